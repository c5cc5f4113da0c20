/**
 * Row plans (internal apart from `RowPlan` and `takeRows`, which leaf types use): every batch-dimension operation (indexing, stack, cat, split) is a selection of rows of the
 * flattened batch, expressed as runs of consecutive rows taken from one of several sources. Each leaf kind applies a
 * plan the same way; a plan of a single run can be applied as a zero-copy view.
 */
import { allocTypedArray, type DType } from "../../bridge/wire/dtypes.js";
import { InvalidArgumentError } from "./errors.js";
import { MAX_RAGGED_LENGTH, RaggedTensor } from "./ragged.js";
import { prod } from "./shape.js";
import { copyInto, view } from "./storage.js";
import { Tensor } from "./tensor.js";

/** Output rows as runs `(source, start, count)` of consecutive source rows, in output order. */
export interface RowPlan {
  /** Total output rows. */
  readonly rows: number;
  /** Source of each run (index into the sources list). */
  readonly source: Int32Array;
  /** First source row of each run. */
  readonly start: Int32Array;
  /** Number of rows in each run. */
  readonly count: Int32Array;
}

/** Builds a {@link RowPlan}, merging a run into the previous one when it continues it. */
export class RowPlanBuilder {
  readonly #source: number[] = [];
  readonly #start: number[] = [];
  readonly #count: number[] = [];
  #rows = 0;

  /** Appends `count` rows of `source` starting at `start`. */
  push(source: number, start: number, count: number): void {
    if (count === 0) return;
    this.#rows += count;
    const last = this.#count.length - 1;
    if (last >= 0 && this.#source[last] === source && this.#start[last]! + this.#count[last]! === start) {
      this.#count[last]! += count;
      return;
    }
    this.#source.push(source);
    this.#start.push(start);
    this.#count.push(count);
  }

  /** The plan built so far. */
  build(): RowPlan {
    return {
      rows: this.#rows,
      source: Int32Array.from(this.#source),
      start: Int32Array.from(this.#start),
      count: Int32Array.from(this.#count),
    };
  }
}

/** Applies a plan to dense leaves with `batchDims` leading batch dimensions; the result has batch size `batchSize`. */
export function takeDense<D extends DType>(
  sources: readonly Tensor<D>[],
  plan: RowPlan,
  batchDims: number,
  batchSize: readonly number[],
  allowView: boolean,
): Tensor<D> {
  const first = sources[0]!;
  const rowShape = first.shape.slice(batchDims);
  const rowElems = prod(rowShape);
  const shape = [...batchSize, ...rowShape];
  const runs = plan.count.length;
  if (allowView && runs === 1) {
    const start = plan.start[0]!;
    const src = sources[plan.source[0]!]!;
    return new Tensor(first.dtype, shape, view(src.data, start * rowElems, (start + plan.count[0]!) * rowElems));
  }
  const out = allocTypedArray(first.dtype, plan.rows * rowElems);
  let pos = 0;
  for (let r = 0; r < runs; r++) {
    const src = sources[plan.source[r]!]!;
    const start = plan.start[r]! * rowElems;
    const end = start + plan.count[r]! * rowElems;
    if (end > start) copyInto(out, pos, src.data, start, end);
    pos += end - start;
  }
  return new Tensor(first.dtype, shape, out);
}

/** Applies a plan to ragged leaves. */
export function takeRagged<D extends DType>(sources: readonly RaggedTensor<D>[], plan: RowPlan, allowView: boolean): RaggedTensor<D> {
  const first = sources[0]!;
  const tailElems = prod(first.tailShape);
  const runs = plan.count.length;
  if (allowView && runs === 1) {
    const src = sources[plan.source[0]!]!;
    const start = plan.start[0]!;
    return new RaggedTensor(first.dtype, src.values, src.offsets.subarray(start, start + plan.count[0]! + 1), first.tailShape);
  }
  const offsets = new Int32Array(plan.rows + 1);
  let total = 0;
  let row = 0;
  for (let r = 0; r < runs; r++) {
    const src = sources[plan.source[r]!]!.offsets;
    const start = plan.start[r]!;
    const count = plan.count[r]!;
    const base = src[start]!;
    for (let k = 1; k <= count; k++) offsets[row + k] = total + (src[start + k]! - base);
    total += src[start + count]! - base;
    if (total > MAX_RAGGED_LENGTH) {
      throw new InvalidArgumentError(`a ragged leaf would hold more than ${MAX_RAGGED_LENGTH} elements along its ragged dimension`);
    }
    row += count;
  }
  const values = allocTypedArray(first.dtype, total * tailElems);
  row = 0;
  for (let r = 0; r < runs; r++) {
    const src = sources[plan.source[r]!]!;
    const start = plan.start[r]!;
    const count = plan.count[r]!;
    const from = src.offsets[start]! * tailElems;
    const to = src.offsets[start + count]! * tailElems;
    if (to > from) copyInto(values, offsets[row]! * tailElems, src.values, from, to);
    row += count;
  }
  return new RaggedTensor(first.dtype, values, offsets, first.tailShape);
}

/**
 * Applies a plan to leaves held as one JS value per row (string leaves, and leaf types whose values are lists of
 * rows): always a new array of the same (immutable) row values.
 *
 * ```ts
 * const rows = takeRows([a.rows, b.rows], plan); // in a LeafType's `take`
 * ```
 */
export function takeRows<T>(sources: readonly (readonly T[])[], plan: RowPlan): T[] {
  const out: T[] = [];
  for (let r = 0; r < plan.count.length; r++) {
    const src = sources[plan.source[r]!]!;
    const start = plan.start[r]!;
    const count = plan.count[r]!;
    for (let k = 0; k < count; k++) out.push(src[start + k]!);
  }
  return out;
}
