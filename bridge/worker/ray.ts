/**
 * Workers placed on a Ray cluster: one Ray driver process (ray-driver.ts) creates a placement group with one bundle
 * per worker and one actor per bundle, each actor runs a posttrain worker bound to a CURVE tcp endpoint on its node,
 * and this process connects to each worker directly over ZeroMQ, as to a local one. Ray decides where workers run
 * and restarts them; it never carries a request. See docs/workers.md ("Workers on Ray") and docs/scaling.md.
 */
import { z } from "zod";
import { ConnectionClosedError, InvalidArgumentError, RayDriverError } from "../errors.js";
import { PROTOCOL_VERSION } from "../protocol/envelope.js";
import { WorkerConnection, type ConnectionOptions } from "./connection.js";
import { clientAuth, generatePoolKeys, type PoolKeys } from "./keys.js";
import { connectionOptions, parsePoolKeys, workerArgs } from "./options.js";
import type { SupervisedWorker, WorkerExit, WorkerLogMode, WorkerReady } from "./process.js";
import { resolvePython } from "./python.js";
import {
  RayConnectResultSchema,
  RayCreateResultSchema,
  RayDriver,
  RayKillResultSchema,
  RayRestartResultSchema,
  type RayWorkerEvent,
  type RayWorkerInfo,
} from "./ray-driver.js";

export type { RayNode, RayWorkerEvent, RayWorkerInfo } from "./ray-driver.js";

/**
 * The placement strategies Ray offers for a pool's placement group, in one place for every schema that names them.
 *
 * ```ts
 * const strategy = z.enum(PLACEMENT_STRATEGIES).default("PACK");
 * ```
 */
export const PLACEMENT_STRATEGIES = ["PACK", "SPREAD", "STRICT_SPREAD"] as const;

/**
 * How Ray spreads the bundles (one per worker) over nodes: `"PACK"` (few nodes), `"SPREAD"`, `"STRICT_SPREAD"` (one node each).
 *
 * ```ts
 * const strategy: PlacementStrategy = "STRICT_SPREAD";
 * ```
 */
export type PlacementStrategy = (typeof PLACEMENT_STRATEGIES)[number];

/**
 * Default of `placementTimeoutMs`: how long the placement group may take to be placed (a cluster that autoscales
 * needs minutes to add a node; an infeasible placement fails at once instead).
 *
 * ```ts
 * const placementTimeoutMs = options.placementTimeoutMs ?? DEFAULT_PLACEMENT_TIMEOUT_MS;
 * ```
 */
export const DEFAULT_PLACEMENT_TIMEOUT_MS = 120_000;

/** Default of `startTimeoutMs`: how long each worker may take to be ready once its actor runs. */
const DEFAULT_START_TIMEOUT_MS = 120_000;

/** A host and a port; an IPv6 host in brackets (`[::1]:6379`), as in a URL. */
const HOST_PORT = /^(?:[^\s/:[\]@]+|\[[0-9a-fA-F:.]+\]):(\d{1,5})$/;

/**
 * A Ray cluster address: `"auto"` (the cluster of the node this process runs on) or the head's GCS `"host:port"`; an
 * IPv6 host is written in brackets (`"[::1]:6379"`), the port is 1–65535. A Ray Client address (`"ray://..."`) is
 * refused with its own message: the driver's supervision reads GCS tables (actor states, placement groups) that Ray
 * Client does not serve.
 *
 * ```ts
 * RayAddressSchema.parse("127.0.0.1:6379");
 * ```
 */
export const RayAddressSchema = z.string().superRefine((address, ctx) => {
  if (address === "auto") return;
  if (/^ray:\/\//i.test(address.trim())) {
    ctx.addIssue({
      code: "custom",
      message:
        'a Ray Client address ("ray://...") is not supported: run the SDK on a node of the cluster with "auto", or give ' +
        'the head\'s GCS "host:port" (e.g. "10.0.0.1:6379")',
    });
    return;
  }
  const port = HOST_PORT.exec(address)?.[1];
  if (port === undefined || Number(port) < 1 || Number(port) > 65_535) {
    ctx.addIssue({ code: "custom", message: 'expected "auto" or "host:port" (an IPv6 host in brackets: "[::1]:6379")' });
  }
});

