/**
 * `ParallelEnv`: `numWorkers` copies of an env spread over `worker_threads` (TorchRL's `ParallelEnv`), as one env of
 * batch size `[numWorkers]` whose copies step at the same time.
 */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { z } from "zod";
import { InvalidArgumentError, parseOptions } from "../core/index.js";
import { TensorDict } from "../tensordict/index.js";
import { BatchedEnvBase } from "./batched-env.js";
import { throwIfAborted, type EnvCallOptions } from "./env-base.js";
import { builtInEnv, loadEnvFactory, resolveEnvFactory, type EnvFactory, type ResolvedEnvFactory } from "./env-factory.js";
import { EnvStateError, SubEnvError } from "./errors.js";
import { DONE_KEYS, NEXT_KEY, RESET_KEY, REWARD_KEY } from "./keys.js";
import type { ThreadReply } from "./parallel-worker.js";
import { readFlags } from "./rows.js";
import { packLeaves, unpackLeaves } from "./thread-leaves.js";

/** Options of {@link ParallelEnv}. */
export const ParallelEnvOptionsSchema = z.strictObject({
  /** Threads to spread the copies over (default: `min(numWorkers, os.availableParallelism())`). */
  numThreads: z.number().int().min(1).optional(),
});

/** Options of {@link ParallelEnv}. */
export type ParallelEnvOptions = z.input<typeof ParallelEnvOptionsSchema>;

interface Pending {
  resolve(reply: ThreadReply): void;
  reject(err: Error): void;
}

/** One thread and the copies it holds (`first .. first + count - 1`). */
interface Share {
  readonly first: number;
  readonly count: number;
  worker?: Worker;
  pending?: Pending | undefined;
  alive: boolean;
  /** The seed of its first copy, sent with the next command. */
  seed?: number | undefined;
  /** Its copies' last observation (what a reset that spares them gives). */
  last?: TensorDict;
}

/** The thread entry, and whether it is TypeScript (running from source: the thread needs tsx's loader). */
function threadEntry(): URL {
  const source = import.meta.url.endsWith(".ts");
  return new URL(source ? "./parallel-worker.ts" : "./parallel-worker.js", import.meta.url);
}

function isTypeScript(url: string): boolean {
  return /\.[cm]?ts$/.test(new URL(url).pathname);
}

