/**
 * `EnvBase`: TorchRL's environment contract over TensorDicts, asynchronous because policies, rewards and tools are.
 *
 * - `reset(td?)` returns the first observation with `done` / `terminated` / `truncated` set to false
 *   (`[...batch, 1]` bool). A `"_reset"` mask in `td` resets only those rows; the others keep `td`'s values.
 * - `step(td)` reads the action the policy wrote into `td`, and sets `td.next` (in place, as TorchRL does) to the
 *   next observation, `reward` and the done keys; it returns `td`.
 * - `stepMdp(td)` moves `next` to the root for the next step (dropping the action and the reward).
 * - `stepAndMaybeReset(td)` steps, then resets the rows that are done.
 * - `rollout(maxSteps, policy)` alternates policy and step and stacks the steps along a new last batch dimension.
 *
 * Subclasses implement `_reset` and `_step` (TorchRL's names); the base class checks batch sizes, fills the done
 * keys and handles partial resets.
 */
import { z } from "zod";
import { RequestAbortedError, type RequestOptions } from "../../bridge/index.js";
import { BatchSizeMismatchError, TensorDict, type NestedKey } from "../tensordict/index.js";
import { parseOptions } from "../core/index.js";
import { EnvStateError, InvalidArgumentError } from "./errors.js";
import { DONE_KEY, DONE_KEYS, NEXT_KEY, RESET_KEY, REWARD_KEY } from "./keys.js";
import { completeDoneKeys, mergeRows, readFlags, flagColumn } from "./rows.js";

/** A value or a promise of it: transform hooks and reward functions may be sync or async. */
export type MaybePromise<T> = T | Promise<T>;

/** Options of every environment call: cancellation (passed on to worker requests made by transforms). */
export interface EnvCallOptions {
  /** Aborts the call; worker requests made on its behalf are cancelled too. */
  readonly signal?: AbortSignal;
}

/**
 * A policy: a function of the TensorDict, or an object with `forward(td)` (such as `TransformersWrapper`). It
 * returns the TensorDict with its action keys added (a new one, or `td` itself).
 */
export type Policy =
  | ((td: TensorDict, options: RequestOptions) => MaybePromise<TensorDict>)
  | {
      /** Answers the observation `td` with the action (e.g. a wrapper's generated response). */
      forward(td: TensorDict, options?: RequestOptions): MaybePromise<TensorDict>;
    };

/** Options of {@link EnvBase.rollout} (TorchRL's names, camelCased). */
export const RolloutOptionsSchema = z.strictObject({
  /** Reset before the first step (default true); when false, `tensordict` is the first state. */
  autoReset: z.boolean().default(true),
  /** Stop after the first step where any row is done (default true). */
  breakWhenAnyDone: z.boolean().default(true),
  /** Stop after the first step where every row is done (default false). */
  breakWhenAllDone: z.boolean().default(false),
  /** Mark the last step truncated when the rollout stops at `maxSteps` without being done (default false). */
  setTruncated: z.boolean().default(false),
  /** The TensorDict passed to `reset` (or the first state when `autoReset` is false). */
  tensordict: z.instanceof(TensorDict).optional(),
  /** Cancels the rollout between (and within) steps. */
  signal: z.instanceof(AbortSignal).optional(),
});

/** Options of {@link EnvBase.rollout}. */
export type RolloutOptions = z.input<typeof RolloutOptionsSchema>;

/** Options of the {@link EnvBase} constructor. */
export const EnvBaseOptionsSchema = z.strictObject({
  /** The batch size every TensorDict of this env has (default `[]`; LLM envs use `[numEnvs]`). */
  batchSize: z.array(z.number().int().nonnegative()).default([]),
});

/** Options of the {@link EnvBase} constructor. */
export type EnvBaseOptions = z.input<typeof EnvBaseOptionsSchema>;

/** Throws {@link RequestAbortedError} (code `ABORTED`, naming `what`) when `signal` is aborted. */
export function throwIfAborted(signal: AbortSignal | undefined, what = "env"): void {
  if (signal?.aborted === true) throw new RequestAbortedError(what, signal.reason);
}

/**
 * The steps of a rollout stacked along `dim`. Keys that some steps lack (an entry `stepMdp` carried from `next` to
 * the root after the first step, such as `kl_penalty`) are left out, so that every step has the same keys.
 */
function stackSteps(steps: readonly TensorDict[], dim: number): TensorDict {
  const keySets = steps.map((td) => new Set(td.keys({ nested: true, leavesOnly: true }).map((k) => JSON.stringify(k))));
  const first = steps[0]!.keys({ nested: true, leavesOnly: true });
  const common = first.filter((k) => keySets.every((set) => set.has(JSON.stringify(k))));
  if (keySets.every((set) => set.size === common.length)) return TensorDict.stack(steps, dim);
  return TensorDict.stack(steps.map((td) => td.select(...common)), dim);
}

