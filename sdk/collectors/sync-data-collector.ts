/**
 * TorchRL's `SyncDataCollector` for control envs: runs a policy in a batched env (`SerialEnv`/`ParallelEnv` of N
 * copies) and hands out batches of `framesPerBatch` frames as an async iterable. One frame is one env step of one copy,
 * so a batch holds `T = framesPerBatch / N` steps of every copy: a TensorDict `[N, T]` (`batch.reshape([N * T])` gives
 * the env-major rows, `env * T + t`, that `ControlAgent.update` takes). Done copies are reset as they finish
 * (`stepAndMaybeReset`), so a batch runs across episode boundaries; the collector keeps each copy's running return
 * and length and reports the episodes that finished. See docs/classic-rl.md.
 */
import { z } from "zod";
import { parseOptions } from "../core/index.js";
import { callPolicy, EnvBase, throwIfAborted, type Policy } from "../envs/env-base.js";
import { DONE_KEY, NEXT_KEY, REWARD_KEY } from "../envs/keys.js";
import { readColumn, readFlags } from "../envs/rows.js";
import { TensorDict, type NestedKey } from "../tensordict/index.js";
import { CollectorStateError, InvalidArgumentError } from "./errors.js";

const isPolicy = (v: unknown): v is Policy =>
  typeof v === "function" || (typeof v === "object" && v !== null && typeof (v as { forward?: unknown }).forward === "function");

/** Options of {@link SyncDataCollector} (TorchRL's names, camelCased). */
export const SyncDataCollectorOptionsSchema = z.strictObject({
  /** The env: a batched env of N copies (batch size `[N]`), or a single env (batch size `[]`, taken as N = 1). */
  env: z.custom<EnvBase>((v) => v instanceof EnvBase, "expected an EnvBase (SerialEnv, ParallelEnv, CartPoleEnv, ...)"),
  /** The policy: `ProbabilisticActor`, or any function or object with `forward(td)` writing `action`. */
  policy: z.custom<Policy>(isPolicy, "expected a policy: a function of the TensorDict or an object with forward(td)"),
  /** Frames (env steps summed over the copies) per batch: a multiple of the number of copies. */
  framesPerBatch: z.number().int().min(1),
  /** Frames to collect in all, a multiple of `framesPerBatch` or -1 (default: until the iteration stops). */
  totalFrames: z.number().int().min(-1).refine((v) => v !== 0, "must be -1 (endless) or at least 1").default(-1),
  /** Cancels the collection: the iteration throws `RequestAbortedError` (code `ABORTED`). */
  signal: z.instanceof(AbortSignal).optional(),
});

/** Options of {@link SyncDataCollector} (input form). */
export type SyncDataCollectorOptions = z.input<typeof SyncDataCollectorOptionsSchema>;

/** A finished episode of one copy: its undiscounted return and its length in steps. */
export interface EpisodeStats {
  /** Which copy of the env played it. */
  readonly env: number;
  /** The sum of its rewards. */
  readonly return: number;
  /** Its steps. */
  readonly length: number;
}

/**
 * The running return and length of each of `n` env copies, closing an episode when its copy is done: what the
 * collector reports as finished episodes and what an evaluation of N copies measures.
 *
 * ```ts
 * const tracker = new EpisodeTracker(8);
 * const finished = tracker.record(stepped.getTensorDict(NEXT_KEY)); // the episodes this step ended
 * ```
 */
export class EpisodeTracker {
  readonly #returns: number[];
  readonly #lengths: number[];

  /** Tracks `n` copies, each at the start of an episode. */
  constructor(readonly n: number) {
    this.#returns = new Array<number>(n).fill(0);
    this.#lengths = new Array<number>(n).fill(0);
  }

