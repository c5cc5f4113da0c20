/**
 * Index expressions over batch dimensions and the row plans they select (internal apart from the types).
 */
import { IndexOutOfRangeError, InvalidArgumentError, ShapeMismatchError } from "./errors.js";
import { RowPlanBuilder, type RowPlan } from "./rows.js";
import { formatShape, normalizeDim, prod, sameShape } from "./shape.js";
import { Tensor } from "./tensor.js";

/**
 * A Python-style slice over one batch dimension: `start` (default 0) and `stop` (default the size) may be negative
 * (counted from the end) and are clamped to the size; `step` (default 1) must be positive.
 */
export interface IndexRange {
  readonly start?: number;
  readonly stop?: number;
  readonly step?: number;
}

/**
 * What {@link TensorDict.index} accepts, over the indexed batch dimension:
 * - an integer (negative counts from the end): drops the dimension;
 * - an {@link IndexRange}: keeps the dimension (zero-copy on the first dimension when `step` is 1);
 * - a boolean mask (`boolean[]`, `Uint8Array` of 0/1, or a `Tensor<"bool">`, whose shape may span several batch
 *   dimensions): keeps the rows where it is true, the masked dimensions become one;
 * - an index array (`number[]`, `Int32Array`, or an int32/int64 `Tensor`; negative allowed, repeats allowed):
 *   takes those rows in that order; an index tensor of shape `S` replaces the dimension with `S`.
 */
export type Index =
  | number
  | IndexRange
  | readonly boolean[]
  | Uint8Array
  | readonly number[]
  | Int32Array
  | Tensor<"bool">
  | Tensor<"int32">
  | Tensor<"int64">;

/** The batch size and row plan an index selects. */
export interface IndexPlan {
  readonly batchSize: readonly number[];
  readonly plan: RowPlan;
}

interface Selection {
  /** How many batch dimensions (from `dim`) the index consumes. */
  readonly consumed: number;
  /** The dimensions that replace them in the result. */
  readonly replacement: readonly number[];
  /** Selected positions within the consumed dimensions (flattened), or a range. */
  readonly positions: Int32Array | { readonly start: number; readonly step: number; readonly count: number };
}

function checkPosition(value: number, size: number, dim: number, where: string): number {
  if (!Number.isInteger(value)) throw new InvalidArgumentError(`index: ${where} must be an integer, got ${String(value)}`);
  if (value < -size || value >= size) {
    throw new IndexOutOfRangeError(`index: ${where} = ${value} is out of range for batch dimension ${dim} of size ${size}`, value, size);
  }
  return value < 0 ? value + size : value;
}

function maskPositions(mask: ArrayLike<number | boolean>): Int32Array {
  const out: number[] = [];
  for (let i = 0; i < mask.length; i++) if (mask[i]) out.push(i);
  return Int32Array.from(out);
}

function checkMaskLength(length: number, size: number, dim: number): void {
  if (length !== size) {
    throw new ShapeMismatchError(
      `index: boolean mask of length ${length} does not match batch dimension ${dim} of size ${size}`,
      [size],
      [length],
    );
  }
}

function indexArray(values: ArrayLike<number>, size: number, dim: number): Int32Array {
  const out = new Int32Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = checkPosition(values[i]!, size, dim, `index[${i}]`);
  return out;
}

function select(index: Index, batchSize: readonly number[], dim: number): Selection {
  const size = batchSize[dim]!;
  if (typeof index === "number") {
    return { consumed: 1, replacement: [], positions: { start: checkPosition(index, size, dim, "index"), step: 1, count: 1 } };
  }
  if (index instanceof Tensor) {
    if (index.dtype === "bool") {
      const k = index.shape.length;
      const expected = batchSize.slice(dim, dim + k);
      if (k === 0 || !sameShape(index.shape, expected)) {
        throw new ShapeMismatchError(
          `index: boolean mask of shape ${formatShape(index.shape)} does not match batch dimensions ${dim}.. of batch size ${formatShape(batchSize)} (expected ${formatShape(expected)})`,
          expected,
          index.shape,
        );
      }
      const positions = maskPositions(index.data);
      return { consumed: k, replacement: [positions.length], positions };
    }
    if (index.dtype === "int32" || index.dtype === "int64") {
      return { consumed: 1, replacement: index.shape, positions: indexArray(index.toNumbers(), size, dim) };
    }
    const other: Tensor = index;
    throw new InvalidArgumentError(`index: an index tensor must be bool, int32 or int64, got ${other.dtype}`);
  }
  if (index instanceof Uint8Array) {
    checkMaskLength(index.length, size, dim);
    return withCount(maskPositions(index));
  }
  if (index instanceof Int32Array) {
    return withCount(indexArray(index, size, dim));
  }
  if (Array.isArray(index)) {
    const items: unknown[] = index;
    if (items.length > 0 && typeof items[0] === "boolean") {
      if (!items.every((v) => typeof v === "boolean")) throw new InvalidArgumentError("index: a mask array must hold booleans only");
      checkMaskLength(items.length, size, dim);
      return withCount(maskPositions(items));
    }
    if (!items.every((v) => typeof v === "number")) throw new InvalidArgumentError("index: an index array must hold numbers only");
    return withCount(indexArray(items, size, dim));
  }
  if (typeof index === "object" && index !== null && !ArrayBuffer.isView(index)) {
    return rangeSelection(index as IndexRange, size);
  }
  throw new InvalidArgumentError(`index: unsupported index ${describe(index)}`);
}

