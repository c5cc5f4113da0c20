/**
 * The `cluster` block of a run config (docs/scaling.md, "Placement on Ray"): where the run's workers are placed.
 * Changing only this block moves a run from local processes to a Ray cluster; nothing else in the config changes.
 */
import { z } from "zod";
import { DEFAULT_PLACEMENT_TIMEOUT_MS, PLACEMENT_STRATEGIES, RayAddressSchema, RayResourcesSchema } from "../../bridge/index.js";

/** The Ray resources of a role's workers, each worker one bundle of them: `{ CPU: 4, GPU: 1 }`, `{ CPU: 1, trainer_node: 1 }`. */
export type RoleResources = z.output<typeof RayResourcesSchema>;

/** The default placement: today's behaviour, worker processes started on this machine. */
export const LocalClusterSchema = z.strictObject({ type: z.literal("local") });

/**
 * Placement on Ray: one placement group per run, one bundle per worker (trainer ranks, then generators, then the
 * reference), each worker a Ray actor scheduled into its bundle, restarted by Ray when it dies. Without `address` the
 * run starts a local Ray cluster bound to 127.0.0.1 and stops it at the end.
 */
export const RayClusterSchema = z.strictObject({
  type: z.literal("ray"),
  /** An existing cluster: `"auto"` (on one of its nodes) or the head's GCS `"host:port"`; absent: a local one, stopped with the run. */
  address: RayAddressSchema.optional(),
  /** Ray namespace of the run's actors. */
  namespace: z.string().min(1).optional(),
  /** Ray runtime environment of the actors (`env_vars`, `working_dir`, ...), passed through as is. */
  runtimeEnv: z.record(z.string(), z.json()).optional(),
  /** How the bundles spread over the nodes (default `"PACK"`). */
  strategy: z.enum(PLACEMENT_STRATEGIES).default("PACK"),
  /**
   * Each role's bundle (default `{ CPU: 1 }`, plus `GPU: 1` for a role whose device is `"cuda"`). A worker computes on
   * CUDA when its bundle has a GPU.
   */
  resources: z
    .strictObject({ trainer: RayResourcesSchema.optional(), generator: RayResourcesSchema.optional(), reference: RayResourcesSchema.optional() })
    .prefault({}),
  /**
   * Ray restarts of each worker's actor over the run's life (default -1: unlimited). Each run restart restarts every
   * actor once, so a finite value caps the run's restarts and must be at least `supervision.maxRestarts`.
   */
  maxRestarts: z.number().int().min(-1).default(-1),
  /** Milliseconds to wait for the placement group once it was found satisfiable (default 120 000). */
  placementTimeoutMs: z.number().int().min(1).default(DEFAULT_PLACEMENT_TIMEOUT_MS),
});

/**
 * The `cluster` block of `GRPOTrainer` and `SFTTrainer` configs: `{ type: "local" }` (default) or `{ type: "ray", ... }`.
 *
 * ```ts
 * const cluster = ClusterConfigSchema.parse({ type: "ray", address: "auto", strategy: "STRICT_SPREAD" });
 * ```
 */
export const ClusterConfigSchema = z.discriminatedUnion("type", [LocalClusterSchema, RayClusterSchema]);

/** The cluster block (input form). */
export type ClusterConfig = z.input<typeof ClusterConfigSchema>;

/** The cluster block with its defaults. */
export type ResolvedClusterConfig = z.output<typeof ClusterConfigSchema>;

/** The Ray cluster block with its defaults. */
export type ResolvedRayCluster = z.output<typeof RayClusterSchema>;

/** Where each role of a run computes (`"auto"`, `"cpu"` or `"cuda"`); a role the run does not have is left out. */
export type RoleDevices = Partial<Record<keyof ResolvedRayCluster["resources"], "auto" | "cpu" | "cuda">>;

/**
 * Checks a Ray `cluster` block against the rest of a run config: a role on `"cuda"` needs a GPU in its bundle (a
 * worker computes on CUDA exactly when its bundle has one), and a finite `cluster.maxRestarts` must allow the run's
 * `supervision.maxRestarts` (each run restart restarts every actor once through Ray).
 *
 * ```ts
 * schema.superRefine((c, ctx) => checkClusterConfig(c.cluster, c.supervision.maxRestarts, { trainer: c.model.device }, ctx));
 * ```
 */
export function checkClusterConfig(cluster: ResolvedClusterConfig, maxRunRestarts: number, devices: RoleDevices, ctx: z.RefinementCtx): void {
  if (cluster.type !== "ray") return;
  for (const [role, device] of Object.entries(devices) as [keyof RoleDevices, RoleDevices[keyof RoleDevices]][]) {
    const bundle = cluster.resources[role];
    if (device === "cuda" && bundle !== undefined && !((bundle.GPU ?? 0) > 0)) {
      ctx.addIssue({
        code: "custom",
        path: ["cluster", "resources", role, "GPU"],
        message: `the ${role} role computes on "cuda": its bundle needs a GPU (a worker uses CUDA when its bundle has one)`,
      });
    }
  }
  if (cluster.maxRestarts !== -1 && cluster.maxRestarts < maxRunRestarts) {
    ctx.addIssue({
      code: "custom",
      path: ["cluster", "maxRestarts"],
      message: `each run restart restarts every actor once: expected -1 (unlimited) or at least supervision.maxRestarts (${String(maxRunRestarts)}), got ${String(cluster.maxRestarts)}`,
    });
  }
}