function identity(env: EnvBase): EnvBase {
  return env;
}

/** Calls a policy (function or `forward` object). */
export async function callPolicy(policy: Policy, td: TensorDict, options: RequestOptions): Promise<TensorDict> {
  const out = typeof policy === "function" ? await policy(td, options) : await policy.forward(td, options);
  if (!(out instanceof TensorDict)) throw new InvalidArgumentError(`rollout: the policy must return a TensorDict, got ${typeof out}`);
  return out;
}

/**
 * The base of every environment (TorchRL's `EnvBase`). Subclasses implement {@link _reset} and {@link _step}.
 *
 * ```ts
 * const td = await env.reset();
 * const stepped = await env.step(await policy.forward(td)); // stepped.get("next") holds the outcome
 * const nextTd = env.stepMdp(stepped);
 * ```
 */
export abstract class EnvBase implements AsyncDisposable {
  /** The batch size of every TensorDict this env takes and returns. */
  readonly batchSize: readonly number[];

  constructor(options: EnvBaseOptions = {}) {
    const parsed = parseOptions(EnvBaseOptionsSchema, options, `${new.target.name} options`);
    this.batchSize = Object.freeze(parsed.batchSize);
  }

  /** The number of rows (sub-environments), `prod(batchSize)`. */
  get numel(): number {
    return this.batchSize.reduce((a, b) => a * b, 1);
  }

  /** The keys the policy writes and `stepMdp` drops (default `["action"]`). */
  get actionKeys(): readonly NestedKey[] {
    return ["action"];
  }

  /** The reward keys a step writes under `next`, which `stepMdp` drops (default `["reward"]`). */
  get rewardKeys(): readonly NestedKey[] {
    return [REWARD_KEY];
  }

  /** The done keys (`done`, `terminated`, `truncated`). */
  get doneKeys(): readonly NestedKey[] {
    return DONE_KEYS;
  }

  /** The innermost env (itself; `TransformedEnv` answers its base env). */
  get baseEnv(): EnvBase {
    return identity(this);
  }

  /**
   * The first observation of each row, from `td` (which may carry data for the reset, e.g. a `"query"`). Returns a
   * TensorDict of batch size {@link batchSize} holding the observation; the base class adds the done keys.
   */
  protected abstract _reset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict>;

  /** The outcome of the action in `td`: the next observation, the reward and the done keys (a new TensorDict). */
  protected abstract _step(td: TensorDict, options: EnvCallOptions): Promise<TensorDict>;

  /** Throws BATCH_SIZE_MISMATCH unless `td` has this env's batch size. */
  protected checkBatchSize(td: TensorDict, what: string): void {
    const ok = td.batchSize.length === this.batchSize.length && td.batchSize.every((s, i) => s === this.batchSize[i]);
    if (!ok) {
      throw new BatchSizeMismatchError(
        `${this.constructor.name}.${what}: the TensorDict has batch size [${td.batchSize.join(", ")}] but the env has [${this.batchSize.join(", ")}]`,
        this.batchSize,
        td.batchSize,
      );
    }
  }

  /**
   * Resets the env and returns the first observation, with `done`, `terminated` and `truncated` false. With a
   * `"_reset"` mask (`[...batch, 1]` bool) in `td`, only those rows are reset; the other rows keep `td`'s values.
   */
  async reset(td?: TensorDict, options: EnvCallOptions = {}): Promise<TensorDict> {
    throwIfAborted(options.signal, `${this.constructor.name}.reset`);
    const input = td ?? new TensorDict({}, { batchSize: this.batchSize });
    this.checkBatchSize(input, "reset");
    const mask = input.has(RESET_KEY) ? readFlags(input, RESET_KEY) : undefined;
    if (mask !== undefined && !mask.some((m) => m)) return input.exclude(RESET_KEY);
    const fresh = await this._reset(input, options);
    this.checkBatchSize(fresh, "reset (the result of _reset)");
    for (const key of DONE_KEYS) fresh.set(key, flagColumn(this.batchSize));
    const out = mask === undefined ? fresh : mergeRows(input.exclude(NEXT_KEY, RESET_KEY), fresh, mask);
    return out.has(RESET_KEY) ? out.exclude(RESET_KEY) : out;
  }