/**
 * One worker's bundle of Ray resources: resource name → amount (≥ 0), with at least one amount > 0 (Ray
 * refuses an empty bundle). Zero entries are allowed and dropped by the driver.
 *
 * ```ts
 * RayResourcesSchema.parse({ CPU: 1, GPU: 0 });
 * ```
 */
export const RayResourcesSchema = z
  .record(z.string().min(1), z.number().min(0))
  .refine((r) => Object.values(r).some((v) => v > 0), "expected at least one resource with an amount > 0");

/**
 * One worker to place: its role (for messages and `RayWorkerInfo.role`) and its bundle of Ray resources.
 *
 * ```ts
 * const trainer: RayWorkerSpec = { role: "trainer", resources: { CPU: 1, GPU: 1 } };
 * ```
 */
export interface RayWorkerSpec {
  readonly role: string;
  /** Ray resources of its bundle, e.g. `{ CPU: 1, GPU: 1 }` or a custom `{ CPU: 1, node_slot: 1 }`; a GPU makes it compute on `cuda`. */
  readonly resources: Readonly<Record<string, number>>;
}

/**
 * Options of {@link launchRayWorkers}: a strict object (an unknown key is an `InvalidArgumentError` naming it).
 *
 * ```ts
 * const options: RayWorkersOptions = { address: "auto", workers: [{ role: "trainer", resources: { CPU: 1 } }] };
 * ```
 */
export interface RayWorkersOptions extends ConnectionOptions {
  /** One bundle (and one worker) each, in order. */
  readonly workers: readonly RayWorkerSpec[];
  /**
   * The cluster: `"auto"` (this node's cluster) or the head's GCS `"host:port"` (see {@link RayAddressSchema}; Ray
   * Client `"ray://"` addresses are refused). Absent: a local cluster on 127.0.0.1, started for this pool and stopped
   * by `close()`.
   */
  readonly address?: string;
  /** Ray namespace of the driver and its actors. */
  readonly namespace?: string;
  /** Ray runtime environment of the driver's job (`ray.init(runtime_env=...)`), when connecting to a cluster. */
  readonly runtimeEnv?: Readonly<Record<string, unknown>>;
  /** Default `"PACK"`. */
  readonly strategy?: PlacementStrategy;
  /** Ray actor restarts per worker; default -1 (unlimited: the run's supervisor bounds them). */
  readonly maxRestarts?: number;
  /** Python with `posttrain_worker` and `ray` (the driver's; actors use the cluster's); see `resolvePython`. */
  readonly python?: string;
  /** Largest message a worker accepts, in bytes (default 4 GiB). */
  readonly maxPayloadBytes?: number;
  /** Compute requests a worker holds at once (default 64). */
  readonly maxInFlight?: number;
  /**
   * Extra environment variables for the Ray driver process and for every worker (the actors pass them on to the
   * worker processes they start; the actor processes themselves get Ray's environment, or `runtimeEnv`'s).
   */
  readonly env?: Readonly<Record<string, string>>;
  /** Worker extensions (Python files, made absolute here): as for local workers. */
  readonly extensions?: readonly string[];
  /** Milliseconds each worker may take to be ready once its actor runs (default 120 000). */
  readonly startTimeoutMs?: number;
  /** Milliseconds the placement group may take to be placed (default {@link DEFAULT_PLACEMENT_TIMEOUT_MS}, 120 000); `PlacementError` after. */
  readonly placementTimeoutMs?: number;
  /**
   * Aborts the launch (`RequestAbortedError`): whatever was started is stopped; a `create_workers` still placing or
   * starting workers in the driver is interrupted (SIGTERM to the driver), not waited for.
   */
  readonly signal?: AbortSignal;
  /** The driver's stderr: `"tail"` (default) for error messages only, or `"inherit"` (also forwarded). */
  readonly log?: WorkerLogMode;
  /** The pool's secret and CURVE keys; default fresh ones (see `generatePoolKeys`). */
  readonly keys?: PoolKeys;
  /** Called with each worker and node event of the driver, parsed (a throwing listener is ignored). */
  readonly onEvent?: (event: RayWorkerEvent) => void;
}

