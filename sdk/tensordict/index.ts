/**
 * posttrain's TensorDict: dense, ragged and string leaves (and those of registered leaf types) sharing a batch size,
 * with TorchRL's operations and a zero-copy bridge to the Arrow wire format. See docs/tensordict.md.
 *
 * @module posttrain/tensordict
 */
export { DTYPES, isDType, itemSize, type DType, type TypedArrayOf, type AnyTypedArray } from "../../bridge/wire/dtypes.js";
export type { WireBatch } from "../../bridge/wire/index.js";
export {
  BatchSizeMismatchError,
  DTypeMismatchError,
  IndexOutOfRangeError,
  InvalidArgumentError,
  KeyNotFoundError,
  LeafKindMismatchError,
  LeafTypeNotRegisteredError,
  PosttrainError,
  ShapeMismatchError,
  type ValueKind,
} from "./errors.js";
export {
  bfloat16BitsToNumber,
  bfloat16ToFloat32Array,
  float16BitsToNumber,
  float16ToFloat32Array,
  float32ToBfloat16Array,
  float32ToFloat16Array,
  numberToBfloat16Bits,
  numberToFloat16Bits,
} from "./float16.js";
export type { Index, IndexRange } from "./indexing.js";
export type { NestedKey } from "./keys.js";
export {
  registerLeafType,
  type LeafKind,
  type LeafType,
  type LeafValue,
  type LeafWireColumn,
  type LeafWireKind,
  type TensorDictLeaves,
} from "./leaf.js";
export {
  asNestedTensor,
  asPaddedTensor,
  MAX_RAGGED_LENGTH,
  RaggedTensor,
  type MaskOrLengths,
  type NestedTensorOptions,
  type PaddedTensor,
  type PaddingOptions,
} from "./ragged.js";
export { takeRows, type RowPlan } from "./rows.js";
export type { ElementOf, Scalar } from "./storage.js";
export { Tensor, type NestedArray, type NestedValue, type TensorFromOptions, type TensorSource } from "./tensor.js";
export {
  kindOf,
  TensorDict,
  type ApplyFunction,
  type KeysOptions,
  type TensorDictOptions,
  type TensorDictSource,
  type TensorDictValue,
  type TensorLeaf,
} from "./tensordict.js";
