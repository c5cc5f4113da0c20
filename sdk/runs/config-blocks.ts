/**
 * Config blocks shared by the run configs of `GRPOTrainer` and `SFTTrainer` (docs/trainers.md): the model, the
 * optimizer and its schedule, checkpoints and the length of the run. YAML-friendly: plain objects with defaults.
 */
import { z } from "zod";
import { TinyModelConfigSchema } from "../models/tiny.js";
import { MODEL_DTYPES } from "../workers/models.js";
import type { OptimizerConfig, ScheduleConfig } from "../trainers/options.js";

/** The model block of a run config. */
export const ModelConfigSchema = z
  .strictObject({
    /**
     * A local directory in Hugging Face format, a hub id (where the worker is online), or `"tiny"`: build the
     * project's tiny random model into `<runDir>/model` (sizes from `tiny`).
     */
    path: z.string().min(1),
    /** Sizes of the tiny model (only with `path: "tiny"`). */
    tiny: TinyModelConfigSchema.optional(),
    /** Weight dtype: `"float32"` (default), `"bfloat16"` or `"float16"`. */
    dtype: z.enum(MODEL_DTYPES).default("float32"),
    /** `"auto"` (default: CUDA when there is a GPU, else CPU), `"cpu"` or `"cuda"`. */
    device: z.enum(["auto", "cpu", "cuda"]).default("auto"),
    /**
     * A Jinja file replacing the model's chat template wherever the run loads it (`loadModel`'s `chatTemplate`):
     * for instance one with `{% generation %}` blocks where the model's own template cannot give assistant masks
     * (docs/history.md, "Assistant masks"). Default: the model directory's template. Not together with
     * `tiny.chatTemplateFile`, which builds a template into the tiny model.
     */
    chatTemplateFile: z.string().min(1).optional(),
  })
  .superRefine((m, ctx) => {
    if (m.tiny !== undefined && m.path !== "tiny") {
      ctx.addIssue({ code: "custom", path: ["tiny"], message: `only used with path "tiny", got path ${JSON.stringify(m.path)}` });
    }
    // both would apply, one silently replacing the other
    if (m.chatTemplateFile !== undefined && m.tiny?.chatTemplateFile !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["chatTemplateFile"],
        message: "not together with tiny.chatTemplateFile (which builds its template into the tiny model); give one of the two",
      });
    }
  });

/** The model block (input form). */
export type ModelConfig = z.input<typeof ModelConfigSchema>;

const Beta = z.number().min(0).lt(1);
const ADAM_ONLY = ["betas", "eps"] as const;
const SGD_ONLY = ["momentum", "nesterov"] as const;

/**
 * The optimizer: `type` `"adamw"` (default), `"adam"` or `"sgd"`, `lr` (default 1e-5) and that optimizer's fields
 * (`weightDecay`; `betas`, `eps` for Adam(W); `momentum`, `nesterov` for SGD).
 */
export const RunOptimizerSchema = z
  .strictObject({
    type: z.enum(["adamw", "adam", "sgd"]).default("adamw"),
    lr: z.number().min(0).default(1e-5),
    weightDecay: z.number().min(0).optional(),
    betas: z.tuple([Beta, Beta]).optional(),
    eps: z.number().gt(0).optional(),
    momentum: z.number().min(0).max(1).optional(),
    nesterov: z.boolean().optional(),
  })
  .superRefine((o, ctx) => {
    const foreign = o.type === "sgd" ? ADAM_ONLY : SGD_ONLY;
    for (const key of foreign) {
      if (o[key] !== undefined) ctx.addIssue({ code: "custom", path: [key], message: `not a field of optimizer type "${o.type}"` });
    }
  });

/** The optimizer block (input form). */
export type RunOptimizerConfig = z.input<typeof RunOptimizerSchema>;

/**
 * The learning-rate schedule: `type` `"constant"` (default), `"linear"` or `"cosine"`, an optional linear
 * `warmupSteps`, and for the decays `totalSteps` (default: the run's steps) and `minLrRatio` (default 0).
 */
export const RunScheduleSchema = z
  .strictObject({
    type: z.enum(["constant", "linear", "cosine"]).default("constant"),
    warmupSteps: z.number().int().min(0).optional(),
    totalSteps: z.number().int().min(1).optional(),
    minLrRatio: z.number().min(0).max(1).optional(),
  })
  .superRefine((s, ctx) => {
    if (s.type === "constant") {
      for (const key of ["totalSteps", "minLrRatio"] as const) {
        if (s[key] !== undefined) ctx.addIssue({ code: "custom", path: [key], message: 'not a field of schedule type "constant"' });
      }
    }
  });