/**
 * Workers started by {@link launchRayWorkers}.
 *
 * ```ts
 * const ray: RayWorkers = await launchRayWorkers(options);
 * console.log(ray.workers.map((w) => w.nodeAddress));
 * ```
 */
export interface RayWorkers {
  /** One connection per worker, in order: the current incarnations (replaced by `restart()`). */
  readonly connections: readonly WorkerConnection[];
  /** Where each connected worker runs, in order. */
  readonly workers: readonly RayWorkerInfo[];
  /** The cluster's GCS address, and whether this pool started it (then `close()` stops it). */
  readonly cluster: { readonly address: string; readonly started: boolean };
  /** The id of the pool's placement group. */
  readonly placementGroupId: string;
  /**
   * Brings every worker back through Ray's actor restart (the live ones are shut down first; the driver is told the
   * incarnation held for each, so one Ray already replaced is waited for, never killed again) and connects to the new
   * incarnations. `RayDriverError` with `RESTARTS_EXHAUSTED` when an actor is dead for good; `ConnectionClosedError`
   * when `close()` overtakes it (what it opened is closed).
   */
  restart(options?: { signal?: AbortSignal }): Promise<void>;
  /** Closes the connections (the workers are asked to shut down and Ray restarts them) until `restart()`. */
  detach(): Promise<void>;
  /**
   * Kills the actors, removes the placement group, stops a cluster this pool started; idempotent. An op still
   * running in the driver (a `restart()`) is interrupted (SIGTERM to the driver), not waited for.
   */
  close(): Promise<void>;
}

const SpecSchema = z.strictObject({ role: z.string().min(1), resources: RayResourcesSchema });

/** Checked by the code they go to (`workerArgs`, `parsePoolKeys`, `WorkerConnection`): listed here so typos are caught. */
const checkedElsewhere = z.unknown().optional();

/** Every key of {@link RayWorkersOptions}: an unknown one (a typo such as `placementTimeout`) is an error. */
const OptionsSchema = z.strictObject({
  workers: z.array(SpecSchema).min(1, "expected at least one worker"),
  address: RayAddressSchema.optional(),
  namespace: z.string().min(1).optional(),
  runtimeEnv: z.record(z.string(), z.unknown()).optional(),
  strategy: z.enum(PLACEMENT_STRATEGIES).optional(),
  maxRestarts: z.number().int().min(-1, "expected -1 (unlimited) or more").optional(),
  python: z.string().min(1).optional(),
  maxPayloadBytes: checkedElsewhere,
  maxInFlight: checkedElsewhere,
  env: z.record(z.string(), z.string()).optional(),
  extensions: checkedElsewhere,
  startTimeoutMs: z.number().positive().optional(),
  placementTimeoutMs: z.number().positive().optional(),
  signal: z.instanceof(AbortSignal, { message: "expected an AbortSignal" }).optional(),
  log: z.enum(["tail", "inherit"]).optional(),
  keys: checkedElsewhere,
  onEvent: z.custom<(event: RayWorkerEvent) => void>((v) => typeof v === "function", "expected a function").optional(),
  requestTimeoutMs: checkedElsewhere,
  heartbeatIntervalMs: checkedElsewhere,
  heartbeatTimeoutMs: checkedElsewhere,
  handshakeTimeoutMs: checkedElsewhere,
  watchdogMs: checkedElsewhere,
});

/**
 * Places one posttrain worker per `workers` entry on a Ray cluster (a placement group with one bundle each, one
 * actor per bundle) and connects to each over CURVE-authenticated ZeroMQ tcp. On any failure, whatever was started
 * is stopped again (actors, placement group, a cluster it started, the driver).
 *
 * ```ts
 * const ray = await launchRayWorkers({ workers: [{ role: "trainer", resources: { CPU: 1 } }] });
 * await ray.connections[0]!.request("ping");
 * await ray.close();
 * ```
 */
