/**
 * `SerialEnv`: `numWorkers` copies of an env stepped one after the other in this thread (TorchRL's `SerialEnv`),
 * as one env of batch size `[numWorkers]`.
 */
import { InvalidArgumentError } from "../core/index.js";
import { TensorDict } from "../tensordict/index.js";
import { BatchedEnvBase, subEnvError, type SpecifiedEnv } from "./batched-env.js";
import { throwIfAborted, type EnvCallOptions } from "./env-base.js";
import { EnvStateError } from "./errors.js";
import { DONE_KEYS, NEXT_KEY, RESET_KEY } from "./keys.js";
import { readFlags } from "./rows.js";

/** The specs every copy must share. */
const SPEC_NAMES = ["observationSpec", "actionSpec", "rewardSpec", "doneSpec"] as const;

/** A copy's spec as text (`Composite(...)` spells every key, shape, dtype and bound), for comparing copies. */
function specText(env: SpecifiedEnv, name: (typeof SPEC_NAMES)[number]): string {
  return String((env[name] as { toString(): string } | undefined)?.toString());
}

/**
 * Copies of one env as a batch `[numWorkers]`, stepped in turn (TorchRL's `SerialEnv(num_workers, create_env_fn)`).
 * The TensorDicts are the copies' stacked: for CartPole, `observation` `[N, 4]`, `action` `[N]`,
 * `("next", "reward")` `[N, 1]`. A partial reset (`"_reset"` mask, as `stepAndMaybeReset` sends) resets only those
 * copies; the others keep their state. Copy `i` is seeded with `seed + i`. An error of a copy surfaces as
 * `SubEnvError` (`SUB_ENV_FAILED`) naming the copy.
 *
 * ```ts
 * const env = new SerialEnv(8, () => new CartPoleEnv());
 * env.setSeed(0);
 * const rollout = await env.rollout(100, policy, { breakWhenAnyDone: false }); // done copies reset themselves
 * ```
 */
export class SerialEnv extends BatchedEnvBase {
  readonly #envs: SpecifiedEnv[];
  /** Each copy's last observation (what `_reset` gives for the copies it does not reset). */
  readonly #last: (TensorDict | undefined)[];
  #closed = false;

  constructor(numWorkers: number, createEnv: () => SpecifiedEnv) {
    super(numWorkers);
    if (typeof createEnv !== "function") throw new InvalidArgumentError("SerialEnv createEnv: expected a function that returns an env");
    const made: SpecifiedEnv[] = [];
    // A constructor cannot await: the copies made before a failure are closed in the background.
    const fail = (err: Error): Error => {
      for (const env of made) void env.close().catch(() => undefined);
      return err;
    };
    for (let i = 0; i < this.numWorkers; i++) {
      try {
        made.push(createEnv());
      } catch (err) {
        throw fail(subEnvError("SerialEnv", i, err));
      }
    }
    this.#envs = made;
    const first = made[0]!;
    const ok = first.batchSize.length === 0 && first.observationSpec !== undefined && first.actionSpec !== undefined;
    if (!ok) throw fail(new InvalidArgumentError("SerialEnv createEnv: expected an env of batch size [] with specs (observationSpec, actionSpec, rewardSpec, doneSpec)"));
    for (let i = 1; i < made.length; i++) {
      const env = made[i]!;
      const differs = SPEC_NAMES.find((name) => specText(env, name) !== specText(first, name) || env.batchSize.length !== 0);
      if (differs !== undefined) {
        throw fail(new InvalidArgumentError(`SerialEnv createEnv: copy ${String(i)}'s ${differs} (${specText(env, differs)}) differs from copy 0's (${specText(first, differs)}); every copy must be the same env`));
      }
    }
    this.#last = new Array<TensorDict | undefined>(this.numWorkers).fill(undefined);
    this.setCopySpecs(first);
  }

  protected specsUnknown(): Error {
    return new EnvStateError("SerialEnv: no specs"); // never: the copies exist from the constructor on
  }

  /** The copies (read-only use: stepping one directly desynchronises the batch). */
  get envs(): readonly SpecifiedEnv[] {
    return this.#envs;
  }

  setSeed(seed: number): void {
    if (!Number.isSafeInteger(seed) || seed < 0) throw new InvalidArgumentError(`SerialEnv.setSeed seed: expected an integer >= 0, got ${String(seed)}`);
    this.#envs.forEach((env, i) => {
      if (typeof env.setSeed !== "function") throw subEnvError("SerialEnv", i, new InvalidArgumentError(`${env.constructor.name} has no setSeed`));
      env.setSeed(seed + i);
    });
  }

  #checkOpen(what: string): void {
    if (this.#closed) throw new EnvStateError(`SerialEnv.${what}: the env is closed`);
  }

  protected async _reset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    this.#checkOpen("reset");
    const mask = td.has(RESET_KEY) ? readFlags(td, RESET_KEY) : new Array<boolean>(this.numWorkers).fill(true);
    const rows = mask.some((m) => !m) || td.keys().length > 0 ? td.exclude(RESET_KEY, NEXT_KEY).unbind(0) : undefined;
    for (let i = 0; i < this.numWorkers; i++) {
      if (!mask[i]) continue;
      throwIfAborted(options.signal, "SerialEnv.reset");
      try {
        const fresh = await this.#envs[i]!.reset(rows?.[i], options);
        this.#last[i] = fresh.exclude(...DONE_KEYS);
      } catch (err) {
        throw subEnvError("SerialEnv", i, err);
      }
    }
    const missing = this.#last.findIndex((t) => t === undefined);
    if (missing >= 0) throw new EnvStateError(`SerialEnv.reset: copy ${missing} was never reset; reset every copy first (no "_reset" mask)`);
    return TensorDict.stack(this.#last as TensorDict[], 0);
  }

  protected async stepCopies(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    this.#checkOpen("step");
    const rows = td.exclude(NEXT_KEY).unbind(0);
    const nexts: TensorDict[] = [];
    for (let i = 0; i < this.numWorkers; i++) {
      throwIfAborted(options.signal, "SerialEnv.step");
      const env = this.#envs[i]!;
      let next: TensorDict;
      try {
        next = (await env.step(rows[i]!, options)).getTensorDict(NEXT_KEY);
      } catch (err) {
        throw subEnvError("SerialEnv", i, err);
      }
      this.#last[i] = next.exclude(...env.rewardKeys, ...DONE_KEYS);
      nexts.push(next);
    }
    return TensorDict.stack(nexts, 0);
  }

  /** Closes every copy (once; later calls do nothing). */
  override async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const env of this.#envs) await env.close();
  }
}
