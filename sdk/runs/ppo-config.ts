/**
 * The run config of {@link PPOTrainer} (YAML or JSON with these camelCase keys), checked with zod: an error names the
 * field, the value and what is allowed. Defaults and meanings: docs/classic-rl.md.
 */
import { z } from "zod";
import { BUILT_IN_ENV_IDS } from "../envs/env-factory.js";
import { ClipPPOLossOptionsSchema, GAEOptionsSchema } from "../objectives/ppo.js";
import { ControlMLPSchema, ControlOptimizerSchema } from "../workers/control.js";
import { checkClusterConfig, ClusterConfigSchema } from "./cluster-config.js";
import { CheckpointConfigSchema, SupervisionConfigSchema } from "./config-blocks.js";
import { LoggersSchema, TrackingConfigSchema } from "./trackers/config.js";

/**
 * The env block: `name` (`"CartPole-v1"` or `"Pendulum-v1"`), `numEnvs` copies (default 8) stepped together, in this
 * thread (`parallel: false`, default: `SerialEnv`) or in worker threads (`ParallelEnv`), and `maxEpisodeSteps` (default:
 * Gymnasium's time limit, 500 for CartPole, 200 for Pendulum).
 */
export const PPOEnvConfigSchema = z.strictObject({
  name: z.enum(BUILT_IN_ENV_IDS),
  numEnvs: z.number().int().min(1).default(8),
  parallel: z.boolean().default(false),
  maxEpisodeSteps: z.number().int().min(1).optional(),
});

/** The env block (input form). */
export type PPOEnvConfig = z.input<typeof PPOEnvConfigSchema>;

/** An MLP block: the worker's `ControlMLPSchema`, `hidden` defaulting to `[64, 64]` and `activation` to `"tanh"`. */
const MLPBlockSchema = z.strictObject({
  hidden: ControlMLPSchema.shape.hidden.default([64, 64]),
  activation: ControlMLPSchema.shape.activation.default("tanh"),
});

const adam = ControlOptimizerSchema.shape;
/** The optimizer block: the worker's `ControlOptimizerSchema` (Adam) less `type`, with its defaults. */
const OptimizerBlockSchema = z.strictObject({
  lr: adam.lr.default(3e-4),
  eps: adam.eps.default(1e-8),
  weightDecay: adam.weightDecay.default(0),
});

/**
 * Evaluation every `every` steps (0 = off, default): `episodes` episodes (default 20) of the deterministic policy (the
 * mode of its distribution) on fresh copies of the env, seeded the same at every evaluation, each cut at `maxSteps`
 * (default: the env's `maxEpisodeSteps`). Logs `eval_return_mean`, `eval_return_std` and `eval_length_mean`.
 */
export const PPOEvalConfigSchema = z.strictObject({
  every: z.number().int().min(0).default(0),
  episodes: z.number().int().min(1).default(20),
  maxSteps: z.number().int().min(1).optional(),
});

/** The eval block (input form). */
export type PPOEvalConfig = z.input<typeof PPOEvalConfigSchema>;