export async function launchRayWorkers(options: RayWorkersOptions): Promise<RayWorkers> {
  const checked = checkOptions(options);
  const args = workerArgs(options);
  const keys = options.keys === undefined ? generatePoolKeys() : parsePoolKeys(options.keys);
  const python = resolvePython(checked.python);
  const driver = await RayDriver.start({
    python,
    ...(checked.env !== undefined ? { env: checked.env } : {}),
    ...(options.signal !== undefined ? { signal: options.signal } : {}),
    ...(checked.log !== undefined ? { log: checked.log } : {}),
  });
  const pool = new RayPool(driver, keys, options);
  try {
    await pool.launch(checked, args);
  } catch (err) {
    await pool.close();
    throw err;
  }
  return pool;
}

type CheckedOptions = z.output<typeof OptionsSchema>;

/** The Ray options checked; an `InvalidArgumentError` naming the first bad field. Nothing is started before. */
function checkOptions(options: RayWorkersOptions): CheckedOptions {
  const parsed = OptionsSchema.safeParse(options);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const field = issue.path.reduce<string>(
    (out, key) => (typeof key === "number" ? `${out}[${key}]` : out === "" ? String(key) : `${out}.${String(key)}`),
    "",
  );
  if (issue.code === "unrecognized_keys") {
    const name = field === "" ? issue.keys[0]! : `${field}.${issue.keys[0]!}`;
    throw new InvalidArgumentError(`${name}: unknown option (a typo?)`);
  }
  let given: unknown = options;
  for (const key of issue.path) given = (given as Record<PropertyKey, unknown> | undefined)?.[key];
  const shown = given === undefined ? "nothing" : typeof given === "function" ? "a function" : JSON.stringify(given);
  throw new InvalidArgumentError(`${field === "" ? "options" : field}: ${issue.message}, got ${shown}`);
}

/**
 * How long the TS side waits for the driver's reply beyond the time the op itself may take, so that a slow op ends in
 * the driver's own typed error (`WORKER_START_FAILED` with the stderr tail, `RESTART_TIMEOUT`), not a client timeout:
 * the driver gives a starting worker `START_GRACE_MS` more than `startTimeoutMs` (its actor must be scheduled and
 * spawn it), may spend up to `TEARDOWN_MS` removing what a failed op created, and the reply still has to travel.
 */
const START_GRACE_MS = 30_000;
const TEARDOWN_MS = 15_000;
const REPLY_SLACK_MS = 15_000;

/** The reply timeout of the short ops (`connect` waits for a cluster; `kill_worker` may wait behind another op). */
const SHORT_OP_TIMEOUT_MS = 120_000;

/** One Ray worker incarnation as a `WorkerConnection` supervises it: its exit comes from the driver's events. */
class RayWorkerHandle implements SupervisedWorker {
  readonly exited: Promise<WorkerExit>;
  readonly ready: WorkerReady;
  private exitInfo: WorkerExit | undefined;
  private tail = "";
  private resolveExit!: (exit: WorkerExit) => void;

  constructor(
    readonly name: string,
    readonly info: RayWorkerInfo,
    private readonly driver: RayDriver,
  ) {
    this.ready = { endpoint: info.endpoint, pid: info.pid, protocolVersion: PROTOCOL_VERSION };
    this.exited = new Promise((resolve) => {
      this.resolveExit = resolve;
    });
  }

  get exit(): WorkerExit | undefined {
    return this.exitInfo;
  }

  /** Records this incarnation's end (the first report wins: worker_exit, worker_lost, node_lost or the driver's death). */
  ended(exit: WorkerExit, tail: string): void {
    if (this.exitInfo !== undefined) return;
    this.exitInfo = exit;
    this.tail = tail;
    this.resolveExit(exit);
  }

