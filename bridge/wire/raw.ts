/**
 * Raw tensor frames (docs/protocol.md, "Raw tensor frames"): the little-endian, row-major bytes of one unbatched
 * tensor, with its dtype and shape carried by the envelope.
 */
import { WireFormatError } from "../errors.js";
import { bytesOf, isDType, itemSize, typedArrayConstructor, viewAs, type DType, type TypedArrayOf } from "./dtypes.js";

/**
 * The frame bytes of a tensor's elements, without copying.
 *
 * @param dtype - the tensor's dtype; `data` must be the matching TypedArray (see `TypedArrayMap`).
 * @param data - the elements, row-major.
 * @throws {@link WireFormatError} when `data` is not the TypedArray of `dtype`.
 */
export function tensorToBytes<D extends DType>(dtype: D, data: TypedArrayOf<D>): Uint8Array {
  if (!isDType(dtype)) throw new WireFormatError(`raw tensor: unknown dtype ${JSON.stringify(dtype) ?? String(dtype)}`);
  const ctor = typedArrayConstructor(dtype);
  if (!(data instanceof ctor)) throw new WireFormatError(`raw tensor: dtype ${dtype} needs a ${ctor.name}`);
  return bytesOf(data);
}

/**
 * The elements of a raw tensor frame: a view of `bytes` when it is aligned to the element size, else a copy.
 *
 * @param bytes - the frame.
 * @param dtype - the dtype named by the envelope.
 * @param shape - the shape named by the envelope; the frame must hold exactly `prod(shape)` elements.
 * @throws {@link WireFormatError} for an unknown dtype, an invalid shape, or a frame of the wrong length.
 */
export function tensorFromBytes<D extends DType>(bytes: Uint8Array, dtype: D, shape: readonly number[]): TypedArrayOf<D> {
  if (!isDType(dtype)) throw new WireFormatError(`raw tensor: unknown dtype ${JSON.stringify(dtype) ?? String(dtype)}`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new WireFormatError(`raw tensor: shape must be an array of non-negative integers, found ${JSON.stringify(shape)}`);
  }
  let numel = 1;
  for (const d of shape) numel *= d;
  const expected = numel * itemSize(dtype);
  if (bytes.byteLength !== expected) {
    throw new WireFormatError(
      `raw tensor: a ${dtype} tensor of shape ${JSON.stringify(shape)} takes ${expected} bytes, the frame has ${bytes.byteLength}`,
    );
  }
  return viewAs(dtype, bytes);
}
