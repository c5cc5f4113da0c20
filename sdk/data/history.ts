/**
 * `History` (one conversation) and `HistoryBatch` (one History per batch row), TorchRL's `History` in TypeScript.
 * Both are immutable: every operation returns a new object and the messages are frozen. See docs/history.md.
 *
 * This module also registers HistoryBatch as a TensorDict leaf type (kind `"history"`) and adds `getHistory` to
 * TensorDict, at its end: whatever program can build a HistoryBatch has loaded this module, so its TensorDicts hold
 * them and read `"history"` wire columns back. (The registration lives here and not in a module of its own because
 * such a module would need HistoryBatch and this module would need it: a cycle.)
 */
import type { NestedKey } from "../tensordict/keys.js";
import { BatchSizeMismatchError, IndexOutOfRangeError } from "../tensordict/errors.js";
import { planIndex, type Index } from "../tensordict/indexing.js";
import { registerLeafType, type LeafType } from "../tensordict/leaf.js";
import { takeRows } from "../tensordict/rows.js";
import { TensorDict } from "../tensordict/tensordict.js";
import { getChatTemplate, type ChatTemplate, type ChatTemplateName } from "./chat-template.js";
import { ChatParseError, InvalidArgumentError, InvalidHistoryError } from "./errors.js";
import { describeValue, isCompleteMessage, messagesEqual, validateMessage, type ChatMessage } from "./message.js";
import { historyMessagesFromWire, historyToWire } from "./wire.js";

/** Options of {@link History.toText}. */
export interface ToTextOptions {
  /** The chat template, by name or as an object. Default `"chatml"`. */
  readonly chatTemplate?: ChatTemplateName | ChatTemplate;
  /** Append the header of a new assistant message, e.g. `<|im_start|>assistant\n` (HF `add_generation_prompt`). Default false. */
  readonly addGenerationPrompt?: boolean;
  /**
   * Leave the final message open, without its end token, so a generation continues it (HF `continue_final_message`).
   * Default false. Use it to render a history whose last message has `isComplete: false` back to the text it came
   * from. Exclusive with `addGenerationPrompt`.
   */
  readonly continueFinalMessage?: boolean;
}

/** Options of {@link History.fromText}. */
export interface FromTextOptions {
  /** The chat template, by name or as an object. Default `"chatml"`. */
  readonly chatTemplate?: ChatTemplateName | ChatTemplate;
  /** Extract `<tool_call>` / `<tool_response>` blocks into `toolCalls` / `toolResponses`. Default true. */
  readonly parseTools?: boolean;
}

let makeHistory: (messages: readonly ChatMessage[]) => History;

function checkBoolean(value: unknown, name: string, context: string): boolean {
  if (value === undefined) return false;
  if (typeof value !== "boolean") throw new InvalidArgumentError(`${context}: ${name} must be a boolean, got ${describeValue(value)}`);
  return value;
}

function toArray<T>(items: Iterable<T>, what: string, context: string): readonly T[] {
  if (Array.isArray(items)) return items as readonly T[];
  if (items === null || typeof items !== "object" || typeof (items as Partial<Iterable<T>>)[Symbol.iterator] !== "function") {
    throw new InvalidArgumentError(`${context}: expected ${what}, got ${describeValue(items)}`);
  }
  return [...items];
}

function validateAll(messages: readonly unknown[], context: string, firstIndex = 0, row?: number): ChatMessage[] {
  return messages.map((m, i) => validateMessage(m, { context, messageIndex: firstIndex + i, row }));
}

/**
 * One conversation: an immutable list of validated {@link ChatMessage}s.
 *
 * ```ts
 * const h = History.from([{ role: "user", content: "2+2?" }]).append({ role: "assistant", content: "4" });
 * h.length;            // 2
 * h.last?.content;     // "4"
 * h.toText({ chatTemplate: "chatml" });
 * ```
 */
export class History implements Iterable<ChatMessage> {
  readonly #messages: readonly ChatMessage[];

  static {
    makeHistory = (messages) => new History(messages);
  }

  private constructor(messages: readonly ChatMessage[]) {
    this.#messages = Object.freeze(messages);
  }

  /** The empty history. */
  static readonly EMPTY: History = new History([]);

  /**
   * A history of `messages` (an array or any iterable of plain messages, or another History). Each message is
   * validated and copied; errors are {@link InvalidHistoryError}s naming the message index and field.
   */
  static from(messages: Iterable<ChatMessage> | History): History {
    if (messages instanceof History) return messages;
    return new History(validateAll(toArray(messages, "an array of messages", "History.from"), "History.from"));
  }

