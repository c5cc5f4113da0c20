/**
 * Ragged tensors: TorchRL's nested (jagged) tensors, as values + offsets. Row `i` has shape
 * `[offsets[i+1] − offsets[i], ...tailShape]` and holds the elements
 * `values[offsets[i] × prod(tailShape) .. offsets[i+1] × prod(tailShape))`.
 */
import {
  allocTypedArray,
  isDType,
  typedArrayConstructor,
  type DType,
  type TypedArrayOf,
} from "../../bridge/wire/dtypes.js";
import { DTypeMismatchError, IndexOutOfRangeError, InvalidArgumentError, ShapeMismatchError } from "./errors.js";
import { checkShape, formatShape, prod, sameShape } from "./shape.js";
import { copyInto, copyOf, fillRaw, isStorageOf, toStorage, view, type ElementOf, type Scalar } from "./storage.js";
import { Tensor, type NestedValue, type TensorSource } from "./tensor.js";

/** The most elements a ragged leaf may hold along its ragged dimension (int32 offsets). */
export const MAX_RAGGED_LENGTH = 2 ** 31 - 1;

/** The result of {@link RaggedTensor.asPaddedTensor}. */
export interface PaddedTensor<D extends DType> {
  /** `[rows, length, ...tailShape]`, padded with `padValue`. */
  readonly values: Tensor<D>;
  /** `[rows, length]`, true where `values` holds a real element. */
  readonly mask: Tensor<"bool">;
}

/** Options of {@link RaggedTensor.asPaddedTensor}. */
export interface PaddingOptions {
  /** The value of padded positions (default 0). */
  readonly padValue?: Scalar;
  /** Where the padding goes: after each row's elements (`"right"`, default) or before them (`"left"`). */
  readonly paddingSide?: "right" | "left";
  /** The padded length (default: the longest row); must be at least the longest row. */
  readonly length?: number;
}

/** Options of {@link RaggedTensor.fromRows} / {@link asNestedTensor}. */
export interface NestedTensorOptions<D extends DType> {
  /** The dtype; required when `rows` is empty or holds plain arrays, checked against tensors otherwise. */
  readonly dtype?: D;
  /** The shape of each element along the ragged dimension (default `[]`, or that of the first row). */
  readonly tailShape?: readonly number[];
}

/** Lengths (one per row) or a boolean mask telling {@link RaggedTensor.fromPadded} which positions are real. */
export type MaskOrLengths = Tensor<"bool"> | Tensor<"int32"> | Tensor<"int64"> | readonly number[] | Int32Array;

function checkOffsets(offsets: Int32Array, valuesLength: number, tailElems: number): void {
  if (offsets.length === 0) throw new InvalidArgumentError("ragged offsets need rows + 1 entries, got an empty array");
  let previous = offsets[0]!;
  if (previous < 0) throw new InvalidArgumentError(`ragged offsets must be non-negative, offsets[0] = ${previous}`);
  for (let i = 1; i < offsets.length; i++) {
    const o = offsets[i]!;
    if (o < previous) throw new InvalidArgumentError(`ragged offsets must not decrease: offsets[${i - 1}] = ${previous} > offsets[${i}] = ${o}`);
    previous = o;
  }
  if (previous * tailElems > valuesLength) {
    throw new ShapeMismatchError(
      `ragged offsets reach ${previous} rows of ${tailElems} element(s) but values hold ${valuesLength} elements`,
      [previous * tailElems],
      [valuesLength],
    );
  }
}

/**
 * A batch of rows of different lengths (TorchRL's nested tensor, jagged along the first dimension of each row).
 * `offsets` has `rows + 1` non-decreasing entries and need not start at 0 (views share `values`).
 */
export class RaggedTensor<D extends DType = DType> {
  /** Element type. */
  readonly dtype: D;
  /** Elements of all rows, row after row; may extend past the last row (views). */
  readonly values: TypedArrayOf<D>;
  /** Row boundaries along the ragged dimension, `rows + 1` entries. */
  readonly offsets: Int32Array;
  /** Shape of each element along the ragged dimension (`[]` for token ids, `[vocab]` for per-token logits). */
  readonly tailShape: readonly number[];

