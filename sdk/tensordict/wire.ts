/**
 * Conversions between TensorDict leaves and the wire data model of `bridge/wire` (internal).
 * None of them copies element data: tensors and wire columns share their TypedArrays.
 */
import type { WireDense, WireRagged } from "../../bridge/wire/index.js";
import { InvalidArgumentError } from "./errors.js";
import { RaggedTensor } from "./ragged.js";
import { Tensor } from "./tensor.js";

/** A dense leaf with `batchDims` batch dimensions as a wire column (row shape = the shape after the batch). */
export function denseToWire(tensor: Tensor, batchDims: number): WireDense {
  return { kind: "dense", dtype: tensor.dtype, rowShape: tensor.shape.slice(batchDims), data: tensor.data };
}

/** A ragged leaf as a wire column. */
export function raggedToWire(ragged: RaggedTensor): WireRagged {
  return { kind: "ragged", dtype: ragged.dtype, tailShape: ragged.tailShape, values: ragged.values, offsets: ragged.offsets };
}

/** A dense wire column as a tensor of shape `[...batchSize, ...rowShape]`. */
export function denseFromWire(column: WireDense, batchSize: readonly number[], key: string): Tensor {
  const rowShape: unknown = column.rowShape;
  if (!Array.isArray(rowShape)) throw new InvalidArgumentError(`fromWire: column ${JSON.stringify(key)} has no rowShape`);
  return new Tensor(column.dtype, [...batchSize, ...column.rowShape], column.data);
}

/** A ragged wire column as a ragged tensor. */
export function raggedFromWire(column: WireRagged): RaggedTensor {
  return new RaggedTensor(column.dtype, column.values, column.offsets, column.tailShape);
}