function spawn(factory: ResolvedEnvFactory, first: number, count: number): Worker {
  const entry = threadEntry();
  const workerData = { factory, first, count };
  if (!isTypeScript(entry.href) && !("module" in factory && isTypeScript(factory.module))) return new Worker(entry, { workerData });
  // TypeScript in a thread (tests, tsx scripts, a .ts factory): register tsx's loader there first.
  let tsx: string;
  try {
    tsx = import.meta.resolve("tsx/esm/api");
  } catch {
    throw new InvalidArgumentError("ParallelEnv: running TypeScript (the SDK from source, or a .ts env factory) in a thread needs the tsx package");
  }
  const code = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(entry.href)}); });`;
  return new Worker(code, { eval: true, workerData });
}

/**
 * Copies of one env as a batch `[numWorkers]`, spread over worker threads that step at the same time (TorchRL's
 * `ParallelEnv(num_workers, create_env_fn)`). A thread cannot receive a function, so `createEnv` names what each
 * thread builds: `{ env: "CartPole-v1" | "Pendulum-v1", options }` or `{ module, export, options }` (a module URL and
 * its exported factory). Thread `t` holds a contiguous share of the copies; actions and observations cross as
 * transferred typed arrays. Same seeds give exactly `SerialEnv`'s trajectories.
 *
 * The threads start at the first `reset` (or `await env.start()`); specs of a built-in env are known at once, those
 * of a module factory after `start`. Call `close()` (or `await using`) to end the threads; an idle `ParallelEnv` does
 * not keep the process alive. An error in a thread surfaces as `SubEnvError` (`SUB_ENV_FAILED`) naming the copy.
 *
 * Cost: every step is a message round trip per thread (tens of microseconds). For envs as cheap as CartPole that is
 * more than the step itself, so `SerialEnv` is faster there; `ParallelEnv` pays off when a step costs more than the
 * round trip (a physics engine, a game).
 *
 * ```ts
 * await using env = new ParallelEnv(8, { env: "CartPole-v1" });
 * env.setSeed(0);
 * const td = await env.reset(); // observation [8, 4]
 * ```
 */
export class ParallelEnv extends BatchedEnvBase {
  /** The number of threads. */
  readonly numThreads: number;
  readonly #factory: ResolvedEnvFactory;
  readonly #shares: Share[];
  #starting: Promise<void> | undefined;
  #closed = false;

  constructor(numWorkers: number, createEnv: EnvFactory, options: ParallelEnvOptions = {}) {
    super(numWorkers);
    this.#factory = resolveEnvFactory(createEnv, "ParallelEnv createEnv");
    const opts = parseOptions(ParallelEnvOptionsSchema, options, "ParallelEnv options");
    this.numThreads = Math.min(this.numWorkers, opts.numThreads ?? availableParallelism());
    const base = Math.floor(this.numWorkers / this.numThreads);
    const extra = this.numWorkers % this.numThreads;
    let first = 0;
    this.#shares = Array.from({ length: this.numThreads }, (_, t) => {
      const count = base + (t < extra ? 1 : 0);
      const share: Share = { first, count, alive: false };
      first += count;
      return share;
    });
    const meta = builtInEnv(this.#factory);
    if (meta !== undefined) this.setCopySpecs(meta);
  }

  protected specsUnknown(): Error {
    return new EnvStateError("ParallelEnv: the specs of a module factory are known once the threads start; await env.start() (or reset) first");
  }

  /** The number of threads running now, counted from their `exit` events (0 before `start` and after `close`). */
  get threadCount(): number {
    return this.#shares.filter((s) => s.alive).length;
  }

  /** Starts the threads and waits until each has built its copies (done by the first `reset` otherwise). */
  start(): Promise<void> {
    if (this.#closed) return Promise.reject(new EnvStateError("ParallelEnv.start: the env is closed"));
    this.#starting ??= this.#start();
    return this.#starting;
  }

  async #start(): Promise<void> {
    if (builtInEnv(this.#factory) === undefined) {
      // As TorchRL, read the specs from one copy built here.
      const meta = (await loadEnvFactory(this.#factory))();
      this.setCopySpecs(meta);
      await meta.close();
    }
    const ready = this.#shares.map((share) => {
      const worker = spawn(this.#factory, share.first, share.count);
      share.worker = worker;
      share.alive = true;
      worker.on("message", (reply: ThreadReply) => {
        this.#settle(share, reply);
      });
      worker.on("error", (err) => {
        this.#fail(share, `the thread failed: ${err.message}`, err);
      });
      worker.on("exit", (code) => {
        share.alive = false;
        this.#fail(share, `the thread exited (code ${code})`);
      });
      return this.#request(share, undefined);
    });
    const replies = await Promise.allSettled(ready);
    const failed = replies.find((r) => r.status === "rejected");
    if (failed !== undefined) {
      this.#closed = true;
      await this.#endThreads();
      throw failed.reason;
    }
  }

  /** Asks each running thread to close its copies, then terminates it. */
  async #endThreads(): Promise<void> {
    await Promise.all(
      this.#shares.map(async (share) => {
        if (!share.alive || share.worker === undefined) return;
        await this.#request(share, { op: "close" }).catch(() => undefined);
        await share.worker.terminate(); // resolves once the thread's "exit" event has marked it not alive
      }),
    );
  }

  #settle(share: Share, reply: ThreadReply): void {
    const pending = share.pending;
    share.pending = undefined;
    share.worker?.unref();
    if (pending === undefined) return;
    if (reply.op === "error") pending.reject(new SubEnvError("ParallelEnv", reply.copy, reply.message, { causeCode: reply.code }));
    else pending.resolve(reply);
  }

  #fail(share: Share, message: string, cause?: unknown): void {
    const pending = share.pending;
    share.pending = undefined;
    pending?.reject(new SubEnvError("ParallelEnv", share.first, message, { cause }));
  }

  /** Sends `command` (or nothing: waits for `ready`) and resolves with the thread's answer. */
  #request(share: Share, command: object | undefined, transfer: ArrayBuffer[] = []): Promise<ThreadReply> {
    if (share.pending !== undefined) return Promise.reject(new EnvStateError("ParallelEnv: a call is already running; await it first"));
    if (!share.alive || share.worker === undefined) return Promise.reject(new SubEnvError("ParallelEnv", share.first, "the thread is not running"));
    const worker = share.worker;
    return new Promise<ThreadReply>((resolve, reject) => {
      share.pending = { resolve, reject };
      worker.ref(); // a thread keeps the process alive only while it owes an answer
      if (command !== undefined) worker.postMessage(command, transfer);
    });
  }

  setSeed(seed: number): void {
    if (!Number.isSafeInteger(seed) || seed < 0) throw new InvalidArgumentError(`ParallelEnv.setSeed seed: expected an integer >= 0, got ${String(seed)}`);
    for (const share of this.#shares) share.seed = seed + share.first;
  }

  #takeSeed(share: Share): { seed?: number } {
    const seed = share.seed;
    share.seed = undefined;
    return seed === undefined ? {} : { seed };
  }

  async #ready(what: string, options: EnvCallOptions): Promise<void> {
    if (this.#closed) throw new EnvStateError(`ParallelEnv.${what}: the env is closed`);
    await this.start();
    throwIfAborted(options.signal, `ParallelEnv.${what}`);
  }

  protected async _reset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    await this.#ready("reset", options);
    const mask = td.has(RESET_KEY) ? readFlags(td, RESET_KEY) : new Array<boolean>(this.numWorkers).fill(true);
    const parts = await Promise.all(
      this.#shares.map(async (share) => {
        const rows = mask.slice(share.first, share.first + share.count);
        if (!rows.some((m) => m)) {
          if (share.last === undefined) throw new EnvStateError(`ParallelEnv.reset: copy ${share.first} was never reset; reset every copy first`);
          return share.last;
        }
        const reply = await this.#request(share, { op: "reset", mask: Uint8Array.from(rows, Number), ...this.#takeSeed(share) });
        share.last = unpackLeaves((reply as { leaves: unknown }).leaves, [share.count], "ParallelEnv reset");
        return share.last;
      }),
    );
    return TensorDict.cat(parts, 0);
  }

  protected async stepCopies(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    await this.#ready("step", options);
    const rows = td.exclude(NEXT_KEY).split(this.#shares.map((s) => s.count), 0);
    const parts = await Promise.all(
      this.#shares.map(async (share, t) => {
        const { leaves, transfer } = packLeaves(rows[t]!, "ParallelEnv.step");
        const reply = await this.#request(share, { op: "step", leaves, ...this.#takeSeed(share) }, transfer);
        const next = unpackLeaves((reply as { leaves: unknown }).leaves, [share.count], "ParallelEnv step");
        share.last = next.exclude(REWARD_KEY, ...DONE_KEYS);
        return next;
      }),
    );
    return TensorDict.cat(parts, 0);
  }

  /** Closes the copies and ends the threads (once; later calls do nothing). */
  override async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#starting?.catch(() => undefined);
    await this.#endThreads();
  }
}
