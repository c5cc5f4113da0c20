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
