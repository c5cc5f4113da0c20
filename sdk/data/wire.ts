/**
 * Conversions between {@link HistoryBatch} and the wire column `WireHistory` of `bridge/wire` (internal: the History
 * leaf type registered in history.ts uses them for TensorDict's `toWire`/`fromWire`). This module imports history.ts
 * for types only, so that history.ts can import it.
 *
 * A message travels field by field; `toolCalls` travels as compact JSON text of the array, written so that Python's
 * `json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)` gives the same text back (see
 * {@link toolCallsToJSON}).
 */
import type { WireChatMessage, WireHistory } from "../../bridge/wire/types.js";
import { InvalidArgumentError, InvalidHistoryError } from "./errors.js";
import type { HistoryBatch } from "./history.js";
import { describeValue, validateMessage, type ChatMessage, type JSONValue, type ToolCall } from "./message.js";

/**
 * A JSON number as Python's `json.dumps` writes the value that `json.loads` reads from JavaScript's text: integers
 * (text without `.` or `e`) are Python ints and print alike; other numbers are Python floats, whose `repr` uses
 * exponent notation with a signed, two-digit (at least) exponent below 1e-4 and from 1e16. Both languages print the
 * shortest digits that round-trip, so only the layout differs (`1e-7` → `1e-07`, `0.00001` → `1e-05`).
 */
function pythonNumber(n: number): string {
  const text = JSON.stringify(n);
  if (!/[.e]/.test(text)) return text;
  const [mantissa, expText] = n.toExponential().split("e") as [string, string];
  const exp = Number(expText);
  if (exp >= -4 && exp < 16) return text;
  return `${mantissa}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}

/** Compact JSON text of a JSON value: keys in insertion order, no spaces, numbers as Python writes them. */
function compactJson(value: JSONValue): string {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") return pythonNumber(value);
  if (Array.isArray(value)) return `[${(value as readonly JSONValue[]).map(compactJson).join(",")}]`;
  return `{${Object.entries(value as { readonly [key: string]: JSONValue }).map(([k, v]) => `${JSON.stringify(k)}:${compactJson(v)}`).join(",")}}`;
}

/**
 * The wire text of a message's tool calls: compact JSON of the array, each call's keys in the order `ChatMessage`
 * stores them (`name`, `arguments`, `id` when present), argument keys in insertion order. It equals
 * `JSON.stringify(toolCalls)` except for numbers JavaScript and Python lay out differently, which are written the way
 * Python's `json.dumps(..., separators=(",", ":"), ensure_ascii=False)` writes them, so both sides produce the same text.
 */
export function toolCallsToJSON(toolCalls: readonly ToolCall[]): string {
  return compactJson(toolCalls as unknown as JSONValue);
}

/** One message in its wire form: absent optional fields stay absent, `isComplete` travels only when false. */
function messageToWire(m: ChatMessage): WireChatMessage {
  const out: { -readonly [K in keyof WireChatMessage]: WireChatMessage[K] } = { role: m.role, content: m.content };
  if (m.name !== undefined) out.name = m.name;
  if (m.toolCalls !== undefined) out.toolCalls = toolCallsToJSON(m.toolCalls);
  if (m.toolResponses !== undefined) out.toolResponses = m.toolResponses;
  if (m.isComplete === false) out.isComplete = false;
  return out;
}

/**
 * A History leaf as a wire column (no copy of strings; tool calls become JSON text).
 *
 * ```ts
 * const column = historyToWire(batch); // { kind: "history", rows: [[{ role: "user", content: "hi" }], ...] }
 * ```
 */
export function historyToWire(batch: HistoryBatch): WireHistory {
  return { kind: "history", rows: batch.rows.map((h) => h.messages.map(messageToWire)) };
}

/**
 * The messages of each row of a wire History column, validated (the rows of a {@link HistoryBatch}). `context` (e.g.
 * `fromWire: key "p"`) starts error messages. Throws {@link InvalidHistoryError} naming the row, message index and
 * field (tool-call text that is not JSON of an array included), INVALID_ARGUMENT for a column without rows.
 *
 * ```ts
 * const rows = historyMessagesFromWire(column, 'fromWire: key "p"'); // ChatMessage[][]
 * ```
 */
export function historyMessagesFromWire(column: WireHistory, context: string): ChatMessage[][] {
  const rows: unknown = column.rows;
  if (!Array.isArray(rows)) throw new InvalidArgumentError(`${context}: a history column needs rows (an array), got ${describeValue(rows)}`);
  return (rows as readonly unknown[]).map((row, r) => {
    if (!Array.isArray(row)) throw new InvalidHistoryError(context, { row: r }, `expected an array of messages, got ${describeValue(row)}`);
    return (row as readonly unknown[]).map((m, i) => validateMessage(messageFromWire(m, context, r, i), { context, messageIndex: i, row: r }));
  });
}

/** A plain message object from a wire message (validated next by validateMessage). */
function messageFromWire(value: unknown, context: string, row: number, messageIndex: number): unknown {
  if (typeof value !== "object" || value === null) return value;
  const m = value as WireChatMessage;
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.name !== undefined) out.name = m.name;
  // The wire writes an absent list of tool calls as "".
  if (m.toolCalls !== undefined && m.toolCalls !== "") {
    if (typeof m.toolCalls !== "string") {
      throw new InvalidHistoryError(context, { row, messageIndex, field: "toolCalls" }, `expected JSON text of an array, got ${describeValue(m.toolCalls)}`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(m.toolCalls);
    } catch (err) {
      throw new InvalidHistoryError(context, { row, messageIndex, field: "toolCalls" }, `is not JSON text: ${(err as Error).message}`);
    }
    if (!Array.isArray(parsed)) throw new InvalidHistoryError(context, { row, messageIndex, field: "toolCalls" }, `expected JSON text of an array, got ${describeValue(parsed)}`);
    out.toolCalls = parsed;
  }
  if (m.toolResponses !== undefined) out.toolResponses = m.toolResponses;
  if (m.isComplete !== undefined) out.isComplete = m.isComplete;
  return out;
}
