/**
 * The client of one Ray driver process (`python -m posttrain_worker.placement.ray_driver`): JSON lines on its
 * stdin and stdout, request ids, per-request timeouts and cancellation, zod-checked replies and events. Ray is the
 * control plane only (where workers run, their restarts); the data plane stays ZeroMQ to each worker. The protocol
 * is written down in docs/protocol.md ("Ray driver").
 */
import type { ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { z } from "zod";
import {
  PlacementError,
  RayDriverError,
  RayUnavailableError,
  RequestAbortedError,
  RequestTimeoutError,
  WorkerStartError,
  type PosttrainError,
  type RayDriverErrorCode,
} from "../errors.js";
import { signalGroup, spawnPythonModule, waitFor } from "./os-process.js";
import type { WorkerLogMode } from "./process.js";
import type { LineTail } from "./stderr-tail.js";

/** One Ray-placed worker, as the driver reports it. */
export const RayWorkerInfoSchema = z.object({
  index: z.number().int().min(0),
  role: z.string(),
  /** `tcp://<node ip>:<port>`, CURVE-authenticated. */
  endpoint: z.string().startsWith("tcp://"),
  /** The worker process's pid, on its node. */
  pid: z.number().int(),
  /** The pid of the Ray actor process that started it. */
  actorPid: z.number().int(),
  nodeId: z.string(),
  nodeAddress: z.string(),
  actorId: z.string(),
  /** 0 for the first worker of an actor, +1 per actor restart. */
  incarnation: z.number().int().min(0),
});

/**
 * One Ray-placed worker: where it runs and which incarnation of its actor it is.
 *
 * ```ts
 * const { nodeAddress, incarnation }: RayWorkerInfo = pool.placement!.workers[0]!;
 * ```
 */
export type RayWorkerInfo = z.infer<typeof RayWorkerInfoSchema>;

/** A node of the Ray cluster, as the driver reports it. */
export const RayNodeSchema = z.object({
  nodeId: z.string(),
  address: z.string(),
  alive: z.boolean(),
  resources: z.record(z.string(), z.number()),
});

/**
 * A node of the Ray cluster.
 *
 * ```ts
 * const alive = (nodes: readonly RayNode[]) => nodes.filter((n) => n.alive).map((n) => n.address);
 * ```
 */
export type RayNode = z.infer<typeof RayNodeSchema>;

const Resources = z.record(z.string(), z.number());

/** The reply to `connect`. */
export const RayConnectResultSchema = z.object({
  address: z.string(),
  started: z.boolean(),
  nodes: z.array(RayNodeSchema),
  available: Resources,
  total: Resources,
});

/** The reply to `create_workers`. */
export const RayCreateResultSchema = z.object({ placementGroupId: z.string(), workers: z.array(RayWorkerInfoSchema) });

/** The reply to `restart`. */
export const RayRestartResultSchema = z.object({ workers: z.array(RayWorkerInfoSchema) });

/** The reply to `close`. */
export const RayCloseResultSchema = z.object({ stoppedCluster: z.boolean() });

/** The reply to `kill_worker`: whether the incarnation asked for was up and got the signal. */
export const RayKillResultSchema = z.object({ killed: z.boolean() });

/** The events the driver reports about workers and nodes. */
export const RayWorkerEventSchema = z.discriminatedUnion("event", [
  z.object({
    event: z.literal("worker_exit"),
    index: z.number().int(),
    incarnation: z.number().int(),
    exitCode: z.number().int().nullable(),
    signal: z.string().nullable(),
    stderrTail: z.string(),
    nodeId: z.string(),
    cause: z.enum(["worker_exited", "actor_died", "node_lost"]),
  }),
  z.object({ event: z.literal("worker_restarted"), worker: RayWorkerInfoSchema }),
  z.object({ event: z.literal("worker_lost"), index: z.number().int(), message: z.string() }),
  z.object({ event: z.literal("node_lost"), nodeId: z.string(), address: z.string() }),
]);

/**
 * An event of a Ray pool: a worker incarnation exited (`worker_exit`), Ray restarted a worker and it is ready again
 * (`worker_restarted`), a worker is dead for good (`worker_lost`: restarts exhausted), a node left (`node_lost`).
 *
 * ```ts
 * const onEvent = (e: RayWorkerEvent) => { if (e.event === "node_lost") console.warn(`node ${e.address} left`); };
 * ```
 */
export type RayWorkerEvent = z.infer<typeof RayWorkerEventSchema>;

const ReplySchema = z.union([
  z.object({ id: z.number().int().nullable(), ok: z.literal(true), result: z.record(z.string(), z.unknown()) }),
  z.object({
    id: z.number().int().nullable(),
    ok: z.literal(false),
    error: z.object({
      code: z.string(),
      message: z.string(),
      details: z.record(z.string(), z.unknown()).nullable().optional(),
    }),
  }),
]);

const ReadySchema = z.object({ event: z.literal("driver_ready"), pid: z.number().int(), rayVersion: z.string() });
const FailedSchema = z.object({ event: z.literal("driver_failed"), code: z.string(), message: z.string() });

/** How the driver process ended. */
export interface RayDriverExit {
  readonly exitCode: number | null;
  readonly signal: string | null;
}

/** Options of {@link RayDriver.start}. */
export interface RayDriverOptions {
  /** Python with `posttrain_worker` and `ray` installed. */
  readonly python: string;
  /** Extra environment variables (the driver passes the process environment on to Ray). */
  readonly env?: Readonly<Record<string, string>>;
  /** Milliseconds to wait for `driver_ready` (default 60 000: importing ray takes a few seconds). */
  readonly startTimeoutMs?: number;
  /** Stops the start: the driver is killed. */
  readonly signal?: AbortSignal;
  /** `"tail"` (default) keeps the driver's stderr for error messages; `"inherit"` also forwards it, prefixed. */
  readonly log?: WorkerLogMode;
}

/** Options of one driver request. */
export interface RayDriverRequestOptions {
  /** Milliseconds to wait for the reply (`RequestTimeoutError`); `0` waits forever. */
  readonly timeoutMs: number;
  /**
   * Gives up on the reply (`RequestAbortedError`). The driver still carries the op out (it serves one at a time),
   * until `close()`, which interrupts it.
   */
  readonly signal?: AbortSignal;
}

interface Pending {
  readonly op: string;
  resolve(result: Record<string, unknown>): void;
  reject(error: Error): void;
}

/** How long `close()` waits for the driver to exit after its `close` reply (Ray's shutdown takes 1–2 s). */
const EXIT_WAIT_MS = 15_000;

/**
 * How long `close()` waits for a driver it sent SIGTERM (an op was in flight) to exit: its handler interrupts the op
 * and tears down as for `close` (actors killed, placement group removed: up to 15 s; a cluster it started stopped).
 */
const TERMINATE_WAIT_MS = 30_000;

/**
 * One Ray driver process and its JSON-lines protocol. `request` sends an op and resolves with its checked result;
 * events go to the listeners of `onEvent`; the driver's death, or a line that is not the protocol, fails every
 * pending request with `RayDriverError` (`RAY_DRIVER_FAILED`, with the driver's stderr tail).
 *
 * ```ts
 * const driver = await RayDriver.start({ python: resolvePython() });
 * const cluster = await driver.request("connect", { address: null }, RayConnectResultSchema, { timeoutMs: 60_000 });
 * await driver.close();
 * ```
 */
export class RayDriver {
  /** Resolves once the driver process has exited. */
  readonly exited: Promise<RayDriverExit>;
  private readonly pending = new Map<number, Pending>();
  /** Ids of the requests written whose reply has not come yet, including those given up on (the driver still runs them). */
  private readonly inFlight = new Set<number>();
  private readonly listeners: ((event: RayWorkerEvent) => void)[] = [];
  private nextId = 1;
  private failure: PosttrainError | undefined;
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly child: ChildProcess,
    private readonly tail: LineTail,
    exited: Promise<RayDriverExit>,
    /** What the driver reported when it was ready: its pid and Ray's version. */
    readonly ready: { readonly pid: number; readonly rayVersion: string },
  ) {
    this.exited = exited;
  }

  /** Spawns the driver and resolves once it reported `driver_ready`; `RayUnavailableError` when it has no ray. */
  static start(options: RayDriverOptions): Promise<RayDriver> {
    // no RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER here: the driver keeps a cluster it starts on 127.0.0.1 itself, and on a
    // real cluster that variable would make it take 127.0.0.1 for its own address. Its own process group, as a
    // worker's: a SIGKILL of the group takes the Ray processes the driver started with it.
    const { child, tail, exited } = spawnPythonModule(options.python, "posttrain_worker.placement.ray_driver", [], {
      ...(options.env !== undefined ? { env: options.env } : {}),
      ...(options.log === "inherit" ? { forwardAs: "ray driver" } : {}),
    });

    return new Promise<RayDriver>((resolve, reject) => {
      let driver: RayDriver | undefined;
      let settled = false;
      const timeoutMs = options.startTimeoutMs ?? 60_000;
      const finish = (error: Error | undefined): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        if (error !== undefined) {
          signalGroup(child, "SIGKILL");
          reject(error);
        } else {
          resolve(driver!);
        }
      };
      const onAbort = (): void => {
        finish(new RayDriverError("RAY_DRIVER_FAILED", "Ray driver: start aborted", tail.text()));
      };
      const timer = setTimeout(() => {
        finish(new RayDriverError("RAY_DRIVER_FAILED", `Ray driver: not ready after ${timeoutMs} ms`, tail.text()));
      }, timeoutMs);
      options.signal?.addEventListener("abort", onAbort, { once: true });
      if (options.signal?.aborted === true) onAbort();
      child.once("error", (err) => {
        finish(new RayDriverError("RAY_DRIVER_FAILED", `Ray driver: could not run ${options.python} (${err.message})`));
      });
      void exited.then(({ exitCode, signal }) => {
        finish(startFailure(options.python, exitCode, signal, tail.text()));
      });
      if (child.stdout === null) return;
      const lines = createInterface({ input: child.stdout });
      lines.on("line", (line) => {
        if (driver !== undefined) {
          driver.onLine(line);
          return;
        }
        const first = parseJson(line);
        const failed = FailedSchema.safeParse(first);
        if (failed.success) {
          const { code, message } = failed.data;
          finish(
            code === "RAY_UNAVAILABLE"
              ? new RayUnavailableError(message)
              : new RayDriverError("RAY_DRIVER_FAILED", `Ray driver: ${code}: ${message}`, tail.text()),
          );
          return;
        }
        const ready = ReadySchema.safeParse(first);
        if (!ready.success) {
          finish(nonProtocol(line, tail.text()));
          return;
        }
        driver = new RayDriver(child, tail, exited, { pid: ready.data.pid, rayVersion: ready.data.rayVersion });
        void exited.then((exit) => {
          driver?.onExit(exit);
        });
        finish(undefined);
      });
    });
  }

  /** The driver's failure (death or a non-protocol line), once it happened. */
  get failed(): PosttrainError | undefined {
    return this.failure;
  }

  /** The last lines the driver wrote to stderr. */
  stderrTail(): string {
    return this.tail.text();
  }

  /** Calls `listener` with every worker and node event, in the order the driver wrote them. */
  onEvent(listener: (event: RayWorkerEvent) => void): void {
    this.listeners.push(listener);
  }

  /**
   * Sends op `op` and resolves with its result checked against `schema`. An error reply rejects with its typed error
   * (`PlacementError`, `WorkerStartError`, `RayDriverError`); a malformed result with `RayDriverError`.
   */
  request<S extends z.ZodType>(
    op: string,
    args: Readonly<Record<string, unknown>>,
    schema: S,
    options: RayDriverRequestOptions,
  ): Promise<z.output<S>> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.closing !== undefined) {
      return Promise.reject(new RayDriverError("RAY_DRIVER_FAILED", `Ray driver: ${op} after close()`));
    }
    return this.send(op, args, schema, options);
  }

  private send<S extends z.ZodType>(
    op: string,
    args: Readonly<Record<string, unknown>>,
    schema: S,
    options: RayDriverRequestOptions,
  ): Promise<z.output<S>> {
    const id = this.nextId++;
    return new Promise<z.output<S>>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        this.pending.delete(id);
      };
      const onAbort = (): void => {
        done();
        reject(new RequestAbortedError(`Ray driver ${op}`, options.signal?.reason));
      };
      this.pending.set(id, {
        op,
        resolve: (result) => {
          done();
          const parsed = schema.safeParse(result);
          if (parsed.success) resolve(parsed.data);
          else reject(new RayDriverError("RAY_DRIVER_FAILED", `Ray driver: malformed ${op} result: ${parsed.error.message}`));
        },
        reject: (error) => {
          done();
          reject(error);
        },
      });
      if (options.timeoutMs > 0) {
        timer = setTimeout(() => {
          done();
          reject(new RequestTimeoutError(`Ray driver ${op}`, options.timeoutMs));
        }, options.timeoutMs);
      }
      options.signal?.addEventListener("abort", onAbort, { once: true });
      if (options.signal?.aborted === true) {
        onAbort();
        return;
      }
      this.inFlight.add(id);
      this.child.stdin?.write(`${JSON.stringify({ ...args, id, op })}\n`);
    });
  }

  /**
   * Stops the driver: actors killed, placement group removed, a cluster the driver started stopped. When no op is in
   * flight it sends `close` (answered within `timeoutMs`, default 30 000) and waits for the exit. When one is (the
   * driver serves one op at a time, so a `close` would wait behind a `create_workers` or `restart`), it sends the
   * driver SIGTERM, whose handler interrupts the op and cleans up the same way; the pending requests then fail with
   * `RAY_DRIVER_FAILED` ("closed"). Either way the driver's process group is SIGKILLed only when the driver has not
   * exited in time. Idempotent; resolves whether or not the driver was still alive.
   */
  close(options: { timeoutMs?: number } = {}): Promise<void> {
    this.closing ??= this.closeOnce(options.timeoutMs ?? 30_000);
    return this.closing;
  }

  private async closeOnce(timeoutMs: number): Promise<void> {
    if (this.failure === undefined && this.inFlight.size > 0) {
      // Only the driver itself: its cleanup stops the Ray processes of a cluster it started, in order.
      this.child.kill("SIGTERM");
      if (!(await waitFor(this.exited, TERMINATE_WAIT_MS))) {
        signalGroup(this.child, "SIGKILL");
        await this.exited;
      }
      this.child.stdin?.end();
      return;
    }
    if (this.failure === undefined) {
      // Whatever it answers (or not), the driver is made to exit below.
      await this.send("close", {}, RayCloseResultSchema, { timeoutMs }).catch(() => undefined);
    }
    // EOF is the driver's other signal to clean up and exit, should it not have read the close.
    this.child.stdin?.end();
    if (!(await waitFor(this.exited, EXIT_WAIT_MS))) {
      signalGroup(this.child, "SIGKILL");
      await this.exited;
    }
  }

  private onLine(line: string): void {
    const value = parseJson(line);
    if (typeof value === "object" && value !== null && "event" in value) {
      const event = RayWorkerEventSchema.safeParse(value);
      if (event.success) {
        for (const listener of this.listeners) listener(event.data);
        return;
      }
      const known = ["worker_exit", "worker_restarted", "worker_lost", "node_lost"];
      // An event this client does not know is a newer driver's: ignored. A known one that does not parse is not.
      if (!known.includes(String(value.event))) return;
      this.fail(nonProtocol(line, this.tail.text()));
      return;
    }
    const reply = ReplySchema.safeParse(value);
    if (!reply.success) {
      this.fail(nonProtocol(line, this.tail.text()));
      return;
    }
    const data = reply.data;
    if (data.id !== null) this.inFlight.delete(data.id);
    const pending = data.id !== null ? this.pending.get(data.id) : undefined;
    if (pending === undefined) {
      // A late reply to a request given up on is expected; an error without an id means the driver could not read
      // a request of ours, which is a bug worth stopping on.
      if (data.id === null && !data.ok) {
        this.fail(new RayDriverError("RAY_DRIVER_FAILED", `Ray driver: ${data.error.code}: ${data.error.message}`));
      }
      return;
    }
    if (data.ok) pending.resolve(data.result);
    else pending.reject(driverError(pending.op, data.error.code, data.error.message, data.error.details ?? {}));
  }

  private onExit(exit: RayDriverExit): void {
    if (this.closing !== undefined && exit.exitCode === 0) {
      for (const p of this.pending.values()) p.reject(new RayDriverError("RAY_DRIVER_FAILED", `Ray driver: ${p.op}: closed`));
      this.pending.clear();
      this.failure ??= new RayDriverError("RAY_DRIVER_FAILED", "Ray driver: closed");
      return;
    }
    const how = exit.signal !== null ? `was killed by ${exit.signal}` : `exited with code ${String(exit.exitCode)}`;
    this.fail(new RayDriverError("RAY_DRIVER_FAILED", `Ray driver ${how}`, this.tail.text()));
  }

  /** Fails every pending request with `error` and kills the driver (it no longer speaks the protocol). */
  private fail(error: PosttrainError): void {
    if (this.failure !== undefined) return;
    this.failure = error;
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
    signalGroup(this.child, "SIGKILL");
  }
}

