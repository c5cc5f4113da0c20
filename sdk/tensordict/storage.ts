/**
 * Element-level access to the TypedArrays that hold tensor data (internal): converting JavaScript values
 * to and from each dtype's storage, and copying blocks between arrays of the same dtype.
 */
import { typedArrayConstructor, type AnyTypedArray, type DType, type TypedArrayOf } from "../../bridge/wire/dtypes.js";
import { InvalidArgumentError } from "./errors.js";
import { bfloat16BitsToNumber, float16BitsToNumber, numberToBfloat16Bits, numberToFloat16Bits } from "./float16.js";

/**
 * The JavaScript value of one element of dtype `D`: `bigint` for int64, `boolean` for bool,
 * `number` otherwise (float16/bfloat16 decoded from their bits).
 */
export type ElementOf<D extends DType> = D extends "int64" ? bigint : D extends "bool" ? boolean : number;

/** A JavaScript value accepted as a tensor element of any dtype (converted as torch would). */
export type Scalar = number | bigint | boolean;

/** The methods every TypedArray shares, with the element type erased (internal). */
interface ErasedArray {
  readonly length: number;
  [index: number]: number | bigint;
  subarray(begin?: number, end?: number): ErasedArray;
  slice(begin?: number, end?: number): ErasedArray;
  set(source: ErasedArray, offset?: number): void;
  fill(value: number | bigint, start?: number, end?: number): ErasedArray;
}

function erase(array: AnyTypedArray): ErasedArray {
  return array as unknown as ErasedArray;
}

/** True when `array` is exactly the TypedArray class that stores `dtype` (e.g. Uint16Array for bfloat16). */
export function isStorageOf<D extends DType>(dtype: D, array: unknown): array is TypedArrayOf<D> {
  return typeof array === "object" && array !== null && array.constructor === typedArrayConstructor(dtype);
}

/** True when `value` is a TypedArray (any element type; read element by element when converted). */
export function isTypedArray(value: unknown): value is AnyTypedArray {
  return ArrayBuffer.isView(value) && !(value instanceof DataView);
}

/** Reads raw element `i` of any TypedArray. */
export function readRaw(data: AnyTypedArray, i: number): number | bigint {
  return erase(data)[i]!;
}

/** Converts a JavaScript value into the raw storage value of `dtype` (number, or bigint for int64). */
export function toStorage(dtype: DType, value: Scalar): number | bigint {
  switch (dtype) {
    case "int64":
      if (typeof value === "bigint") return value;
      if (typeof value === "boolean") return value ? 1n : 0n;
      if (!Number.isFinite(value)) throw new InvalidArgumentError(`cannot store ${String(value)} as int64`);
      return BigInt(Math.trunc(value));
    case "bool":
      if (typeof value === "boolean") return value ? 1 : 0;
      return typeof value === "bigint" ? (value !== 0n ? 1 : 0) : value !== 0 ? 1 : 0;
    case "float16":
      return numberToFloat16Bits(Number(value));
    case "bfloat16":
      return numberToBfloat16Bits(Number(value));
    default:
      return Number(value);
  }
}

/** Converts a raw storage value of `dtype` into its JavaScript value. */
export function fromStorage<D extends DType>(dtype: D, raw: number | bigint): ElementOf<D> {
  let out: Scalar;
  switch (dtype) {
    case "float16":
      out = float16BitsToNumber(Number(raw));
      break;
    case "bfloat16":
      out = bfloat16BitsToNumber(Number(raw));
      break;
    case "bool":
      out = raw !== 0;
      break;
    default:
      out = raw;
  }
  return out as ElementOf<D>;
}

/** Reads element `i` of `data` as a JavaScript value. */
export function readElement<D extends DType>(dtype: D, data: TypedArrayOf<D>, i: number): ElementOf<D> {
  return fromStorage(dtype, erase(data)[i]!);
}

/** Reads element `i` of `data` as a number (int64 through `Number()`, which may round beyond 2^53). */
export function readNumber(dtype: DType, data: AnyTypedArray, i: number): number {
  const raw = erase(data)[i]!;
  if (dtype === "float16") return float16BitsToNumber(Number(raw));
  if (dtype === "bfloat16") return bfloat16BitsToNumber(Number(raw));
  return Number(raw);
}

/** Writes a JavaScript value into element `i` of `data`. */
export function writeElement(dtype: DType, data: AnyTypedArray, i: number, value: Scalar): void {
  erase(data)[i] = toStorage(dtype, value);
}

/** Fills `data[start, end)` with the storage value `raw`. */
export function fillRaw(data: AnyTypedArray, raw: number | bigint, start?: number, end?: number): void {
  erase(data).fill(raw, start, end);
}

/** A zero-copy view of `data[start, end)`. */
export function view<A extends AnyTypedArray>(data: A, start: number, end: number): A {
  return erase(data).subarray(start, end) as unknown as A;
}

/** A copy of `data[start, end)` in a new buffer. */
export function copyOf<A extends AnyTypedArray>(data: A, start = 0, end = data.length): A {
  return erase(data).slice(start, end) as unknown as A;
}

/** Copies `source[start, end)` into `target` at `offset`; both arrays hold the same dtype. */
export function copyInto(target: AnyTypedArray, offset: number, source: AnyTypedArray, start: number, end: number): void {
  if (end - start === 1) {
    erase(target)[offset] = erase(source)[start]!;
    return;
  }
  erase(target).set(erase(source).subarray(start, end), offset);
}

/** Assigns raw element `source[j]` to `target[i]` (same dtype). */
export function copyElement(target: AnyTypedArray, i: number, source: AnyTypedArray, j: number): void {
  erase(target)[i] = erase(source)[j]!;
}