  /**
   * Signals this incarnation's worker through the driver (`kill_worker` with its incarnation: a newer one Ray has
   * started meanwhile is left alone); Ray then restarts its actor.
   */
  kill(signal: NodeJS.Signals = "SIGTERM"): void {
    if (this.exitInfo !== undefined || this.driver.failed !== undefined) return;
    const args = {
      index: this.info.index,
      signal: signal === "SIGKILL" ? "SIGKILL" : "SIGTERM",
      incarnation: this.info.incarnation,
    };
    this.driver.request("kill_worker", args, RayKillResultSchema, { timeoutMs: SHORT_OP_TIMEOUT_MS }).catch(() => undefined);
  }

  /** No-op: the worker's stdin is its actor's (a `shutdown` request is what ends it). */
  closeStdin(): void {}

  stderrTail(): string {
    return this.tail;
  }
}

/** One worker slot: its spec and the incarnation connected now. */
interface Slot {
  readonly spec: RayWorkerSpec;
  handle: RayWorkerHandle;
  connection: WorkerConnection;
}

class RayPool implements RayWorkers {
  cluster: { address: string; started: boolean } = { address: "", started: false };
  placementGroupId = "";
  private slots: Slot[] = [];
  /**
   * Ends of incarnations reported before their handle existed (a restart's reply and its worker's death may cross);
   * an entry goes once a handle takes it or a newer incarnation of its worker ends.
   */
  private readonly earlyExits = new Map<string, { exit: WorkerExit; tail: string }>();
  /**
   * Per worker index, a newer incarnation Ray restarted on its own and reported ready (not exited since): reused by
   * `restart()`. Kept by index, not by slot: it may come while the launch is still connecting.
   */
  private readonly fresh = new Map<number, RayWorkerInfo>();
  /** Per worker index, why its actor is dead for good (`worker_lost`). */
  private readonly lost = new Map<number, string>();
  private closing: Promise<void> | undefined;
  private restarting: Promise<void> | undefined;
  private detached = false;
  /** Handles being connected (not in a slot yet): they must hear of their worker's end too. */
  private pendingHandles: RayWorkerHandle[] = [];

  constructor(
    private readonly driver: RayDriver,
    private readonly keys: PoolKeys,
    private readonly options: RayWorkersOptions,
  ) {
    driver.onEvent((event) => {
      this.onEvent(event);
    });
    void driver.exited.then(() => {
      const tail = `the Ray driver exited${driver.failed !== undefined ? `: ${driver.failed.message}` : ""}`;
      for (const handle of this.allHandles()) handle.ended({ exitCode: null, signal: null }, tail);
    });
  }

  get connections(): readonly WorkerConnection[] {
    return this.slots.map((s) => s.connection);
  }

  get workers(): readonly RayWorkerInfo[] {
    return this.slots.map((s) => s.handle.info);
  }

  async launch(checked: CheckedOptions, args: readonly string[]): Promise<void> {
    const signal = this.options.signal;
    const signalOption = signal !== undefined ? { signal } : {};
    const connected = await this.driver.request(
      "connect",
      {
        address: checked.address ?? null,
        namespace: checked.namespace ?? null,
        runtimeEnv: checked.runtimeEnv ?? null,
        tempDir: null, // the driver makes (and removes) a private one for a cluster it starts
        numCpus: null,
      },
      RayConnectResultSchema,
      { timeoutMs: SHORT_OP_TIMEOUT_MS, ...signalOption },
    );
    this.cluster = { address: connected.address, started: connected.started };
    const startTimeoutMs = checked.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
    const placementTimeoutMs = checked.placementTimeoutMs ?? DEFAULT_PLACEMENT_TIMEOUT_MS;
    const created = await this.driver.request(
      "create_workers",
      {
        auth: {
          secret: this.keys.secret,
          serverSecretKey: this.keys.server.secretKey,
          clientPublicKey: this.keys.client.publicKey,
        },
        strategy: checked.strategy ?? "PACK",
        workers: checked.workers.map((spec, index) => ({
          index,
          role: spec.role,
          resources: spec.resources,
          args,
          env: checked.env ?? {},
        })),
        maxRestarts: checked.maxRestarts ?? -1,
        startTimeoutS: startTimeoutMs / 1000,
        placementTimeoutS: placementTimeoutMs / 1000,
      },
      RayCreateResultSchema,
      { timeoutMs: placementTimeoutMs + startTimeoutMs + START_GRACE_MS + TEARDOWN_MS + REPLY_SLACK_MS, ...signalOption },
    );
    this.placementGroupId = created.placementGroupId;
    const opened = await this.open(created.workers);
    this.slots = opened.map(({ handle, connection }, i) => ({ spec: checked.workers[i]!, handle, connection }));
  }