/** The typed error of an error reply to `op`. */
function driverError(op: string, code: string, message: string, details: Record<string, unknown>): Error {
  switch (code) {
    case "PLACEMENT_INFEASIBLE":
    case "PLACEMENT_TIMEOUT":
      return new PlacementError(code, message, {
        ...(Array.isArray(details.asked) ? { asked: details.asked as unknown[] } : {}),
        ...(isRecord(details.available) ? { available: details.available } : {}),
        ...(Array.isArray(details.nodes) ? { nodes: details.nodes as unknown[] } : {}),
      });
    case "WORKER_START_FAILED":
      return new WorkerStartError(message, typeof details.stderrTail === "string" ? details.stderrTail : "");
    case "RAY_CONNECT_FAILED":
    case "RESTARTS_EXHAUSTED":
    case "RESTART_TIMEOUT":
      return new RayDriverError(code satisfies RayDriverErrorCode, message);
    case "INTERNAL":
      // The driver is alive and keeps serving: not RAY_DRIVER_FAILED, which says it died.
      return new RayDriverError("RAY_DRIVER_INTERNAL", `Ray driver ${op}: ${message}`);
    default:
      return new RayDriverError("RAY_DRIVER_FAILED", `Ray driver ${op}: ${code}: ${message}`);
  }
}

/** Why a driver that exited before `driver_ready` could not start. */
function startFailure(python: string, exitCode: number | null, signal: string | null, tail: string): Error {
  if (/No module named '?ray'?$/m.test(tail)) {
    return new RayUnavailableError(`ray is not installed in ${python}: npx posttrain setup --extras ray`);
  }
  const how = signal !== null ? `was killed by ${signal}` : `exited with code ${String(exitCode)}`;
  const missing = /No module named '?posttrain_worker/.test(tail)
    ? ` (${python} has no posttrain_worker.placement: run \`npm run bootstrap\`, or set POSTTRAIN_PYTHON)`
    : "";
  return new RayDriverError("RAY_DRIVER_FAILED", `Ray driver ${how} before it was ready${missing}`, tail);
}

function nonProtocol(line: string, tail: string): RayDriverError {
  const shown = line.length > 200 ? `${line.slice(0, 197)}...` : line;
  return new RayDriverError("RAY_DRIVER_FAILED", `Ray driver printed a line that is not the protocol: ${JSON.stringify(shown)}`, tail);
}

function parseJson(line: string): unknown {
  try {
    return JSON.parse(line) as unknown;
  } catch {
    return undefined;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
