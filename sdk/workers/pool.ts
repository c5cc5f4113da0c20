import {
  launchLocalWorkers,
  launchRayWorkers,
  type LocalWorkers,
  type LocalWorkersOptions,
  type RayWorkerInfo,
  type RayWorkers,
  type RayWorkersOptions,
  type WorkerConnection,
} from "../../bridge/index.js";
import { InvalidArgumentError } from "../core/errors.js";
import { WorkerClient } from "./client.js";

/** Options of {@link WorkerPool.local}. */
export type WorkerPoolOptions = LocalWorkersOptions;

/**
 * Options of {@link WorkerPool.ray}: the workers to place (one Ray bundle each), the cluster (absent `address`: a
 * local one on 127.0.0.1, stopped with the pool), the placement strategy and Ray's actor restarts. See
 * docs/workers.md, "Workers on Ray".
 *
 * ```ts
 * const options: RayWorkerPoolOptions = {
 *   address: "10.0.0.1:6379",
 *   workers: [{ role: "trainer", resources: { CPU: 4, GPU: 1 } }, { role: "generator", resources: { CPU: 4, GPU: 1 } }],
 *   strategy: "SPREAD",
 * };
 * ```
 */
export type RayWorkerPoolOptions = RayWorkersOptions;

/**
 * Where a Ray pool's workers run: the cluster and, per worker, its node and actor.
 *
 * ```ts
 * const nodes = pool.placement?.workers.map((w) => w.nodeAddress);
 * ```
 */
export interface WorkerPlacement {
  /** The cluster's GCS address, and whether the pool started it (then `close()` stops it). */
  readonly cluster: { readonly address: string; readonly started: boolean };
  /** One entry per worker, in order: node, endpoint, pids, actor and incarnation. */
  readonly workers: readonly RayWorkerInfo[];
}

type Backend = { readonly kind: "local"; readonly local: LocalWorkers } | { readonly kind: "ray"; readonly ray: RayWorkers };

/**
 * A set of Python worker processes and their typed clients: local processes (`WorkerPool.local`) or Ray actors
 * (`WorkerPool.ray`); either way each worker is reached directly over ZeroMQ.
 *
 * ```ts
 * await using pool = await WorkerPool.local({ workers: 1, device: "cpu" });
 * const info = await pool.worker(0).loadModel({ name: "policy", path: "runs/demo/model" });
 * ```
 */
export class WorkerPool implements AsyncDisposable {
  private clients: readonly WorkerClient[];
  private clientsOf: readonly WorkerConnection[];

  private constructor(private readonly backend: Backend) {
    this.clientsOf = this.currentConnections();
    this.clients = this.clientsOf.map((c) => new WorkerClient(c));
  }

  /**
   * Spawns local workers (`python -m posttrain_worker` from the project's `.venv`), waits until each is
   * ready and handshaken. CPU when there is no GPU, one worker per GPU otherwise.
   */
  static async local(options: WorkerPoolOptions = {}): Promise<WorkerPool> {
    return new WorkerPool({ kind: "local", local: await launchLocalWorkers(options) });
  }

  /**
   * Places one worker per `workers` entry on a Ray cluster (a placement group, one bundle and one actor each) and
   * connects to each directly over CURVE-authenticated ZeroMQ tcp. Fails fast with `PlacementError` when the cluster
   * cannot hold the bundles, `RayUnavailableError` when the Python has no `ray`. See docs/workers.md, "Workers on Ray".
   *
   * ```ts
   * await using pool = await WorkerPool.ray({
   *   workers: [{ role: "trainer", resources: { CPU: 1 } }, { role: "trainer", resources: { CPU: 1 } }],
   *   strategy: "STRICT_SPREAD",
   * });
   * console.log(pool.worker(0).nodeId, pool.worker(1).nodeAddress);
   * ```
   */
  static async ray(options: RayWorkerPoolOptions): Promise<WorkerPool> {
    return new WorkerPool({ kind: "ray", ray: await launchRayWorkers(options) });
  }

  /** One typed client per worker, in worker order; after `restart()`, the clients of the new workers. */
  get workers(): readonly WorkerClient[] {
    const connections = this.currentConnections();
    if (connections.some((c, i) => c !== this.clientsOf[i]) || connections.length !== this.clientsOf.length) {
      this.clientsOf = connections;
      this.clients = connections.map((c) => new WorkerClient(c));
    }
    return this.clients;
  }

  /** Number of workers. */
  get size(): number {
    return this.workers.length;
  }

  /** The private directory holding the workers' ipc socket files (removed by `close()`); local pools only. */
  get socketDir(): string {
    if (this.backend.kind !== "local") throw new InvalidArgumentError("socketDir: a Ray pool's workers use tcp, not ipc sockets");
    return this.backend.local.socketDir;
  }

  /** Where a Ray pool's workers run (cluster address, node and actor per worker); `undefined` for a local pool. */
  get placement(): WorkerPlacement | undefined {
    if (this.backend.kind !== "ray") return undefined;
    return { cluster: this.backend.ray.cluster, workers: this.backend.ray.workers };
  }

  /** The client of worker `index`. */
  worker(index: number): WorkerClient {
    const client = this.workers[index];
    if (client === undefined) {
      throw new InvalidArgumentError(`worker index: expected 0..${this.workers.length - 1}, got ${index}`);
    }
    return client;
  }

  /**
   * Ray pools: brings every worker back through Ray's actor restart (the live ones are shut down first) and
   * reconnects; `workers` then holds the new clients. Fails with `RayDriverError` (`RESTARTS_EXHAUSTED`) when a
   * worker's actor is dead for good, with `ConnectionClosedError` when `close()` overtakes it. Local pools:
   * `InvalidArgumentError` (start a new pool instead).
   *
   * ```ts
   * await pool.restart();
   * ```
   */
  async restart(options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.rayWorkers("restart").restart(options);
  }

  /**
   * Ray pools: closes the connections (the workers shut down and Ray restarts them) until `restart()`.
   *
   * ```ts
   * await pool.detach(); // ... later
   * await pool.restart();
   * ```
   */
  async detach(): Promise<void> {
    await this.rayWorkers("detach").detach();
  }

  /** Shuts every worker down (Ray: kills the actors, removes the placement group, stops a cluster it started); idempotent. */
  close(): Promise<void> {
    return this.backend.kind === "local" ? this.backend.local.close() : this.backend.ray.close();
  }

  /** For `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private currentConnections(): readonly WorkerConnection[] {
    return this.backend.kind === "local" ? this.backend.local.connections : this.backend.ray.connections;
  }

  private rayWorkers(method: string): RayWorkers {
    if (this.backend.kind !== "ray") {
      throw new InvalidArgumentError(`${method}: only for Ray pools (WorkerPool.ray); close a local pool and start a new one`);
    }
    return this.backend.ray;
  }
}
