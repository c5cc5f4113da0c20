/**
 * Finding tool calls in an assistant message: ```` ```python ```` blocks for `PythonInterpreter`, and named calls
 * for `SimpleToolTransform` / `MCPToolTransform` in the formats TorchRL's tool transforms read, plus the message's
 * structured `toolCalls` and Hermes/Qwen `<tool_call>` blocks. See docs/tools.md for examples of each format.
 */
import type { ChatMessage, JSONObject, JSONValue } from "../../data/index.js";

/** Where a named call came from. */
export type ToolCallFormat =
  /** `<tool>name\n{"arg": 1}</tool>` — TorchRL's `SimpleToolTransform` / `MCPToolTransform` default. */
  | "tool-block"
  /** `<tool name="name" tag="t">{"arg": 1}</tool>` — TorchRL's `XMLBlockParser`. */
  | "tool-attr"
  /** `<tool>{"name": "name", "arguments": {"arg": 1}}</tool>`. */
  | "tool-json"
  /** `<tool_call>{"name": "name", "arguments": {"arg": 1}}</tool_call>` — Hermes/Qwen. */
  | "hermes"
  /** The message's `toolCalls` field. */
  | "message"
  /** Found by a custom parser (`SimpleToolTransform`'s `parser`), in a task's own syntax. */
  | "custom";

/** A well-formed named tool call. */
export interface ParsedToolCall {
  readonly ok: true;
  /** The tool name as written (MCP calls may be `server.tool`). */
  readonly name: string;
  readonly arguments: JSONObject;
  /** The call's id or tag, when the format has one. */
  readonly id?: string;
  readonly format: ToolCallFormat;
}

/** A call the model tried to make but wrote wrongly: it becomes an error `tool` message. */
export interface MalformedToolCall {
  readonly ok: false;
  /** The tool name, when it could be read. */
  readonly name: string | null;
  /** What was wrong, e.g. `arguments are not valid JSON (Unexpected token ...)`. */
  readonly reason: string;
  /** The text of the block. */
  readonly raw: string;
  readonly format: ToolCallFormat;
}

/** One call found in a message, well-formed or not. */
export type ToolCallMatch = ParsedToolCall | MalformedToolCall;

/** Finds the named calls of one assistant message (`SimpleToolTransform`'s `parser`; default {@link parseToolCalls}). */
export type ToolCallParser = (message: ChatMessage) => readonly ToolCallMatch[];

const PYTHON_BLOCK = /```(?:python3?|py)[^\S\n]*\n([\s\S]*?)\n?```/g;
const TOOL_BLOCK = /<tool(\s[^>]*)?>([\s\S]*?)<\/tool>/g;
const HERMES_BLOCK = /<tool_call>([\s\S]*?)<\/tool_call>/g;
const TOOL_NAME = /^[A-Za-z_][\w.-]*$/;

/**
 * The ```` ```python ```` (also ```` ```py ````) code blocks of `text`, in order — TorchRL's `PythonInterpreter`
 * extraction, lenient about trailing spaces after the language tag and a missing newline before the closing fence.
 */
export function extractPythonBlocks(text: string): string[] {
  return [...text.matchAll(PYTHON_BLOCK)].map((m) => m[1]!);
}

/**
 * The named tool calls of an assistant message, in order of appearance. When the message has a `toolCalls` field
 * those are the calls (the text is not searched again); otherwise its content is searched for `<tool>` blocks (all
 * three layouts) and Hermes `<tool_call>` blocks. Blocks with bad JSON, a missing name or non-object arguments come
 * back as {@link MalformedToolCall}s, so the model can be told what was wrong.
 */
export function parseToolCalls(message: ChatMessage | string): ToolCallMatch[] {
  if (typeof message !== "string" && message.toolCalls !== undefined && message.toolCalls.length > 0) {
    return message.toolCalls.map((tc) => ({
      ok: true,
      name: tc.name,
      arguments: tc.arguments,
      ...(tc.id !== undefined ? { id: tc.id } : {}),
      format: "message",
    }));
  }
  const text = typeof message === "string" ? message : message.content;
  const found: { index: number; call: ToolCallMatch }[] = [];
  for (const m of text.matchAll(TOOL_BLOCK)) found.push({ index: m.index, call: parseToolBlock(m[0], m[1] ?? "", m[2]!) });
  for (const m of text.matchAll(HERMES_BLOCK)) found.push({ index: m.index, call: parseJsonCall(m[0], m[1]!, "hermes") });
  return found.sort((a, b) => a.index - b.index).map((f) => f.call);
}

/** Whether `text` holds any named tool call or ```` ```python ```` block. */
export function hasToolCall(message: ChatMessage | string): boolean {
  const text = typeof message === "string" ? message : message.content;
  return extractPythonBlocks(text).length > 0 || parseToolCalls(message).length > 0;
}

function parseToolBlock(raw: string, attrs: string, body: string): ToolCallMatch {
  const attrName = /\bname\s*=\s*"([^"]*)"/.exec(attrs)?.[1];
  if (attrName !== undefined) {
    const tag = /\btag\s*=\s*"([^"]*)"/.exec(attrs)?.[1];
    return withArguments(raw, attrName, body, "tool-attr", tag);
  }
  const trimmed = body.trim();
  if (trimmed.startsWith("{")) return parseJsonCall(raw, trimmed, "tool-json");
  const newline = trimmed.indexOf("\n");
  const name = (newline === -1 ? trimmed : trimmed.slice(0, newline)).trim();
  const args = newline === -1 ? "" : trimmed.slice(newline + 1);
  return withArguments(raw, name, args, "tool-block");
}

function withArguments(raw: string, name: string, argsText: string, format: ToolCallFormat, id?: string): ToolCallMatch {
  if (!TOOL_NAME.test(name)) {
    return { ok: false, name: name === "" ? null : name, reason: name === "" ? "the tool name is missing" : `${JSON.stringify(name)} is not a tool name`, raw, format };
  }
  const text = argsText.trim();
  if (text === "") return { ok: true, name, arguments: {}, ...(id !== undefined ? { id } : {}), format };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, name, reason: `arguments are not valid JSON (${(err as Error).message})`, raw, format };
  }
  if (!isJsonObject(value)) return { ok: false, name, reason: "arguments must be a JSON object", raw, format };
  return { ok: true, name, arguments: value, ...(id !== undefined ? { id } : {}), format };
}

function parseJsonCall(raw: string, body: string, format: ToolCallFormat): ToolCallMatch {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (err) {
    return { ok: false, name: null, reason: `the call is not valid JSON (${(err as Error).message})`, raw, format };
  }
  if (!isJsonObject(value)) return { ok: false, name: null, reason: 'the call must be a JSON object {"name": ..., "arguments": {...}}', raw, format };
  const name = value.name;
  if (typeof name !== "string" || !TOOL_NAME.test(name)) {
    return { ok: false, name: typeof name === "string" && name !== "" ? name : null, reason: 'the call needs a "name" string naming a tool', raw, format };
  }
  let args: JSONValue | undefined = value.arguments;
  if (typeof args === "string") {
    try {
      args = JSON.parse(args) as JSONValue;
    } catch (err) {
      return { ok: false, name, reason: `arguments are not valid JSON (${(err as Error).message})`, raw, format };
    }
  }
  if (args === undefined) args = {};
  if (!isJsonObject(args)) return { ok: false, name, reason: "arguments must be a JSON object", raw, format };
  const id = value.id;
  return { ok: true, name, arguments: args, ...(typeof id === "string" ? { id } : {}), format };
}

function isJsonObject(value: unknown): value is JSONObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