  /**
   * Wraps values and offsets without copying. Throws INVALID_ARGUMENT for offsets that are empty, negative or
   * decreasing, SHAPE_MISMATCH when they reach past `values`.
   */
  constructor(dtype: D, values: TypedArrayOf<D>, offsets: Int32Array, tailShape: readonly number[] = []) {
    if (!isDType(dtype)) throw new InvalidArgumentError(`unknown dtype ${JSON.stringify(dtype)}`);
    if (!isStorageOf(dtype, values)) {
      throw new InvalidArgumentError(`ragged ${dtype} values must be a ${typedArrayConstructor(dtype).name}`);
    }
    if (!(offsets instanceof Int32Array)) throw new InvalidArgumentError("ragged offsets must be an Int32Array");
    const tail = checkShape(tailShape, "ragged tailShape");
    checkOffsets(offsets, values.length, prod(tail));
    this.dtype = dtype;
    this.values = values;
    this.offsets = offsets;
    this.tailShape = tail;
  }

  /**
   * A ragged tensor from a list of tensors of shape `[L_i, ...tailShape]` (copies them into one buffer).
   * Throws DTYPE_MISMATCH / SHAPE_MISMATCH naming the first row and the offending one.
   */
  static fromRows<D extends DType>(rows: readonly Tensor<D>[], options: NestedTensorOptions<D> = {}): RaggedTensor<D> {
    const first = rows[0];
    const dtype = options.dtype ?? first?.dtype;
    if (dtype === undefined) throw new InvalidArgumentError("RaggedTensor.fromRows: pass options.dtype to build from zero rows");
    if (first !== undefined && first.shape.length === 0) {
      throw new InvalidArgumentError("RaggedTensor.fromRows: rows need at least one dimension (the ragged one), rows[0] is 0-d");
    }
    const tail = options.tailShape !== undefined ? checkShape(options.tailShape, "tailShape") : (first?.shape.slice(1) ?? []);
    const tailElems = prod(tail);
    const offsets = new Int32Array(rows.length + 1);
    let total = 0;
    rows.forEach((row, i) => {
      if (row.dtype !== dtype) {
        throw new DTypeMismatchError(`RaggedTensor.fromRows: expected dtype ${dtype}, rows[${i}] has ${row.dtype}`, dtype, row.dtype);
      }
      if (row.shape.length === 0 || !sameShape(row.shape.slice(1), tail)) {
        throw new ShapeMismatchError(
          `RaggedTensor.fromRows: rows must have shape [L, ${tail.join(", ")}]${first === undefined ? "" : ` like rows[0] ${formatShape(first.shape)}`}, rows[${i}] has ${formatShape(row.shape)}`,
          [-1, ...tail],
          row.shape,
        );
      }
      total += row.shape[0]!;
      if (total > MAX_RAGGED_LENGTH) throw new InvalidArgumentError(`RaggedTensor.fromRows: more than ${MAX_RAGGED_LENGTH} elements along the ragged dimension`);
      offsets[i + 1] = total;
    });
    const values = allocTypedArray(dtype, total * tailElems);
    rows.forEach((row, i) => {
      copyInto(values, offsets[i]! * tailElems, row.data, 0, row.data.length);
    });
    return new RaggedTensor(dtype, values, offsets, tail);
  }

