/**
 * posttrain's trainers: `Trainer` (loss, optimizer and schedule in a worker), `ReferenceModel`, checkpoints,
 * and weight sync from trainer to generators. See docs/training.md.
 */
export { Trainer, type SaveCheckpointOptions, type TrainerNeeds } from "./trainer.js";
export {
  LoraSchema,
  OptimizerSchema,
  ScheduleSchema,
  TrainerOptionsSchema,
  type LoraConfig,
  type OptimizerConfig,
  type ResolvedTrainerOptions,
  type ScheduleConfig,
  type TrainerOptions,
} from "./options.js";
export {
  CheckpointInfoSchema,
  LossResultSchema,
  MetricsSchema,
  RestoredSchema,
  TrainerStateSchema,
  TrainStepResultSchema,
  type CheckpointInfo,
  type LossResult,
  type RestoredState,
  type TrainerState,
  type TrainMetrics,
  type TrainStepResult,
} from "./results.js";
export { ReferenceModel, ReferenceModelOptionsSchema, type ReferenceModelOptions } from "./reference.js";
export { NonFiniteLossError, TRAINING_ERROR_CODES, type TrainingErrorCode } from "./errors.js";
export {
  DistributedWeightSyncOptionsSchema,
  DistributedWeightSyncScheme,
  SharedWeightSyncOptionsSchema,
  SharedWeightSyncScheme,
  ZmqWeightSyncOptionsSchema,
  ZmqWeightSyncScheme,
  type DistributedWeightSyncOptions,
  type SharedWeightSyncOptions,
  type WeightEndpoint,
  type WeightSyncResult,
  type WeightSyncScheme,
  type ZmqWeightSyncOptions,
} from "./weight-sync.js";
