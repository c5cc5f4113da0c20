/**
 * Collectors (TorchRL's `LLMCollector`): run a policy in an environment and hand out the collected dialog turns as an
 * async iterable, optionally into a replay buffer, or collect into one in the background (`start`, `takeBatch`);
 * `GeneratorPool` makes several generators one policy; `SyncDataCollector` collects fixed-size batches of frames
 * from a batched control env (docs/classic-rl.md). See docs/collectors.md.
 *
 * @module posttrain/collectors
 */
export { CollectorStateError } from "./errors.js";
export { GENERATOR_KEY, GeneratorPool, GeneratorPoolOptionsSchema, type GeneratorPoolOptions, type GeneratorStats } from "./generator-pool.js";
export {
  CollectorStartOptionsSchema,
  LLMCollector,
  LLMCollectorOptionsSchema,
  TakeBatchOptionsSchema,
  type CollectorStartOptions,
  type LLMCollectorOptions,
  type LLMCollectorStats,
  type TakeBatchOptions,
  type TakenBatch,
  type WeightUpdater,
} from "./llm-collector.js";
export {
  SyncDataCollector,
  SyncDataCollectorOptionsSchema,
  type EpisodeStats,
  type SyncDataCollectorOptions,
} from "./sync-data-collector.js";
export { trajectoryBatch, TrajectoryBatchOptionsSchema, type TrajectoryBatchOptions } from "./trajectory-batch.js";