/** The schedule block (input form). */
export type RunScheduleConfig = z.input<typeof RunScheduleSchema>;

/** Default of `checkpoint.every`: a save of the demo's tiny model (~27 ms) every 100 steps costs < 2% of a step. */
export const DEFAULT_CHECKPOINT_EVERY = 100;
/** Default of `checkpoint.everyMinutes`: a crash loses about this much work at most (plus the step in flight), whatever the step time. */
export const DEFAULT_CHECKPOINT_EVERY_MINUTES = 10;

/**
 * Checkpoints: every `every` steps (default 100) or every `everyMinutes` minutes since the last save (default 10),
 * whichever comes first (0 turns that trigger off; both 0 = only at the end and on stop), keeping the last `keepLast`
 * (default 2). A step is saved at most once.
 */
export const CheckpointConfigSchema = z.strictObject({
  every: z.number().int().min(0).default(DEFAULT_CHECKPOINT_EVERY),
  everyMinutes: z.number().min(0).default(DEFAULT_CHECKPOINT_EVERY_MINUTES),
  keepLast: z.number().int().min(1).default(2),
});

/** The checkpoint block (input form). */
export type CheckpointConfig = z.input<typeof CheckpointConfigSchema>;

/**
 * Supervision (docs/trainers.md, "Supervision and restarts"): when a worker the run started dies or stops answering,
 * the run restarts its workers from the last checkpoint, at most `maxRestarts` times (default 3; 0 = fail at once)
 * in a row — the count starts again after `healthySteps` steps without a failure (default 20) — waiting `backoffMs`
 * before the first restart (default 1000), doubling each time up to `maxBackoffMs` (default 30 000). `callWatchdogMs`
 * (default 0 = off) bounds every call of the trainer (a step, a checkpoint save or load): one unanswered after that
 * long means the worker's compute thread hangs, so the worker is killed and the run restarts; set it well above the
 * slowest step and save.
 */
export const SupervisionConfigSchema = z.strictObject({
  maxRestarts: z.number().int().min(0).default(3),
  backoffMs: z.number().int().min(0).default(1000),
  maxBackoffMs: z.number().int().min(0).default(30_000),
  healthySteps: z.number().int().min(1).default(20),
  callWatchdogMs: z.number().int().min(0).default(0),
});

/** The supervision block (input form). */
export type SupervisionConfig = z.input<typeof SupervisionConfigSchema>;

/** Steps and epochs: at least one of them (`steps` wins when both are given: the run stops at whichever comes first). */
export function checkLength(c: { steps?: number | undefined; epochs?: number | undefined }, ctx: z.RefinementCtx): void {
  if (c.steps === undefined && c.epochs === undefined) {
    ctx.addIssue({ code: "custom", path: ["steps"], message: "is required (a positive integer) unless epochs is given" });
  }
}

/** The `Trainer` optimizer config of a resolved optimizer block. */
export function toOptimizerConfig(o: z.output<typeof RunOptimizerSchema>): OptimizerConfig {
  const weightDecay = o.weightDecay !== undefined ? { weightDecay: o.weightDecay } : {};
  if (o.type === "sgd") {
    return {
      type: "sgd",
      lr: o.lr,
      ...weightDecay,
      ...(o.momentum !== undefined ? { momentum: o.momentum } : {}),
      ...(o.nesterov !== undefined ? { nesterov: o.nesterov } : {}),
    };
  }
  return { type: o.type, lr: o.lr, ...weightDecay, ...(o.betas !== undefined ? { betas: o.betas } : {}), ...(o.eps !== undefined ? { eps: o.eps } : {}) };
}

/** The `Trainer` schedule config of a resolved schedule block, the decays ending at `totalSteps` (default `steps`). */
export function toScheduleConfig(s: z.output<typeof RunScheduleSchema>, steps: number): ScheduleConfig {
  const warmup = s.warmupSteps !== undefined ? { warmupSteps: s.warmupSteps } : {};
  if (s.type === "constant") return { type: "constant", ...warmup };
  return { type: s.type, ...warmup, totalSteps: s.totalSteps ?? steps, ...(s.minLrRatio !== undefined ? { minLrRatio: s.minLrRatio } : {}) };
}
