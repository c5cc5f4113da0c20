/**
 * Collectors (TorchRL's `LLMCollector`): run a policy in an environment and hand out the collected dialog turns as an
 * async iterable, optionally into a replay buffer. See docs/collectors.md.
 */
export { CollectorStateError } from "./errors.js";
export { LLMCollector, LLMCollectorOptionsSchema, type LLMCollectorOptions, type WeightUpdater } from "./llm-collector.js";