  detach(): Promise<void> {
    if (this.closing !== undefined) return this.closing;
    this.detached = true;
    // Each close asks its worker to shut down and waits for the driver's report of its exit.
    return Promise.all(this.slots.map((s) => s.connection.close())).then(() => undefined);
  }

  restart(options: { signal?: AbortSignal } = {}): Promise<void> {
    this.restarting ??= this.restartOnce(options.signal).finally(() => {
      this.restarting = undefined;
    });
    return this.restarting;
  }

  /** Every await is followed by a check of `closing`: a `close()` meanwhile wins, and what was opened is closed. */
  private async restartOnce(signal: AbortSignal | undefined): Promise<void> {
    const closed = (): ConnectionClosedError => new ConnectionClosedError("Ray workers: closed during restart()");
    if (this.closing !== undefined) throw new ConnectionClosedError("Ray workers: restart() after close()");
    if (!this.detached) await this.detach();
    if (this.closing !== undefined) throw closed();
    const lost = this.slots.findIndex((_, i) => this.lost.has(i));
    if (lost >= 0) {
      throw new RayDriverError("RESTARTS_EXHAUSTED", `worker ${lost} (${this.slots[lost]!.spec.role}): ${this.lost.get(lost)!}`);
    }
    const infos: (RayWorkerInfo | undefined)[] = this.slots.map((s, i) => {
      const fresh = this.fresh.get(i);
      return fresh !== undefined && fresh.incarnation > s.handle.info.incarnation ? fresh : undefined;
    });
    const indices = infos.flatMap((info, i) => (info === undefined ? [i] : []));
    if (indices.length > 0) {
      const timeoutMs = (this.options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS) + START_GRACE_MS;
      let restarted;
      try {
        restarted = await this.driver.request(
          "restart",
          {
            indices,
            timeoutS: timeoutMs / 1000,
            // the incarnation held for each: one Ray already replaced is only waited for, never killed again
            incarnations: indices.map((i) => this.slots[i]!.handle.info.incarnation),
          },
          RayRestartResultSchema,
          { timeoutMs: timeoutMs + TEARDOWN_MS + REPLY_SLACK_MS, ...(signal !== undefined ? { signal } : {}) },
        );
      } catch (err) {
        if (this.closing !== undefined) throw closed();
        throw err;
      }
      if (this.closing !== undefined) throw closed();
      for (const info of restarted.workers) infos[info.index] = info;
    }
    let opened;
    try {
      opened = await this.open(infos.map((info) => info!));
    } catch (err) {
      if (this.closing !== undefined) throw closed();
      throw err;
    }
    if (this.closing !== undefined) {
      await Promise.all(opened.map(({ connection }) => connection.close()));
      throw closed();
    }
    for (const [i, { handle, connection }] of opened.entries()) {
      const slot = this.slots[i]!;
      slot.handle = handle;
      slot.connection = connection;
      this.fresh.delete(i);
    }
    this.detached = false;
  }

