/**
 * Storages of the replay buffer (TorchRL's `ListStorage`, `LazyStackStorage`): a list of rows, each row one element of
 * the written data along its first batch dimension. The two differ in how sampled rows are put together.
 */
import { z } from "zod";
import { parseOptions } from "../../core/index.js";
import type { NestedKey } from "../../tensordict/keys.js";
import { Tensor } from "../../tensordict/tensor.js";
import { TensorDict } from "../../tensordict/tensordict.js";
import { lazyStack, stackOfRows, type LazyStack } from "./collate.js";
import { InvalidArgumentError } from "./errors.js";

/** The storage kinds `ReplayBuffer.save` knows how to write and load. */
export type StorageKind = "list" | "lazy-stack";

/** Options of {@link ListStorage} and {@link LazyStackStorage}. */
export const StorageOptionsSchema = z.strictObject({
  /** The most rows held (default unbounded); a round-robin writer overwrites the oldest beyond it. */
  maxSize: z.number().int().min(1).optional(),
});

/** Options of {@link ListStorage} and {@link LazyStackStorage}. */
export type StorageOptions = z.input<typeof StorageOptionsSchema>;

/**
 * Where a replay buffer keeps its rows. Rows are TensorDicts that share data with what was written (as TorchRL's
 * list storages keep references); `get` copies the requested rows into one new TensorDict.
 */
export abstract class Storage {
  /** The most rows held (`Infinity` when unbounded). */
  readonly maxSize: number;
  /** The kind written in save files. */
  abstract readonly kind: StorageKind;
  readonly #rows: Entry[] = [];

  protected constructor(options: StorageOptions, where: string) {
    const parsed = parseOptions(StorageOptionsSchema, options, `${where} options`);
    this.maxSize = parsed.maxSize ?? Infinity;
  }

  /** The number of rows held. */
  get length(): number {
    return this.#rows.length;
  }

  /**
   * Writes `rows[i]` at position `positions[i]`: an existing position is overwritten, the position equal to
   * `length` appends. Throws INVALID_ARGUMENT for a position beyond `length` or `maxSize`.
   */
  set(positions: ArrayLike<number>, rows: readonly TensorDict[]): void {
    if (positions.length !== rows.length) {
      throw new InvalidArgumentError(`${this.constructor.name}.set: ${positions.length} positions for ${rows.length} rows`);
    }
    this.#place(positions, (i) => rows[i]!);
  }

  /**
   * Writes row `rows[i]` of `td` (one batch dimension) at position `positions[i]`, as {@link set} with
   * `td.unbind(0)`, but splits `td` into rows only when one is read on its own: {@link get} of all of its rows
   * in order copies `td` instead of stacking them (the GRPO write and take). @internal
   */
  setChunk(positions: ArrayLike<number>, td: TensorDict, rows: ArrayLike<number>): void {
    if (positions.length !== rows.length) {
      throw new InvalidArgumentError(`${this.constructor.name}.set: ${positions.length} positions for ${rows.length} rows`);
    }
    const chunk = new Chunk(td.exclude()); // its own structure, sharing the leaves (as the rows of td.unbind(0) do)
    this.#place(positions, (i) => ({ chunk, i: rows[i]! }));
  }

  #place(positions: ArrayLike<number>, entry: (i: number) => Entry): void {
    for (let i = 0; i < positions.length; i++) {
      const p = positions[i]!;
      if (!Number.isInteger(p) || p < 0 || p >= this.maxSize || p > this.#rows.length) {
        throw new InvalidArgumentError(
          `${this.constructor.name}.set: position ${p} is outside [0, ${Math.min(this.#rows.length, this.maxSize - 1)}] (length ${this.#rows.length}, maxSize ${this.maxSize})`,
        );
      }
      if (p === this.#rows.length) this.#rows.push(entry(i));
      else this.#rows[p] = entry(i);
    }
  }

  /** The row at `position` (shared, not copied). */
  row(position: number): TensorDict {
    const entry = this.#rows[position];
    if (entry === undefined) throw new InvalidArgumentError(`${this.constructor.name}.row: position ${position} is outside [0, ${this.#rows.length})`);
    return entry instanceof TensorDict ? entry : entry.chunk.row(entry.i);
  }

  /**
   * The first element of the row's tensor leaf `key` as a number, `-Infinity` when the row has no tensor there; reads a
   * chunk's column without splitting it into rows. @internal
   */
  firstNumber(position: number, key: NestedKey): number {
    const entry = this.#rows[position];
    if (entry !== undefined && !(entry instanceof TensorDict) && !entry.chunk.split) {
      const column = entry.chunk.td.get(key, undefined);
      // dtypes whose storage holds the values themselves (float16's holds bits)
      const plain = column instanceof Tensor && (column.dtype === "int64" || column.dtype === "int32" || column.dtype === "float32" || column.dtype === "float64");
      if (plain && column.shape.length >= 1) {
        const perRow = column.shape.slice(1).reduce((a, b) => a * b, 1);
        if (perRow > 0) return Number(column.data[entry.i * perRow]!);
      }
    }
    const value = this.row(position).get(key, undefined);
    return value instanceof Tensor ? Number(value.toNumbers()[0]) : -Infinity;
  }

