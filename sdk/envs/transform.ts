/**
 * Transforms: TorchRL's `Transform`, `Compose` and `TransformedEnv`.
 *
 * How to write a Transform: subclass {@link Transform} and override the hooks you need. Each hook may be sync or
 * async, gets the call's {@link EnvCallOptions} (pass `options.signal` on to worker requests), and returns the
 * TensorDict it was given (edited in place) or a new one of the same batch size:
 *
 * - `beforeReset(td)` — before the base env's reset, on the data passed to `reset` (TorchRL's
 *   `_reset_env_preprocess`); `DataLoadingPrimer` puts the dataset rows (`"query"`, ...) here. A `"_reset"` mask
 *   in `td` says which rows are being reset.
 * - `reset(td, tdReset)` — after the base env's reset: `td` is what was passed in, `tdReset` the first observation;
 *   return `tdReset` edited (TorchRL's `_reset(tensordict, tensordict_reset)`); e.g. `StepCounter` sets
 *   `step_count` to 0.
 * - `inv(td)` — before the base env's step, on the TensorDict holding the policy's action (TorchRL's `inv`).
 * - `step(td, next)` — after the base env's step: `td` holds the action (for a ChatEnv, `("history", "full")` and
 *   `("history", "response")`), `next` the outcome (`("history", "prompt")` of the next turn, `reward`, done
 *   keys); return `next` edited (TorchRL's `_step(tensordict, next_tensordict)`). Reward, tool and KL transforms
 *   work here. Use `markDone` / `clearDone` from `sdk/envs/rows.ts` to end rows.
 *
 * `this.parent` is the `TransformedEnv` holding the transform (`parent.baseEnv` is the `ChatEnv` underneath, with
 * its `inputMode`). Specs (`transformObservationSpec` and friends) do not exist here: TensorDicts carry their keys.
 * A `Compose` runs `beforeReset`, `reset` and `step` in order and `inv` in reverse order.
 */
import type { NestedKey } from "../tensordict/index.js";
import { TensorDict } from "../tensordict/index.js";
import { EnvBase, throwIfAborted, type EnvCallOptions, type MaybePromise } from "./env-base.js";
import { InvalidArgumentError } from "./errors.js";
import { NEXT_KEY } from "./keys.js";

/**
 * The base class of transforms. Every hook defaults to "no change" (after checking `options.signal`); override the ones you need (see the module
 * comment for the order they run in).
 */
export abstract class Transform {
  #parent: TransformedEnv | undefined;

  /** The env holding this transform, once appended to one. */
  get parent(): TransformedEnv | undefined {
    return this.#parent;
  }

  /** Called when the transform is attached to `env` (a transform belongs to the last env it was given to). */
  setContainer(env: TransformedEnv): void {
    this.#parent = env;
  }

  /** Reward keys this transform writes under `next`, beyond `"reward"` (dropped by `stepMdp`). Default none. */
  get rewardKeys(): readonly NestedKey[] {
    return [];
  }

  /** Before the base env's reset; returns the data for it (default: `td`). */
  beforeReset(td: TensorDict, options: EnvCallOptions): MaybePromise<TensorDict> {
    throwIfAborted(options.signal, `${this.toString()}.beforeReset`);
    return td;
  }

  /** After the base env's reset; returns the first observation (default: `tdReset`). */
  reset(td: TensorDict, tdReset: TensorDict, options: EnvCallOptions): MaybePromise<TensorDict> {
    throwIfAborted(options.signal, `${this.toString()}.reset`);
    return tdReset;
  }

  /** Before the base env's step, on the action; returns the TensorDict the base env steps on (default: `td`). */
  inv(td: TensorDict, options: EnvCallOptions): MaybePromise<TensorDict> {
    throwIfAborted(options.signal, `${this.toString()}.inv`);
    return td;
  }

  /** After the base env's step; returns the outcome (default: `next`). */
  step(td: TensorDict, next: TensorDict, options: EnvCallOptions): MaybePromise<TensorDict> {
    throwIfAborted(options.signal, `${this.toString()}.step`);
    return next;
  }

  /** Releases what the transform holds (default: nothing). */
  close(): MaybePromise<void> {
    // Nothing to release by default.
  }

  /** The transform's class name. */
  toString(): string {
    return this.constructor.name;
  }
}

function checkTransform(t: unknown, where: string): Transform {
  if (!(t instanceof Transform)) throw new InvalidArgumentError(`${where}: expected a Transform, got ${t === null ? "null" : typeof t}`);
  return t;
}

function checkResult(out: unknown, t: Transform, hook: string, batchSize: readonly number[]): TensorDict {
  if (!(out instanceof TensorDict)) throw new InvalidArgumentError(`${t.toString()}.${hook} must return a TensorDict, got ${out === null ? "null" : typeof out}`);
  const same = out.batchSize.length === batchSize.length && out.batchSize.every((s, i) => s === batchSize[i]);
  if (!same) {
    throw new InvalidArgumentError(`${t.toString()}.${hook} returned batch size [${out.batchSize.join(", ")}], expected [${batchSize.join(", ")}]`);
  }
  return out;
}

/** Several transforms run as one: `beforeReset`, `reset` and `step` in order, `inv` in reverse order. */
export class Compose extends Transform {
  readonly #transforms: Transform[];

  constructor(...transforms: Transform[]) {
    super();
    this.#transforms = transforms.map((t, i) => checkTransform(t, `Compose: transforms[${i}]`));
  }

  /** The transforms, in order. */
  get transforms(): readonly Transform[] {
    return this.#transforms;
  }

  /** The number of transforms. */
  get length(): number {
    return this.#transforms.length;
  }

