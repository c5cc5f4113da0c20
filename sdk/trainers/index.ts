/**
 * posttrain's worker-bound training parts: `Trainer` (loss, optimizer and schedule in a worker, or data-parallel over
 * a group of workers), `ReferenceModel`, checkpoints, and weight sync from trainer to generators. See
 * docs/training.md. The whole-run recipes (`GRPOTrainer`, `SFTTrainer`) are in `posttrain/runs`.
 *
 * @module posttrain/trainers
 */
export { NonFiniteLossError, TRAINING_ERROR_CODES, type TrainingErrorCode } from "./errors.js";
export {
  LoraSchema,
  OptimizerSchema,
  PARALLEL_STRATEGIES,
  ParallelOptionsSchema,
  ScheduleSchema,
  TrainerGroupOptionsSchema,
  TrainerOptionsSchema,
  type LoraConfig,
  type OptimizerConfig,
  type ParallelOptions,
  type ParallelStrategy,
  type ResolvedParallelOptions,
  type ResolvedTrainerOptions,
  type ScheduleConfig,
  type TrainerGroupOptions,
  type TrainerOptions,
} from "./options.js";
export { ReferenceModel, ReferenceModelOptionsSchema, type ReferenceModelOptions } from "./reference.js";
export { shardByTokens } from "./shard.js";
export { Trainer, type SaveCheckpointOptions, type TrainerNeeds } from "./trainer.js";
export {
  DistributedWeightSyncOptionsSchema,
  DistributedWeightSyncScheme,
  SharedWeightSyncOptionsSchema,
  SharedWeightSyncScheme,
  ZMQWeightSyncOptionsSchema,
  ZMQWeightSyncScheme,
  type DistributedWeightSyncOptions,
  type SharedWeightSyncOptions,
  type StartedWeightSync,
  type WeightEndpoint,
  type WeightSyncResult,
  type WeightSyncScheme,
  type ZMQWeightSyncOptions,
} from "./weight-sync.js";
export type { CheckpointInfo, LossResult, RestoredState, TrainerState, TrainMetrics, TrainStepResult } from "../workers/trainer-results.js";
export * from "./deprecated.js";