  close(): Promise<void> {
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  private async closeOnce(): Promise<void> {
    // Marked closing at once (before the driver kills the actors): pending calls end as closed, not as deaths.
    const closes = this.slots.map((s) => s.connection.close());
    // With an op in flight (a restart), the driver is interrupted by SIGTERM rather than queued behind it.
    const driverClosed = this.driver.close();
    // A restart in flight sees `closing` at its next step and closes what it opened; its error is its caller's.
    await this.restarting?.catch(() => undefined);
    await driverClosed;
    await Promise.all(closes);
  }

  /** Connects to each worker of `infos` (in order); on any failure the others opened are closed again. */
  private async open(infos: readonly RayWorkerInfo[]): Promise<{ handle: RayWorkerHandle; connection: WorkerConnection }[]> {
    const handles = infos.map((info) => {
      const handle = new RayWorkerHandle(`worker ${info.index} (${info.role})`, info, this.driver);
      const earlyKey = key(info.index, info.incarnation);
      const early = this.earlyExits.get(earlyKey);
      if (early !== undefined) {
        this.earlyExits.delete(earlyKey);
        handle.ended(early.exit, early.tail);
      } else if (this.driver.failed !== undefined) {
        handle.ended({ exitCode: null, signal: null }, this.driver.failed.message);
      }
      return handle;
    });
    this.pendingHandles.push(...handles);
    try {
      const opened = await Promise.allSettled(
        handles.map((handle) =>
          WorkerConnection.open({
            ...connectionOptions(this.options),
            name: handle.name,
            endpoint: handle.info.endpoint,
            auth: clientAuth(this.keys, handle.info.endpoint),
            node: { id: handle.info.nodeId, address: handle.info.nodeAddress },
            process: handle,
          }),
        ),
      );
      const failed = opened.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (failed !== undefined) {
        await Promise.all(opened.flatMap((s) => (s.status === "fulfilled" ? [s.value.close()] : [])));
        throw failed.reason;
      }
      return opened.map((s, i) => ({ handle: handles[i]!, connection: (s as PromiseFulfilledResult<WorkerConnection>).value }));
    } finally {
      this.pendingHandles = this.pendingHandles.filter((h) => !handles.includes(h));
    }
  }

  /** The handles of the connected incarnations and of those being connected. */
  private allHandles(): RayWorkerHandle[] {
    return [...this.slots.map((s) => s.handle), ...this.pendingHandles];
  }

  private onEvent(event: RayWorkerEvent): void {
    switch (event.event) {
      case "worker_exit": {
        const handles = this.allHandles().filter((h) => h.info.index === event.index);
        const address = handles.find((h) => h.info.nodeId === event.nodeId)?.info.nodeAddress ?? "unknown address";
        const exit: WorkerExit = {
          exitCode: event.exitCode,
          signal: event.signal,
          ...(event.cause === "node_lost" ? { lostNode: { id: event.nodeId, address } } : {}),
        };
        // An older incarnation's end can no longer be asked for once a newer one has ended.
        for (const k of this.earlyExits.keys()) {
          const [index, incarnation] = k.split(":").map(Number);
          if (index === event.index && incarnation! < event.incarnation) this.earlyExits.delete(k);
        }
        const mine = handles.filter((h) => h.info.incarnation === event.incarnation);
        for (const h of mine) h.ended(exit, event.stderrTail);
        // No handle yet: a restart's reply naming this incarnation may still be on its way to `open()`.
        if (mine.length === 0) this.earlyExits.set(key(event.index, event.incarnation), { exit, tail: event.stderrTail });
        if (this.fresh.get(event.index)?.incarnation === event.incarnation) this.fresh.delete(event.index);
        break;
      }
      case "worker_restarted": {
        const { index, incarnation } = event.worker;
        if (!this.earlyExits.has(key(index, incarnation))) this.fresh.set(index, event.worker);
        break;
      }
      case "worker_lost": {
        this.lost.set(event.index, event.message);
        this.fresh.delete(event.index);
        for (const h of this.allHandles()) {
          if (h.info.index === event.index) h.ended({ exitCode: null, signal: null }, event.message);
        }
        break;
      }
      case "node_lost": {
        const lostNode = { id: event.nodeId, address: event.address };
        for (const h of this.allHandles()) {
          if (h.info.nodeId === event.nodeId) h.ended({ exitCode: null, signal: null, lostNode }, "");
        }
        for (const [index, info] of this.fresh) if (info.nodeId === event.nodeId) this.fresh.delete(index);
        break;
      }
    }
    try {
      this.options.onEvent?.(event);
    } catch {
      // A listener's failure must not stop the supervision of the workers.
    }
  }
}

function key(index: number, incarnation: number): string {
  return `${index}:${incarnation}`;
}