  /**
   * Parses a rendered chat back into messages (TorchRL's `History.fromText`). Content is kept verbatim. A last message
   * without its end token — a generation cut off before `<|im_end|>`, or a trailing generation prompt
   * `<|im_start|>assistant\n` (empty content) — comes back with `isComplete: false`. Throws {@link ChatParseError}
   * (code `CHAT_PARSE`, with the offset) for text that is not in the template's format.
   */
  static fromText(text: string, options: FromTextOptions = {}): History {
    if (typeof text !== "string") throw new InvalidArgumentError(`History.fromText: text must be a string, got ${describeValue(text)}`);
    const template = getChatTemplate(options.chatTemplate ?? "chatml");
    const parseTools = options.parseTools === undefined ? true : checkBoolean(options.parseTools, "parseTools", "History.fromText");
    const parsed = template.parse(text, { parseTools });
    return new History(validateAll(parsed, `History.fromText (${template.name})`));
  }

  /** The messages, frozen. */
  get messages(): readonly ChatMessage[] {
    return this.#messages;
  }

  /** The number of messages. */
  get length(): number {
    return this.#messages.length;
  }

  /** The last message, or `undefined` for an empty history. */
  get last(): ChatMessage | undefined {
    return this.#messages.at(-1);
  }

  /** `false` when the last message is marked incomplete (a cut-off generation or a generation prompt). */
  get isComplete(): boolean {
    const last = this.last;
    return last === undefined || isCompleteMessage(last);
  }

  /** The message at `index` (negative counts from the end), or `undefined` when out of range. */
  at(index: number): ChatMessage | undefined {
    return this.#messages.at(index);
  }

