/**
 * Element types that cross the wire, and the TypedArray that holds each one in TypeScript.
 * Names follow torch (`float32`, `bfloat16`, ...). See docs/protocol.md for the Arrow storage of each.
 */
export const DTYPES = [
  "float32",
  "float64",
  "float16",
  "bfloat16",
  "int64",
  "int32",
  "int16",
  "int8",
  "uint8",
  "bool",
] as const;

/** A tensor element type, named as in torch. */
export type DType = (typeof DTYPES)[number];

/** The TypedArray that holds the elements of each dtype (float16/bfloat16 as raw 16-bit patterns, bool as bytes). */
export interface TypedArrayMap {
  float32: Float32Array;
  float64: Float64Array;
  float16: Uint16Array;
  bfloat16: Uint16Array;
  int64: BigInt64Array;
  int32: Int32Array;
  int16: Int16Array;
  int8: Int8Array;
  uint8: Uint8Array;
  bool: Uint8Array;
}

/** The TypedArray of a given dtype. */
export type TypedArrayOf<D extends DType> = TypedArrayMap[D];

/** Any TypedArray that can hold tensor elements. */
export type AnyTypedArray = TypedArrayMap[DType];

type TypedArrayConstructorOf<D extends DType> = {
  new (length: number): TypedArrayOf<D>;
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): TypedArrayOf<D>;
  readonly BYTES_PER_ELEMENT: number;
};

const CONSTRUCTORS: { readonly [D in DType]: TypedArrayConstructorOf<D> } = {
  float32: Float32Array,
  float64: Float64Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
  int64: BigInt64Array,
  int32: Int32Array,
  int16: Int16Array,
  int8: Int8Array,
  uint8: Uint8Array,
  bool: Uint8Array,
};

/** True when `value` names a supported dtype. */
export function isDType(value: unknown): value is DType {
  return typeof value === "string" && (DTYPES as readonly string[]).includes(value);
}

/** Bytes per element of a dtype. */
export function itemSize(dtype: DType): number {
  return CONSTRUCTORS[dtype].BYTES_PER_ELEMENT;
}

/** The TypedArray constructor for a dtype. */
export function typedArrayConstructor<D extends DType>(dtype: D): TypedArrayConstructorOf<D> {
  return CONSTRUCTORS[dtype];
}

/** A new zero-filled array of `length` elements of `dtype`. */
export function allocTypedArray<D extends DType>(dtype: D, length: number): TypedArrayOf<D> {
  return new CONSTRUCTORS[dtype](length);
}

/**
 * A view of `bytes` as elements of `dtype`, without copying when `bytes` is aligned to the element size;
 * otherwise the bytes are copied into a new aligned array.
 */
export function viewAs<D extends DType>(dtype: D, bytes: Uint8Array): TypedArrayOf<D> {
  const ctor = CONSTRUCTORS[dtype];
  const size = ctor.BYTES_PER_ELEMENT;
  if (bytes.byteLength % size !== 0) {
    throw new RangeError(`${bytes.byteLength} bytes is not a whole number of ${dtype} elements (${size} bytes each)`);
  }
  const length = bytes.byteLength / size;
  if (bytes.byteOffset % size === 0) return new ctor(bytes.buffer, bytes.byteOffset, length);
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new ctor(copy.buffer, 0, length);
}

/** The bytes of a TypedArray, without copying. */
export function bytesOf(array: AnyTypedArray): Uint8Array {
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}
