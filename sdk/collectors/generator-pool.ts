/**
 * `GeneratorPool`: several generators (policies on generator workers) acting as one policy. Each call cuts its batch
 * into chunks of whole prompt groups; every generator takes the next chunk as soon as it is free (one forward at a
 * time), so a slow generator samples less within a call. The rows come back in their original order, each stamped
 * with the generator that sampled it. A generator whose worker dies (or stops answering) is dropped, and its chunk
 * goes to another generator.
 */
import { z } from "zod";
import { isWorkerLoss, RequestAbortedError } from "../../bridge/errors.js";
import { InvalidArgumentError } from "../core/errors.js";
import { parseOptions } from "../core/validation.js";
import { lazyCat } from "../data/replay-buffer/collate.js";
import { callPolicy, type Policy } from "../envs/env-base.js";
import type { ForwardOptions } from "../modules/llm-wrapper.js";
import { Tensor, type TensorDict } from "../tensordict/index.js";

/** Where each row records the index of the generator that sampled it (int64, one per row). */
export const GENERATOR_KEY: readonly string[] = Object.freeze(["collector", "generator"]);

/** Options of {@link GeneratorPool}. */
export const GeneratorPoolOptionsSchema = z.strictObject({
  /** Rows per prompt group: each run of this many consecutive rows is sampled by one generator (default 1). */
  groupSize: z.number().int().min(1).default(1),
  /**
   * Prompt groups per chunk, the unit a generator takes at a time (default: ceil(groups / (2 × generators)) of each
   * call, at least 1). Smaller chunks balance better; larger ones batch more per forward.
   */
  chunkGroups: z.number().int().min(1).optional(),
  /**
   * Told when a generator is dropped (its worker died or stopped answering; see {@link isWorkerLoss}) and its chunk
   * handed to another: the generator's index and the error. Not called for the last generator standing, whose error
   * the call rejects with.
   */
  onGeneratorLost: z
    .custom<(index: number, error: unknown) => void>((v) => typeof v === "function", { message: "expected a function (index, error) => void" })
    .optional(),
});

/** Options of {@link GeneratorPool} (input form). */
export type GeneratorPoolOptions = z.input<typeof GeneratorPoolOptionsSchema>;

/** Counters of one generator of a {@link GeneratorPool}. */
export interface GeneratorStats {
  /** Rows sent to it. */
  readonly rows: number;
  /** Forwards sent to it (one per chunk; one per call with a single generator). */
  readonly calls: number;
  /** Time with at least one forward in flight on it (ms), counting one in progress. */
  readonly busyMs: number;
  /** Rows of its forwards still in flight. */
  readonly outstandingRows: number;
}

interface Counters {
  rows: number;
  calls: number;
  busyMs: number;
  outstandingRows: number;
  inFlight: number;
  busySince: number;
}

/** One chunk of a call: whole prompt groups, with the seed of its index. */
interface Chunk {
  readonly part: TensorDict;
  readonly rows: number;
  readonly options: ForwardOptions;
}

/** A call of the multi-generator path, while it has chunks to hand out or in flight. */
interface PendingCall {
  readonly chunks: readonly Chunk[];
  readonly results: TensorDict[];
  /** The next chunk to hand out. */
  next: number;
  /** Chunks whose generator was lost, to hand out again before `next`. */
  readonly retry: number[];
  /** Chunks in flight. */
  inFlight: number;
  /** The first error (a failed call hands out no more chunks). */
  failure: { readonly error: unknown } | undefined;
  readonly resolve: (results: TensorDict[]) => void;
  readonly reject: (error: unknown) => void;
  readonly cleanup: () => void;
}

/** The seed of call (or chunk) `call` derived from `seed`: distinct streams for distinct numbers, reproducibly. */
export function stepSeed(seed: number, call: number): number {
  return (seed * 1_000_003 + call) % Number.MAX_SAFE_INTEGER;
}