  /** Adds a step's `("next", "reward")` to each copy's episode; returns (and restarts) the episodes `done` ended. */
  record(next: TensorDict): EpisodeStats[] {
    const rewards = readColumn(next, REWARD_KEY) ?? new Array<number>(this.n).fill(0);
    const done = readFlags(next, DONE_KEY);
    const finished: EpisodeStats[] = [];
    for (let i = 0; i < this.n; i++) {
      this.#returns[i]! += rewards[i] ?? 0;
      this.#lengths[i]! += 1;
      if (done[i]) {
        finished.push({ env: i, return: this.#returns[i]!, length: this.#lengths[i]! });
        this.#returns[i] = 0;
        this.#lengths[i] = 0;
      }
    }
    return finished;
  }

  /** Copy `env`'s episode in progress: its return and length so far. */
  running(env: number): EpisodeStats {
    return { env, return: this.#returns[env] ?? 0, length: this.#lengths[env] ?? 0 };
  }
}

/** The keys every step has (`stepAndMaybeReset` may add keys to some steps only, such as a reset's). */
function commonKeys(steps: readonly TensorDict[]): NestedKey[] {
  const sets = steps.map((td) => new Set(td.keys({ nested: true, leavesOnly: true }).map((k) => JSON.stringify(k))));
  return steps[0]!.keys({ nested: true, leavesOnly: true }).filter((k) => sets.every((s) => s.has(JSON.stringify(k))));
}

/**
 * Collects fixed-size batches from a batched env (see the module notes).
 *
 * ```ts
 * const collector = new SyncDataCollector({ env: new SerialEnv(8, () => new CartPoleEnv()), policy: actor, framesPerBatch: 1024, totalFrames: 100_000 });
 * for await (const batch of collector) {
 *   await agent.update(batch.reshape([batch.numel()]), { numEnvs: 8, epochs: 10, miniBatchSize: 256 });
 *   console.log(collector.frames, collector.takeFinishedEpisodes().length);
 * }
 * ```
 */
export class SyncDataCollector implements AsyncIterable<TensorDict> {
  /** The env it steps. */
  readonly env: EnvBase;
  /** The policy it runs. */
  readonly policy: Policy;
  /** Copies of the env (1 for an unbatched env). */
  readonly numEnvs: number;
  /** Frames per batch. */
  readonly framesPerBatch: number;
  /** Steps of each copy per batch (`framesPerBatch / numEnvs`). */
  readonly stepsPerBatch: number;
  /** Frames to collect in all (-1: endless). */
  readonly totalFrames: number;
  readonly #signal: AbortSignal | undefined;
  readonly #batched: boolean;
  #state: TensorDict | undefined;
  #frames = 0;
  #running = false;
  /** Whether a {@link next} call is in progress (a second, concurrent one is refused). */
  #collecting = false;
  readonly #episodes: EpisodeTracker;
  #finished: EpisodeStats[] = [];

  /** Throws `InvalidArgumentError` naming the field when an option does not fit. */
  constructor(options: SyncDataCollectorOptions) {
    const o = parseOptions(SyncDataCollectorOptionsSchema, options, "SyncDataCollector options");
    if (o.env.batchSize.length > 1) {
      throw new InvalidArgumentError(`SyncDataCollector options.env: expected batch size [N] or [], got [${o.env.batchSize.join(", ")}]`);
    }
    this.env = o.env;
    this.policy = o.policy;
    this.#batched = o.env.batchSize.length === 1;
    this.numEnvs = o.env.numel;
    if (o.framesPerBatch % this.numEnvs !== 0) {
      throw new InvalidArgumentError(`SyncDataCollector options.framesPerBatch: must be a multiple of the env's ${String(this.numEnvs)} copies, got ${String(o.framesPerBatch)}`);
    }
    if (o.totalFrames !== -1 && o.totalFrames % o.framesPerBatch !== 0) {
      throw new InvalidArgumentError(`SyncDataCollector options.totalFrames: must be -1 or a multiple of framesPerBatch (${String(o.framesPerBatch)}), got ${String(o.totalFrames)}`);
    }
    this.framesPerBatch = o.framesPerBatch;
    this.stepsPerBatch = o.framesPerBatch / this.numEnvs;
    this.totalFrames = o.totalFrames;
    this.#signal = o.signal;
    this.#episodes = new EpisodeTracker(this.numEnvs);
  }

  /** Frames collected so far. */
  get frames(): number {
    return this.#frames;
  }

  /** The episodes that finished since the last call (oldest first), and forgets them. */
  takeFinishedEpisodes(): EpisodeStats[] {
    const out = this.#finished;
    this.#finished = [];
    return out;
  }

  /** Yields batches of `framesPerBatch` frames, `[N, T]`, until `totalFrames` (or forever with -1). */
  async *[Symbol.asyncIterator](): AsyncIterator<TensorDict> {
    if (this.#running) throw new CollectorStateError("SyncDataCollector: already being iterated");
    this.#running = true;
    try {
      while (this.totalFrames === -1 || this.#frames < this.totalFrames) yield await this.next();
    } finally {
      this.#running = false;
    }
  }

  /**
   * Collects one batch of `framesPerBatch` frames (`[N, T]`), whatever `totalFrames` says. A call while another is in
   * progress (from this iterator or another caller) throws `CollectorStateError`. When the policy or the env throws
   * (or the signal aborts: `RequestAbortedError`) mid-batch, the partial batch is dropped: `frames` does not count it,
   * but the env has moved on and the episodes it finished are reported; the next call goes on from the env's state.
   */
  async next(): Promise<TensorDict> {
    if (this.#collecting) throw new CollectorStateError("SyncDataCollector.next: a batch is already being collected (await it first)");
    this.#collecting = true;
    try {
      return await this.#collect();
    } finally {
      this.#collecting = false;
    }
  }

  async #collect(): Promise<TensorDict> {
    const call = this.#signal === undefined ? {} : { signal: this.#signal };
    this.#state ??= await this.env.reset(undefined, call);
    const steps: TensorDict[] = [];
    for (let t = 0; t < this.stepsPerBatch; t++) {
      throwIfAborted(this.#signal, "SyncDataCollector");
      const acted = await callPolicy(this.policy, this.#state, call);
      const [stepped, next] = await this.env.stepAndMaybeReset(acted, call);
      this.#finished.push(...this.#episodes.record(stepped.getTensorDict(NEXT_KEY)));
      steps.push(stepped);
      this.#state = next;
    }
    this.#frames += this.framesPerBatch;
    const keys = commonKeys(steps);
    const uniform = steps.map((td) => td.select(...keys));
    return this.#batched ? TensorDict.stack(uniform, 1) : TensorDict.stack(uniform, 0).unsqueeze(0);
  }
}
