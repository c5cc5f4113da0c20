/**
 * The workers a run starts itself, over its whole life: started for the first build, released when the parts close,
 * brought back for the build after a worker failure, stopped when the run closes. Local workers are started anew
 * for each build; Ray workers keep their placement group and come back through Ray's own actor restart (the TS side
 * then reconnects to their new endpoints).
 */
import { WorkerPool } from "../workers/pool.js";
import type { ResolvedClusterConfig, ResolvedRayCluster, RoleResources } from "./cluster-config.js";
import type { RunDevice, RunPoolOptions } from "./setup.js";

/** One worker of a run's layout: its role and the device its role computes on. */
export interface RunWorkerSlot {
  readonly role: "trainer" | "generator" | "reference";
  readonly device: RunDevice;
}

/** Why the run releases its workers: a restart brings them back, a close stops them for good. */
export type ReleaseReason = "restart" | "close";

/** The workers a run owns (not a caller's `options.pool`), local or on Ray, across restarts. */
export interface RunWorkers {
  /** The workers for `slots` (in order): started on the first call, back from a restart on later ones. */
  open(slots: readonly RunWorkerSlot[], device: RunDevice, signal: AbortSignal | undefined): Promise<WorkerPool>;
  /** Releases `pool` after its parts are closed. */
  release(pool: WorkerPool, reason: ReleaseReason): Promise<void>;
  /** Stops whatever is still running (idempotent). */
  close(): Promise<void>;
}

/**
 * The run's workers for its `cluster` block; `extra` are test-only pool options (see `POOL_OPTIONS`).
 *
 * ```ts
 * const workers = runWorkers(config.cluster, undefined);
 * const pool = await workers.open([{ role: "trainer", device: "cpu" }], "cpu", signal);
 * ```
 */
export function runWorkers(cluster: ResolvedClusterConfig, extra: RunPoolOptions | undefined): RunWorkers {
  return cluster.type === "ray" ? new RayRunWorkers(cluster, extra) : new LocalRunWorkers(extra);
}

/** Local processes: each build starts its own pool and each release stops it. */
class LocalRunWorkers implements RunWorkers {
  constructor(private readonly extra: RunPoolOptions | undefined) {}

  open(slots: readonly RunWorkerSlot[], device: RunDevice, signal: AbortSignal | undefined): Promise<WorkerPool> {
    return WorkerPool.local({ ...this.extra, workers: slots.length, device, ...(signal !== undefined ? { signal } : {}) });
  }

  release(pool: WorkerPool): Promise<void> {
    return pool.close();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/**
 * The bundle of a worker: its role's resources, or `{ CPU: 1 }` (plus a GPU for a role on `"cuda"`).
 *
 * ```ts
 * bundleOf(cluster, { role: "generator", device: "cuda" }); // { CPU: 1, GPU: 1 } unless cluster.resources.generator
 * ```
 */
export function bundleOf(cluster: ResolvedRayCluster, slot: RunWorkerSlot): RoleResources {
  return cluster.resources[slot.role] ?? { CPU: 1, ...(slot.device === "cuda" ? { GPU: 1 } : {}) };
}

/**
 * Actors in one placement group: the first build creates them; a release for a restart disconnects (the workers shut
 * down and Ray restarts their actors in the same bundles), the next build waits for every actor's new worker and
 * reconnects; the run's close kills the actors and removes the placement group (and a cluster the run started).
 */
class RayRunWorkers implements RunWorkers {
  #pool: WorkerPool | undefined;

  constructor(
    private readonly cluster: ResolvedRayCluster,
    private readonly extra: RunPoolOptions | undefined,
  ) {}

  async open(slots: readonly RunWorkerSlot[], _device: RunDevice, signal: AbortSignal | undefined): Promise<WorkerPool> {
    const signalOption = signal !== undefined ? { signal } : {};
    if (this.#pool !== undefined) {
      // a later build always follows a release for a restart: every worker comes back through Ray
      await this.#pool.restart(signalOption);
      return this.#pool;
    }
    const c = this.cluster;
    this.#pool = await WorkerPool.ray({
      ...this.extra,
      workers: slots.map((slot) => ({ role: slot.role, resources: bundleOf(c, slot) })),
      strategy: c.strategy,
      maxRestarts: c.maxRestarts,
      placementTimeoutMs: c.placementTimeoutMs,
      ...(c.address !== undefined ? { address: c.address } : {}),
      ...(c.namespace !== undefined ? { namespace: c.namespace } : {}),
      ...(c.runtimeEnv !== undefined ? { runtimeEnv: c.runtimeEnv } : {}),
      ...signalOption,
    });
    return this.#pool;
  }

  async release(pool: WorkerPool, reason: ReleaseReason): Promise<void> {
    if (reason === "close") {
      this.#pool = undefined;
      await pool.close();
      return;
    }
    await pool.detach();
  }

  async close(): Promise<void> {
    const pool = this.#pool;
    this.#pool = undefined;
    await pool?.close();
  }
}
