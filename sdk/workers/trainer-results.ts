/**
 * What a worker answers to the training methods (`trainer_create`, `train_step`, `compute_loss`, `trainer_state`,
 * `save_checkpoint`, `load_checkpoint`), checked with zod (a malformed reply is a `ProtocolError`).
 */
import { z } from "zod";
import { JSONValueSchema } from "../core/json.js";

/**
 * Metrics of a step or a loss evaluation, TorchRL's names: `loss` (the total), `loss_objective`,
 * `clip_fraction`, `kl_approx`, `ESS`, `entropy`, `loss_entropy`, `kl_to_ref`, `loss_kl_to_ref`, ...
 * (those the loss has), and `grad_norm` after a step (before clipping). `null` where a value is not finite.
 */
export const MetricsSchema = z.record(z.string(), z.number().nullable());

/** Metrics by name; see `MetricsSchema`. */
export type TrainMetrics = z.infer<typeof MetricsSchema>;

/** The reply of `compute_loss`. */
export const LossResultSchema = z.object({
  /** Optimizer steps taken so far. */
  step: z.number().int().nonnegative(),
  metrics: MetricsSchema,
  /** Tokens under the loss mask, over the whole batch. */
  numTokens: z.number().int().nonnegative(),
  /** Rows of the batch. */
  numSequences: z.number().int().nonnegative(),
  /** Forward passes the batch was split into (`microBatchTokens`). */
  microBatches: z.number().int().positive(),
  /** The trained model's policy version (moves on each weight sync). */
  policyVersion: z.number().int().nonnegative(),
  /** In a trainer group (`Trainer.createGroup`): the rank that answered (the counts above are the whole batch's). */
  rank: z.number().int().nonnegative().optional(),
  /** In a trainer group: the number of ranks. */
  worldSize: z.number().int().positive().optional(),
  /** In a trainer group: the tokens under the loss mask in this rank's shard. */
  localTokens: z.number().int().nonnegative().optional(),
  /** In a trainer group: the rows of this rank's shard. */
  localSequences: z.number().int().nonnegative().optional(),
});

/** The loss of a batch without a step: `LossResultSchema`. */
export type LossResult = z.infer<typeof LossResultSchema>;

/** The reply of `train_step`: the loss result plus the learning rate the step used. */
export const TrainStepResultSchema = LossResultSchema.extend({
  /** The learning rate of this step (the schedule's value before it advanced). */
  lr: z.number(),
});

/** One optimizer step's outcome: `TrainStepResultSchema`. */
export type TrainStepResult = z.infer<typeof TrainStepResultSchema>;

/** The reply of `trainer_state`. */
export const TrainerStateSchema = z.object({
  model: z.string(),
  /** Optimizer steps taken. */
  step: z.number().int().nonnegative(),
  policyVersion: z.number().int().nonnegative(),
  /** The learning rate of the next step. */
  lr: z.number(),
  trainableParameters: z.number().int().nonnegative(),
  /** The metrics of the last step (empty before the first). */
  lastMetrics: MetricsSchema,
  /** The configs as the worker holds them (camelCase JSON). */
  loss: z.record(z.string(), z.unknown()),
  optimizer: z.record(z.string(), z.unknown()),
  schedule: z.record(z.string(), z.unknown()),
  gradClip: z.number().nullable(),
  microBatchTokens: z.number().int().nullable(),
  refModel: z.string().nullable(),
  autocast: z.string().nullable(),
  lora: z.record(z.string(), z.unknown()).nullable(),
  /** The trainer group this rank belongs to (`Trainer.createGroup`), or `null` for a trainer of its own. */
  parallel: z
    .object({ strategy: z.string(), rank: z.number().int().nonnegative(), worldSize: z.number().int().positive() })
    .nullable()
    .default(null),
  /** Whether activations are recomputed in the backward (`gradientCheckpointing`). */
  gradientCheckpointing: z.boolean().default(false),
});

/** A trainer's state in its worker: `TrainerStateSchema`. */
export type TrainerState = z.infer<typeof TrainerStateSchema>;

/** The extra facts `trainer_create` answers: which inputs the loss reads from the batch. */
export const CreatedSchema = TrainerStateSchema.extend({
  needs: z.object({ oldLogProbs: z.boolean(), refLogProbs: z.boolean(), advantages: z.boolean() }),
});

/** The reply of `save_checkpoint`: the content of `trainer_state.json` and the directory. */
export const CheckpointInfoSchema = z.object({
  path: z.string(),
  step: z.number().int().nonnegative(),
  policyVersion: z.number().int().nonnegative(),
  dataPosition: JSONValueSchema,
});

/** A written checkpoint: `CheckpointInfoSchema`. */
export type CheckpointInfo = z.infer<typeof CheckpointInfoSchema>;

/** The reply of `load_checkpoint`: the restored state, the data position saved with it, the directory. */
export const RestoredSchema = TrainerStateSchema.extend({ dataPosition: JSONValueSchema, path: z.string() });

/** A trainer restored from a checkpoint: `RestoredSchema`. */
export type RestoredState = z.infer<typeof RestoredSchema>;
