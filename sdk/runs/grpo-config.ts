/**
 * The run config of {@link GRPOTrainer} (YAML or JSON with these camelCase keys), checked with zod: an error names
 * the field, the value and what is allowed. Defaults and meanings: docs/trainers.md.
 */
import { z } from "zod";
import { createLoss, LOSS_REGISTRY, LOSS_VARIANTS, type LossConfigLike } from "../objectives/index.js";
import { PARALLEL_STRATEGIES } from "../trainers/options.js";
import { MODEL_BACKENDS } from "../workers/models.js";
import {
  CheckpointConfigSchema,
  checkLength,
  ModelConfigSchema,
  RunOptimizerSchema,
  type ModelConfig,
  RunScheduleSchema,
  SupervisionConfigSchema,
} from "./config-blocks.js";
import { checkClusterConfig, ClusterConfigSchema } from "./cluster-config.js";
import { TaskConfigSchema } from "./task-config.js";
import { LoggersSchema, TrackingConfigSchema } from "./trackers/config.js";

/**
 * The loss: `variant` (default `"grpo"`) and that loss class's fields (`clipEpsilon`, `entropyCoeff`,
 * `aggregation`, ...; see docs/losses.md). The KL-to-reference coefficient is the run's `klToRefCoeff`.
 */
export const RunLossSchema = z
  .looseObject({ variant: z.enum(LOSS_VARIANTS).default("grpo") })
  .superRefine((loss, ctx) => {
    const { variant, ...fields } = loss;
    if (Object.hasOwn(fields, "klToRefCoeff")) {
      ctx.addIssue({ code: "custom", path: ["klToRefCoeff"], message: "set the run's top-level klToRefCoeff instead" });
      return;
    }
    const { schema, defaults } = LOSS_REGISTRY[variant];
    const parsed = schema.safeParse({ ...defaults, ...fields });
    if (parsed.success) return;
    for (const issue of parsed.error.issues) {
      const keys = issue.code === "unrecognized_keys" ? issue.keys : [];
      const message =
        keys.length > 0 ? `not a field of loss variant "${variant}": ${keys.join(", ")}` : `${issue.message} (loss variant "${variant}")`;
      ctx.addIssue({ code: "custom", path: issue.path, message });
    }
  });

/** The loss block (input form). */
export type RunLossConfig = z.input<typeof RunLossSchema>;

/** Sampling of the training completions (the worker's `generate` options). */
export const SamplingConfigSchema = z.strictObject({
  /** Softmax temperature (default 1; 0 = greedy). */
  temperature: z.number().min(0).default(1),
  /** Nucleus mass in (0, 1] (default 1 = off). */
  topP: z.number().gt(0).max(1).default(1),
  /** Keep the `topK` most likely tokens (default 0 = off). */
  topK: z.number().int().min(0).default(0),
  /** HF repetition penalty (default 1 = off). */
  repetitionPenalty: z.number().gt(0).default(1),
});

/** Held-out evaluation: every `every` steps (0 = off, default), on `prompts` prompts (default 64), greedy by default. */
export const EvalConfigSchema = z.strictObject({
  every: z.number().int().min(0).default(0),
  prompts: z.number().int().min(1).default(64),
  greedy: z.boolean().default(true),
});

/** What goes to `samples.jsonl`: `samplesPerStep` completions per step (default 2). */
export const LogConfigSchema = z.strictObject({
  samplesPerStep: z.number().int().min(0).default(2),
});

/** Where a role's workers compute: `"auto"` (CUDA when there is a GPU), `"cpu"` or `"cuda"`; default `model.device`. */
const RoleDeviceSchema = z.enum(["auto", "cpu", "cuda"]);

/**
 * The trainer role: `count` ranks (default 1; more form a data-parallel trainer group on torch.distributed, the
 * batch split over them by token count), how they train together (`strategy`, default `"ddp"`; `"fsdp"` shards
 * the policy over them), and `gradientCheckpointing` (default false).
 */
const TrainerRoleSchema = z.strictObject({
  count: z.number().int().min(1).default(1),
  device: RoleDeviceSchema.optional(),
  strategy: z.enum(PARALLEL_STRATEGIES).default("ddp"),
  gradientCheckpointing: z.boolean().default(false),
});

/** The generator role: worker processes (default 0, or what `layout` implies). */
const GeneratorRoleSchema = z.strictObject({ count: z.number().int().min(0).optional(), device: RoleDeviceSchema.optional() });

