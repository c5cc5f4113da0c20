/**
 * `MCPToolTransform`: tools served by Model Context Protocol servers over stdio, through the official MCP
 * TypeScript SDK client (TorchRL's `MCPToolTransform`).
 */
import { z } from "zod";
import type { ChatMessage, JSONObject } from "../../data/index.js";
import { parseOptions } from "../../core/index.js";
import type { EnvCallOptions } from "../env-base.js";
import { describeError, mapLimited, withDeadline } from "./limits.js";
import { MCPServerConnection, mcpResultText } from "./mcp-connection.js";
import { parseToolCalls } from "./parse.js";
import { malformedCall, toolFailed, toolSucceeded, unknownTool } from "./tool-results.js";
import { ToolTransformBase, ToolTransformOptionsSchema, type ToolCallOptions } from "./tool-transform.js";

const ServerSchema = z.strictObject({
  /** The executable that starts the server, e.g. `"npx"`, `"uvx"`, `process.execPath`. */
  command: z.string().min(1),
  /** Its arguments (default none). */
  args: z.array(z.string()).default([]),
  /** Extra environment variables, on top of the SDK's safe defaults (`HOME`, `PATH`, ...). */
  env: z.record(z.string(), z.string()).optional(),
  /** The server's working directory. */
  cwd: z.string().min(1).optional(),
});

/** zod schema of {@link MCPToolTransformOptions}. */
export const MCPToolTransformOptionsSchema = ToolTransformOptionsSchema.extend({
  /** The servers by name (letters, digits, `_`, `-`): calls name tools `server.tool`, or just `tool` when unique. */
  servers: z
    .record(z.string(), ServerSchema)
    .superRefine((servers, ctx) => {
      if (Object.keys(servers).length === 0) ctx.addIssue({ code: "custom", message: "at least one server is needed" });
      for (const name of Object.keys(servers)) {
        if (!/^[A-Za-z0-9_-]+$/.test(name)) ctx.addIssue({ code: "custom", path: [name], message: "a server name has letters, digits, _ or -" });
      }
    }),
  /** Milliseconds one call may take (default 10 000, TorchRL's 10 s). */
  timeoutMs: z.number().int().positive().default(10_000),
  /** Milliseconds to start a server and list its tools (default 30 000). */
  connectTimeoutMs: z.number().int().positive().default(30_000),
});

/** Options of {@link MCPToolTransform}. */
export type MCPToolTransformOptions = z.input<typeof MCPToolTransformOptionsSchema>;

/** A tool of an MCP server. */
export interface MCPToolSpec {
  /** The server's name. */
  readonly server: string;
  /** The tool's name on its server. */
  readonly tool: string;
  /** `server.tool`, the name a call may always use. */
  readonly name: string;
  readonly description: string;
  /** The JSON Schema of its arguments, as the server declares it. */
  readonly inputSchema: Record<string, unknown>;
}

/**
 * Runs the named tool calls of the policy's message on MCP servers and appends one `tool` message per call:
 * `Tool calc.add executed successfully:\n5` or `Tool calc.add failed:\n<error>`. A call names `server.tool`
 * (TorchRL's `<tool>server.tool\n{json}</tool>`), or a bare `tool` that one server alone has; the other call
 * layouts of `parseToolCalls` work too. Unknown tools, malformed JSON, arguments the server rejects, tool
 * errors, timeouts and a server that dies all become error messages; a dead server is started again on the next
 * call. Servers start on first use (or with {@link connect}); a server that cannot start at all throws
 * `MCPConnectionError`.
 *
 * ```ts
 * const mcp = new MCPToolTransform({ servers: { calc: { command: "node", args: ["calc-server.mjs"] } } });
 * console.log(await mcp.listTools());
 * ```
 */
export class MCPToolTransform extends ToolTransformBase {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof MCPToolTransformOptionsSchema>>;
  private readonly connections: ReadonlyMap<string, MCPServerConnection>;

