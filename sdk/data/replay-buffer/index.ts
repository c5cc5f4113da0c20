/**
 * The replay buffer (TorchRL's `ReplayBuffer`): storages, samplers, writers, transforms (`MCAdvantage`,
 * `TopKRewardSelector`) and Arrow IPC save/load. See docs/replay-buffer.md.
 */
export { IncompleteTrajectoryError, ReplayBufferEmptyError, ReplayBufferFileError } from "./errors.js";
export {
  MCAdvantage,
  MCAdvantageOptionsSchema,
  type MCAdvantageOptions,
  type MCAdvantageStats,
} from "./mc-advantage.js";
export { PrioritizedSampler, PrioritizedSamplerOptionsSchema, type PrioritizedSamplerOptions } from "./prioritized.js";
export type { Reduction } from "./reduce.js";
export {
  REPLAY_BUFFER_FILE_VERSION,
  ReplayBuffer,
  ReplayBufferOptionsSchema,
  type LoadOptions,
  type ReplayBufferOptions,
} from "./replay-buffer.js";
export { SeededRNG } from "./rng.js";
export {
  RandomSampler,
  Sampler,
  SamplerWithoutReplacement,
  SamplerWithoutReplacementOptionsSchema,
  type SampleResult,
  type SamplerKind,
  type SamplerWithoutReplacementOptions,
} from "./samplers.js";
export type { LazyStack } from "./collate.js";
export { LazyStackStorage, ListStorage, Storage, StorageOptionsSchema, type StorageKind, type StorageOptions } from "./storage.js";
export { TopKRewardSelector, TopKRewardSelectorOptionsSchema, type TopKRewardSelectorOptions } from "./topk.js";
export type { ReplayBufferTransform } from "./transform.js";
export {
  MaxValueWriterOptionsSchema,
  RoundRobinWriter,
  TensorDictMaxValueWriter,
  Writer,
  type MaxValueWriterOptions,
  type WriterKind,
} from "./writers.js";