  /** A new history with `message` appended. */
  append(message: ChatMessage): History {
    return new History([...this.#messages, validateMessage(message, { context: "History.append", messageIndex: this.length })]);
  }

  /** A new history with `messages` (an array, an iterable or a History) appended. */
  extend(messages: Iterable<ChatMessage> | History): History {
    if (messages instanceof History) return messages.length === 0 ? this : new History([...this.#messages, ...messages.#messages]);
    const added = validateAll(toArray(messages, "an array of messages", "History.extend"), "History.extend", this.length);
    return added.length === 0 ? this : new History([...this.#messages, ...added]);
  }

  /** Messages `start` to `end` (exclusive), with `Array.prototype.slice` semantics (negative counts from the end). */
  slice(start?: number, end?: number): History {
    return new History(this.#messages.slice(start, end));
  }

  /** Whether `other` holds the same messages (tool-call argument key order does not matter). */
  equals(other: History): boolean {
    if (!(other instanceof History)) return false;
    return this.length === other.length && this.#messages.every((m, i) => messagesEqual(m, other.#messages[i]!));
  }

  /**
   * Renders the history with a chat template (default `"chatml"`, `<|im_start|>role\ncontent<|im_end|>\n`).
   *
   * The worker's HF tokenizer applies the model's real template and is the source of truth for what the model sees
   * and for assistant masks; this renderer is a TypeScript mirror for token-free logic, matching the HF template for
   * the same messages and options. `isComplete` does not change rendering (as in HF); pass `continueFinalMessage`
   * to leave the last message open. Throws {@link InvalidHistoryError} for content holding a delimiter of the
   * format (it would not parse back).
   */
  toText(options: ToTextOptions = {}): string {
    const template = getChatTemplate(options.chatTemplate ?? "chatml");
    return template.render(this.#messages, {
      addGenerationPrompt: checkBoolean(options.addGenerationPrompt, "addGenerationPrompt", "toText"),
      continueFinalMessage: checkBoolean(options.continueFinalMessage, "continueFinalMessage", "toText"),
    });
  }

  /** The messages as plain (frozen) objects; `History.from(h.toJSON())` equals `h`. */
  toJSON(): ChatMessage[] {
    return [...this.#messages];
  }

  /** The messages, oldest first. */
  [Symbol.iterator](): Iterator<ChatMessage> {
    return this.#messages[Symbol.iterator]();
  }

  /** A short description, e.g. `History(3 messages: system, user, assistant…)`. */
  toString(): string {
    const roles = this.#messages.map((m) => (isCompleteMessage(m) ? m.role : `${m.role}…`)).join(", ");
    return `History(${this.length} message${this.length === 1 ? "" : "s"}${this.length === 0 ? "" : `: ${roles}`})`;
  }
}

/** What one row of {@link HistoryBatch.appendEach} adds: a message, several messages, or nothing (`null`). */
export type RowAppend = ChatMessage | readonly ChatMessage[] | History | null | undefined;

/**
 * One {@link History} per batch row — the TypeScript side of a TensorDict History leaf (`List<Struct>` on the wire):
 * `td.set(["history", "prompt"], batch)` needs `batch.length === td.numel()`. Rows are in row-major order over the
 * TensorDict's batch size, like string leaves. Immutable.
 *
 * ```ts
 * const batch = HistoryBatch.from([[{ role: "user", content: "a" }], [{ role: "user", content: "b" }]]);
 * const next = batch.appendEach([{ role: "assistant", content: "A" }, null]); // multi-turn: row 1 unchanged
 * ```
 */
export class HistoryBatch implements Iterable<History> {
  readonly #rows: readonly History[];

  private constructor(rows: readonly History[]) {
    this.#rows = Object.freeze(rows);
  }

  /**
   * A batch from one entry per row: a History or an array of messages. Errors are {@link InvalidHistoryError}s
   * naming the row, the message index and the field.
   */
  static from(rows: Iterable<History | readonly ChatMessage[]>): HistoryBatch {
    const items = toArray(rows, "an array of rows", "HistoryBatch.from");
    return new HistoryBatch(
      items.map((row, r) => {
        if (row instanceof History) return row;
        if (!Array.isArray(row)) {
          throw new InvalidHistoryError("HistoryBatch.from", { row: r }, `expected a History or an array of messages, got ${describeValue(row)}`);
        }
        return makeHistory(validateAll(row as readonly unknown[], "HistoryBatch.from", 0, r));
      }),
    );
  }

  /** A batch of the given histories, one per row (TorchRL's stack of histories along a new batch dim). */
  static stack(histories: readonly History[]): HistoryBatch {
    const items = toArray(histories, "an array of History", "HistoryBatch.stack");
    items.forEach((h, r) => {
      if (!(h instanceof History)) throw new InvalidHistoryError("HistoryBatch.stack", { row: r }, `expected a History, got ${describeValue(h)}`);
    });
    return new HistoryBatch(items);
  }

  /** The rows of several batches, one after the other. */
  static cat(batches: readonly HistoryBatch[]): HistoryBatch {
    const items = toArray(batches, "an array of HistoryBatch", "HistoryBatch.cat");
    items.forEach((b, i) => {
      if (!(b instanceof HistoryBatch)) throw new InvalidArgumentError(`HistoryBatch.cat: batches[${i}] must be a HistoryBatch, got ${describeValue(b)}`);
    });
    return new HistoryBatch(items.flatMap((b) => b.#rows));
  }

  /** Parses one rendered chat per row (see {@link History.fromText}); errors name the row. */
  static fromText(texts: readonly string[], options: FromTextOptions = {}): HistoryBatch {
    const items = toArray(texts, "an array of strings", "HistoryBatch.fromText");
    return new HistoryBatch(
      items.map((text, r) => {
        try {
          return History.fromText(text, options);
        } catch (err) {
          if (err instanceof ChatParseError && err.row === undefined) throw err.withRow(r);
          if (err instanceof InvalidHistoryError && err.row === undefined) throw err.withRow(r, "HistoryBatch.fromText");
          if (err instanceof InvalidArgumentError && typeof text !== "string") {
            throw new InvalidArgumentError(`HistoryBatch.fromText: row ${r}: text must be a string, got ${describeValue(text)}`);
          }
          throw err;
        }
      }),
    );
  }

  /** The histories, one per row (frozen). */
  get rows(): readonly History[] {
    return this.#rows;
  }

  /** The number of rows. */
  get length(): number {
    return this.#rows.length;
  }

  /** The batch size, `[length]`. */
  get batchSize(): readonly number[] {
    return [this.#rows.length];
  }

  /** The history of row `row` (negative counts from the end); throws {@link IndexOutOfRangeError} when out of range. */
  row(row: number): History {
    if (!Number.isInteger(row)) throw new InvalidArgumentError(`HistoryBatch.row: row must be an integer, got ${String(row)}`);
    const h = this.#rows.at(row);
    if (h === undefined) throw new IndexOutOfRangeError(`HistoryBatch.row: row ${row} is out of range for a batch of ${this.length} rows`, row, this.length);
    return h;
  }

  /**
   * Selects rows with TensorDict's index expressions: an integer gives that row's History; a range
   * `{ start, stop, step }`, a boolean mask (`boolean[]`, `Uint8Array`, bool Tensor) or an index array (`number[]`,
   * `Int32Array`, int32/int64 Tensor; negative and repeated allowed) gives a HistoryBatch.
   */
  index(row: number): History;
  index(rows: Exclude<Index, number>): HistoryBatch;
  index(rows: Index): History | HistoryBatch;
  index(rows: Index): History | HistoryBatch {
    if (typeof rows === "number") return this.row(rows);
    const { plan } = planIndex([this.length], rows, 0);
    return new HistoryBatch(takeRows([this.#rows], plan));
  }

  /**
   * Multi-turn over a batch: appends `perRow[r]` to row `r` — a message, an array of messages, a History, or `null`
   * / `undefined` to leave the row as it is. `perRow` must have one entry per row ({@link BatchSizeMismatchError}
   * otherwise); bad messages throw {@link InvalidHistoryError} naming the row, message index and field.
   */
  appendEach(perRow: readonly RowAppend[]): HistoryBatch {
    const items = toArray(perRow, "an array with one entry per row", "HistoryBatch.appendEach");
    if (items.length !== this.length) {
      throw new BatchSizeMismatchError(
        `HistoryBatch.appendEach: got ${items.length} entries for a batch of ${this.length} rows (one per row; null leaves a row unchanged)`,
        [this.length],
        [items.length],
      );
    }
    return new HistoryBatch(
      this.#rows.map((h, r) => {
        const add = items[r];
        if (add === null || add === undefined) return h;
        if (add instanceof History) return h.extend(add);
        const list: readonly unknown[] = Array.isArray(add) ? add : [add];
        return list.length === 0 ? h : makeHistory([...h.messages, ...validateAll(list, "HistoryBatch.appendEach", h.length, r)]);
      }),
    );
  }

  /** A new batch of `fn(history, row)` for each row. */
  map(fn: (history: History, row: number) => History): HistoryBatch {
    return HistoryBatch.stack(this.#rows.map(fn));
  }

  /** Renders each row (see {@link History.toText}); errors name the row. */
  toText(options: ToTextOptions = {}): string[] {
    return this.#rows.map((h, r) => {
      try {
        return h.toText(options);
      } catch (err) {
        if (err instanceof InvalidHistoryError && err.row === undefined) throw err.withRow(r);
        throw err;
      }
    });
  }

  /** Whether `other` has the same number of rows and equal histories row by row. */
  equals(other: HistoryBatch): boolean {
    if (!(other instanceof HistoryBatch)) return false;
    return this.length === other.length && this.#rows.every((h, r) => h.equals(other.#rows[r]!));
  }

  /** One array of plain messages per row. */
  toJSON(): ChatMessage[][] {
    return this.#rows.map((h) => h.toJSON());
  }

  /** The rows' conversations, in batch order. */
  [Symbol.iterator](): Iterator<History> {
    return this.#rows[Symbol.iterator]();
  }

  /** A short description, e.g. `HistoryBatch(4 rows)`. */
  toString(): string {
    return `HistoryBatch(${this.length} row${this.length === 1 ? "" : "s"})`;
  }
}

// ---------------------------------------------------------------------------------------------- TensorDict leaf

declare module "../tensordict/leaf.js" {
  interface TensorDictLeaves {
    /** Conversations: a {@link HistoryBatch}, one History per batch row; a `WireHistory` column on the wire. */
    history: HistoryBatch;
  }
}

declare module "../tensordict/tensordict.js" {
  interface TensorDict {
    /**
     * The conversations under `key` (one History per batch element, row-major): `getLeaf(key, "history")`. Throws
     * KEY_NOT_FOUND or LEAF_KIND_MISMATCH. Added by `posttrain/data`.
     *
     * ```ts
     * const prompt = td.getHistory(["history", "prompt"]);
     * ```
     */
    getHistory(key: NestedKey): HistoryBatch;
  }
}

/**
 * HistoryBatch as a TensorDict leaf: batch operations select the same (immutable) Histories in row order, `clone` gives
 * a new HistoryBatch of the same Histories, and the wire form is a `WireHistory` column (data/wire.ts).
 */
const historyLeaf: LeafType<HistoryBatch> = {
  kind: "history",
  name: "HistoryBatch",
  wireKind: "history",
  is: (value): value is HistoryBatch => value instanceof HistoryBatch,
  rows: (batch) => batch.length,
  take: (sources, plan) => HistoryBatch.stack(takeRows(sources.map((batch) => batch.rows), plan)),
  clone: (batch) => HistoryBatch.stack(batch.rows),
  describe: (batch) => batch.toString(),
  hint: (value) => (value instanceof History ? "wrap Histories with HistoryBatch.stack, one per batch row" : undefined),
  toWire: historyToWire,
  fromWire: (column, context) => HistoryBatch.stack(historyMessagesFromWire(column, context).map((messages) => makeHistory(messages))),
};

registerLeafType(historyLeaf);

Object.defineProperty(TensorDict.prototype, "getHistory", {
  value: function getHistory(this: TensorDict, key: NestedKey): HistoryBatch {
    return this.getLeaf(key, "history");
  },
  writable: true,
  configurable: true,
});