/**
 * A policy over several generators (a generator service with replicas, as in torchforge). Each `forward` cuts its
 * batch into chunks of whole prompt groups (`groupSize` consecutive rows, never split; `chunkGroups` groups per chunk,
 * by default ceil(groups / (2 × generators))) and hands them out by pulling: every free generator takes the next
 * chunk, runs it, and takes another, one forward at a time, so within one call a slow generator samples fewer chunks.
 * A generator still busy with another call's chunk joins when it is free; calls are served oldest first, and among
 * free generators the lowest index goes first. Chunk `j` samples with `stepSeed(seed, j)` when `options.seed` is given:
 * the seed follows the rows, not the generator, so with equal weights the rows do not depend on which generator took
 * which chunk, and a seeded call is reproducible. The rows come back in their original order (views, no copies), each
 * with `("collector","generator")` (int64, the index of the generator that sampled it). A generator whose worker is
 * lost ({@link isWorkerLoss}: it died, stopped answering or hung) while others are left is dropped for good (`lost`,
 * `onGeneratorLost`) and its chunk goes to a live generator with the same seed. Any other failure stops the hand-out;
 * the call rejects with the first error once its chunks in flight have settled, and the pool stays usable. With one
 * generator, the call and its seed pass through unchanged.
 *
 * ```ts
 * const policy = new GeneratorPool([new TransformersWrapper(a, opts), new TransformersWrapper(b, opts)], { groupSize: 4 });
 * const collector = new LLMCollector({ env, policy, dialogTurnsPerBatch: 32 });
 * ```
 */
export class GeneratorPool {
  readonly #generators: readonly Policy[];
  readonly #groupSize: number;
  readonly #chunkGroups: number | undefined;
  readonly #onLost: ((index: number, error: unknown) => void) | undefined;
  /** Generators dropped after their worker was lost: handed nothing more. */
  readonly #lost: boolean[];
  readonly #counters: Counters[];
  /** Whether each generator runs a chunk (the multi-generator path: one at a time). */
  readonly #busy: boolean[];
  /** Calls with chunks not yet handed out, oldest first. */
  #queue: PendingCall[] = [];

