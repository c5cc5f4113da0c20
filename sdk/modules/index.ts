export {
  GenerateKwargsSchema,
  TransformersWrapper,
  TransformersWrapperOptionsSchema,
  type TransformersWrapperOptions,
} from "./transformers.js";
