/**
 * Writers of the replay buffer: where each written row goes (TorchRL's `RoundRobinWriter`,
 * `TensorDictMaxValueWriter`).
 */
import { z } from "zod";
import type { JSONObject } from "../message.js";
import { formatKey, type NestedKey } from "../../tensordict/keys.js";
import type { TensorDict } from "../../tensordict/tensordict.js";
import { parseOptions } from "../../core/index.js";
import { InvalidArgumentError } from "./errors.js";
import { NestedKeySchema } from "./options.js";
import { leafNumbers, reduce } from "./reduce.js";
import type { Storage } from "./storage.js";

/** The writer kinds `ReplayBuffer.save` knows how to write and load. */
export type WriterKind = "round-robin" | "max-value";

const CursorStateSchema = z.strictObject({ cursor: z.number().int().min(0), writeCount: z.number().int().min(0) });

/** Decides the storage position of every written row and counts the rows written. */
export abstract class Writer {
  /** The kind written in save files. */
  abstract readonly kind: WriterKind;
  protected cursor = 0;
  #writeCount = 0;

  /** Rows written since creation (or the last `empty`), overwrites included. */
  get writeCount(): number {
    return this.#writeCount;
  }

  /** Counts `n` more writes (a subclass calls it from `extend`; the count is saved in `state()`). */
  protected countWrites(n: number): void {
    this.#writeCount += n;
  }

  /**
   * The position of each row in `storage`, `-1` for a row that is not to be written. When two rows get the same
   * position, the later one is written.
   */
  abstract positions(rows: readonly TensorDict[], storage: Storage): Int32Array;

  /** Forgets every position and resets `writeCount` (with the storage emptied). */
  empty(): void {
    this.cursor = 0;
    this.#writeCount = 0;
  }

  /** The options needed to rebuild this writer (saved with the buffer). */
  abstract config(): JSONObject;

  /** The state saved with the buffer. */
  state(): JSONObject {
    return { cursor: this.cursor, writeCount: this.#writeCount };
  }

  /** Restores a state from `state()`; throws INVALID_ARGUMENT naming the bad field. */
  loadState(state: unknown): void {
    const parsed = parseOptions(CursorStateSchema, state, `${this.constructor.name} state`);
    this.cursor = parsed.cursor;
    this.#writeCount = parsed.writeCount;
  }
}

/**
 * TorchRL's `RoundRobinWriter`: rows go to consecutive positions; once the storage holds `maxSize` rows the cursor
 * wraps around and the oldest rows are overwritten.
 */
export class RoundRobinWriter extends Writer {
  readonly kind = "round-robin";

  positions(rows: readonly TensorDict[], storage: Storage): Int32Array {
    const out = new Int32Array(rows.length);
    for (let i = 0; i < rows.length; i++) out[i] = (this.cursor + i) % storage.maxSize;
    this.cursor = (this.cursor + rows.length) % storage.maxSize;
    this.countWrites(rows.length);
    return out;
  }

  config(): JSONObject {
    return {};
  }
}

/** Options of {@link TensorDictMaxValueWriter}. */
export const MaxValueWriterOptionsSchema = z.strictObject({
  /** The key ranking rows (default `["next", "reward"]`). */
  rankKey: NestedKeySchema.default(["next", "reward"]),
  /** How a rank leaf with several elements becomes one number (default `"sum"`). */
  reduction: z.enum(["sum", "mean", "max", "min", "median"]).default("sum"),
});

/** Options of {@link TensorDictMaxValueWriter}. */
export type MaxValueWriterOptions = z.input<typeof MaxValueWriterOptionsSchema>;

const MaxValueStateSchema = CursorStateSchema.extend({
  top: z.array(z.tuple([z.number(), z.number().int().min(0)])),
});

type Entry = readonly [rank: number, position: number];

const less = (a: Entry, b: Entry): boolean => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);

/**
 * TorchRL's `TensorDictMaxValueWriter`: keeps the `maxSize` rows of highest rank. While the storage has room, rows go
 * to consecutive positions; once full, a row replaces the lowest-ranked row if it ranks strictly higher, and is
 * dropped otherwise (position `-1`). Rows must have batch size `[]` (a buffer of steps or of whole trajectories).
 */
export class TensorDictMaxValueWriter extends Writer {
  readonly kind = "max-value";
  /** The key ranking rows. */
  readonly rankKey: NestedKey;
  /** How a rank leaf with several elements becomes one number. */
  readonly reduction: z.output<typeof MaxValueWriterOptionsSchema>["reduction"];
  /** Min-heap of (rank, position). */
  #heap: Entry[] = [];

  constructor(options: MaxValueWriterOptions = {}) {
    super();
    const parsed = parseOptions(MaxValueWriterOptionsSchema, options, "TensorDictMaxValueWriter options");
    this.rankKey = parsed.rankKey;
    this.reduction = parsed.reduction;
  }

  #rank(row: TensorDict): number {
    const values = leafNumbers(row, this.rankKey, "TensorDictMaxValueWriter");
    if (values.length === 0) throw new InvalidArgumentError(`TensorDictMaxValueWriter: rank key ${formatKey(this.rankKey)} holds no value`);
    return values.length === 1 ? values[0]! : reduce(values, this.reduction);
  }

  positions(rows: readonly TensorDict[], storage: Storage): Int32Array {
    const chosen = new Map<number, number>(); // position -> row (a later row wins)
    for (let i = 0; i < rows.length; i++) {
      const rank = this.#rank(rows[i]!);
      let position: number | undefined;
      if (this.#heap.length < storage.maxSize) {
        position = this.cursor;
        this.cursor = (this.cursor + 1) % storage.maxSize;
        this.#push([rank, position]);
      } else if (rank > this.#heap[0]![0]) {
        position = this.#pop()[1];
        this.#push([rank, position]);
      }
      if (position !== undefined) {
        this.countWrites(1);
        chosen.set(position, i);
      }
    }
    const out = new Int32Array(rows.length).fill(-1);
    for (const [position, row] of chosen) out[row] = position;
    return out;
  }

  #push(entry: Entry): void {
    const heap = this.#heap;
    heap.push(entry);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!less(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  }

  #pop(): Entry {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && less(heap[l]!, heap[m]!)) m = l;
        if (r < heap.length && less(heap[r]!, heap[m]!)) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m]!, heap[i]!];
        i = m;
      }
    }
    return top;
  }

  override empty(): void {
    super.empty();
    this.#heap = [];
  }

  config(): JSONObject {
    return { rankKey: this.rankKey, reduction: this.reduction };
  }

  override state(): JSONObject {
    return { ...super.state(), top: this.#heap.map(([rank, position]) => [rank, position]) };
  }

  override loadState(state: unknown): void {
    const parsed = parseOptions(MaxValueStateSchema, state, "TensorDictMaxValueWriter state");
    super.loadState({ cursor: parsed.cursor, writeCount: parsed.writeCount });
    this.#heap = [];
    for (const [rank, position] of parsed.top) this.#push([rank, position]);
  }
}