  /**
   * The inverse of {@link asPaddedTensor}: keeps the real elements of a padded tensor.
   * With a boolean mask of shape `[...lead, T]` (padded: `[...lead, T, ...tail]`), row `i` holds the positions where
   * the mask is true, in order (so left padding works too); rows are `prod(lead)`.
   * With lengths (one per row), row `i` holds the first `lengths[i]` positions of `padded[i]` (right padding).
   */
  static fromPadded<D extends DType>(padded: Tensor<D>, maskOrLengths: MaskOrLengths): RaggedTensor<D> {
    const isMask = maskOrLengths instanceof Tensor && maskOrLengths.dtype === "bool";
    let lead: readonly number[];
    let lengths: number[] | undefined;
    if (isMask) {
      if (maskOrLengths.shape.length === 0) throw new InvalidArgumentError("RaggedTensor.fromPadded: the mask needs at least one dimension");
      lead = maskOrLengths.shape.slice(0, -1);
    } else if (maskOrLengths instanceof Tensor) {
      lead = maskOrLengths.shape;
      lengths = maskOrLengths.toNumbers();
    } else {
      lengths = Array.from(maskOrLengths);
      lead = [lengths.length];
    }
    const timeDim = lead.length;
    const expectedPrefix = isMask ? maskOrLengths.shape : lead;
    if (padded.shape.length < timeDim + 1 || !sameShape(padded.shape.slice(0, expectedPrefix.length), expectedPrefix)) {
      throw new ShapeMismatchError(
        `RaggedTensor.fromPadded: padded shape ${formatShape(padded.shape)} must start with ${isMask ? "the mask shape" : "[rows, T] for lengths of shape"} ${formatShape(isMask ? expectedPrefix : [...lead, -1])}`,
        isMask ? expectedPrefix : [...lead, -1],
        padded.shape,
      );
    }
    const rows = prod(lead);
    const span = padded.shape[timeDim]!;
    const tail = padded.shape.slice(timeDim + 1);
    const tailElems = prod(tail);
    const offsets = new Int32Array(rows + 1);
    const mask = isMask ? (maskOrLengths.data) : undefined;
    for (let r = 0; r < rows; r++) {
      let count: number;
      if (mask !== undefined) {
        count = 0;
        for (let t = 0; t < span; t++) count += mask[r * span + t]!;
      } else {
        count = lengths![r]!;
        if (!Number.isInteger(count) || count < 0 || count > span) {
          throw new InvalidArgumentError(`RaggedTensor.fromPadded: lengths[${r}] = ${count} must be an integer in [0, ${span}] (the padded length)`);
        }
      }
      const next = offsets[r]! + count;
      if (next > MAX_RAGGED_LENGTH) throw new InvalidArgumentError(`RaggedTensor.fromPadded: more than ${MAX_RAGGED_LENGTH} elements along the ragged dimension`);
      offsets[r + 1] = next;
    }
    const values = allocTypedArray(padded.dtype, offsets[rows]! * tailElems);
    for (let r = 0; r < rows; r++) {
      const rowBase = r * span * tailElems;
      let out = offsets[r]! * tailElems;
      if (mask === undefined) {
        const n = offsets[r + 1]! - offsets[r]!;
        if (n > 0) copyInto(values, out, padded.data, rowBase, rowBase + n * tailElems);
        continue;
      }
      let t = 0;
      while (t < span) {
        if (mask[r * span + t] === 0) {
          t++;
          continue;
        }
        const start = t;
        while (t < span && mask[r * span + t] !== 0) t++;
        copyInto(values, out, padded.data, rowBase + start * tailElems, rowBase + t * tailElems);
        out += (t - start) * tailElems;
      }
    }
    return new RaggedTensor(padded.dtype, values, offsets, tail);
  }

  /** Number of rows. */
  get rows(): number {
    return this.offsets.length - 1;
  }

  /** Length of each row along the ragged dimension (a new array). */
  lengths(): Int32Array {
    const out = new Int32Array(this.rows);
    for (let i = 0; i < out.length; i++) out[i] = this.offsets[i + 1]! - this.offsets[i]!;
    return out;
  }

  /** The longest row's length (0 when there are no rows). */
  maxLength(): number {
    let max = 0;
    for (let i = 0; i < this.rows; i++) max = Math.max(max, this.offsets[i + 1]! - this.offsets[i]!);
    return max;
  }

  /** Total number of elements over all rows. */
  numel(): number {
    return (this.offsets[this.rows]! - this.offsets[0]!) * prod(this.tailShape);
  }

  /** Row `i` (negative counts from the end) as a tensor of shape `[L_i, ...tailShape]`, sharing `values`. */
  row(i: number): Tensor<D> {
    const rows = this.rows;
    if (!Number.isInteger(i) || i < -rows || i >= rows) {
      throw new IndexOutOfRangeError(`row ${i} is out of range for a ragged tensor of ${rows} rows`, i, rows);
    }
    const r = i < 0 ? i + rows : i;
    const tailElems = prod(this.tailShape);
    const start = this.offsets[r]!;
    const end = this.offsets[r + 1]!;
    return new Tensor(this.dtype, [end - start, ...this.tailShape], view(this.values, start * tailElems, end * tailElems));
  }