  /**
   * Takes the action the policy wrote into `td` and sets `td.next` to the outcome (in place, as TorchRL does):
   * the next observation, the reward and consistent done keys. Returns `td`.
   */
  async step(td: TensorDict, options: EnvCallOptions = {}): Promise<TensorDict> {
    throwIfAborted(options.signal, `${this.constructor.name}.step`);
    this.checkBatchSize(td, "step");
    const next = await this._step(td, options);
    this.checkBatchSize(next, "step (the result of _step)");
    td.set(NEXT_KEY, completeDoneKeys(next));
    return td;
  }

  /**
   * The state for the next step (TorchRL's `step_mdp`): `td` without `next`, the action keys and the done keys,
   * then every entry of `td.next` except the reward keys. A new TensorDict sharing the leaves.
   */
  stepMdp(td: TensorDict): TensorDict {
    if (!td.has(NEXT_KEY)) throw new EnvStateError(`${this.constructor.name}.stepMdp: the TensorDict has no "next" entry; call step first`);
    const next = td.getTensorDict(NEXT_KEY);
    const out = td.exclude(NEXT_KEY, ...this.actionKeys, ...DONE_KEYS);
    const excluded = next.exclude(...this.rewardKeys);
    for (const [key, value] of excluded.entries({ nested: true, leavesOnly: true })) out.set(key, value);
    return out;
  }

  /**
   * Steps, then resets the rows that are done (TorchRL's `step_and_maybe_reset`). Returns `[stepped, next]`:
   * `stepped` is `td` with `next` set, `next` the state for the following step (reset rows start afresh).
   */
  async stepAndMaybeReset(td: TensorDict, options: EnvCallOptions = {}): Promise<[TensorDict, TensorDict]> {
    const stepped = await this.step(td, options);
    let next = this.stepMdp(stepped);
    const done = readFlags(next, DONE_KEY);
    if (done.some((d) => d)) {
      next.set(RESET_KEY, flagColumn(this.batchSize, done));
      next = await this.reset(next, options);
    }
    return [stepped, next];
  }

  /**
   * Runs `policy` and `step` for at most `maxSteps` steps and stacks the steps along a new last batch dimension:
   * the result has batch size `[...batchSize, T]`, each step with its `next` (keys missing from some steps are
   * left out). With `breakWhenAnyDone` (default) it
   * stops after the first step where a row is done; with both break options false, done rows are reset and the
   * rollout goes on (`stepAndMaybeReset`).
   */
  async rollout(maxSteps: number, policy: Policy, options: RolloutOptions = {}): Promise<TensorDict> {
    const steps = parseOptions(z.number().int().min(1), maxSteps, `${this.constructor.name}.rollout maxSteps`);
    const opts = parseOptions(RolloutOptionsSchema, options, `${this.constructor.name}.rollout options`);
    if (typeof policy !== "function" && (typeof policy !== "object" || policy === null || typeof policy.forward !== "function")) {
      throw new InvalidArgumentError(`${this.constructor.name}.rollout policy: expected a function or an object with forward(td)`);
    }
    const call: EnvCallOptions = opts.signal === undefined ? {} : { signal: opts.signal };
    let td: TensorDict;
    if (opts.autoReset) td = await this.reset(opts.tensordict, call);
    else if (opts.tensordict !== undefined) td = opts.tensordict;
    else throw new InvalidArgumentError(`${this.constructor.name}.rollout options.tensordict: required when autoReset is false`);
    const stopEarly = opts.breakWhenAnyDone || opts.breakWhenAllDone;
    const collected: TensorDict[] = [];
    for (let t = 0; t < steps; t++) {
      throwIfAborted(opts.signal, `${this.constructor.name}.rollout`);
      const acted = await callPolicy(policy, td, call);
      let stepped: TensorDict;
      if (stopEarly || t === steps - 1) {
        stepped = await this.step(acted, call);
        td = this.stepMdp(stepped);
      } else {
        [stepped, td] = await this.stepAndMaybeReset(acted, call);
      }
      const done = readFlags(stepped.getTensorDict(NEXT_KEY), DONE_KEY);
      if (t === steps - 1 && opts.setTruncated) {
        const next = stepped.getTensorDict(NEXT_KEY);
        const truncated = readFlags(next, "truncated").map((f, i) => f || !done[i]);
        next.set("truncated", flagColumn(this.batchSize, truncated));
        completeDoneKeys(next);
      }
      collected.push(stepped);
      if (opts.breakWhenAnyDone && done.some((d) => d)) break;
      if (opts.breakWhenAllDone && done.every((d) => d)) break;
    }
    return stackSteps(collected, this.batchSize.length);
  }

  /** Releases what the env holds (default: nothing). */
  async close(): Promise<void> {
    // Nothing to release by default.
  }

  /** For `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
