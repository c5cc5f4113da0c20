/**
 * `SimpleToolTransform`: TypeScript functions as tools, with zod schemas for their arguments (TorchRL's
 * `SimpleToolTransform`).
 */
import { z } from "zod";
import { InvalidArgumentError } from "../../core/errors.js";
import type { ChatMessage, History } from "../../data/index.js";
import { parseOptions } from "../../core/index.js";
import { describeError, withDeadline } from "./limits.js";
import { parseToolCalls, type ToolCallParser } from "./parse.js";
import { describeArgumentIssues, malformedCall, resultText, toolFailed, toolSucceeded, unknownTool } from "./tool-results.js";
import { ToolTransformBase, ToolTransformOptionsSchema, type ToolRunOptions } from "./tool-transform.js";

/** What a tool function gets besides its arguments. */
export interface SimpleToolContext {
  /** Fires when the call times out or the env call is cancelled: stop work and return. */
  readonly signal: AbortSignal;
  /** The batch row of the conversation. */
  readonly row: number;
  /**
   * The conversation, the calling message included (in an env step, always; through `toolMessages`, when given).
   * A tool may read the question from it.
   */
  readonly history?: History;
}

/** One tool: what it does, the zod schema of its arguments, and the function. */
export interface SimpleTool<S extends z.ZodType = z.ZodType> {
  /** What the tool does (for the tool list you show the model). */
  readonly description?: string | undefined;
  /** The arguments' schema; the model's arguments are validated (and transformed) with it before `run`. */
  readonly schema: S;
  /** The tool. Its return value becomes the result: a string as is, anything else as JSON. It may throw. */
  run(args: z.output<S>, context: SimpleToolContext): unknown;
}

const ToolSchema = z.strictObject({
  description: z.string().optional(),
  schema: z.instanceof(z.ZodType, { message: "expected a zod schema" }),
  /** The tool's function (`SimpleTool.run`). */
  run: z.custom<SimpleTool["run"]>((v) => typeof v === "function", { message: "expected a function" }),
});

/** zod schema of {@link SimpleToolTransformOptions}. */
export const SimpleToolTransformOptionsSchema = ToolTransformOptionsSchema.extend({
  /** The tools by name (letters, digits, `_`, `.`, `-`; starting with a letter or `_`). */
  tools: z
    .record(z.string(), ToolSchema)
    .superRefine((tools, ctx) => {
      if (Object.keys(tools).length === 0) ctx.addIssue({ code: "custom", message: "at least one tool is needed" });
      for (const name of Object.keys(tools)) {
        if (!/^[A-Za-z_][\w.-]*$/.test(name)) {
          ctx.addIssue({ code: "custom", path: [name], message: "a tool name has letters, digits, _, . or - and starts with a letter or _" });
        }
      }
    }),
  /** Milliseconds one call may take (default 10 000, TorchRL's 10 s); its signal fires then and the call fails. */
  timeoutMs: z.number().int().positive().default(10_000),
  /**
   * Finds the calls in a message (default {@link parseToolCalls}: the `<tool>` and `<tool_call>` formats) — TorchRL's
   * tool transforms take a parser too. A task may read its own, shorter call syntax with it.
   */
  parser: z.custom<ToolCallParser>((v) => typeof v === "function", { message: "expected a function (message) => ToolCallMatch[]" }).optional(),
});

/** Options of {@link SimpleToolTransform}; `T` maps each tool name to its argument schema. */
export interface SimpleToolTransformOptions<T extends Record<string, z.ZodType>> {
  readonly tools: { readonly [K in keyof T]: SimpleTool<T[K]> };
  readonly toolRole?: string;
  readonly maxConcurrency?: number;
  readonly timeoutMs?: number;
  readonly parser?: ToolCallParser;
}

/** A tool as shown to the model: its name, description and JSON Schema of the arguments. */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
}

/**
 * Runs the named tool calls of the policy's message (`<tool>name\n{json}</tool>`, `<tool name="...">`,
 * `<tool>{"name", "arguments"}</tool>`, Hermes `<tool_call>` or the message's `toolCalls`) with TypeScript
 * functions, and appends one `tool` message per call: `Tool add executed successfully:\n5`, or
 * `Tool add failed:\n...` for an unknown tool, malformed JSON, arguments the zod schema rejects (the issues are
 * named), a function that throws, or one that takes longer than `timeoutMs`.
 *
 * ```ts
 * const tools = new SimpleToolTransform({
 *   tools: { add: { description: "a + b", schema: z.object({ a: z.number(), b: z.number() }), run: ({ a, b }) => a + b } },
 * });
 * ```
 */
export class SimpleToolTransform<T extends Record<string, z.ZodType> = Record<string, z.ZodType>> extends ToolTransformBase {
  /** The call timeout in milliseconds. */
  readonly timeoutMs: number;
  private readonly tools: ReadonlyMap<string, SimpleTool>;
  private readonly parser: ToolCallParser;

  constructor(options: SimpleToolTransformOptions<T>) {
    const parsed = parseOptions(SimpleToolTransformOptionsSchema, options, "SimpleToolTransform options");
    super(parsed);
    this.timeoutMs = parsed.timeoutMs;
    this.tools = new Map(Object.entries(parsed.tools).map(([name, tool]) => [name, tool]));
    this.parser = parsed.parser ?? parseToolCalls;
  }

  /** The tools with their JSON Schemas (from the zod schemas), e.g. to list them in a system prompt. */
  get specs(): ToolSpec[] {
    return [...this.tools].map(([name, tool]) => ({
      name,
      description: tool.description ?? "",
      inputSchema: toJsonSchema(name, tool.schema),
    }));
  }

  protected override async runTools(message: ChatMessage, row: number, options: ToolRunOptions): Promise<readonly string[] | null> {
    const calls = this.parser(message);
    if (calls.length === 0) return null;
    const results: string[] = [];
    for (const call of calls) {
      if (!call.ok) {
        results.push(malformedCall(call));
        continue;
      }
      const tool = this.tools.get(call.name);
      if (tool === undefined) {
        results.push(unknownTool(call.name, [...this.tools.keys()]));
        continue;
      }
      const args = tool.schema.safeParse(call.arguments);
      if (!args.success) {
        results.push(toolFailed(call.name, describeArgumentIssues(args.error.issues)));
        continue;
      }
      const outcome = await withDeadline(`tool ${call.name}`, this.timeoutMs, options.signal, (signal) =>
        Promise.resolve().then(() => tool.run(args.data, { signal, row, ...(options.history === undefined ? {} : { history: options.history }) })),
      );
      if (outcome.kind === "value") results.push(toolSucceeded(call.name, resultText(outcome.value)));
      else if (outcome.kind === "timeout") results.push(toolFailed(call.name, `timed out after ${this.timeoutMs} ms`));
      else results.push(toolFailed(call.name, describeError(outcome.error)));
    }
    return results;
  }
}

function toJsonSchema(name: string, schema: z.ZodType): Record<string, unknown> {
  try {
    return z.toJSONSchema(schema, { unrepresentable: "any" });
  } catch (err) {
    throw new InvalidArgumentError(`SimpleToolTransform tools.${name}.schema: cannot be written as JSON Schema (${describeError(err)})`);
  }
}
