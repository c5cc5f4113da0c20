/**
 * Chat messages: the type, its zod schema, and the validation/normalization every History goes through.
 *
 * A validated message is a frozen plain object with its fields in a fixed order (`role`, `content`, `name`,
 * `toolCalls`, `toolResponses`, `isComplete`); absent optional fields are left out and `isComplete` is kept only
 * when it is `false` (TorchRL's `is_complete` defaults to true), so `History.from(msgs).toJSON()` gives back `msgs`.
 */
import { z } from "zod";
import type { JSONObject, JSONValue } from "../core/json.js";
import { InvalidHistoryError } from "./errors.js";

/** A message role. The four standard roles are suggested; any non-empty string is accepted. */
export type Role = "system" | "user" | "assistant" | "tool" | (string & {});

export type { JSONObject, JSONValue } from "../core/json.js";

/** A function call requested by the assistant (Hermes/Qwen `{"name": ..., "arguments": {...}}`). */
export interface ToolCall {
  /** The function name. */
  readonly name: string;
  /** The arguments, a JSON object. */
  readonly arguments: JSONObject;
  /** An id that ties the call to its response, when the format has one. */
  readonly id?: string;
}

/**
 * One chat message, as you write it and as `History.toJSON()` gives it back. Mirrors TorchRL's `History` element
 * (`role`, `content`, `is_complete`, `tool_calls`, `tool_responses`) in camelCase.
 */
export interface ChatMessage {
  /** Who speaks: `"system"`, `"user"`, `"assistant"`, `"tool"`, or another non-empty string. */
  readonly role: Role;
  /** The text of the message (may be empty, e.g. a generation prompt). */
  readonly content: string;
  /** An optional speaker or tool name (HF's `name` field). */
  readonly name?: string;
  /** Tool calls made in this message (assistant). */
  readonly toolCalls?: readonly ToolCall[];
  /** Tool outputs carried by this message (tool role). */
  readonly toolResponses?: readonly string[];
  /**
   * `false` when the message was not terminated by its end token, e.g. a generation cut off before `<|im_end|>`
   * or a trailing generation prompt. Absent means complete (`true` is normalized away).
   */
  readonly isComplete?: boolean;
}

/** The fields a message may have, in their normalized order. */
export const MESSAGE_FIELDS = ["role", "content", "name", "toolCalls", "toolResponses", "isComplete"] as const;
const TOOL_CALL_FIELDS = ["name", "arguments", "id"] as const;

/** zod schema of one tool call (strict: unknown fields are errors). */
export const ToolCallSchema = z.strictObject({
  name: z.string().min(1),
  arguments: z.record(z.string(), z.json()),
  id: z.string().optional(),
});

/** zod schema of one message (strict: unknown fields such as `tool_calls` are errors). */
export const ChatMessageSchema = z.strictObject({
  role: z.string().min(1),
  content: z.string(),
  name: z.string().optional(),
  toolCalls: z.array(ToolCallSchema).optional(),
  toolResponses: z.array(z.string()).optional(),
  isComplete: z.boolean().optional(),
});

/** `true` unless the message is marked incomplete. */
export function isCompleteMessage(message: ChatMessage): boolean {
  return message.isComplete !== false;
}

/** Where a message sits, for error messages. */
export interface MessageSite {
  readonly context: string;
  readonly messageIndex: number;
  readonly row?: number | undefined;
}

/**
 * Validates one message and returns its normalized, deeply frozen copy. Throws {@link InvalidHistoryError} naming
 * the row, the message index and the field.
 */
export function validateMessage(value: unknown, site: MessageSite): ChatMessage {
  const parsed = ChatMessageSchema.safeParse(value, { reportInput: true });
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const { field, reason } = describeIssue(issue);
    const more = parsed.error.issues.length > 1 ? ` (and ${parsed.error.issues.length - 1} more problem(s))` : "";
    throw new InvalidHistoryError(site.context, { row: site.row, messageIndex: site.messageIndex, field }, reason + more);
  }
  const m = parsed.data;
  return normalize({
    role: m.role,
    content: m.content,
    name: m.name,
    toolCalls: m.toolCalls?.map((tc) => ({ name: tc.name, arguments: tc.arguments, id: tc.id })),
    toolResponses: m.toolResponses,
    isComplete: m.isComplete,
  });
}

interface Loose {
  role: string;
  content: string;
  name: string | undefined;
  toolCalls: readonly { name: string; arguments: JSONObject; id: string | undefined }[] | undefined;
  toolResponses: readonly string[] | undefined;
  isComplete: boolean | undefined;
}

