export {
  GenerateKwargsSchema,
  TransformersWrapper,
  TransformersWrapperOptionsSchema,
  type TransformersWrapperOptions,
} from "./transformers.js";
export { vLLMWrapper, vLLMWrapperOptionsSchema, type vLLMWrapperOptions } from "./vllm.js";
export {
  LLMWrapperBase,
  type ForwardOptions,
  LLMWrapperOptionsSchema,
  type LLMWrapperOptions,
  type ResolvedLLMWrapperOptions,
} from "./llm-wrapper.js";
export { BackendUnavailableError } from "./errors.js";
export {
  ControlAgent,
  type ControlAgentConfig,
  type ControlUpdateOptions,
  type ControlUpdateResult,
} from "./control-agent.js";
export {
  explorationType,
  ProbabilisticActor,
  ProbabilisticActorOptionsSchema,
  setExplorationType,
  type ActorForwardOptions,
  type ProbabilisticActorOptions,
} from "./probabilistic-actor.js";