/**
 * The reference role (a KL term, `klToRefCoeff > 0`): `count` 0 (the default) keeps a frozen copy of the policy in
 * each trainer rank's worker; 1 loads the initial policy in a worker of its own, which scores every batch.
 */
const ReferenceRoleSchema = z.strictObject({ count: z.union([z.literal(0), z.literal(1)]).default(0), device: RoleDeviceSchema.optional() });

/** A role's `device` only when it is given (so a config without one reads back the same). */
function withDevice<T extends object>(role: T, device: z.output<typeof RoleDeviceSchema> | undefined): T & { device?: z.output<typeof RoleDeviceSchema> } {
  return device === undefined ? role : { ...role, device };
}

/**
 * Which workers play which role: `trainer` (`count` ranks of the policy's optimizer: workers 0..count−1),
 * `generator` (count 0, the default: the trainer's worker, rank 0, also generates, sharing the weights; count ≥ 1:
 * that many generator workers, each sampling a share of every batch, the weights sent to them over ZeroMQ after each
 * step) and `reference` (count 0 or 1, the last worker). Each role may compute on its own `device`. `layout` is the
 * older shorthand: `"colocated"` = generator count 0, `"separate"` = generator count 1.
 */
export const WorkersConfigSchema = z
  .strictObject({
    layout: z.enum(["colocated", "separate"]).optional(),
    trainer: TrainerRoleSchema.prefault({}),
    generator: GeneratorRoleSchema.prefault({}),
    reference: ReferenceRoleSchema.prefault({}),
  })
  .superRefine((w, ctx) => {
    const implied = w.layout === undefined ? undefined : w.layout === "separate" ? 1 : 0;
    const count = w.generator.count;
    if (implied !== undefined && count !== undefined && (implied === 0) !== (count === 0)) {
      ctx.addIssue({ code: "custom", path: ["generator", "count"], message: `${count} contradicts layout "${w.layout}"; give one of the two` });
    }
    if (w.trainer.count > 1 && w.trainer.strategy === "fsdp" && (count ?? implied ?? 0) === 0) {
      ctx.addIssue({
        code: "custom",
        path: ["generator", "count"],
        message: "fsdp shards the policy: colocated generation needs the full weights; give workers.generator.count >= 1",
      });
    }
  })
  .transform((w) => ({
    trainer: withDevice({ count: w.trainer.count, strategy: w.trainer.strategy, gradientCheckpointing: w.trainer.gradientCheckpointing }, w.trainer.device),
    generator: withDevice({ count: w.generator.count ?? (w.layout === "separate" ? 1 : 0) }, w.generator.device),
    reference: withDevice({ count: w.reference.count }, w.reference.device),
  }));

/**
 * The default `generator.vllm.gpuMemoryUtilization` of an engine colocated with the trainer (`workers.generator.count`
 * 0) on a device that may be CUDA: vLLM's own 0.9 would leave the trainer's model, gradients and optimizer state too
 * little of the same GPU.
 */
export const COLOCATED_GPU_MEMORY_UTILIZATION = 0.3;

/**
 * Engine options of the vLLM generators (`generator.vllm`, only with `backend: "vllm"`): the worker's `loadModel`
 * options of that backend, and the KV cache of vLLM's CPU backend.
 */
export const VllmGeneratorOptionsSchema = z.strictObject({
  /**
   * The fraction of the GPU's memory the engine may take, in (0, 1] (GPU only). Default: vLLM's 0.9 on a generator
   * worker of its own; 0.3 when colocated with the trainer (`workers.generator.count` 0) on a device that may be CUDA,
   * which shares the GPU with the trainer's model, gradients and optimizer state.
   */
  gpuMemoryUtilization: z.number().gt(0).max(1).optional(),
  /** The context length, prompt + completion (default the model's `max_position_embeddings`). */
  maxModelLen: z.number().int().min(1).optional(),
  /** No CUDA graphs: a faster start, slower decoding (default: true on vLLM's CPU backend, which has none, false on a GPU). */
  enforceEager: z.boolean().optional(),
  /** Reuse the KV cache of a group's shared prompt (default true). */
  enablePrefixCaching: z.boolean().optional(),
  /**
   * CPU backend only: GiB of memory for the KV cache (`VLLM_CPU_KVCACHE_SPACE` of the workers the run starts; refused
   * with `options.pool`, whose workers run already: start that pool with the variable instead).
   */
  kvCacheSpaceGiB: z.number().gt(0).optional(),
});

