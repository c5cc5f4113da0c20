/**
 * The wire data model and the Arrow IPC codec of TensorDict payloads (docs/protocol.md).
 */
export * from "./dtypes.js";
export type * from "./types.js";
export { encodeBatch, encodeBatchParts, SPLIT_MIN_BYTES, FIXED_SHAPE_TENSOR, MAX_INT32, META_KEYS, WIRE_FORMAT_VERSION } from "./encode.js";
export { decodeBatch } from "./decode.js";
export { tensorFromBytes, tensorToBytes } from "./raw.js";
