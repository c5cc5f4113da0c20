/**
 * TorchRL's `LLMCollector`: runs a policy in an environment and hands out the collected dialog turns as an async
 * iterable, optionally writing them into a replay buffer. See docs/collectors.md.
 */
import { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import { lazyCat, lazyStack } from "../data/replay-buffer/collate.js";
import { ReplayBuffer } from "../data/replay-buffer/replay-buffer.js";
import { callPolicy, EnvBase, throwIfAborted, type MaybePromise, type Policy } from "../envs/env-base.js";
import { NEXT_DONE_KEY, POLICY_VERSION_KEY } from "../envs/keys.js";
import { Tensor, TensorDict } from "../tensordict/index.js";
import { parseOptions } from "../core/index.js";
import { CollectorStateError, InvalidArgumentError } from "./errors.js";
import { Pulse } from "./pulse.js";

/**
 * The weight-update hook: called by {@link LLMCollector.updatePolicyWeights} with what the caller passed (e.g. a
 * trainer's state, or nothing), to push new weights to the policy before the policy version is incremented.
 */
export type WeightUpdater = (weights: unknown, collector: LLMCollector) => MaybePromise<void>;

const isPolicy = (v: unknown): v is Policy =>
  typeof v === "function" || (typeof v === "object" && v !== null && typeof (v as { forward?: unknown }).forward === "function");

/** Options of {@link LLMCollector} (TorchRL's names, camelCased). */
export const LLMCollectorOptionsSchema = z.strictObject({
  /** The environment (`ChatEnv`, `DatasetChatEnv`, any `EnvBase`). */
  env: z.custom<EnvBase>((v) => v instanceof EnvBase, "expected an EnvBase (ChatEnv, DatasetChatEnv, TransformedEnv, ...)"),
  /** The policy: an object with `forward(td)` (e.g. `TransformersWrapper`) or a function of the TensorDict. */
  policy: z.custom<Policy>(isPolicy, "expected a policy: a function of the TensorDict or an object with forward(td)"),
  /** Dialog turns (env steps, summed over the env batch) per yielded batch; required unless yielding trajectories (then 1). */
  dialogTurnsPerBatch: z.number().int().min(1).optional(),
  /** Dialog turns to collect in all; -1 (default) collects until `close()` or the signal aborts. */
  totalDialogTurns: z.number().int().min(-1).refine((v) => v !== 0, "must be -1 (forever) or at least 1").default(-1),
  /** Yield whole trajectories (each ending with a done step) instead of fixed-size slices of steps. */
  yieldCompletedTrajectories: z.boolean().optional(),
  /** Yield only the last (done) step of each trajectory; implies `yieldCompletedTrajectories`. */
  yieldOnlyLastSteps: z.boolean().optional(),
  /** Flatten `[B, T]` batches to `[B * T]` (default: true with a replay buffer, false otherwise). */
  flattenData: z.boolean().optional(),
  /** Each batch is also written here (`extend`) before it is yielded. */
  replayBuffer: z.custom<ReplayBuffer>((v) => v instanceof ReplayBuffer, "expected a ReplayBuffer").optional(),
  /** Reset the env at the start of every batch (default false: batches continue the running dialogs). */
  resetAtEachIter: z.boolean().default(false),
  /** Write the policy version (int64, one per row) under `"policy_version"` in the collected steps (default false). */
  trackPolicyVersion: z.boolean().default(false),
  /** Called by `updatePolicyWeights` to push weights to the policy. */
  weightUpdater: z.custom<WeightUpdater>((v) => typeof v === "function", "expected a function (weights, collector) => void").optional(),
  /** Applied to each batch before it is written and yielded. */
  postproc: z.custom<(td: TensorDict) => MaybePromise<TensorDict>>((v) => typeof v === "function", "expected a function of the TensorDict").optional(),
  /** Cancels the collection: the iteration throws `RequestAbortedError` (code `ABORTED`). */
  signal: z.instanceof(AbortSignal).optional(),
});

/** Options of {@link LLMCollector}. */
export type LLMCollectorOptions = z.input<typeof LLMCollectorOptionsSchema>;
type Resolved = z.output<typeof LLMCollectorOptionsSchema>;

/** Options of {@link LLMCollector.start}. */
export const CollectorStartOptionsSchema = z.strictObject({
  /**
   * How many policy versions collection may run ahead of the weights (default 0): batch `i` (counted from `start()`)
   * starts once `updatePolicyWeights()` has been called at least `i − maxPolicyAge` times. 0 collects the next batch
   * after the weights trained on the last one are in (synchronous, on-policy), 1 collects one batch ahead while the
   * trainer trains, and so on.
   */
  maxPolicyAge: z.number().int().min(0).default(0),
  /**
   * Batches already in the replay buffer that count as collected by this start (default 0): a run resumed with the
   * rows it had collected ahead passes their batch count, so collection stays within `maxPolicyAge` of the weights.
   */
  collectedAhead: z.number().int().min(0).default(0),
});

/** Options of {@link LLMCollector.start}. */
export type CollectorStartOptions = z.input<typeof CollectorStartOptionsSchema>;

/** Options of {@link LLMCollector.takeBatch}. */
export const TakeBatchOptionsSchema = z.strictObject({
  /** Drop (and count) rows whose `"policy_version"` is more than this many versions behind the collector's. */
  maxPolicyAge: z.number().int().min(0).optional(),
  /** Stops waiting: the call rejects with `RequestAbortedError` (code `ABORTED`). */
  signal: z.instanceof(AbortSignal).optional(),
});

/** Options of {@link LLMCollector.takeBatch}. */
export type TakeBatchOptions = z.input<typeof TakeBatchOptionsSchema>;

/** What {@link LLMCollector.takeBatch} returns. */
export interface TakenBatch {
  /** The oldest rows of the replay buffer, removed from it. */
  readonly batch: TensorDict;
  /** Rows dropped for staleness before these were taken. */
  readonly dropped: number;
}

/** Counters of {@link LLMCollector}. */
export interface LLMCollectorStats {
  /** Batches collected (written to the replay buffer, or yielded). */
  readonly batches: number;
  /** Milliseconds spent collecting (policy and env steps), counting a batch in progress up to now. */
  readonly busyMs: number;
  /** Rows dropped by {@link LLMCollector.takeBatch} for staleness. */
  readonly droppedStale: number;
}

/** A stored row's `"policy_version"` (-Infinity when it has none: such a row is always stale). */
function rowVersion(row: TensorDict): number {
  const v = row.get(POLICY_VERSION_KEY, undefined);
  return v instanceof Tensor ? Number(v.toNumbers()[0]) : -Infinity;
}

/** True when any element of the row's `("next", "done")` leaf is true. */
function rowDone(row: TensorDict): boolean {
  const done = row.get(NEXT_DONE_KEY, undefined);
  return done instanceof Tensor && done.toNumbers().some((v) => v !== 0);
}

/** Stacks steps of batch size `[B]` along a new last dimension, `[B, T]`, lazily (rows may differ in length). */
function stackSteps(steps: readonly TensorDict[]): TensorDict {
  try {
    return TensorDict.stack(steps, -1);
  } catch {
    const first = steps[0]!;
    const b = first.numel();
    const rows: TensorDict[] = [];
    const perStep = steps.map((s) => s.reshape([b]).unbind(0));
    for (let i = 0; i < b; i++) for (const step of perStep) rows.push(step[i]!);
    return lazyStack(rows, true).td.reshape([...first.batchSize, steps.length]);
  }
}

/**
 * Collects dialog turns from an environment with a policy (TorchRL's `LLMCollector`), as an async iterable:
 *
 * ```ts
 * const collector = new LLMCollector({ env, policy, dialogTurnsPerBatch: 8, totalDialogTurns: 64, replayBuffer: rb });
 * for await (const batch of collector) { ...train on rb...; await collector.updatePolicyWeights(); }
 * ```
 *
 * - Default mode: each batch holds `dialogTurnsPerBatch` steps or a little more (whole env steps), `[B, T]` or
 *   flattened `[B * T]`; dialogs continue across batches (unless `resetAtEachIter`); done rows are reset.
 * - `yieldCompletedTrajectories`: each batch is one or more whole trajectories (cut after a done step) of one env row,
 *   concatenated until at least `dialogTurnsPerBatch` steps, `[T]`. With `yieldOnlyLastSteps`, only each
 *   trajectory's last step is kept (the dropped steps still count toward `totalDialogTurns`).
 * - With a `replayBuffer`, every batch is written to it (then yielded too, for logging: TorchRL yields nothing).
 * - `trackPolicyVersion` writes the version of the policy that acted into each step; `updatePolicyWeights()` runs
 *   the `weightUpdater` hook and increments the version.
 */
export class LLMCollector implements AsyncIterable<TensorDict>, AsyncDisposable {
  readonly #o: Resolved;
  readonly #yieldTrajectories: boolean;
  readonly #yieldOnlyLastSteps: boolean;
  readonly #flatten: boolean;
  readonly #dialogTurnsPerBatch: number;
  #shuttle: TensorDict | undefined;
  #frames = 0;
  #version = 0;
  #iterating = false;
  #closed = false;
  readonly #rowQueues: TensorDict[][];
  readonly #trajectories: TensorDict[] = [];
  #queuedNumel = 0;
  // background collection (start / takeBatch / shutdown)
  readonly #pulse = new Pulse();
  #background: Promise<void> | undefined;
  #stopBackground: AbortController | undefined;
  #failure: Error | undefined;
  #batchesStarted = 0;
  #updates = 0;
  #batches = 0;
  #busyMs = 0;
  #busySince: number | undefined;
  #droppedStale = 0;
  /** Set by {@link pause}: no new batch starts. */
  #paused = false;
  /** The batch being collected and written in the background, if any. */
  #inFlight: Promise<unknown> | undefined;

  constructor(options: LLMCollectorOptions) {
    const o = parseOptions(LLMCollectorOptionsSchema, options, "LLMCollector options");
    const onlyLast = o.yieldOnlyLastSteps ?? false;
    if (onlyLast && o.yieldCompletedTrajectories === false) {
      throw new InvalidArgumentError("LLMCollector options.yieldCompletedTrajectories: must not be false with yieldOnlyLastSteps");
    }
    if (onlyLast && o.flattenData !== undefined) throw new InvalidArgumentError("LLMCollector options.flattenData: cannot be set with yieldOnlyLastSteps");
    if (onlyLast && o.resetAtEachIter) throw new InvalidArgumentError("LLMCollector options.resetAtEachIter: cannot be true with yieldOnlyLastSteps");
    const trajectories = o.yieldCompletedTrajectories ?? onlyLast;
    if (!trajectories && o.dialogTurnsPerBatch === undefined) {
      throw new InvalidArgumentError("LLMCollector options.dialogTurnsPerBatch: required unless yieldCompletedTrajectories is true");
    }
    if (trajectories && o.env.batchSize.length !== 1) {
      throw new InvalidArgumentError(
        `LLMCollector options.env: yieldCompletedTrajectories needs an env with one batch dimension, got batch size [${o.env.batchSize.join(", ")}]`,
      );
    }
    this.#o = o;
    this.#yieldTrajectories = trajectories;
    this.#yieldOnlyLastSteps = onlyLast;
    this.#flatten = o.flattenData ?? o.replayBuffer !== undefined;
    this.#dialogTurnsPerBatch = o.dialogTurnsPerBatch ?? 1;
    this.#rowQueues = trajectories ? Array.from({ length: o.env.batchSize[0]! }, () => []) : [];
  }

  /** The environment. */
  get env(): EnvBase {
    return this.#o.env;
  }

  /** The replay buffer batches are written to, if any. */
  get replayBuffer(): ReplayBuffer | undefined {
    return this.#o.replayBuffer;
  }

  /** Dialog turns per batch (1 when yielding trajectories without it). */
  get dialogTurnsPerBatch(): number {
    return this.#dialogTurnsPerBatch;
  }

  /** Dialog turns to collect in all (-1: forever). */
  get totalDialogTurns(): number {
    return this.#o.totalDialogTurns;
  }

  /** Dialog turns collected so far (steps that ran, over all env rows). */
  get dialogTurns(): number {
    return this.#frames;
  }

  /** The current policy version (starts at 0), or `undefined` when `trackPolicyVersion` is off. */
  get policyVersion(): number | undefined {
    return this.#o.trackPolicyVersion ? this.#version : undefined;
  }

  /** Increments the policy version (no-op when `trackPolicyVersion` is off). */
  incrementVersion(): void {
    if (this.#o.trackPolicyVersion) this.#version += 1;
  }

  /** Sets the policy version (a resumed run starts at its checkpoint's; no-op when `trackPolicyVersion` is off). */
  setPolicyVersion(version: number): void {
    const v = parseOptions(z.number().int().min(0), version, "LLMCollector.setPolicyVersion version");
    if (this.#o.trackPolicyVersion) this.#version = v;
  }

  /** Batches collected, time spent collecting, rows dropped for staleness. */
  get stats(): LLMCollectorStats {
    const running = this.#busySince === undefined ? 0 : performance.now() - this.#busySince;
    return { batches: this.#batches, busyMs: this.#busyMs + running, droppedStale: this.#droppedStale };
  }

  /**
   * Pushes new weights to the policy through the `weightUpdater` hook (if any), then increments the policy version
   * (TorchRL's `update_policy_weights_`). Data collected afterwards carries the new version.
   */
  async updatePolicyWeights(weights?: unknown): Promise<void> {
    if (this.#o.weightUpdater !== undefined) await this.#o.weightUpdater(weights, this);
    this.incrementVersion();
    this.#updates += 1;
    this.#pulse.notify();
  }

  /**
   * Collects in the background into the replay buffer (TorchRL's `collector.start()`), until `totalDialogTurns`,
   * `shutdown()`, `close()` or the signal. Each batch waits for its turn (`maxPolicyAge`: how far collection may run
   * ahead of `updatePolicyWeights`) and for room in the buffer's storage (back-pressure: a full buffer pauses
   * collection until {@link takeBatch} removes rows). Read the data with {@link takeBatch}; a collection error is
   * rethrown there.
   */
  start(options: CollectorStartOptions = {}): void {
    const { maxPolicyAge, collectedAhead } = parseOptions(CollectorStartOptionsSchema, options, "LLMCollector.start options");
    const rb = this.#o.replayBuffer;
    if (rb === undefined) throw new InvalidArgumentError("LLMCollector options.replayBuffer: start() collects into a replay buffer; pass one");
    if (rb.storage.maxSize < this.#dialogTurnsPerBatch) {
      throw new InvalidArgumentError(
        `LLMCollector options.replayBuffer: its storage holds at most ${rb.storage.maxSize} rows, less than one batch (dialogTurnsPerBatch ${this.#dialogTurnsPerBatch})`,
      );
    }
    if (this.#closed) throw new CollectorStateError("LLMCollector: the collector is closed");
    if (this.#iterating || this.#background !== undefined) throw new CollectorStateError("LLMCollector: already collecting (one iteration or start() at a time)");
    this.#stopBackground = new AbortController();
    this.#failure = undefined;
    this.#batchesStarted = collectedAhead;
    this.#updates = 0;
    this.#background = this.#collectInBackground(maxPolicyAge, this.#stopBackground.signal);
  }

  /**
   * Pauses background collection for a consistent snapshot of the replay buffer (a checkpoint): resolves once the
   * batch in flight, if any, is written (or has failed); no batch starts until {@link resume}. Does nothing to an
   * iteration, whose batches are written only between the caller's steps.
   */
  async pause(): Promise<void> {
    this.#paused = true;
    await this.#inFlight;
  }

  /** Lets background collection go on after {@link pause}. */
  resume(): void {
    this.#paused = false;
    this.#pulse.notify();
  }

  /** Whether background collection ({@link start}) is running. */
  get running(): boolean {
    return this.#background !== undefined;
  }

  /**
   * Waits until the replay buffer holds `rows` rows, then removes the oldest `rows` and returns them. With
   * `maxPolicyAge`, rows more than that many versions behind the collector's policy version are dropped first (and
   * counted). Rejects with the background collection's error as soon as it fails (a worker that died), and with
   * COLLECTOR_STATE when collection has ended without enough rows.
   */
  async takeBatch(rows: number, options: TakeBatchOptions = {}): Promise<TakenBatch> {
    const count = parseOptions(z.number().int().min(1), rows, "LLMCollector.takeBatch rows");
    const o = parseOptions(TakeBatchOptionsSchema, options, "LLMCollector.takeBatch options");
    const rb = this.#o.replayBuffer;
    if (rb === undefined) throw new InvalidArgumentError("LLMCollector options.replayBuffer: takeBatch() reads the replay buffer; pass one");
    let dropped = 0;
    for (;;) {
      if (this.#failure !== undefined) throw this.#failure;
      if (o.maxPolicyAge !== undefined && rb.length > 0) {
        const oldest = this.#version - o.maxPolicyAge;
        const stale = rb.discardWhere((row) => rowVersion(row) < oldest);
        dropped += stale;
        if (stale > 0) this.#pulse.notify(); // room for the collector
      }
      if (rb.length >= count) {
        const batch = rb.take(count);
        this.#droppedStale += dropped;
        this.#pulse.notify();
        return { batch, dropped };
      }
      if (this.#background === undefined) {
        this.#droppedStale += dropped;
        throw new CollectorStateError(`LLMCollector.takeBatch: collection is not running and the replay buffer holds ${rb.length} of ${count} rows`);
      }
      await this.#pulse.wait(o.signal, "LLMCollector.takeBatch");
    }
  }

  /** Stops background collection: a batch in progress is cancelled (its worker requests too); resolves once stopped. */
  async shutdown(): Promise<void> {
    const background = this.#background;
    if (background === undefined) return;
    this.#stopBackground?.abort(new CollectorStateError("LLMCollector: shut down"));
    await background;
  }

  async #collectInBackground(maxPolicyAge: number, stop: AbortSignal): Promise<void> {
    const rb = this.#o.replayBuffer!;
    const outer = this.#o.signal;
    const signal = outer === undefined ? stop : AbortSignal.any([outer, stop]);
    const ready = (): boolean =>
      !this.#paused && this.#batchesStarted - this.#updates <= maxPolicyAge && rb.length + this.#dialogTurnsPerBatch <= rb.storage.maxSize;
    try {
      while (this.#budgetLeft() && !this.#closed && !stop.aborted) {
        while (!ready()) await this.#pulse.wait(signal, "LLMCollector");
        this.#batchesStarted += 1;
        const written = this.#collectBatch({ signal }).then((batch) => rb.extend(batch));
        this.#inFlight = written.catch(() => undefined); // pause() waits for it, whatever its outcome
        try {
          await written;
        } finally {
          this.#inFlight = undefined;
        }
        this.#pulse.notify();
      }
    } catch (err) {
      if (!stop.aborted) this.#failure = err instanceof Error ? err : new CollectorStateError(`LLMCollector: collection failed: ${String(err)}`);
    } finally {
      this.#background = undefined;
      this.#stopBackground = undefined;
      this.#pulse.notify();
    }
  }

  /** One batch: rolled out, counted, post-processed. */
  async #collectBatch(request: RequestOptions): Promise<TensorDict> {
    throwIfAborted(request.signal, "LLMCollector");
    this.#busySince = performance.now();
    try {
      let batch = this.#yieldTrajectories ? await this.#rolloutTrajectories(request) : await this.#rolloutAll(request);
      this.#frames += batch.numel();
      if (this.#o.postproc !== undefined) batch = await this.#o.postproc(batch);
      this.#batches += 1;
      return batch;
    } finally {
      this.#busyMs += performance.now() - this.#busySince;
      this.#busySince = undefined;
    }
  }

  /** Stops the collection (a running iteration ends after its current batch; background collection is cancelled) and closes the env. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.shutdown();
    await this.#o.env.close();
  }

  /** For `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #budgetLeft(): boolean {
    return this.#o.totalDialogTurns < 0 || this.#frames < this.#o.totalDialogTurns;
  }

  /**
   * The batches, until `totalDialogTurns` dialog turns are collected, `close()` is called or the signal aborts
   * (then it throws `RequestAbortedError`). One iteration at a time (COLLECTOR_STATE otherwise, or after `close()`).
   */
  async *[Symbol.asyncIterator](): AsyncIterator<TensorDict> {
    if (this.#closed) throw new CollectorStateError("LLMCollector: the collector is closed");
    if (this.#iterating || this.#background !== undefined) throw new CollectorStateError("LLMCollector: already being iterated (one iteration or start() at a time)");
    this.#iterating = true;
    try {
      while (this.#budgetLeft() && !this.#closed) {
        const batch = await this.#collectBatch(this.#request);
        if (this.#o.replayBuffer !== undefined) this.#o.replayBuffer.extend(batch);
        yield batch;
      }
    } finally {
      this.#iterating = false;
    }
  }

  get #request(): RequestOptions {
    return this.#o.signal === undefined ? {} : { signal: this.#o.signal };
  }

  /**
   * The policy, then an env step. The policy version written is the one the policy reports under `"policy_version"`
   * (a worker's generate records the version of the weights it sampled with), else the collector's. With
   * `last` (a batch's last step when the next batch resets anyway), done rows are not reset.
   */
  async #act(td: TensorDict, request: RequestOptions, last = false): Promise<[TensorDict, TensorDict]> {
    throwIfAborted(request.signal, "LLMCollector");
    let acted = await callPolicy(this.#o.policy, td, request);
    if (this.#o.trackPolicyVersion && !acted.has(POLICY_VERSION_KEY)) {
      acted = acted.exclude().set(POLICY_VERSION_KEY, Tensor.full("int64", acted.batchSize, BigInt(this.#version)));
    }
    if (!last) return this.#o.env.stepAndMaybeReset(acted, request);
    const stepped = await this.#o.env.step(acted, request);
    return [stepped, this.#o.env.stepMdp(stepped)];
  }

  async #rolloutAll(request: RequestOptions): Promise<TensorDict> {
    const reset = this.#o.resetAtEachIter;
    if (reset || this.#shuttle === undefined) this.#shuttle = await this.#o.env.reset(undefined, request);
    const steps: TensorDict[] = [];
    let collected = 0;
    while (collected < this.#dialogTurnsPerBatch) {
      const last = reset && collected + this.#shuttle.numel() >= this.#dialogTurnsPerBatch;
      const [stepped, next] = await this.#act(this.#shuttle, request, last);
      steps.push(stepped);
      collected += stepped.numel();
      this.#shuttle = next;
    }
    const trajectory = stackSteps(steps);
    return this.#flatten ? trajectory.reshape([-1]) : trajectory;
  }

  async #rolloutTrajectories(request: RequestOptions): Promise<TensorDict> {
    this.#shuttle ??= await this.#o.env.reset(undefined, request);
    while (this.#queuedNumel < this.#dialogTurnsPerBatch) {
      const [stepped, next] = await this.#act(this.#shuttle, request);
      this.#shuttle = next;
      stepped.unbind(0).forEach((row, i) => {
        const queue = this.#rowQueues[i]!;
        queue.push(row);
        if (rowDone(row)) this.#enqueueTrajectory(queue);
      });
    }
    const out: TensorDict[] = [];
    let count = 0;
    while (count < this.#dialogTurnsPerBatch) {
      const trajectory = this.#trajectories.shift()!;
      this.#queuedNumel -= trajectory.numel();
      count += trajectory.numel();
      out.push(trajectory);
    }
    return lazyCat(out);
  }

  /** A finished dialog of one env row: all its steps (`[T]`), or only its last one (`[1]`) with the others counted. */
  #enqueueTrajectory(queue: TensorDict[]): void {
    let trajectory: TensorDict;
    if (this.#yieldOnlyLastSteps) {
      const last = queue[queue.length - 1]!;
      this.#frames += queue.reduce((n, td) => n + td.numel(), 0) - last.numel();
      trajectory = last.unsqueeze(0);
    } else {
      trajectory = lazyStack(queue, true).td;
    }
    this.#trajectories.push(trajectory);
    this.#queuedNumel += trajectory.numel();
    queue.length = 0;
  }
}