  /** The rows at `positions`, stacked into one TensorDict of batch size `[positions.length, ...]` (copied). */
  get(positions: ArrayLike<number>): TensorDict {
    const whole = this.#wholeChunk(positions);
    if (whole !== undefined) {
      const stacked = this.collateChunk?.(whole.td);
      if (stacked !== undefined) return stacked;
    }
    const rows = Array.from({ length: positions.length }, (_, i) => this.row(positions[i]!));
    return this.collate(rows);
  }

  /** The chunk whose rows `positions` are, all of them in order, if so. */
  #wholeChunk(positions: ArrayLike<number>): Chunk | undefined {
    const first = this.#rows[positions[0]!];
    // once its rows were handed out (`row`), they may have been changed: they are what is read then
    if (first === undefined || first instanceof TensorDict || first.chunk.split || first.chunk.size !== positions.length) return undefined;
    for (let i = 0; i < positions.length; i++) {
      const entry = this.#rows[positions[i]!];
      if (entry === undefined || entry instanceof TensorDict || entry.chunk !== first.chunk || entry.i !== i) return undefined;
    }
    return first.chunk;
  }

  /** Keeps only the rows at `positions` (in that order), moved to positions 0.. (`ReplayBuffer.take`'s removal). @internal */
  keep(positions: ArrayLike<number>): void {
    const kept = Array.from(positions, (p) => {
      const entry = this.#rows[p];
      if (entry === undefined) throw new InvalidArgumentError(`${this.constructor.name}.keep: position ${p} is outside [0, ${this.#rows.length})`);
      return entry;
    });
    this.#rows.length = 0;
    this.#rows.push(...kept);
  }

  /** Every row in position order, stacked, with the dense keys that became ragged (for `save`). */
  all(): LazyStack | undefined {
    if (this.#rows.length === 0) return undefined;
    return lazyStack(Array.from({ length: this.#rows.length }, (_, p) => this.row(p)), true);
  }

  /** Removes every row. */
  empty(): void {
    this.#rows.length = 0;
  }

  /** Puts sampled rows together. */
  protected abstract collate(rows: readonly TensorDict[]): TensorDict;

  /** What {@link collate} gives for all the rows of `td` in order, without splitting it; `undefined`: split it. */
  protected collateChunk?(td: TensorDict): TensorDict | undefined;
}

/** A written TensorDict whose rows are stored; split into rows on the first read of one. */
class Chunk {
  readonly td: TensorDict;
  readonly size: number;
  #rows: TensorDict[] | undefined;

  constructor(td: TensorDict) {
    this.td = td;
    this.size = td.batchSize[0]!;
  }

  /** Whether its rows were made (and handed out). */
  get split(): boolean {
    return this.#rows !== undefined;
  }

  row(i: number): TensorDict {
    this.#rows ??= this.td.unbind(0);
    return this.#rows[i]!;
  }
}

/** A stored row: a TensorDict, or row `i` of a chunk not split yet. */
type Entry = TensorDict | { readonly chunk: Chunk; readonly i: number };

/**
 * TorchRL's `ListStorage`: rows in a list, sampled rows stacked as `torch.stack` would, so every row must have the
 * same keys, dtypes and shapes (SHAPE_MISMATCH naming the key otherwise).
 */
export class ListStorage extends Storage {
  readonly kind = "list";

  /** A storage of at most `maxSize` rows (default unbounded). */
  constructor(options: StorageOptions = {}) {
    super(options, "ListStorage");
  }

  protected collate(rows: readonly TensorDict[]): TensorDict {
    return lazyStack(rows, false).td;
  }
}

/**
 * TorchRL's `LazyStackStorage`: rows in a list, sampled rows stacked lazily, so rows may hold dense leaves of
 * different lengths (a response of 7 tokens next to one of 12): such a leaf comes out as a ragged tensor, like the
 * nested tensor TorchRL's lazy stack densifies to.
 */
export class LazyStackStorage extends Storage {
  readonly kind = "lazy-stack";

  /** A storage of at most `maxSize` rows (default unbounded). */
  constructor(options: StorageOptions = {}) {
    super(options, "LazyStackStorage");
  }

  protected collate(rows: readonly TensorDict[]): TensorDict {
    return lazyStack(rows, true).td;
  }

  protected override collateChunk(td: TensorDict): TensorDict | undefined {
    return stackOfRows(td);
  }
}
