export { makeTinyModel, TinyModelOptionsSchema, type TinyModel, type TinyModelOptions } from "./tiny.js";
