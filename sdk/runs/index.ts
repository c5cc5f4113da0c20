/**
 * posttrain's whole-run recipes: `GRPOTrainer` and `SFTTrainer` run a post-training job from one config (task or
 * examples, policy in a worker, loss, optimizer, evaluation, checkpoints, resume, a run directory with its report),
 * and `PPOTrainer` a PPO run on a classic control env. See docs/trainers.md and docs/classic-rl.md.
 *
 * @module posttrain/runs
 */
export { ClusterConfigSchema, type ClusterConfig, type ResolvedClusterConfig } from "./cluster-config.js";
export { NoCheckpointError, RunConfigMismatchError, RunDirectoryError, RunWorkerLostError, TrainerClosedError, type SetAsideCheckpoint } from "./errors.js";
export { GeneratorConfigSchema, GRPOTrainerConfigSchema, type GeneratorConfig, type GRPOTrainerConfig, type GRPOTrainerConfigInput } from "./grpo-config.js";
export { GRPOTrainer, GRPOTrainerOptionsSchema, type GRPOTrainerOptions } from "./grpo-trainer.js";
export {
  PPOEnvConfigSchema,
  PPOEvalConfigSchema,
  PPOTrainerConfigSchema,
  type PPOEnvConfig,
  type PPOEvalConfig,
  type PPOTrainerConfig,
  type PPOTrainerConfigInput,
} from "./ppo-config.js";
export { PPOTrainer, PPOTrainerOptionsSchema, type PPOTrainerOptions } from "./ppo-trainer.js";
export type { EvalRecord, StepRecord, TrainSummary } from "./records.js";
export type { MetricRecord, SampleRecord } from "../reports/report.js";
export type { TrainingRun } from "./run-base.js";
export type { RunOptions } from "./setup.js";
export { SFTTrainerConfigSchema, type SFTTrainerConfig, type SFTTrainerConfigInput } from "./sft-config.js";
export { SFTTrainer, SFTTrainerOptionsSchema, type SFTTrainerOptions } from "./sft-trainer.js";
export { LOGGER_NAMES, TrackingConfigSchema, type LoggerName, type TrackingConfig } from "./trackers/config.js";
export { TrackerError, TrackerUnavailableError } from "./trackers/errors.js";
export { TASK_TYPES, TaskConfigSchema, type TaskConfig, type TaskConfigInput, type TaskType } from "./task-config.js";