function normalize(m: Loose): ChatMessage {
  const out: { -readonly [K in keyof ChatMessage]: ChatMessage[K] } = { role: m.role, content: m.content };
  if (m.name !== undefined) out.name = m.name;
  if (m.toolCalls !== undefined) {
    out.toolCalls = Object.freeze(
      m.toolCalls.map((tc) => Object.freeze(tc.id === undefined ? { name: tc.name, arguments: freezeJson(tc.arguments) } : { name: tc.name, arguments: freezeJson(tc.arguments), id: tc.id })),
    );
  }
  if (m.toolResponses !== undefined) out.toolResponses = Object.freeze([...m.toolResponses]);
  if (m.isComplete === false) out.isComplete = false;
  return Object.freeze(out);
}

/** A deep, frozen copy of a JSON value. */
function freezeJson<T extends JSONValue>(value: T): T {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return Object.freeze((value as readonly JSONValue[]).map((v) => freezeJson(v))) as unknown as T;
  const out: Record<string, JSONValue> = {};
  for (const [k, v] of Object.entries(value)) out[k] = freezeJson(v);
  return Object.freeze(out) as T;
}

/** Deep equality of JSON values (object key order does not matter). */
export function jsonEqual(a: JSONValue | undefined, b: JSONValue | undefined): boolean {
  if (a === b) return true;
  if (a === null || b === null || a === undefined || b === undefined || typeof a !== "object" || typeof b !== "object") return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b)) return false;
    const xs = a as readonly JSONValue[];
    const ys = b as readonly JSONValue[];
    return xs.length === ys.length && xs.every((x, i) => jsonEqual(x, ys[i]));
  }
  const ao = a as JSONObject;
  const bo = b as JSONObject;
  const keys = Object.keys(ao);
  if (keys.length !== Object.keys(bo).length) return false;
  return keys.every((k) => Object.hasOwn(bo, k) && jsonEqual(ao[k], bo[k]));
}

/** Equality of two normalized messages. */
export function messagesEqual(a: ChatMessage, b: ChatMessage): boolean {
  if (a === b) return true;
  if (a.role !== b.role || a.content !== b.content || a.name !== b.name || isCompleteMessage(a) !== isCompleteMessage(b)) return false;
  if (!jsonEqual(a.toolResponses, b.toolResponses)) return false;
  if (a.toolCalls === undefined || b.toolCalls === undefined) return a.toolCalls === b.toolCalls;
  return (
    a.toolCalls.length === b.toolCalls.length &&
    a.toolCalls.every((x, i) => {
      const y = b.toolCalls![i]!;
      return x.name === y.name && x.id === y.id && jsonEqual(x.arguments, y.arguments);
    })
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Issue formatting

function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const p of path) {
    if (typeof p === "number") out += `[${p}]`;
    else out += out === "" ? String(p) : `.${String(p)}`;
  }
  return out;
}

/** A short description of a runtime value for error messages. */
export function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "undefined";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "number") return Number.isFinite(value) ? "a number" : String(value);
  if (typeof value === "object") {
    const ctor = (value as { constructor?: { name?: string } }).constructor?.name;
    return ctor === undefined || ctor === "Object" ? "an object" : `a ${ctor}`;
  }
  return `a ${typeof value}`;
}

const EXPECTED_NAMES: Readonly<Record<string, string>> = { record: "a plain object", object: "an object", array: "an array" };

function camelCase(key: string): string {
  return key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

function describeIssue(issue: z.core.$ZodIssue): { field: string | undefined; reason: string } {
  const path = issue.path;
  const field = path.length === 0 ? undefined : formatPath(path);
  const input = (issue as { input?: unknown }).input;
  switch (issue.code) {
    case "invalid_type": {
      const expected = EXPECTED_NAMES[issue.expected] ?? issue.expected;
      if (path.length === 0) return { field, reason: `expected a message object { role, content }, got ${describeValue(input)}` };
      if (input === undefined) return { field, reason: `is missing (expected ${expected})` };
      return { field, reason: `expected ${expected}, got ${describeValue(input)}` };
    }
    case "unrecognized_keys": {
      const key = issue.keys[0] ?? "";
      const isToolCall = path.length === 2 && path[0] === "toolCalls";
      const known: readonly string[] = isToolCall ? TOOL_CALL_FIELDS : MESSAGE_FIELDS;
      const hint = known.includes(camelCase(key)) && camelCase(key) !== key ? `; did you mean ${JSON.stringify(camelCase(key))}?` : "";
      return {
        field: formatPath([...path, key]),
        reason: `unknown field${hint === "" ? `; a ${isToolCall ? "tool call" : "message"} has ${known.join(", ")}` : hint}`,
      };
    }
    case "too_small":
      return { field, reason: "must not be empty" };
    case "invalid_union":
      return { field, reason: `is not a JSON value (string, finite number, boolean, null, array or plain object), got ${describeValue(input)}` };
    default:
      return { field, reason: issue.message };
  }
}
