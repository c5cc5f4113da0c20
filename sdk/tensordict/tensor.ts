/**
 * A dense tensor: a dtype, a shape and a row-major TypedArray (see `bridge/wire/dtypes.ts` for the array of
 * each dtype: int64 is a BigInt64Array, float16/bfloat16 are Uint16Array bit patterns, bool is a Uint8Array of 0/1).
 */
import {
  allocTypedArray,
  isDType,
  typedArrayConstructor,
  type AnyTypedArray,
  type DType,
  type TypedArrayOf,
} from "../../bridge/wire/dtypes.js";
import { IndexOutOfRangeError, InvalidArgumentError, ShapeMismatchError } from "./errors.js";
import { bfloat16ToFloat32Array, float16ToFloat32Array } from "./float16.js";
import { checkShape, formatShape, prod, resolveShape } from "./shape.js";
import {
  copyOf,
  fillRaw,
  isStorageOf,
  isTypedArray,
  readElement,
  readNumber,
  readRaw,
  toStorage,
  writeElement,
  type ElementOf,
  type Scalar,
} from "./storage.js";

/** Arbitrarily nested readonly arrays of `T` (the input form of {@link Tensor.from}). */
export type NestedArray<T> = readonly (T | NestedArray<T>)[];

type Nest0<T> = T | unknown[];
type Nest1<T> = T | Nest0<T>[];
type Nest2<T> = T | Nest1<T>[];
type Nest3<T> = T | Nest2<T>[];
type Nest4<T> = T | Nest3<T>[];
type Nest5<T> = T | Nest4<T>[];
type Nest6<T> = T | Nest5<T>[];
type Nest7<T> = T | Nest6<T>[];

/**
 * `T` or nested arrays of `T` (the elements of {@link Tensor.toArray}'s result). The type spells out 8 levels of
 * nesting (deeper levels are `unknown[]`) rather than recursing, so that idioms such as `.flat(Infinity)` type-check.
 */
export type NestedValue<T> = Nest7<T>;

/** What {@link Tensor.from} accepts: a scalar, nested arrays of scalars, or a TypedArray. */
export type TensorSource = Scalar | NestedArray<Scalar> | AnyTypedArray;

/** Options of {@link Tensor.from}. */
export interface TensorFromOptions<D extends DType> {
  /** The element type of the new tensor. */
  readonly dtype: D;
  /** The shape (at most one size may be -1); defaults to the nesting of the input (`[length]` for a TypedArray). */
  readonly shape?: readonly number[];
}

function describeArray(data: unknown): string {
  if (data === null || typeof data !== "object") return typeof data;
  return data.constructor.name;
}

/** Writes nested arrays of scalars into `out` (row-major), checking that they are rectangular with `shape`. */
function fillNested(values: unknown, shape: readonly number[], depth: number, out: AnyTypedArray, dtype: DType, pos: number): number {
  if (depth === shape.length) {
    if (typeof values !== "number" && typeof values !== "bigint" && typeof values !== "boolean") {
      if (Array.isArray(values)) {
        throw new ShapeMismatchError(
          `Tensor.from: nested arrays are not rectangular: found an array at depth ${depth}, where shape ${formatShape(shape)} has scalars`,
          shape,
          [...shape, values.length],
        );
      }
      throw new InvalidArgumentError(`Tensor.from: elements must be numbers, bigints or booleans, got ${describeArray(values)}`);
    }
    writeElement(dtype, out, pos, values);
    return pos + 1;
  }
  const expected = shape[depth]!;
  if (!Array.isArray(values) || values.length !== expected) {
    const found = Array.isArray(values) ? `${values.length} elements` : "a scalar";
    const actual = shape.slice(0, depth).concat(Array.isArray(values) ? [values.length] : []);
    throw new ShapeMismatchError(
      `Tensor.from: nested arrays are not rectangular: expected ${expected} elements at depth ${depth} (shape ${formatShape(shape)}), found ${found}`,
      shape,
      actual,
    );
  }
  const items: unknown[] = values;
  let next = pos;
  for (const item of items) next = fillNested(item, shape, depth + 1, out, dtype, next);
  return next;
}

function inferNestedShape(values: NestedArray<Scalar>): number[] {
  const shape: number[] = [];
  let cursor: unknown = values;
  while (Array.isArray(cursor)) {
    const level: unknown[] = cursor;
    shape.push(level.length);
    if (level.length === 0) break;
    cursor = level[0];
  }
  return shape;
}