/** The engine options of the vLLM generators, as parsed. */
type VllmGeneratorOptions = z.output<typeof VllmGeneratorOptionsSchema>;

/**
 * Which engine generates the training completions and how often it gets the trainer's weights. `workers.generator`
 * says where generation runs (in the trainer's worker, or `count` generator workers); this block says with what:
 * `backend` `"transformers"` (default: the worker's own decoding loop over the HF model) or `"vllm"` (a vLLM engine
 * loaded from the same checkpoint, in that same worker); `syncEvery` (default 1): the trainer's weights go to the
 * generators after each optimizer step whose number is a multiple of `syncEvery` (an evaluation or a resume syncs in
 * between without moving that schedule), so samples may lag up to `syncEvery − 1` versions (each carries the version
 * it was sampled with). See docs/trainers.md, "vLLM generation".
 *
 * ```ts
 * GeneratorConfigSchema.parse({ backend: "vllm", vllm: { maxModelLen: 2048 } }); // syncEvery: 1
 * ```
 */
export const GeneratorConfigSchema = z
  .strictObject({
    backend: z.enum(MODEL_BACKENDS).default("transformers"),
    syncEvery: z.number().int().min(1).default(1),
    vllm: VllmGeneratorOptionsSchema.optional(),
  })
  .superRefine((g, ctx) => {
    if (g.vllm !== undefined && g.backend !== "vllm") {
      ctx.addIssue({ code: "custom", path: ["vllm"], message: `options of backend "vllm", but generator.backend is "${g.backend}"; set backend: "vllm" or leave them out` });
    }
  });

/** The generator block (input form). */
export type GeneratorConfig = z.input<typeof GeneratorConfigSchema>;

/**
 * Asynchronous collection: generators run up to `maxPolicyAge` policy versions ahead of the trainer (0 = the
 * synchronous, on-policy algorithm). See docs/trainers.md.
 */
export const AsyncConfigSchema = z.strictObject({
  /** The most policy versions a trained sample may lag behind the trainer (required; older groups are dropped and counted). */
  maxPolicyAge: z.number().int().min(0),
  /** Groups the replay buffer holds (default `(maxPolicyAge + 1) × promptsPerStep`); a full buffer pauses collection. */
  bufferGroups: z.number().int().min(1).optional(),
});

/** The run config of `GRPOTrainer`. */
export const GRPOTrainerConfigSchema = z
  .strictObject({
    /** The policy model. */
    model: ModelConfigSchema,
    /** Where the training prompts and rewards come from. */
    task: TaskConfigSchema,
    /** The held-out prompts (default: the task's held-out split, or its stream under another seed). */
    evalTask: TaskConfigSchema.optional(),
    /** Completions per prompt (default 8). */
    groupSize: z.number().int().min(2).default(8),
    /** Distinct prompts per step (default 8): a step trains on `promptsPerStep × groupSize` completions. */
    promptsPerStep: z.number().int().min(1).default(8),
    /** Tokens sampled per completion (default 64). */
    maxNewTokens: z.number().int().min(1).default(64),
    sampling: SamplingConfigSchema.prefault({}),
    loss: RunLossSchema.prefault({}),
    /** k3 KL to a frozen copy of the initial policy (default 0 = off; > 0 loads the reference). */
    klToRefCoeff: z.number().min(0).default(0),
    /** Default `{ type: "adamw", lr: 1e-5 }`. */
    optimizer: RunOptimizerSchema.prefault({}),
    /** Default `{ type: "constant" }`. */
    schedule: RunScheduleSchema.prefault({}),
    /** Clip the global gradient norm (default 1; null = off). */
    gradClip: z.number().gt(0).nullable().default(1),
    /** Largest padded micro-batch in tokens (default null = the whole batch). */
    microBatchTokens: z.number().int().min(1).nullable().default(null),
    /** Optimizer steps to take (required unless `epochs`). */
    steps: z.number().int().min(1).optional(),
    /** Passes over the task's training prompts (dataset tasks; procedural tasks count their training split). */
    epochs: z.number().int().min(1).optional(),
    eval: EvalConfigSchema.prefault({}),
    checkpoint: CheckpointConfigSchema.prefault({}),
    /** Restarts after a worker failure (default `{ maxRestarts: 3, backoffMs: 1000 }`). */
    supervision: SupervisionConfigSchema.prefault({}),
    log: LogConfigSchema.prefault({}),
    /** Where the metrics go besides `metrics.jsonl` (always written): default `["jsonl"]` (docs/trackers.md). */
    loggers: LoggersSchema,
    /** The tracker runs' project, name and folder (docs/trackers.md). */
    tracking: TrackingConfigSchema.prefault({}),
    workers: WorkersConfigSchema.prefault({}),
    /** The generation engine and how often it gets the weights (default `{ backend: "transformers", syncEvery: 1 }`). */
    generator: GeneratorConfigSchema.prefault({}),
    /** Where the workers run: `{ type: "local" }` (default) or `{ type: "ray", ... }` (docs/scaling.md, "Placement on Ray"). */
    cluster: ClusterConfigSchema.prefault({ type: "local" }),
    /** Collect ahead of the trainer (default off: synchronous, the same as `{ maxPolicyAge: 0 }`). */
    async: AsyncConfigSchema.optional(),
    /** Seeds the prompt streams, the sampling and the tiny model (default 0). */
    seed: z.number().int().nonnegative().default(0),
    /** The run directory (created when missing). */
    runDir: z.string().min(1),
  })
  .superRefine(checkLength)
  .superRefine((c, ctx) => {
    const w = c.workers;
    const devices = {
      trainer: w.trainer.device ?? c.model.device,
      ...(w.generator.count > 0 ? { generator: w.generator.device ?? c.model.device } : {}),
      ...(w.reference.count > 0 ? { reference: w.reference.device ?? c.model.device } : {}),
    };
    checkClusterConfig(c.cluster, c.supervision.maxRestarts, devices, ctx);
    if (c.workers.reference.count === 1 && c.klToRefCoeff === 0) {
      ctx.addIssue({
        code: "custom",
        path: ["workers", "reference", "count"],
        message: "a reference worker scores the KL-to-reference term: set klToRefCoeff > 0, or leave the count at 0",
      });
    }
    const groups = c.async?.bufferGroups;
    if (groups !== undefined && groups < c.promptsPerStep) {
      ctx.addIssue({
        code: "custom",
        path: ["async", "bufferGroups"],
        message: `must hold at least one step's groups (promptsPerStep = ${c.promptsPerStep}), got ${groups}`,
      });
    }
  });

