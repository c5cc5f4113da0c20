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
export {
  EvalConfigSchema,
  GRPOTrainerConfigSchema,
  LOSS_VARIANTS,
  LogConfigSchema,
  lossOf,
  RunLossSchema,
  SamplingConfigSchema,
  WorkersConfigSchema,
  type GRPOTrainerConfig,
  type GRPOTrainerConfigInput,
  type LossVariant,
  type RunLossConfig,
} from "./grpo-config.js";
export { GRPOTrainer, GRPOTrainerOptionsSchema, type GRPOTrainerOptions } from "./grpo-trainer.js";
export { completionLengths, groupAdvantages, meanStd, rewardMeans, zeroStdFraction } from "./grpo-metrics.js";
export { evaluateOnEnv, grpoStep, promptTexts, type GrpoStepContext } from "./grpo-step.js";
export {
  SFTTrainerConfigSchema,
  SftDataConfigSchema,
  SftDatasetDataSchema,
  SftDigitSortDataSchema,
  SftEvalConfigSchema,
  type SFTTrainerConfig,
  type SFTTrainerConfigInput,
  type SftDataConfigInput,
} from "./sft-config.js";
export { SFTTrainer, SFTTrainerOptionsSchema, type SFTTrainerOptions } from "./sft-trainer.js";
export { SftBatches, loadConversations, renderConversations, type SftPosition } from "./sft-data.js";
export {
  CheckpointConfigSchema,
  ModelConfigSchema,
  RunOptimizerSchema,
  RunScheduleSchema,
  TinyModelConfigSchema,
  toOptimizerConfig,
  toScheduleConfig,
  type CheckpointConfig,
  type ModelConfig,
  type RunOptimizerConfig,
  type RunScheduleConfig,
} from "./run-config.js";
export { RunDirectory, type RunCheckpoint } from "./run-directory.js";
export { RunConfigMismatchError, RunDirectoryError, TrainerClosedError } from "./run-errors.js";
export type { EvalRecord, StepRecord, TrainSummary } from "./run-records.js";
export { formatStepLine, RunLoop, type RunLoopOptions, type StepOutcome } from "./run-loop.js";
export { parseRunConfig, POLICY_MODEL, RunOptionsSchema, type RunOptions } from "./run-setup.js";
export {
  CountdownTaskSchema,
  DatasetTaskSchema,
  DigitSortTaskSchema,
  Gsm8kTaskSchema,
  IFEvalTaskSchema,
  MathTaskSchema,
  TASK_TYPES,
  TaskConfigSchema,
  type TaskConfig,
  type TaskConfigInput,
  type TaskType,
} from "./task-config.js";
export { createTaskEnv, EXACT_MATCH_REWARD, type TaskEnv, type TaskEnvOptions } from "./task-factory.js";