/**
 * A dense tensor of dtype `D`: `shape` is the full shape, `data` holds `prod(shape)` elements in row-major order.
 * Tensors are cheap handles: {@link Tensor.reshape} and TensorDict views share `data`; {@link Tensor.clone} copies it.
 */
export class Tensor<D extends DType = DType> {
  /** Element type. */
  readonly dtype: D;
  /** Full shape (for a TensorDict leaf it starts with the batch size). */
  readonly shape: readonly number[];
  /** Row-major elements in the TypedArray of `dtype` (raw bits for float16/bfloat16, 0/1 bytes for bool). */
  readonly data: TypedArrayOf<D>;

  /**
   * Wraps `data` without copying. Throws INVALID_ARGUMENT when `data` is not the TypedArray class of `dtype`,
   * SHAPE_MISMATCH when its length is not `prod(shape)`.
   */
  constructor(dtype: D, shape: readonly number[], data: TypedArrayOf<D>) {
    if (!isDType(dtype)) throw new InvalidArgumentError(`unknown dtype ${JSON.stringify(dtype)}`);
    const checked = checkShape(shape, "Tensor shape");
    if (!isStorageOf(dtype, data)) {
      throw new InvalidArgumentError(
        `a ${dtype} tensor stores its data in a ${typedArrayConstructor(dtype).name}, got ${describeArray(data)}`,
      );
    }
    const numel = prod(checked);
    if (data.length !== numel) {
      throw new ShapeMismatchError(
        `tensor data has ${data.length} elements but shape ${formatShape(checked)} holds ${numel}`,
        checked,
        [data.length],
      );
    }
    this.dtype = dtype;
    this.shape = checked;
    this.data = data;
  }

  /**
   * A tensor from a scalar, nested arrays or a TypedArray.
   * A TypedArray that is already the storage class of `dtype` (e.g. Float32Array for float32, Uint16Array bits for
   * bfloat16) is used as is, without copying; any other input is converted element by element, as torch converts:
   * numbers to float16/bfloat16 round to nearest, to integers truncate toward zero, to bool test `!== 0`.
   */
  static from<D extends DType>(values: TensorSource, options: TensorFromOptions<D>): Tensor<D> {
    const { dtype } = options;
    if (!isDType(dtype)) throw new InvalidArgumentError(`Tensor.from: unknown dtype ${JSON.stringify(dtype)}`);
    let data: TypedArrayOf<D>;
    let inferred: readonly number[];
    if (isTypedArray(values)) {
      inferred = [values.length];
      if (isStorageOf(dtype, values) && (dtype !== "bool" || (values as Uint8Array).every((v) => v <= 1))) {
        data = values;
      } else {
        data = allocTypedArray(dtype, values.length);
        for (let i = 0; i < values.length; i++) writeElement(dtype, data, i, readRaw(values, i));
      }
    } else if (Array.isArray(values)) {
      const nested = values as NestedArray<Scalar>;
      inferred = inferNestedShape(nested);
      data = allocTypedArray(dtype, prod(inferred));
      fillNested(nested, inferred, 0, data, dtype, 0);
    } else if (typeof values === "number" || typeof values === "bigint" || typeof values === "boolean") {
      inferred = [];
      data = allocTypedArray(dtype, 1);
      writeElement(dtype, data, 0, values);
    } else {
      throw new InvalidArgumentError(`Tensor.from: expected a scalar, nested arrays or a TypedArray, got ${describeArray(values)}`);
    }
    const shape = options.shape === undefined ? inferred : resolveShape(options.shape, data.length, inferred, "Tensor.from");
    return new Tensor(dtype, shape, data);
  }

  /** A tensor of zeros. */
  static zeros<D extends DType>(dtype: D, shape: readonly number[]): Tensor<D> {
    if (!isDType(dtype)) throw new InvalidArgumentError(`unknown dtype ${JSON.stringify(dtype)}`);
    const checked = checkShape(shape, "Tensor.zeros shape");
    return new Tensor(dtype, checked, allocTypedArray(dtype, prod(checked)));
  }

  /** A tensor of ones. */
  static ones<D extends DType>(dtype: D, shape: readonly number[]): Tensor<D> {
    return Tensor.full(dtype, shape, 1);
  }

  /** A tensor filled with `value` (converted to `dtype`). */
  static full<D extends DType>(dtype: D, shape: readonly number[], value: Scalar): Tensor<D> {
    const tensor = Tensor.zeros(dtype, shape);
    fillRaw(tensor.data, toStorage(dtype, value));
    return tensor;
  }

