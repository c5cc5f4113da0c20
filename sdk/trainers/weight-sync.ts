/**
 * Weight sync from a trainer's model to generators (TorchRL's weight-sync schemes): the generator's policy
 * version moves on every sync, and its log-probs then equal the trainer's. See docs/training.md.
 *
 * - {@link SharedWeightSyncScheme}: generator and trainer in one worker sharing parameter tensors, zero copy
 *   (or a copy within the worker when `share: false`, or into a vLLM engine loaded there with `clone: false`).
 * - {@link ZMQWeightSyncScheme}: raw tensor frames in size-bounded buckets, straight from the trainer's worker
 *   to each generator's worker over a ZeroMQ pair opened for the sync.
 * - {@link DistributedWeightSyncScheme}: a torch.distributed broadcast (gloo on CPU, NCCL on GPU) in a
 *   process group of the trainer's worker and the generators' workers.
 */
import { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import { InvalidArgumentError } from "../core/errors.js";
import type { WorkerClient } from "../workers/client.js";
import type { MethodResult } from "../workers/methods.js";
import { parseOptions } from "../core/validation.js";
import { storeAddress } from "./store-address.js";

/** A model in a worker: a trainer (`{ worker, model }`) or a generator. */
export interface WeightEndpoint {
  readonly worker: WorkerClient;
  readonly model: string;
}

/** The outcome of one sync. */
export interface WeightSyncResult {
  /** The policy version the generators now hold (the trainer's model holds it too). */
  readonly policyVersion: number;
  /** Bytes moved to each generator (0 when parameters are shared). */
  readonly bytes: number;
  /** Wall time of the sync in ms, measured here. */
  readonly ms: number;
}

/** A sync under way ({@link ZMQWeightSyncScheme.startUpdate}): the version is fixed, the delivery may still run. */
export interface StartedWeightSync {
  /** The policy version being delivered: the trainer's model holds it already. */
  readonly policyVersion: number;
  /** Settles once every generator holds the weights (rejects when a delivery fails). */
  readonly delivered: Promise<WeightSyncResult>;
}

/** A way of moving the trainer's weights to generators. */
export interface WeightSyncScheme {
  /** Moves the current weights; resolves once every generator holds them. */
  updateWeights(requestOptions?: RequestOptions): Promise<WeightSyncResult>;
  /** Releases what the scheme holds (a process group); idempotent. */
  close(requestOptions?: RequestOptions): Promise<void>;
}

const Endpoint = z.custom<WeightEndpoint>(
  (v) => typeof v === "object" && v !== null && typeof (v as { model?: unknown }).model === "string" && "worker" in v,
  { message: "expected { worker, model } (a Trainer, or a generator model in a worker)" },
);

/** Runs `calls` together; the first failure aborts the others and is rethrown. */
async function together<T>(calls: ((signal: AbortSignal) => Promise<T>)[], requestOptions: RequestOptions): Promise<T[]> {
  const controller = new AbortController();
  const outer = requestOptions.signal;
  const onAbort = (): void => {
    controller.abort(outer?.reason);
  };
  if (outer?.aborted === true) onAbort();
  outer?.addEventListener("abort", onAbort, { once: true });
  try {
    return await Promise.all(
      calls.map((call) =>
        call(controller.signal).catch((err: unknown) => {
          controller.abort(err);
          throw err;
        }),
      ),
    );
  } finally {
    outer?.removeEventListener("abort", onAbort);
  }
}

function withSignal(requestOptions: RequestOptions, signal: AbortSignal): RequestOptions {
  return { ...requestOptions, signal };
}

// ---- colocated ---------------------------------------------------------------------------------------

/** Options of {@link SharedWeightSyncScheme.create}. */
export const SharedWeightSyncOptionsSchema = z.strictObject({
  /** Name of the generator model to create in the trainer's worker. */
  target: z.string().min(1),
  /** Share the parameter tensors (default true: nothing moves on a sync); false makes a separate copy. */
  share: z.boolean().optional(),
  /**
   * Create the target as a clone of the source (default true). false: the target is already loaded in the source's
   * worker — a model on the vLLM backend, from the same checkpoint — and every sync copies the weights into it
   * (the engine's `load_weights`, with the Hugging Face names); `share` must then be left out.
   */
  clone: z.boolean().default(true),
});

/** Options of {@link SharedWeightSyncScheme.create} (input form). */
export type SharedWeightSyncOptions = z.input<typeof SharedWeightSyncOptionsSchema>;

/**
 * A generator model in the trainer's own worker. With `share` (the default) it is the trainer's model under a
 * second name: every step is visible to generation at once, and a sync only moves the policy version. With
 * `clone: false` it is a model already loaded there (a vLLM engine), into which each sync copies the weights.
 *
 * ```ts
 * await worker.loadModel({ name: "generator", path, backend: "vllm" });
 * const sync = await SharedWeightSyncScheme.create(trainer, { target: "generator", clone: false });
 * ```
 */
export class SharedWeightSyncScheme implements WeightSyncScheme {
  private constructor(
    readonly source: WeightEndpoint,
    /** The generator: the target model in the source's worker. */
    readonly target: WeightEndpoint,
  ) {}

  /**
   * Creates the generator model `options.target` next to `source.model` (replacing one of that name), or with
   * `clone: false` takes the one loaded under that name.
   */
  static async create(source: WeightEndpoint, options: SharedWeightSyncOptions, requestOptions: RequestOptions = {}): Promise<SharedWeightSyncScheme> {
    const checked = parseOptions(Endpoint, source, "SharedWeightSyncScheme source");
    const resolved = parseOptions(SharedWeightSyncOptionsSchema, options, "SharedWeightSyncScheme options");
    if (resolved.target === checked.model) {
      throw new InvalidArgumentError("SharedWeightSyncScheme options.target: must differ from the source model");
    }
    if (!resolved.clone) {
      if (resolved.share !== undefined) {
        throw new InvalidArgumentError("SharedWeightSyncScheme options.share: only with clone: true (a loaded target has weights of its own)");
      }
      return new SharedWeightSyncScheme(checked, { worker: checked.worker, model: resolved.target });
    }
    const args = { source: checked.model, name: resolved.target, shareParameters: resolved.share ?? true, replace: true };
    await checked.worker.invoke("clone_model", args, [], requestOptions);
    return new SharedWeightSyncScheme(checked, { worker: checked.worker, model: resolved.target });
  }

  /** Moves the policy version (and copies the weights when they are not shared). */
  async updateWeights(requestOptions: RequestOptions = {}): Promise<WeightSyncResult> {
    const start = performance.now();
    const args = { source: this.source.model, target: this.target.model };
    const { policyVersion, bytes } = (await this.source.worker.invoke("sync_weights", args, [], requestOptions)).result;
    return { policyVersion, bytes, ms: performance.now() - start };
  }

  /** Nothing to release. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}

// ---- worker to worker over ZeroMQ --------------------------------------------------------------------

/** Options of {@link ZMQWeightSyncScheme}. */
export const ZMQWeightSyncOptionsSchema = z.strictObject({
  /** Largest bucket of tensors in one message, in bytes (a bigger tensor travels alone). Default 64 MiB. */
  bucketBytes: z.number().int().min(1).default(64 * 2 ** 20),
  /**
   * `"ipc"` (default: workers on one machine) or `"tcp"` (the generator binds `host` on an ephemeral port). tcp is
   * ZeroMQ CURVE with the keys of the workers' pool, so source and targets must come from one pool (docs/workers.md,
   * "Security"); a worker started by hand with `--insecure` transfers over loopback tcp only.
   */
  transport: z.enum(["ipc", "tcp"]).default("ipc"),
  /**
   * Interface every generator binds for tcp (default: each generator's own node address, `WorkerClient.nodeAddress`:
   * `"127.0.0.1"` for a local worker, its node's address for one placed on Ray; another address only with the pool's keys).
   */
  host: z.string().min(1).optional(),
  /** How long either side waits for the other, in ms. Default 120 000. */
  timeoutMs: z.number().int().min(1).default(120_000),
  /**
   * The trainer's worker copies the weights and sends the copy from a thread of its own (default false):
   * {@link ZMQWeightSyncScheme.startUpdate} resolves once the copy is taken, so the trainer's next request (a train
   * step) need not wait for the generators, whose receive may queue behind a generation in flight. Costs one copy
   * of the weights in the trainer's worker while a send runs.
   */
  background: z.boolean().default(false),
});

/** Options of {@link ZMQWeightSyncScheme} (input form). */
export type ZMQWeightSyncOptions = z.input<typeof ZMQWeightSyncOptionsSchema>;

/**
 * Direct transfer between workers: for each sync every generator's worker opens a receiving socket, and the
 * trainer's worker sends its weights there as raw frames in buckets of at most `bucketBytes`; generators
 * receive one after the other, all with the same policy version. Nothing passes through this process. A generator on
 * the vLLM backend stages what it receives and loads the whole set into its engine at the end.
 */
export class ZMQWeightSyncScheme implements WeightSyncScheme {
  private readonly options: z.output<typeof ZMQWeightSyncOptionsSchema>;
  /** The generators. */
  readonly targets: readonly WeightEndpoint[];

  constructor(
    readonly source: WeightEndpoint,
    targets: readonly WeightEndpoint[],
    options: ZMQWeightSyncOptions = {},
  ) {
    parseOptions(Endpoint, source, "ZMQWeightSyncScheme source");
    this.targets = parseOptions(z.array(Endpoint).min(1), targets, "ZMQWeightSyncScheme targets");
    this.options = parseOptions(ZMQWeightSyncOptionsSchema, options, "ZMQWeightSyncScheme options");
  }

  /**
   * Starts a transfer of the current weights and resolves once they are fixed: with `background`, as soon as the
   * trainer's worker has copied them (the generators receive later, each after the requests queued before it);
   * otherwise once every generator holds them. The trainer may step again right away: the copy is what is sent.
   */
  async startUpdate(requestOptions: RequestOptions = {}): Promise<StartedWeightSync> {
    if (!this.options.background) {
      const done = await this.updateWeights(requestOptions);
      return { policyVersion: done.policyVersion, delivered: Promise.resolve(done) };
    }
    const start = performance.now();
    const { bucketBytes, timeoutMs } = this.options;
    const listens = await this.listen(requestOptions);
    const controller = new AbortController();
    const signal = requestOptions.signal === undefined ? controller.signal : AbortSignal.any([requestOptions.signal, controller.signal]);
    const receives = Promise.all(
      listens.map((listen, i) => this.targets[i]!.worker.invoke("weights_receive", { token: listen.token, timeoutMs }, [], withSignal(requestOptions, signal))),
    );
    const args = { model: this.source.model, endpoints: listens.map((l) => l.endpoint), bucketBytes, timeoutMs, background: true };
    let sent: MethodResult<"weights_send">;
    try {
      sent = (await this.source.worker.invoke("weights_send", args, [], requestOptions)).result;
    } catch (err) {
      controller.abort(err);
      await receives.catch(() => undefined);
      throw err;
    }
    const delivered = receives.then(() => ({ policyVersion: sent.policyVersion, bytes: sent.bytes, ms: performance.now() - start }));
    delivered.catch(() => undefined); // the caller awaits it; an unobserved failure must not crash the process
    return { policyVersion: sent.policyVersion, delivered };
  }

  /** Every generator's receiving end (answered by its worker at once, even while it generates). */
  private async listen(requestOptions: RequestOptions): Promise<MethodResult<"weights_listen">[]> {
    const { transport, host } = this.options;
    const listens: MethodResult<"weights_listen">[] = [];
    for (const target of this.targets) {
      const args = { model: target.model, transport, host: host ?? target.worker.nodeAddress };
      listens.push((await target.worker.invoke("weights_listen", args, [], requestOptions)).result);
    }
    return listens;
  }

  /** One transfer to every generator; resolves once every generator holds the weights. */
  async updateWeights(requestOptions: RequestOptions = {}): Promise<WeightSyncResult> {
    if (this.options.background) return (await this.startUpdate(requestOptions)).delivered;
    const start = performance.now();
    const { bucketBytes, timeoutMs } = this.options;
    // Listeners first: a receive holds its worker's compute thread until the sender is done with it.
    const listens = await this.listen(requestOptions);
    const receives = listens.map((listen, i) => async (signal: AbortSignal) => {
      await this.targets[i]!.worker.invoke("weights_receive", { token: listen.token, timeoutMs }, [], withSignal(requestOptions, signal));
      return null;
    });
    const send = async (signal: AbortSignal) => {
      const args = { model: this.source.model, endpoints: listens.map((l) => l.endpoint), bucketBytes, timeoutMs };
      return (await this.source.worker.invoke("weights_send", args, [], withSignal(requestOptions, signal))).result;
    };
    const [sent] = await together<MethodResult<"weights_send"> | null>([send, ...receives], requestOptions);
    const { policyVersion, bytes } = sent!;
    return { policyVersion, bytes, ms: performance.now() - start };
  }

  /** Nothing to release: sockets live for one sync. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}

// ---- torch.distributed -------------------------------------------------------------------------------

/** Options of {@link DistributedWeightSyncScheme.init}. */
export const DistributedWeightSyncOptionsSchema = z.strictObject({
  /** `"gloo"` (CPU, default) or `"nccl"` (GPU workers). */
  backend: z.enum(["gloo", "nccl"]).default("gloo"),
  /** The TCP store, `tcp://host:port`, hosted by the trainer's worker (rank 0); default a free local port. */
  initMethod: z.string().regex(/^tcp:\/\/.+:\d+$/, "expected tcp://host:port").optional(),
  /** Bucket size of the broadcast, in bytes. Default 64 MiB. */
  bucketBytes: z.number().int().min(1).default(64 * 2 ** 20),
  /** Timeout of the group's setup and collectives, in ms. Default 120 000. */
  timeoutMs: z.number().int().min(1).default(120_000),
});

/** Options of {@link DistributedWeightSyncScheme.init} (input form). */
export type DistributedWeightSyncOptions = z.input<typeof DistributedWeightSyncOptionsSchema>;

/**
 * A torch.distributed process group of the trainer's worker (rank 0) and the generators' workers (ranks 1..n);
 * each sync is one broadcast from rank 0, in byte buckets. A worker is in at most one group: `close()` leaves
 * it. Collectives cannot be cancelled once started.
 */
export class DistributedWeightSyncScheme implements WeightSyncScheme {
  private closed = false;

  private constructor(
    readonly source: WeightEndpoint,
    readonly targets: readonly WeightEndpoint[],
    private readonly bucketBytes: number,
  ) {}

  /** Sets the group up on every worker (each must be a different worker). */
  static async init(
    source: WeightEndpoint,
    targets: readonly WeightEndpoint[],
    options: DistributedWeightSyncOptions = {},
    requestOptions: RequestOptions = {},
  ): Promise<DistributedWeightSyncScheme> {
    parseOptions(Endpoint, source, "DistributedWeightSyncScheme source");
    const checked = parseOptions(z.array(Endpoint).min(1), targets, "DistributedWeightSyncScheme targets");
    const resolved = parseOptions(DistributedWeightSyncOptionsSchema, options, "DistributedWeightSyncScheme options");
    const members = [source, ...checked];
    if (new Set(members.map((m) => m.worker)).size !== members.length) {
      throw new InvalidArgumentError("DistributedWeightSyncScheme targets: every member must be in its own worker");
    }
    const initMethod = resolved.initMethod ?? (await storeAddress(source.worker, requestOptions));
    const common = { backend: resolved.backend, initMethod, worldSize: members.length, timeoutMs: resolved.timeoutMs };
    await together(
      members.map((m, rank) => (signal: AbortSignal) => m.worker.invoke("dist_init", { ...common, rank }, [], withSignal(requestOptions, signal))),
      requestOptions,
    );
    return new DistributedWeightSyncScheme(source, checked, resolved.bucketBytes);
  }

  /** One broadcast from the trainer's model into every generator. */
  async updateWeights(requestOptions: RequestOptions = {}): Promise<WeightSyncResult> {
    if (this.closed) throw new InvalidArgumentError("DistributedWeightSyncScheme: closed");
    const start = performance.now();
    const members = [this.source, ...this.targets];
    const replies = await together(
      members.map((m) => (signal: AbortSignal) =>
        m.worker.invoke("weights_broadcast", { model: m.model, src: 0, bucketBytes: this.bucketBytes }, [], withSignal(requestOptions, signal)),
      ),
      requestOptions,
    );
    const { policyVersion, bytes } = replies[0]!.result;
    return { policyVersion, bytes, ms: performance.now() - start };
  }

  /** Leaves the process group on every worker. */
  async close(requestOptions: RequestOptions = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const members = [this.source, ...this.targets];
    await Promise.all(members.map((m) => m.worker.invoke("dist_close", {}, [], requestOptions)));
  }
}