  /** Every row as nested arrays (see {@link Tensor.toArray}). */
  toArray(): NestedValue<ElementOf<D>>[][] {
    const out: NestedValue<ElementOf<D>>[][] = [];
    for (let i = 0; i < this.rows; i++) out.push(this.row(i).toArray());
    return out;
  }

  /**
   * The rows padded to a common length (TorchRL's `as_padded_tensor`): values `[rows, length, ...tailShape]`
   * and a bool mask `[rows, length]` that is true on real elements.
   */
  asPaddedTensor(options: PaddingOptions = {}): PaddedTensor<D> {
    const longest = this.maxLength();
    const length = options.length ?? longest;
    if (!Number.isInteger(length) || length < longest) {
      throw new InvalidArgumentError(`asPaddedTensor: length ${length} is shorter than the longest row (${longest})`);
    }
    const left = (options.paddingSide ?? "right") === "left";
    const rows = this.rows;
    const tailElems = prod(this.tailShape);
    const values = Tensor.zeros(this.dtype, [rows, length, ...this.tailShape]);
    if (options.padValue !== undefined) fillRaw(values.data, toStorage(this.dtype, options.padValue));
    const mask = Tensor.zeros("bool", [rows, length]);
    for (let r = 0; r < rows; r++) {
      const start = this.offsets[r]!;
      const n = this.offsets[r + 1]! - start;
      const shift = left ? length - n : 0;
      if (n > 0) copyInto(values.data, (r * length + shift) * tailElems, this.values, start * tailElems, (start + n) * tailElems);
      mask.data.fill(1, r * length + shift, r * length + shift + n);
    }
    return { values, mask };
  }

  /** A deep copy holding only the rows' elements, with offsets starting at 0. */
  clone(): RaggedTensor<D> {
    const base = this.offsets[0]!;
    const tailElems = prod(this.tailShape);
    const offsets = this.offsets.map((o) => o - base);
    const values = copyOf(this.values, base * tailElems, this.offsets[this.rows]! * tailElems);
    return new RaggedTensor(this.dtype, values, offsets, this.tailShape);
  }

  /** `RaggedTensor(rows=3, shape=[-1], dtype=int64)`. */
  toString(): string {
    return `RaggedTensor(rows=${this.rows}, shape=${formatShape([-1, ...this.tailShape])}, dtype=${this.dtype})`;
  }
}

/**
 * TorchRL's `as_nested_tensor`: a ragged tensor from a list of rows, each a tensor of shape `[L_i, ...tail]`
 * or plain nested arrays / TypedArrays (then `options.dtype` is required). Copies the rows into one buffer.
 */
export function asNestedTensor<D extends DType>(rows: readonly Tensor<D>[], options?: NestedTensorOptions<D>): RaggedTensor<D>;
export function asNestedTensor<D extends DType>(
  rows: readonly (Tensor<D> | TensorSource)[],
  options: NestedTensorOptions<D> & { readonly dtype: D },
): RaggedTensor<D>;
export function asNestedTensor<D extends DType>(
  rows: readonly (Tensor<D> | TensorSource)[],
  options: NestedTensorOptions<D> = {},
): RaggedTensor<D> {
  const { dtype, tailShape } = options;
  const tensors = rows.map((row, i) => {
    if (row instanceof Tensor) return row;
    if (dtype === undefined) throw new InvalidArgumentError(`asNestedTensor: rows[${i}] is not a Tensor; pass options.dtype`);
    return Tensor.from(row, tailShape === undefined ? { dtype } : { dtype, shape: [-1, ...tailShape] });
  });
  return RaggedTensor.fromRows(tensors, options);
}

/** TorchRL's `as_padded_tensor`: the same as `ragged.asPaddedTensor(options)`. */
export function asPaddedTensor<D extends DType>(ragged: RaggedTensor<D>, options: PaddingOptions = {}): PaddedTensor<D> {
  return ragged.asPaddedTensor(options);
}