  /** Number of dimensions. */
  get ndim(): number {
    return this.shape.length;
  }

  /** Number of elements, `prod(shape)`. */
  numel(): number {
    return this.data.length;
  }

  /** The same data under another shape (one size may be -1); shares `data`. Throws SHAPE_MISMATCH naming both shapes. */
  reshape(shape: readonly number[]): Tensor<D> {
    return new Tensor(this.dtype, resolveShape(shape, this.numel(), this.shape, "Tensor.reshape"), this.data);
  }

  /** A deep copy (new data buffer). */
  clone(): Tensor<D> {
    return new Tensor(this.dtype, this.shape, copyOf(this.data));
  }

  /**
   * The elements as nested arrays following `shape`: numbers, bigints for int64, booleans for bool;
   * float16/bfloat16 decoded to numbers. A 0-d tensor gives a one-element array `[x]` (use {@link item} for `x`).
   */
  toArray(): NestedValue<ElementOf<D>>[] {
    if (this.shape.length === 0) return [readElement(this.dtype, this.data, 0)];
    const build = (depth: number, offset: number): NestedValue<ElementOf<D>>[] => {
      const size = this.shape[depth]!;
      const stride = prod(this.shape.slice(depth + 1));
      const out: NestedValue<ElementOf<D>>[] = new Array<NestedValue<ElementOf<D>>>(size);
      for (let i = 0; i < size; i++) {
        out[i] = depth === this.shape.length - 1
          ? readElement(this.dtype, this.data, offset + i)
          : build(depth + 1, offset + i * stride);
      }
      return out;
    };
    return build(0, 0);
  }

  /** The single element of a one-element tensor; throws INVALID_ARGUMENT otherwise. */
  item(): ElementOf<D> {
    if (this.numel() !== 1) {
      throw new InvalidArgumentError(`item() needs a tensor with one element, got shape ${formatShape(this.shape)}`);
    }
    return readElement(this.dtype, this.data, 0);
  }

  /** The element at a full index (one integer per dimension, negative counts from the end). */
  at(...index: number[]): ElementOf<D> {
    if (index.length !== this.shape.length) {
      throw new InvalidArgumentError(`at() needs ${this.shape.length} indices for shape ${formatShape(this.shape)}, got ${index.length}`);
    }
    let flat = 0;
    index.forEach((raw, d) => {
      const size = this.shape[d]!;
      if (!Number.isInteger(raw) || raw < -size || raw >= size) {
        throw new IndexOutOfRangeError(`index ${raw} is out of range for dimension ${d} of size ${size}`, raw, size);
      }
      flat = flat * size + (raw < 0 ? raw + size : raw);
    });
    return readElement(this.dtype, this.data, flat);
  }

  /**
   * The elements as a new Float32Array: float16/bfloat16 decoded from their bits, bool as 0/1,
   * integers (int64 included) converted with `Number()`, so large values round.
   */
  toFloat32Array(): Float32Array {
    const { dtype, data } = this;
    if (dtype === "float16") return float16ToFloat32Array(data as Uint16Array);
    if (dtype === "bfloat16") return bfloat16ToFloat32Array(data as Uint16Array);
    if (dtype === "int64") return Float32Array.from(data as BigInt64Array, Number);
    return Float32Array.from(data as Exclude<AnyTypedArray, BigInt64Array>);
  }

  /** The elements as a new array of JavaScript numbers (int64 through `Number()`, which rounds beyond 2^53). */
  toNumbers(): number[] {
    const out = new Array<number>(this.data.length);
    for (let i = 0; i < out.length; i++) out[i] = readNumber(this.dtype, this.data, i);
    return out;
  }

  /**
   * This tensor converted to another dtype (a new buffer), as torch's `tensor.to(dtype)`: floats to integers
   * truncate toward zero, anything to bool tests `!== 0`. Returns `this` when the dtype is already `dtype`.
   */
  to<E extends DType>(dtype: E): Tensor<E> {
    const target: DType = dtype;
    if (target === this.dtype) return this as unknown as Tensor<E>;
    const out = allocTypedArray(dtype, this.data.length);
    for (let i = 0; i < out.length; i++) writeElement(dtype, out, i, readElement(this.dtype, this.data, i));
    return new Tensor(dtype, this.shape, out);
  }

  /** `Tensor(shape=[2, 3], dtype=float32)`. */
  toString(): string {
    return `Tensor(shape=${formatShape(this.shape)}, dtype=${this.dtype})`;
  }
}
