/** The project's tiny random model, built offline for tests, examples and the demo. See docs/models.md. */
export {
  makeTinyModel,
  TinyModelConfigSchema,
  TinyModelOptionsSchema,
  type TinyModel,
  type TinyModelConfig,
  type TinyModelOptions,
} from "./tiny.js";