/** The run config of `GRPOTrainer` (input form: defaults may be left out). */
export type GRPOTrainerConfigInput = z.input<typeof GRPOTrainerConfigSchema>;

/** The run config of `GRPOTrainer` with every default filled in (what `config.yaml` holds). */
export type GRPOTrainerConfig = z.output<typeof GRPOTrainerConfigSchema>;

/**
 * The engine options of a vLLM generator colocated with the trainer on `device`: unless given, a GPU memory fraction
 * that leaves the trainer room (`COLOCATED_GPU_MEMORY_UTILIZATION`); on `"cpu"` as given (the CPU engine sizes its KV
 * cache by `kvCacheSpaceGiB`).
 */
export function colocatedEngineOf(vllm: VllmGeneratorOptions | undefined, device: ModelConfig["device"]): VllmGeneratorOptions | undefined {
  if (device === "cpu" || vllm?.gpuMemoryUtilization !== undefined) return vllm;
  return { ...vllm, gpuMemoryUtilization: COLOCATED_GPU_MEMORY_UTILIZATION };
}

/** How far collection may run ahead (0 without `async`). */
export function maxPolicyAgeOf(config: Pick<GRPOTrainerConfig, "async">): number {
  return config.async?.maxPolicyAge ?? 0;
}

/**
 * The oldest policy version a trained row may have, counted back from the trainer's: `maxPolicyAge` for collection
 * ahead plus `syncEvery − 1` for the versions the generators skip between syncs.
 */
export function trainablePolicyAgeOf(config: Pick<GRPOTrainerConfig, "async" | "generator">): number {
  return maxPolicyAgeOf(config) + config.generator.syncEvery - 1;
}

/** Groups the replay buffer holds. */
export function bufferGroupsOf(config: Pick<GRPOTrainerConfig, "async" | "promptsPerStep">): number {
  return config.async?.bufferGroups ?? (maxPolicyAgeOf(config) + 1) * config.promptsPerStep;
}

/** The loss object of a resolved config (the variant's class from `LOSS_REGISTRY`, with the run's `klToRefCoeff`). */
export function lossOf(config: Pick<GRPOTrainerConfig, "loss" | "klToRefCoeff">): LossConfigLike {
  const { variant, ...fields } = config.loss;
  const options = { ...fields, klToRefCoeff: config.klToRefCoeff > 0 ? config.klToRefCoeff : null };
  return createLoss(variant, options, "GRPOTrainer config.loss");
}