  /** The transform at `index` (negative counts from the end), or `undefined`. */
  at(index: number): Transform | undefined {
    return this.#transforms.at(index);
  }

  /** The first transform (searched recursively through nested Composes) that is an instance of `cls`. */
  find<T extends Transform>(cls: abstract new (...args: never[]) => T): T | undefined {
    for (const t of this.#transforms) {
      if (t instanceof cls) return t;
      if (t instanceof Compose) {
        const inner = t.find(cls);
        if (inner !== undefined) return inner;
      }
    }
    return undefined;
  }

  /** Appends a transform (attached to this Compose's env, if any). */
  append(transform: Transform): this {
    const t = checkTransform(transform, "Compose.append");
    this.#transforms.push(t);
    if (this.parent !== undefined) t.setContainer(this.parent);
    return this;
  }

  /** Inserts a transform at `index` (0 runs first; negative counts from the end). */
  insert(index: number, transform: Transform): this {
    const t = checkTransform(transform, "Compose.insert");
    if (!Number.isInteger(index)) throw new InvalidArgumentError(`Compose.insert index: expected an integer, got ${String(index)}`);
    this.#transforms.splice(index, 0, t);
    if (this.parent !== undefined) t.setContainer(this.parent);
    return this;
  }

  override setContainer(env: TransformedEnv): void {
    super.setContainer(env);
    for (const t of this.#transforms) t.setContainer(env);
  }

  override get rewardKeys(): readonly NestedKey[] {
    return this.#transforms.flatMap((t) => t.rewardKeys);
  }

  override async beforeReset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    let out = td;
    for (const t of this.#transforms) out = checkResult(await t.beforeReset(out, options), t, "beforeReset", td.batchSize);
    return out;
  }

  override async reset(td: TensorDict, tdReset: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    let out = tdReset;
    for (const t of this.#transforms) out = checkResult(await t.reset(td, out, options), t, "reset", tdReset.batchSize);
    return out;
  }

  override async inv(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    let out = td;
    for (const t of [...this.#transforms].reverse()) out = checkResult(await t.inv(out, options), t, "inv", td.batchSize);
    return out;
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    let out = next;
    for (const t of this.#transforms) out = checkResult(await t.step(td, out, options), t, "step", next.batchSize);
    return out;
  }

  override async close(): Promise<void> {
    for (const t of this.#transforms) await t.close();
  }

  override toString(): string {
    return `Compose(${this.#transforms.map((t) => t.toString()).join(", ")})`;
  }
}

/**
 * An env with transforms (TorchRL's `TransformedEnv`). Wrapping a `TransformedEnv` flattens it: the new env has
 * the same base env and the inner transforms followed by the new ones.
 *
 * ```ts
 * const env = new TransformedEnv(new ChatEnv({ batchSize: [4] }), new Compose(primer, new StepCounter({ maxSteps: 3 })));
 * env.appendTransform(rewards);
 * ```
 */
export class TransformedEnv extends EnvBase {
  readonly #base: EnvBase;
  /** The transforms, run in order around the base env. */
  readonly transform: Compose;

  constructor(env: EnvBase, transform?: Transform | readonly Transform[]) {
    if (!(env instanceof EnvBase)) throw new InvalidArgumentError(`TransformedEnv env: expected an EnvBase, got ${env === null ? "null" : typeof env}`);
    super({ batchSize: [...env.batchSize] });
    const added = transform === undefined ? [] : Array.isArray(transform) ? [...(transform as readonly Transform[])] : [transform as Transform];
    added.forEach((t, i) => checkTransform(t, `TransformedEnv transform[${i}]`));
    if (env instanceof TransformedEnv) {
      this.#base = env.#base;
      this.transform = new Compose(...env.transform.transforms, ...added);
    } else {
      this.#base = env;
      this.transform = new Compose(...added);
    }
    this.transform.setContainer(this);
  }

  /** The innermost env (not a TransformedEnv). */
  override get baseEnv(): EnvBase {
    return this.#base;
  }

  override get actionKeys(): readonly NestedKey[] {
    return this.#base.actionKeys;
  }

  override get rewardKeys(): readonly NestedKey[] {
    return [...this.#base.rewardKeys, ...this.transform.rewardKeys];
  }

  /** Appends a transform (runs after the others) and returns this env. */
  appendTransform(transform: Transform): this {
    this.transform.append(transform);
    return this;
  }

  /** Inserts a transform at `index` and returns this env. */
  insertTransform(index: number, transform: Transform): this {
    this.transform.insert(index, transform);
    return this;
  }

  protected override async _reset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    const input = await this.transform.beforeReset(td, options);
    const tdReset = await this.#base.reset(input, options);
    return this.transform.reset(input, tdReset, options);
  }

  protected override async _step(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    const action = await this.transform.inv(td, options);
    const stepped = await this.#base.step(action, options);
    return this.transform.step(td, stepped.getTensorDict(NEXT_KEY), options);
  }

  /** Closes the transforms, then the base env. */
  override async close(): Promise<void> {
    await this.transform.close();
    await this.#base.close();
  }

  override toString(): string {
    return `TransformedEnv(${this.#base.constructor.name}, ${this.transform.toString()})`;
  }
}

/**
 * TorchRL's `env.append_transform(t)`: a `TransformedEnv` gets `t` appended (and is returned); any other env is
 * wrapped in a new `TransformedEnv`.
 */
export function appendTransform(env: EnvBase, transform: Transform): TransformedEnv {
  return env instanceof TransformedEnv ? env.appendTransform(transform) : new TransformedEnv(env, transform);
}