  constructor(generators: readonly Policy[], options: GeneratorPoolOptions = {}) {
    this.#generators = Array.isArray(generators) ? [...(generators as readonly Policy[])] : [];
    if (this.#generators.length === 0) throw new InvalidArgumentError("GeneratorPool generators: expected at least one policy");
    this.#generators.forEach((g: unknown, i) => {
      if (typeof g !== "function" && typeof (g as { forward?: unknown } | null)?.forward !== "function") {
        throw new InvalidArgumentError(`GeneratorPool generators[${i}]: expected a function or an object with forward(td)`);
      }
    });
    const parsed = parseOptions(GeneratorPoolOptionsSchema, options, "GeneratorPool options");
    this.#groupSize = parsed.groupSize;
    this.#chunkGroups = parsed.chunkGroups;
    this.#onLost = parsed.onGeneratorLost;
    this.#lost = this.#generators.map(() => false);
    this.#counters = this.#generators.map(() => ({ rows: 0, calls: 0, busyMs: 0, outstandingRows: 0, inFlight: 0, busySince: 0 }));
    this.#busy = this.#generators.map(() => false);
  }

  /** The number of generators. */
  get size(): number {
    return this.#generators.length;
  }

  /** Rows per prompt group. */
  get groupSize(): number {
    return this.#groupSize;
  }

  /** The indexes of the generators dropped after their worker was lost (see the class). */
  get lost(): readonly number[] {
    return this.#lost.flatMap((l, i) => (l ? [i] : []));
  }

  /** Per-generator counters, by generator index (a snapshot). */
  get stats(): readonly GeneratorStats[] {
    const now = performance.now();
    return this.#counters.map((c) => ({
      rows: c.rows,
      calls: c.calls,
      busyMs: c.busyMs + (c.inFlight > 0 ? now - c.busySince : 0),
      outstandingRows: c.outstandingRows,
    }));
  }

  /** Samples `td` on the generators (see the class); the result has the batch size of `td` (times any sample dim). */
  async forward(td: TensorDict, options: ForwardOptions = {}): Promise<TensorDict> {
    const rows = td.numel();
    // one generator (or nothing to share): the call as it came, seed included
    if (this.#generators.length === 1 || rows === 0) return stamp(await this.#send(0, td, options), 0);
    const flat = td.reshape([rows]);
    const groups = Math.ceil(rows / this.#groupSize);
    const chunkRows = (this.#chunkGroups ?? Math.max(1, Math.ceil(groups / (2 * this.#generators.length)))) * this.#groupSize;
    const chunks: Chunk[] = [];
    for (let start = 0; start < rows; start += chunkRows) {
      const stop = Math.min(rows, start + chunkRows);
      const j = chunks.length;
      const seeded: ForwardOptions = options.seed === undefined ? options : { ...options, seed: stepSeed(options.seed, j) };
      chunks.push({ part: flat.index({ start, stop }), rows: stop - start, options: seeded });
    }
    const merged = lazyCat(await this.#dispatch(chunks, options.signal));
    return merged.reshape([...td.batchSize, ...merged.batchSize.slice(1)]);
  }

  /** Queues a call's chunks for the generators to pull; resolves with the stamped results in chunk order. */
  #dispatch(chunks: readonly Chunk[], signal: AbortSignal | undefined): Promise<TensorDict[]> {
    return new Promise<TensorDict[]>((resolve, reject) => {
      const onAbort = (): void => {
        // chunks in flight get the signal themselves; those not handed out yet are not sent
        if (call.next < call.chunks.length) this.#fail(call, new RequestAbortedError("GeneratorPool.forward", signal?.reason));
      };
      const call: PendingCall = {
        chunks,
        results: new Array<TensorDict>(chunks.length),
        next: 0,
        retry: [],
        inFlight: 0,
        failure: undefined,
        resolve,
        reject,
        cleanup: () => signal?.removeEventListener("abort", onAbort),
      };
      if (signal?.aborted === true) {
        reject(new RequestAbortedError("GeneratorPool.forward", signal.reason));
        return;
      }
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#queue.push(call);
      this.#pump();
    });
  }

  /** Gives every free generator (lowest index first) the next chunk (a retried one first) of the oldest call that has one. */
  #pump(): void {
    for (let i = 0; i < this.#generators.length; i++) {
      if (this.#busy[i]! || this.#lost[i]!) continue;
      const call = this.#queue[0];
      if (call === undefined) return;
      const j = call.retry.shift() ?? call.next++;
      if (call.retry.length === 0 && call.next === call.chunks.length) this.#queue.shift();
      void this.#run(i, call, j);
    }
  }

  /** Chunk `j` of `call` on generator `i`; when it settles, the generator pulls the next chunk. */
  async #run(i: number, call: PendingCall, j: number): Promise<void> {
    this.#busy[i] = true;
    call.inFlight += 1;
    const chunk = call.chunks[j]!;
    try {
      const out = await this.#send(i, chunk.part, chunk.options);
      call.results[j] = stamp(checkRows(out, chunk.rows, i), i);
    } catch (error) {
      if (!this.#retryElsewhere(i, call, j, error)) this.#fail(call, error);
    } finally {
      this.#busy[i] = false;
      call.inFlight -= 1;
      this.#settle(call);
      this.#pump();
    }
  }

  /**
   * When generator `i` is lost (its worker gone, {@link isWorkerLoss}) and another is left: drops it, tells
   * `onGeneratorLost`, and queues chunk `j` of `call` again (first), for a live generator (same rows, same seed).
   */
  #retryElsewhere(i: number, call: PendingCall, j: number, error: unknown): boolean {
    if (!isWorkerLoss(error) || call.failure !== undefined) return false;
    if (!this.#lost.some((lost, k) => k !== i && !lost)) return false;
    if (!this.#lost[i]!) {
      this.#lost[i] = true;
      this.#onLost?.(i, error);
    }
    call.retry.push(j);
    if (!this.#queue.includes(call)) this.#queue.unshift(call);
    return true;
  }

  /** Records `call`'s first error and hands out none of its chunks left. */
  #fail(call: PendingCall, error: unknown): void {
    call.failure ??= { error };
    this.#queue = this.#queue.filter((c) => c !== call);
    this.#settle(call);
  }

  /** Ends `call` once nothing of it is in flight and nothing is left to hand out (or it failed). */
  #settle(call: PendingCall): void {
    if (call.inFlight > 0) return;
    if (call.failure !== undefined) {
      call.cleanup();
      call.reject(call.failure.error);
    } else if (call.next === call.chunks.length && call.retry.length === 0) {
      call.cleanup();
      call.resolve(call.results);
    }
  }

  /** One forward on generator `i`, counted; its rows are outstanding from the moment it is made until it settles. */
  async #send(i: number, td: TensorDict, options: ForwardOptions): Promise<TensorDict> {
    const c = this.#counters[i]!;
    const rows = td.numel();
    c.outstandingRows += rows;
    c.rows += rows;
    c.calls += 1;
    if (c.inFlight++ === 0) c.busySince = performance.now();
    try {
      return await callPolicy(this.#generators[i]!, td, options);
    } finally {
      c.outstandingRows -= rows;
      if (--c.inFlight === 0) c.busyMs += performance.now() - c.busySince;
    }
  }
}

/** `out` (a shallow copy) with every row stamped with generator `i`. */
function stamp(out: TensorDict, i: number): TensorDict {
  return out.exclude().set([...GENERATOR_KEY], Tensor.full("int64", out.batchSize, BigInt(i)));
}

function checkRows(out: TensorDict, rows: number, i: number): TensorDict {
  if (out.batchDims === 0 || out.batchSize[0] !== rows) {
    throw new InvalidArgumentError(`GeneratorPool: generator ${i} answered batch size [${out.batchSize.join(", ")}] for ${rows} rows`);
  }
  return out;
}
