/**
 * Storages of the replay buffer (TorchRL's `ListStorage`, `LazyStackStorage`): a list of rows, each row one element of
 * the written data along its first batch dimension. The two differ in how sampled rows are put together.
 */
import { z } from "zod";
import { parseOptions } from "../../core/index.js";
import type { TensorDict } from "../../tensordict/tensordict.js";
import { lazyStack, type LazyStack } from "./collate.js";
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
  readonly #rows: TensorDict[] = [];

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
    for (let i = 0; i < rows.length; i++) {
      const p = positions[i]!;
      if (!Number.isInteger(p) || p < 0 || p >= this.maxSize || p > this.#rows.length) {
        throw new InvalidArgumentError(
          `${this.constructor.name}.set: position ${p} is outside [0, ${Math.min(this.#rows.length, this.maxSize - 1)}] (length ${this.#rows.length}, maxSize ${this.maxSize})`,
        );
      }
      if (p === this.#rows.length) this.#rows.push(rows[i]!);
      else this.#rows[p] = rows[i]!;
    }
  }

  /** The row at `position` (shared, not copied). */
  row(position: number): TensorDict {
    const row = this.#rows[position];
    if (row === undefined) throw new InvalidArgumentError(`${this.constructor.name}.row: position ${position} is outside [0, ${this.#rows.length})`);
    return row;
  }

  /** The rows at `positions`, stacked into one TensorDict of batch size `[positions.length, ...]` (copied). */
  get(positions: ArrayLike<number>): TensorDict {
    const rows = Array.from({ length: positions.length }, (_, i) => this.row(positions[i]!));
    return this.collate(rows);
  }

  /** Every row in position order, stacked, with the dense keys that became ragged (for `save`). */
  all(): LazyStack | undefined {
    if (this.#rows.length === 0) return undefined;
    return lazyStack(this.#rows, true);
  }

  /** Removes every row. */
  empty(): void {
    this.#rows.length = 0;
  }

  /** Puts sampled rows together. */
  protected abstract collate(rows: readonly TensorDict[]): TensorDict;
}

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
}
