import {
  ConnectionClosedError,
  InvalidArgumentError,
  ProtocolError,
  WorkerDiedError,
  WorkerUnresponsiveError,
} from "../errors.js";
import { RPCChannel, type RequestOptions, type RPCReply } from "../protocol/channel.js";
import {
  PROTOCOL_VERSION,
  WorkerInfoSchema,
  type HandshakeArgs,
  type HeartbeatReply,
  type WorkerInfo,
} from "../protocol/envelope.js";
import type { Payload } from "../protocol/payload.js";
import type { Transport } from "../transport/transport.js";
import { ZMQDealerTransport } from "../transport/zmq.js";
import { ConnectionAuthSchema, type ConnectionAuth } from "./keys.js";
import { waitFor } from "./os-process.js";
import type { SupervisedWorker } from "./process.js";

/** Liveness and timeout settings of a {@link WorkerConnection}. */
export interface ConnectionOptions {
  /** Default per-request timeout in ms; `0` (default) waits forever: training steps can be long. */
  readonly requestTimeoutMs?: number;
  /** Interval between heartbeats in ms (default 2000); `0` disables heartbeats. */
  readonly heartbeatIntervalMs?: number;
  /**
   * A worker silent for this long (ms) is declared unresponsive: pending requests are rejected with
   * `WorkerUnresponsiveError` and its process is killed. Default 60 000.
   */
  readonly heartbeatTimeoutMs?: number;
  /** Timeout of the handshake in ms (default 30 000). */
  readonly handshakeTimeoutMs?: number;
  /**
   * Default per-call watchdog in ms (`RequestOptions.watchdogMs`): a call unanswered this long fails the connection
   * with `WorkerHungError` and kills the worker process. `0` (default) is off: heartbeats alone cannot see a compute
   * thread that stopped, since the I/O thread answers them.
   */
  readonly watchdogMs?: number;
}

/** Options of {@link WorkerConnection.open}. */
export interface OpenConnectionOptions extends ConnectionOptions {
  /**
   * The pool secret the handshake carries, and for tcp the CURVE keys (see `clientAuth`); required by every
   * worker the SDK starts. Validated: a malformed value is an `InvalidArgumentError` naming the field.
   */
  readonly auth?: ConnectionAuth;
  /** Name used in messages, e.g. `"worker 0"`. */
  readonly name: string;
  /** The worker's endpoint (from its READY line). */
  readonly endpoint?: string;
  /** A transport to use instead of a ZeroMQ DEALER on `endpoint`. */
  readonly transport?: Transport;
  /**
   * The worker this client supervises (a local `WorkerProcess`, or a Ray worker's handle): its exit fails the
   * connection with `WorkerDiedError`.
   */
  readonly process?: SupervisedWorker;
  /** The cluster node the worker runs on (Ray workers): its id and address, exposed as `connection.node`. */
  readonly node?: { readonly id: string; readonly address: string };
}

const CLIENT_VERSION = "0.1.0";

/**
 * A live, handshaken connection to one worker: the envelope protocol over a transport, plus supervision
 * of the worker's process (exit → `WorkerDiedError` for every pending request) and heartbeats.
 * Knows nothing of TensorDicts or RL: methods are called by name with JSON args and payload frames.
 */
export class WorkerConnection {
  private heartbeatTimer: NodeJS.Timeout | undefined;

  private constructor(
    readonly name: string,
    private readonly channel: RPCChannel,
    readonly info: WorkerInfo,
    readonly process: SupervisedWorker | undefined,
    // Shared with the exit watcher, which must tell a requested shutdown from a death.
    private readonly state: { closing: boolean },
    /** The cluster node the worker runs on, when it was opened with one (Ray workers); `undefined` for local workers. */
    readonly node: { readonly id: string; readonly address: string } | undefined,
  ) {}

