import {
  ConnectionClosedError,
  InvalidArgumentError,
  PosttrainError,
  ProtocolError,
  RequestAbortedError,
  RequestTimeoutError,
  WorkerError,
  WorkerHungError,
  WorkerOverloadedError,
} from "../errors.js";
import type { Transport } from "../transport/transport.js";
import type { DType } from "../wire/dtypes.js";
import {
  PROTOCOL_VERSION,
  decodeWorkerMessage,
  encodeEnvelope,
  type ClientMessage,
  type HeartbeatReply,
  type PayloadDescriptor,
  type ResponseEnvelope,
} from "./envelope.js";
import { checkArgsDepth, checkRequestSize, type WorkerLimits } from "./limits.js";
import type { Payload } from "./payload.js";

/** Per-request options. */
export interface RequestOptions {
  /** Milliseconds to wait for the reply; `0` waits forever. Defaults to the channel's `requestTimeoutMs`. */
  readonly timeoutMs?: number;
  /** Cancels the request: it is rejected with `RequestAbortedError` and the worker drops it if not started. */
  readonly signal?: AbortSignal;
  /**
   * Milliseconds after which an unanswered call means the worker's compute thread stopped making progress: the whole
   * channel fails with `WorkerHungError` (every pending request is rejected with it) and the worker is killed. `0`
   * turns it off; defaults to the channel's `watchdogMs`. The time counts from sending, so it includes the time the
   * call waits in the worker's queue behind others. Compare `timeoutMs`, which gives up on this request only.
   *
   * ```ts
   * await worker.invoke("train_step", { model: "policy" }, [batch], { watchdogMs: 10 * 60_000 });
   * ```
   */
  readonly watchdogMs?: number;
}

/** A successful reply. */
export interface RPCReply {
  readonly result: Readonly<Record<string, unknown>>;
  readonly payloads: readonly Payload[];
}

/** Options of {@link RPCChannel}. */
export interface RPCChannelOptions {
  /** Name used in error messages, e.g. `"worker 0"`. */
  readonly name: string;
  /** Default per-request timeout in ms; `0` (the default) waits forever. */
  readonly requestTimeoutMs?: number;
  /** Called for messages that cannot be routed to a request (malformed, unknown id). */
  readonly onProtocolError?: (error: ProtocolError) => void;
  /** Default per-call watchdog in ms (`RequestOptions.watchdogMs`); `0` (the default) is off. */
  readonly watchdogMs?: number;
  /** Called once the channel failed with `WorkerHungError`: the owner kills the hung worker there. */
  readonly onHung?: (error: WorkerHungError) => void;
}

// One record per request in flight, with no closures: a call without timeout, watchdog or signal (the usual
// small call) allocates no timer and no listener, and settling it frees nothing.
interface Pending {
  readonly method: string;
  readonly resolve: (reply: RPCReply) => void;
  readonly reject: (error: Error) => void;
  timer: NodeJS.Timeout | undefined;
  watchdog: NodeJS.Timeout | undefined;
  abort: { readonly signal: AbortSignal; readonly listener: () => void } | undefined;
}

interface PendingHeartbeat {
  readonly resolve: (reply: HeartbeatReply) => void;
  readonly reject: (error: Error) => void;
}

/**
 * The client end of the envelope protocol over one transport: request ids, many requests in flight,
 * per-request timeouts, AbortSignal cancellation, heartbeats. Once failed (`fail`), every pending and
 * future request is rejected with the failure error: no promise hangs.
 */
export class RPCChannel {
  private readonly pending = new Map<number, Pending>();
  private readonly heartbeats = new Map<number, PendingHeartbeat>();
  private nextId = 1;
  private failure: Error | undefined;
  private lastMessageAt = Date.now();
  private limits: WorkerLimits | undefined;

  constructor(
    private readonly transport: Transport,
    private readonly options: RPCChannelOptions,
  ) {
    transport.start({
      message: (frames) => {
        this.onMessage(frames);
      },
      closed: (error) => {
        this.fail(error ?? new ConnectionClosedError(`${options.name}: connection closed`));
      },
    });
  }

  /** Requests awaiting a reply. */
  get inFlight(): number {
    return this.pending.size;
  }

  /** `Date.now()` when the last message arrived from the peer. */
  get lastMessageTime(): number {
    return this.lastMessageAt;
  }

  /** The error this channel failed with, if it has. */
  get failedWith(): Error | undefined {
    return this.failure;
  }

