export { WorkerClient } from "./client.js";
export { WorkerPool, type WorkerPoolOptions } from "./pool.js";
export {
  LoadModelOptionsSchema,
  MODEL_BACKENDS,
  MODEL_DTYPES,
  ModelInfoSchema,
  type LoadModelOptions,
  type ModelBackend,
  type ModelInfo,
} from "./models.js";
export {
  ChatTemplateOptionsSchema,
  GenerateOptionsSchema,
  ScoreOptionsSchema,
  type ChatTemplateOptions,
  type GenerateOptions,
  type ScoreOptions,
} from "./generation.js";