  /** Connects, performs the handshake and starts supervision. */
  static async open(options: OpenConnectionOptions): Promise<WorkerConnection> {
    const auth = parseAuth(options);
    const transport = options.transport ?? newZmqTransport(options, auth);
    const proc = options.process;
    const channel = new RPCChannel(transport, {
      name: options.name,
      requestTimeoutMs: options.requestTimeoutMs ?? 0,
      watchdogMs: options.watchdogMs ?? 0,
      // A hung compute thread never returns: only a kill frees the worker (a supervisor restarts it).
      onHung: () => proc?.kill("SIGKILL"),
    });
    const state = { closing: false };
    if (proc !== undefined) {
      void proc.exited.then(({ exitCode, signal, lostNode }) => {
        channel.fail(
          state.closing
            ? new ConnectionClosedError(`${options.name} was shut down`)
            : new WorkerDiedError(options.name, exitCode, signal, proc.stderrTail(), lostNode !== undefined ? { lostNode } : {}),
        );
      });
    }
    let info: WorkerInfo;
    try {
      const args: HandshakeArgs = {
        protocolVersion: PROTOCOL_VERSION,
        client: { name: "posttrain", version: CLIENT_VERSION },
        ...(auth !== undefined ? { secret: auth.secret } : {}),
      };
      const reply = await channel.request(
        "handshake",
        args,
        [],
        { timeoutMs: options.handshakeTimeoutMs ?? 30_000 },
      );
      const parsed = WorkerInfoSchema.safeParse(reply.result);
      if (!parsed.success) {
        throw new ProtocolError(`${options.name}: malformed handshake reply: ${parsed.error.message}`);
      }
      info = parsed.data;
      if (info.protocolVersion !== PROTOCOL_VERSION) {
        throw new ProtocolError(
          `${options.name}: worker speaks protocol ${info.protocolVersion}, this client ${PROTOCOL_VERSION}`,
        );
      }
    } catch (err) {
      await channel.close();
      throw err;
    }
    channel.setLimits({ maxPayloadBytes: info.maxPayloadBytes });
    const node = options.node !== undefined ? { id: options.node.id, address: options.node.address } : undefined;
    const connection = new WorkerConnection(options.name, channel, info, proc, state, node);
    connection.startHeartbeats(options.heartbeatIntervalMs ?? 2000, options.heartbeatTimeoutMs ?? 60_000);
    return connection;
  }

  /** False once the connection failed or was closed. */
  get alive(): boolean {
    return this.channel.failedWith === undefined;
  }

  /** Why the connection ended (`WorkerDiedError`, `ConnectionClosedError`, ...), or `undefined` while it is alive. */
  get failure(): Error | undefined {
    return this.channel.failedWith;
  }

  /** Requests awaiting a reply. */
  get inFlight(): number {
    return this.channel.inFlight;
  }

  /** Calls a worker method by name. Rejects with `WorkerError` when the worker answers with an error. */
  request(
    method: string,
    args: Record<string, unknown> = {},
    payloads: readonly Payload[] = [],
    options: RequestOptions = {},
  ): Promise<RPCReply> {
    return this.channel.request(method, args, payloads, options);
  }

  /** Sends one heartbeat; the worker's I/O thread answers it even while a method computes. */
  heartbeat(timeoutMs = 5000): Promise<HeartbeatReply> {
    return this.channel.heartbeat(timeoutMs);
  }

  /** Asks the worker to exit, waits for it (killing it after `timeoutMs`), and closes the socket. */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    if (this.state.closing) {
      await this.process?.exited;
      return;
    }
    this.state.closing = true;
    this.stopHeartbeats();
    const timeoutMs = options.timeoutMs ?? 5000;
    const proc = this.process;
    if (this.alive) {
      // Requests still pending end here, as closed by the client, whatever the worker answers them later.
      this.channel.rejectPending(new ConnectionClosedError(`${this.name}: connection closed by the client`));
      await this.channel.request("shutdown", {}, [], { timeoutMs, watchdogMs: 0 }).catch(() => undefined);
    }
    await this.channel.close();
    if (proc !== undefined) {
      proc.closeStdin();
      const exited = await waitFor(proc.exited, timeoutMs);
      if (!exited) {
        proc.kill("SIGKILL");
        await proc.exited;
      }
    }
  }

  private startHeartbeats(intervalMs: number, timeoutMs: number): void {
    if (intervalMs <= 0) return;
    this.heartbeatTimer = setInterval(() => {
      if (!this.alive) {
        this.stopHeartbeats();
        return;
      }
      const silentMs = Date.now() - this.channel.lastMessageTime;
      if (timeoutMs > 0 && silentMs > timeoutMs) {
        this.stopHeartbeats();
        this.channel.fail(new WorkerUnresponsiveError(this.name, silentMs));
        this.process?.kill("SIGKILL");
        return;
      }
      this.channel.heartbeat(Math.max(timeoutMs, intervalMs)).catch(() => undefined);
    }, intervalMs);
    this.heartbeatTimer.unref();
  }

  private stopHeartbeats(): void {
    if (this.heartbeatTimer !== undefined) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = undefined;
  }
}

function parseAuth(options: OpenConnectionOptions): ConnectionAuth | undefined {
  if (options.auth === undefined) return undefined;
  const parsed = ConnectionAuthSchema.safeParse(options.auth);
  if (!parsed.success) {
    // The issues name the field; the values are secrets and stay out of the message.
    const where = parsed.error.issues.map((i) => `auth.${i.path.join(".")}: ${i.message}`).join("; ");
    throw new InvalidArgumentError(`${options.name}: ${where}`);
  }
  return parsed.data;
}

function newZmqTransport(options: OpenConnectionOptions, auth: ConnectionAuth | undefined): Transport {
  if (options.endpoint === undefined) {
    throw new ProtocolError(`${options.name}: neither an endpoint nor a transport was given`);
  }
  return new ZMQDealerTransport({
    endpoint: options.endpoint,
    ...(auth?.curve !== undefined ? { curve: auth.curve } : {}),
  });
}
