/**
 * Worker clients: `WorkerPool` starts Python workers, `WorkerClient` calls their methods through the typed method
 * table (`WORKER_METHODS`). See docs/workers.md.
 */
export { WorkerClient, type MethodReply } from "./client.js";
export { WorkerPool, type RayWorkerPoolOptions, type WorkerPlacement, type WorkerPoolOptions } from "./pool.js";
export { WORKER_METHODS, type MethodArgs, type MethodResult, type PayloadShape, type WorkerMethod, type WorkerMethodName } from "./methods.js";
export {
  LoadModelOptionsSchema,
  MODEL_BACKENDS,
  MODEL_DTYPES,
  ModelInfoSchema,
  type LoadModelOptions,
  type ModelBackend,
  type ModelInfo,
} from "./models.js";
export type { WeightsDigest } from "./weight-results.js";
export {
  ChatTemplateOptionsSchema,
  GenerateOptionsSchema,
  ScoreOptionsSchema,
  type ChatTemplateOptions,
  type GenerateOptions,
  type ScoreOptions,
} from "./generation.js";
export {
  CONTROL_ACTIVATIONS,
  ControlActArgsSchema,
  ControlActionSchema,
  ControlAdvantageSchema,
  ControlCheckpointArgsSchema,
  ControlCreateArgsSchema,
  ControlCreateResultSchema,
  ControlLoadResultSchema,
  ControlLossSchema,
  ControlMLPSchema,
  ControlOptimizerSchema,
  ControlSaveResultSchema,
  ControlUpdateArgsSchema,
  ControlUpdateMetricsSchema,
  ControlUpdateResultSchema,
  EXPLORATION_TYPES,
  LOSS_CRITIC_TYPES,
  type ControlAction,
  type ControlAdvantage,
  type ControlCreateArgs,
  type ControlLoss,
  type ControlMLP,
  type ControlOptimizer,
  type ControlUpdateMetrics,
  type ExplorationType,
} from "./control.js";