  /**
   * The worker's size limits (from its handshake): from now on a request over them is refused before it is sent,
   * with `PayloadTooLargeError`, instead of meeting a disconnect by the worker's socket.
   */
  setLimits(limits: WorkerLimits): void {
    this.limits = limits;
  }

  /** Calls `method` on the worker with JSON `args` and payload frames. */
  request(
    method: string,
    args: Record<string, unknown> = {},
    payloads: readonly Payload[] = [],
    options: RequestOptions = {},
  ): Promise<RPCReply> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    const signal = options.signal;
    if (signal?.aborted === true) return Promise.reject(new RequestAbortedError(method, signal.reason));
    const id = this.nextId++;
    const timeoutMs = options.timeoutMs ?? this.options.requestTimeoutMs ?? 0;
    const watchdogMs = options.watchdogMs ?? this.options.watchdogMs ?? 0;
    const envelope: ClientMessage = {
      v: PROTOCOL_VERSION,
      type: "request",
      id,
      method,
      args,
      payloads: payloads.map(describePayload),
    };
    let head: Uint8Array;
    try {
      // The caller's mistakes, refused before anything goes out: the worker would answer them with an error at
      // best (too deep, an envelope over 1 MiB) and cut the connection at worst (a frame over its socket's limit).
      if (!(watchdogMs >= 0 && Number.isFinite(watchdogMs))) {
        throw new InvalidArgumentError(`${method} options.watchdogMs: expected a non-negative number of ms (0 = off), got ${String(watchdogMs)}`);
      }
      checkArgsDepth(method, args);
      head = encodeEnvelope(envelope);
      checkRequestSize(method, head, payloads, this.limits);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new ProtocolError(String(err)));
    }
    return new Promise<RPCReply>((resolve, reject) => {
      const pending: Pending = { method, resolve, reject, timer: undefined, watchdog: undefined, abort: undefined };
      this.pending.set(id, pending);
      if (timeoutMs > 0) {
        pending.timer = setTimeout(() => {
          this.abandon(id, new RequestTimeoutError(method, timeoutMs));
        }, timeoutMs);
      }
      if (watchdogMs > 0) {
        pending.watchdog = setTimeout(() => {
          this.onWatchdog(method, watchdogMs);
        }, watchdogMs);
      }
      if (signal !== undefined) {
        const listener = (): void => {
          this.abandon(id, new RequestAbortedError(method, signal.reason));
        };
        pending.abort = { signal, listener };
        signal.addEventListener("abort", listener, { once: true });
      }
      const frames = payloads.length === 0 ? [head] : [head, ...payloads.flatMap((p) => p.data)];
      this.transport.send(frames).catch((err: unknown) => {
        this.take(id)?.reject(err instanceof Error ? err : new ConnectionClosedError(String(err)));
      });
    });
  }

  /** Sends a heartbeat and resolves with the worker's answer (answered even while the worker computes). */
  heartbeat(timeoutMs: number): Promise<HeartbeatReply> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise<HeartbeatReply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.heartbeats.delete(id);
        reject(new RequestTimeoutError("heartbeat", timeoutMs));
      }, timeoutMs);
      this.heartbeats.set(id, {
        resolve: (reply) => {
          clearTimeout(timer);
          resolve(reply);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.transport.send([encodeEnvelope({ v: PROTOCOL_VERSION, type: "heartbeat", id })]).catch((err: unknown) => {
        this.heartbeats.delete(id);
        clearTimeout(timer);
        reject(err instanceof Error ? err : new ConnectionClosedError(String(err)));
      });
    });
  }

  /** Rejects every pending and future request with `error`, and closes the transport. Idempotent. */
  fail(error: Error): void {
    if (this.failure !== undefined) return;
    this.failure = error;
    for (const id of [...this.pending.keys()]) this.take(id)?.reject(error);
    for (const [id, hb] of this.heartbeats) {
      this.heartbeats.delete(id);
      hb.reject(error);
    }
    void this.transport.close();
  }

  /**
   * Rejects every request pending now with `error` (the worker is told to drop them), without failing the
   * channel: later requests still go out. Used before a requested shutdown.
   */
  rejectPending(error: Error): void {
    for (const id of [...this.pending.keys()]) {
      this.take(id)?.reject(error);
      this.transport.send([encodeEnvelope({ v: PROTOCOL_VERSION, type: "cancel", id })]).catch(() => undefined);
    }
  }

  /** Closes the channel: pending requests are rejected with `ConnectionClosedError`. */
  async close(): Promise<void> {
    this.fail(new ConnectionClosedError(`${this.options.name}: connection closed by the client`));
    await this.transport.close();
  }

  /** A call outlived its watchdog: the worker is hung, so everything pending on it fails, then its owner kills it. */
  private onWatchdog(method: string, limitMs: number): void {
    if (this.failure !== undefined) return;
    const error = new WorkerHungError(this.options.name, method, limitMs);
    this.fail(error);
    this.options.onHung?.(error);
  }

  private abandon(id: number, error: PosttrainError): void {
    const pending = this.take(id);
    if (pending === undefined) return;
    pending.reject(error);
    // Best effort: tell the worker to drop it if it has not started.
    if (this.failure === undefined) {
      this.transport.send([encodeEnvelope({ v: PROTOCOL_VERSION, type: "cancel", id })]).catch(() => undefined);
    }
  }

  /** Removes request `id` from the pending map and stops its timers and abort listener; the caller settles it. */
  private take(id: number): Pending | undefined {
    const p = this.pending.get(id);
    if (p === undefined) return undefined;
    this.pending.delete(id);
    if (p.timer !== undefined) clearTimeout(p.timer);
    if (p.watchdog !== undefined) clearTimeout(p.watchdog);
    if (p.abort !== undefined) p.abort.signal.removeEventListener("abort", p.abort.listener);
    return p;
  }

  private onMessage(frames: Uint8Array[]): void {
    this.lastMessageAt = Date.now();
    const head = frames[0];
    if (head === undefined) return;
    const decoded = decodeWorkerMessage(head);
    if (!decoded.ok) {
      this.reportProtocolError(`${this.options.name}: ${decoded.problem}`);
      return;
    }
    const message = decoded.message;
    if (message.type === "heartbeat") {
      const hb = this.heartbeats.get(message.id);
      this.heartbeats.delete(message.id);
      hb?.resolve(message);
      return;
    }
    if (message.id === null) {
      const what = message.error !== undefined ? `${message.error.code}: ${message.error.message}` : "no error";
      this.reportProtocolError(`${this.options.name}: worker could not read one of our envelopes (${what})`);
      return;
    }
    const pending = this.take(message.id);
    if (pending === undefined) return; // a late reply to a request that timed out or was aborted
    const outcome = toReply(pending.method, message, frames.slice(1));
    if (outcome instanceof Error) pending.reject(outcome);
    else pending.resolve(outcome);
  }

  private reportProtocolError(message: string): void {
    const error = new ProtocolError(message);
    if (this.options.onProtocolError !== undefined) this.options.onProtocolError(error);
    else process.emitWarning(error.message, "PosttrainProtocolWarning");
  }
}

