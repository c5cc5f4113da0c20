/** The wording of named-tool results, as TorchRL's `SimpleToolTransform` and `MCPToolTransform` write them. */
import type { z } from "zod";
import type { MalformedToolCall } from "./parse.js";

/** `Tool <name> executed successfully:\n<result>`. */
export function toolSucceeded(name: string, result: string): string {
  return `Tool ${name} executed successfully:\n${result}`;
}

/** `Tool <name> failed:\n<error>`. */
export function toolFailed(name: string, error: string): string {
  return `Tool ${name} failed:\n${error}`;
}

/** The error message for a call the model wrote wrongly. */
export function malformedCall(call: MalformedToolCall): string {
  return toolFailed(call.name ?? "call", `malformed tool call: ${call.reason}`);
}

/** The error message for a tool name nobody serves. */
export function unknownTool(name: string, known: readonly string[]): string {
  return toolFailed(name, `unknown tool ${JSON.stringify(name)}; the tools are: ${known.length === 0 ? "(none)" : known.join(", ")}`);
}

/** `invalid arguments: a: expected number, received string; b: required`, from zod issues. */
export function describeArgumentIssues(issues: readonly z.core.$ZodIssue[]): string {
  const parts = issues.map((issue) => {
    const path = issue.path.map(String).join(".");
    return path === "" ? issue.message : `${path}: ${issue.message}`;
  });
  return `invalid arguments: ${parts.join("; ")}`;
}

/** A tool's return value as text: strings as they are, anything else as JSON. */
export function resultText(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  if (typeof value === "bigint") return value.toString();
  try {
    const json = JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
    if (json !== undefined) return json;
  } catch {
    // circular: fall through
  }
  return `[${typeof value}]`;
}
