/**
 * One MCP server behind `MCPToolTransform`: the official MCP TypeScript SDK's `Client` over a
 * `StdioClientTransport` (the server is a child process speaking JSON-RPC on stdin/stdout). Connects lazily,
 * caches the tool list, and reconnects (a new process) on the next call after the server went away.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult, ContentBlock, Tool } from "@modelcontextprotocol/sdk/types.js";
import { LineTail } from "../../../bridge/worker/stderr-tail.js";
import { MCPConnectionError } from "./errors.js";
import { describeError } from "./limits.js";

/** How to start one stdio MCP server (TorchRL's `{"command", "args", "env"}`). */
export interface MCPServerConfig {
  /** The executable, e.g. `"npx"`, `"uvx"` or `process.execPath`. */
  readonly command: string;
  readonly args: readonly string[];
  /** Extra environment variables, on top of the SDK's safe defaults (`HOME`, `PATH`, ...). */
  readonly env?: Readonly<Record<string, string>> | undefined;
  /** The server's working directory (default: this process's). */
  readonly cwd?: string | undefined;
}

interface Live {
  readonly client: Client;
  readonly tools: readonly Tool[];
}

const CLIENT_INFO = { name: "posttrain", version: "0.1.0" };

/** A connection to one stdio MCP server. */
export class MCPServerConnection {
  private live: Promise<Live> | undefined;
  private lastTools: readonly Tool[] = [];
  private connectedOnce = false;
  private closed = false;
  private readonly stderr = new LineTail(20);

  constructor(
    /** The server's name in the transform's `servers`. */
    readonly name: string,
    private readonly config: MCPServerConfig,
    private readonly connectTimeoutMs: number,
  ) {}

  /** Whether the server was connected at least once (a later failure is then the server's, not the setup's). */
  get everConnected(): boolean {
    return this.connectedOnce;
  }

  /** The tools of the last successful listing (empty before the first connection). */
  get cachedTools(): readonly Tool[] {
    return this.lastTools;
  }

  /** Connects (starting the server) unless connected; resolves with the server's tools. Throws `MCPConnectionError`. */
  async tools(): Promise<readonly Tool[]> {
    return (await this.connect()).tools;
  }

  /** Calls `tool` with `args`; rejects with the SDK's error when the call cannot be made or the server dies. */
  async call(tool: string, args: Record<string, unknown>, signal: AbortSignal, timeoutMs: number): Promise<CallToolResult> {
    const { client } = await this.connect();
    const result = await client.callTool({ name: tool, arguments: args }, undefined, { signal, timeout: timeoutMs });
    return result as CallToolResult;
  }

  /** Stops the server. */
  async close(): Promise<void> {
    this.closed = true;
    const live = this.live;
    this.live = undefined;
    if (live !== undefined) await (await live.catch(() => undefined))?.client.close();
  }

  private connect(): Promise<Live> {
    if (this.closed) return Promise.reject(new MCPConnectionError(this.name, "the transform is closed"));
    if (this.live !== undefined) return this.live;
    const attempt = this.open();
    this.live = attempt;
    const forget = (): void => {
      if (this.live === attempt) this.live = undefined; // the next call starts the server again
    };
    attempt.then((live) => {
      live.client.onclose = forget;
    }, forget);
    return attempt;
  }

  private async open(): Promise<Live> {
    const transport = new StdioClientTransport({
      command: this.config.command,
      args: [...this.config.args],
      ...(this.config.env !== undefined ? { env: { ...this.config.env } } : {}),
      ...(this.config.cwd !== undefined ? { cwd: this.config.cwd } : {}),
      stderr: "pipe",
    });
    transport.stderr?.on("data", (chunk: Buffer | string) => {
      this.stderr.push(chunk.toString());
    });
    const client = new Client(CLIENT_INFO, { capabilities: {} });
    try {
      await client.connect(transport, { timeout: this.connectTimeoutMs });
      const { tools } = await client.listTools(undefined, { timeout: this.connectTimeoutMs });
      this.lastTools = tools;
      this.connectedOnce = true;
      return { client, tools };
    } catch (err) {
      await client.close().catch(() => undefined);
      const tail = this.stderr.text().trim();
      const command = [this.config.command, ...this.config.args].join(" ");
      throw new MCPConnectionError(this.name, `could not connect to \`${command}\` (${describeError(err)})${tail === "" ? "" : `; last stderr lines:\n${tail}`}`, { cause: err });
    }
  }
}

/** The text of an MCP tool result: text blocks as they are, other blocks as a short placeholder. */
export function mcpResultText(result: CallToolResult): string {
  const parts = result.content.map((block: ContentBlock) => {
    switch (block.type) {
      case "text":
        return block.text;
      case "image":
      case "audio":
        return `[${block.type} ${block.mimeType}]`;
      case "resource":
        return "text" in block.resource ? block.resource.text : `[resource ${block.resource.uri}]`;
      case "resource_link":
        return `[resource ${block.uri}]`;
      default:
        return JSON.stringify(block);
    }
  });
  if (parts.length === 0 && result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  return parts.join("\n");
}