function describePayload(payload: Payload): PayloadDescriptor {
  if (payload.kind === "tensor") {
    const base = { kind: "tensor" as const, dtype: payload.dtype, shape: [...payload.shape] };
    return payload.name === undefined ? base : { ...base, name: payload.name };
  }
  if (payload.kind === "tensordict" && !(payload.data instanceof Uint8Array) && payload.data.length !== 1) {
    return { kind: "tensordict", frames: payload.data.length };
  }
  return { kind: payload.kind };
}

function toReply(method: string, message: ResponseEnvelope, frames: Uint8Array[]): RPCReply | Error {
  if (!message.ok) {
    const error = message.error ?? { code: "INTERNAL", message: "failed without an error object" };
    if (error.code === "OVERLOADED") return new WorkerOverloadedError(method, error.message, error.details ?? {});
    return new WorkerError(error.code, method, error.message, error.details ?? {});
  }
  const counts = message.payloads.map((d) => (d.kind === "tensordict" ? (d.frames ?? 1) : 1));
  const expected = counts.reduce((a, b) => a + b, 0);
  if (frames.length !== expected) {
    return new ProtocolError(`${method}: reply describes ${expected} payload frame(s) but carries ${frames.length}`);
  }
  let at = 0;
  const payloads: Payload[] = message.payloads.map((descriptor, i) => {
    const count = counts[i]!;
    at += count;
    return count === 1 ? attach(descriptor, frames[at - 1]!) : { kind: "tensordict", data: frames.slice(at - count, at) };
  });
  return { result: message.result ?? {}, payloads };
}

function attach(descriptor: PayloadDescriptor, data: Uint8Array): Payload {
  if (descriptor.kind === "tensor") {
    const dtype: DType = descriptor.dtype;
    return descriptor.name === undefined
      ? { kind: "tensor", dtype, shape: descriptor.shape, data }
      : { kind: "tensor", dtype, shape: descriptor.shape, name: descriptor.name, data };
  }
  return { kind: descriptor.kind, data };
}