  constructor(options: MCPToolTransformOptions) {
    const parsed = parseOptions(MCPToolTransformOptionsSchema, options, "MCPToolTransform options");
    super(parsed);
    this.config = parsed;
    this.connections = new Map(Object.entries(parsed.servers).map(([name, server]) => [name, new MCPServerConnection(name, server, parsed.connectTimeoutMs)]));
  }

  /** Starts every server that is not running and lists its tools. Throws `MCPConnectionError` naming the server. */
  async connect(): Promise<void> {
    await Promise.all([...this.connections.values()].map((c) => c.tools()));
  }

  /** The tools of every server (connecting first). */
  async listTools(): Promise<MCPToolSpec[]> {
    const lists = await mapLimited([...this.connections.values()], this.connections.size, async (c) => ({ server: c.name, tools: await c.tools() }));
    return lists.flatMap(({ server, tools }) =>
      tools.map((t) => ({ server, tool: t.name, name: `${server}.${t.name}`, description: t.description ?? "", inputSchema: { ...t.inputSchema } })),
    );
  }

  /**
   * Calls one tool directly and returns the `tool` message text (`Tool s.t executed successfully:\n...` or
   * `... failed:\n...`), as a step would.
   */
  async callTool(name: string, args: JSONObject, options: ToolCallOptions = {}): Promise<string> {
    return this.runCall(name, args, options.signal);
  }

  /** Stops every server. */
  override async close(): Promise<void> {
    await Promise.all([...this.connections.values()].map((c) => c.close()));
  }

  protected override async runTools(message: ChatMessage, _row: number, options: EnvCallOptions): Promise<readonly string[] | null> {
    const calls = parseToolCalls(message);
    if (calls.length === 0) return null;
    const results: string[] = [];
    for (const call of calls) results.push(call.ok ? await this.runCall(call.name, call.arguments, options.signal) : malformedCall(call));
    return results;
  }

  private async runCall(name: string, args: JSONObject, signal: AbortSignal | undefined): Promise<string> {
    const target = await this.resolve(name);
    if (typeof target === "string") return target;
    const { connection, tool } = target;
    const label = `${connection.name}.${tool}`;
    const { timeoutMs } = this.config;
    // The SDK's own timeout is set a little later so that ours decides, with one wording.
    const outcome = await withDeadline(`tool ${label}`, timeoutMs, signal, (s) => connection.call(tool, { ...args }, s, timeoutMs + 1_000));
    if (outcome.kind === "timeout") return toolFailed(label, `timed out after ${timeoutMs} ms`);
    if (outcome.kind === "error") return toolFailed(label, describeError(outcome.error));
    const text = mcpResultText(outcome.value);
    return outcome.value.isError === true ? toolFailed(label, text) : toolSucceeded(label, text);
  }

  /** The server and tool a call names, or the error message to answer with. */
  private async resolve(name: string): Promise<{ connection: MCPServerConnection; tool: string } | string> {
    const dot = name.indexOf(".");
    const prefixed = dot > 0 ? this.connections.get(name.slice(0, dot)) : undefined;
    if (prefixed !== undefined) {
      if (!prefixed.everConnected) await prefixed.tools();
      return { connection: prefixed, tool: name.slice(dot + 1) };
    }
    await Promise.all([...this.connections.values()].filter((c) => !c.everConnected).map((c) => c.tools()));
    const owners = [...this.connections.values()].filter((c) => c.cachedTools.some((t) => t.name === name));
    if (owners.length === 1) return { connection: owners[0]!, tool: name };
    if (owners.length > 1) return toolFailed(name, `ambiguous tool name: servers ${owners.map((c) => c.name).join(", ")} all have it; call it as server.${name}`);
    const known = [...this.connections.values()].flatMap((c) => c.cachedTools.map((t) => `${c.name}.${t.name}`));
    return unknownTool(name, known);
  }
}