function describe(value: unknown): string {
  return typeof value === "object" && value !== null ? value.constructor.name : typeof value;
}

function withCount(positions: Int32Array): Selection {
  return { consumed: 1, replacement: [positions.length], positions };
}

function rangeBound(value: number | undefined, fallback: number, size: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value)) throw new InvalidArgumentError(`index: range ${name} must be an integer, got ${String(value)}`);
  const v = value < 0 ? value + size : value;
  return Math.min(Math.max(v, 0), size);
}

function rangeSelection(range: IndexRange, size: number): Selection {
  for (const key of Object.keys(range)) {
    if (key !== "start" && key !== "stop" && key !== "step") {
      throw new InvalidArgumentError(`index: a range has only start, stop and step, got ${JSON.stringify(key)}`);
    }
  }
  const step = range.step ?? 1;
  if (!Number.isInteger(step) || step <= 0) throw new InvalidArgumentError(`index: range step must be a positive integer, got ${String(step)}`);
  const start = rangeBound(range.start, 0, size, "start");
  const stop = rangeBound(range.stop, size, size, "stop");
  const count = stop > start ? Math.ceil((stop - start) / step) : 0;
  return { consumed: 1, replacement: [count], positions: { start, step, count } };
}

/** The batch size and rows selected by `index` over batch dimension `dim`. */
export function planIndex(batchSize: readonly number[], index: Index, dim: number): IndexPlan {
  if (batchSize.length === 0) throw new InvalidArgumentError("index: a TensorDict with batch size [] has no batch dimension to index");
  const d = normalizeDim(dim, batchSize.length, "index");
  const sel = select(index, batchSize, d);
  const outer = prod(batchSize.slice(0, d));
  const size = prod(batchSize.slice(d, d + sel.consumed));
  const inner = prod(batchSize.slice(d + sel.consumed));
  const builder = new RowPlanBuilder();
  const { positions } = sel;
  for (let o = 0; o < outer; o++) {
    const base = o * size;
    if (positions instanceof Int32Array) {
      for (const p of positions) builder.push(0, (base + p) * inner, inner);
    } else if (positions.step === 1) {
      builder.push(0, (base + positions.start) * inner, positions.count * inner);
    } else {
      for (let j = 0; j < positions.count; j++) builder.push(0, (base + positions.start + j * positions.step) * inner, inner);
    }
  }
  return {
    batchSize: [...batchSize.slice(0, d), ...sel.replacement, ...batchSize.slice(d + sel.consumed)],
    plan: builder.build(),
  };
}

/**
 * The plans of `planIndex(batchSize, i, dim)` for every `i` along `dim` (already normalized), built in one pass:
 * `unbind` needs all of them, and the positions are in range by construction, so none is checked again.
 */
export function planUnbind(batchSize: readonly number[], dim: number): IndexPlan[] {
  const outer = prod(batchSize.slice(0, dim));
  const size = batchSize[dim]!;
  const inner = prod(batchSize.slice(dim + 1));
  const rowBatchSize = Object.freeze([...batchSize.slice(0, dim), ...batchSize.slice(dim + 1)]); // shared by every row
  return Array.from({ length: size }, (_, i) => {
    const builder = new RowPlanBuilder();
    for (let o = 0; o < outer; o++) builder.push(0, (o * size + i) * inner, inner);
    return { batchSize: rowBatchSize, plan: builder.build() };
  });
}

/** Rows of `count` sources of batch size `batchSize` stacked along a new dimension `dim` (already normalized). */
export function planStack(count: number, batchSize: readonly number[], dim: number): IndexPlan {
  const outer = prod(batchSize.slice(0, dim));
  const inner = prod(batchSize.slice(dim));
  const builder = new RowPlanBuilder();
  for (let o = 0; o < outer; o++) for (let k = 0; k < count; k++) builder.push(k, o * inner, inner);
  return { batchSize: [...batchSize.slice(0, dim), count, ...batchSize.slice(dim)], plan: builder.build() };
}

/** Rows of sources concatenated along existing dimension `dim` (already normalized; other sizes already checked). */
export function planCat(batchSizes: readonly (readonly number[])[], dim: number): IndexPlan {
  const first = batchSizes[0]!;
  const outer = prod(first.slice(0, dim));
  const inner = prod(first.slice(dim + 1));
  const builder = new RowPlanBuilder();
  let total = 0;
  for (const b of batchSizes) total += b[dim]!;
  for (let o = 0; o < outer; o++) {
    batchSizes.forEach((b, k) => {
      const n = b[dim]! * inner;
      builder.push(k, o * n, n);
    });
  }
  return { batchSize: [...first.slice(0, dim), total, ...first.slice(dim + 1)], plan: builder.build() };
}