/** The run config of `PPOTrainer`. */
export const PPOTrainerConfigSchema = z
  .strictObject({
    env: PPOEnvConfigSchema,
    /** The policy network (default `{ hidden: [64, 64], activation: "tanh" }`). */
    actor: MLPBlockSchema.prefault({}),
    /** The value network (default `{ hidden: [64, 64], activation: "tanh" }`). */
    critic: MLPBlockSchema.prefault({}),
    /** `ClipPPOLoss` fields (TorchRL's defaults). */
    loss: ClipPPOLossOptionsSchema.prefault({}),
    /** `GAE` fields (TorchRL's defaults: gamma 0.99, lmbda 0.95). */
    advantage: GAEOptionsSchema.prefault({}),
    /** Adam over the actor's and critic's parameters: `lr` (default 3e-4), `eps` (default 1e-8), `weightDecay` (default 0). */
    optimizer: OptimizerBlockSchema.prefault({}),
    /** Gradient-norm clipping of each optimizer step (default 1.0; `null` = off). */
    maxGradNorm: z.number().gt(0).nullable().default(1.0),
    /** Frames (env steps summed over the copies) collected per step: a multiple of `env.numEnvs` (default 2048). */
    framesPerBatch: z.number().int().min(1).default(2048),
    /** Frames of the whole run, a multiple of `framesPerBatch`: the run takes `totalFrames / framesPerBatch` steps. */
    totalFrames: z.number().int().min(1).optional(),
    /** The step the run ends at, instead of `totalFrames` (wins when both are given; `--steps` sets it). */
    steps: z.number().int().min(1).optional(),
    /** Passes over each collected batch (default 10). */
    epochs: z.number().int().min(1).default(10),
    /** Rows per optimizer step (default 64); at most `framesPerBatch`. */
    miniBatchSize: z.number().int().min(1).default(64),
    eval: PPOEvalConfigSchema.prefault({}),
    checkpoint: CheckpointConfigSchema.prefault({}),
    /** Restarts after a worker failure (default `{ maxRestarts: 3, backoffMs: 1000 }`). */
    supervision: SupervisionConfigSchema.prefault({}),
    /** Where the agent computes: `"cpu"` (default: small MLPs are fastest there), `"cuda"` or `"auto"`. */
    device: z.enum(["auto", "cpu", "cuda"]).default("cpu"),
    /** Where the metrics go besides `metrics.jsonl` (always written): default `["jsonl"]` (docs/trackers.md). */
    loggers: LoggersSchema,
    /** The tracker runs' project, name and folder (docs/trackers.md). */
    tracking: TrackingConfigSchema.prefault({}),
    /** Where the worker runs: `{ type: "local" }` (default) or `{ type: "ray", ... }` (docs/scaling.md). */
    cluster: ClusterConfigSchema.prefault({ type: "local" }),
    /** Seeds the networks' initialisation, the action sampling and the envs (copy i gets `seed + i`; default 0). */
    seed: z.number().int().nonnegative().default(0),
    runDir: z.string().min(1),
  })
  .superRefine((c, ctx) => {
    if (c.framesPerBatch % c.env.numEnvs !== 0) {
      ctx.addIssue({
        code: "custom",
        path: ["framesPerBatch"],
        message: `must be a multiple of env.numEnvs (${String(c.env.numEnvs)}): each step collects framesPerBatch / numEnvs steps of every copy`,
      });
    }
    if (c.miniBatchSize > c.framesPerBatch) {
      ctx.addIssue({ code: "custom", path: ["miniBatchSize"], message: `must be at most framesPerBatch (${String(c.framesPerBatch)})` });
    }
    if (c.totalFrames === undefined && c.steps === undefined) {
      ctx.addIssue({ code: "custom", path: ["totalFrames"], message: "is required (a multiple of framesPerBatch) unless steps is given" });
    }
    if (c.totalFrames !== undefined && c.steps === undefined && c.totalFrames % c.framesPerBatch !== 0) {
      ctx.addIssue({ code: "custom", path: ["totalFrames"], message: `must be a multiple of framesPerBatch (${String(c.framesPerBatch)})` });
    }
    checkClusterConfig(c.cluster, c.supervision.maxRestarts, { trainer: c.device }, ctx);
  });

/** The run config of `PPOTrainer` (input form). */
export type PPOTrainerConfigInput = z.input<typeof PPOTrainerConfigSchema>;

/** The run config of `PPOTrainer` with every default filled in. */
export type PPOTrainerConfig = z.output<typeof PPOTrainerConfigSchema>;

/** The steps of a run: `steps`, else `totalFrames / framesPerBatch`. */
export function ppoSteps(c: PPOTrainerConfig): number {
  return c.steps ?? Math.floor((c.totalFrames ?? c.framesPerBatch) / c.framesPerBatch);
}
