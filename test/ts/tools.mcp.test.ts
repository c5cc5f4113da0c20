// MCPToolTransform over the official MCP SDK client with a real stdio server (test/fixtures/mcp/server.mjs, written
// with the same SDK): listing tools, calls from a scripted policy's messages through a ChatEnv, server-side errors,
// timeouts, a server that crashes mid-call (error message, then a fresh server), ambiguous names, bad setups.
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, TransformedEnv } from "../../sdk/index.js";
import { ChatEnv } from "../../sdk/envs/chat-env.js";
import { MCPConnectionError, MCPToolTransform } from "../../sdk/envs/tools/index.js";
import { resetWith, ScriptedPolicy, toolReplies } from "./tools.helpers.js";

const SERVER = fileURLToPath(new URL("../fixtures/mcp/server.mjs", import.meta.url));
const server = (env?: Record<string, string>): { command: string; args: string[]; env?: Record<string, string> } => ({
  command: process.execPath,
  args: [SERVER],
  ...(env !== undefined ? { env } : {}),
});

describe("MCPToolTransform with a stdio server", () => {
  let mcp: MCPToolTransform;

  beforeAll(async () => {
    mcp = new MCPToolTransform({ servers: { calc: server({ GREETING: "hi " }) }, timeoutMs: 2_000 });
    await mcp.connect();
  });

  afterAll(async () => {
    await mcp.close();
  });

  it("lists the server's tools with their JSON Schemas", async () => {
    const tools = await mcp.listTools();
    expect(tools.map((t) => t.name)).toEqual(["calc.add", "calc.echo", "calc.fail", "calc.sleep", "calc.crash"]);
    expect(tools[0]).toMatchObject({
      server: "calc",
      tool: "add",
      description: "Adds two numbers.",
      inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
    });
  });

  it("runs calls from the policy's message in a ChatEnv step, by qualified and bare name", async () => {
    const env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [mcp]);
    const policy = new ScriptedPolicy((_turn, _prompt, row) =>
      row === 0 ? '<tool>calc.add\n{"a": 2, "b": 40}</tool>' : '<tool>echo\n{"text": "there"}</tool> and <tool>add\n{"a": 1, "b": 1}</tool>',
    );
    const stepped = await env.step(policy.forward(await resetWith(env, ["q0", "q1"])));
    const prompts = stepped.getTensorDict("next").getHistory(["history", "prompt"]);
    expect(toolReplies(prompts.row(0))).toEqual([{ role: "tool", content: "Tool calc.add executed successfully:\n42" }]);
    expect(toolReplies(prompts.row(1))).toEqual([
      { role: "tool", content: "Tool calc.echo executed successfully:\nhi there" },
      { role: "tool", content: "Tool calc.add executed successfully:\n2" },
    ]);
  });

  it("answers arguments the server rejects, a tool error, an unknown tool and malformed JSON with error messages", async () => {
    const text =
      '<tool>calc.add\n{"a": "x", "b": 1}</tool><tool>calc.fail\n{"message": "no luck"}</tool><tool>subtract\n{}</tool><tool>calc.add\n{oops}</tool>';
    const [invalid, failed, unknown, malformed] = (await mcp.toolMessages(text)).map((m) => m.content);
    expect(invalid).toMatch(/^Tool calc\.add failed:\n.*Invalid arguments for tool add/);
    expect(invalid).toContain("expected number, received string");
    expect(failed).toBe("Tool calc.fail failed:\nno luck");
    expect(unknown).toBe('Tool subtract failed:\nunknown tool "subtract"; the tools are: calc.add, calc.echo, calc.fail, calc.sleep, calc.crash');
    expect(malformed).toMatch(/^Tool calc\.add failed:\nmalformed tool call: arguments are not valid JSON/);
  });

  it("fails a call that runs past timeoutMs and keeps serving", async () => {
    const started = performance.now();
    expect(await mcp.callTool("calc.sleep", { ms: 5_000 })).toBe("Tool calc.sleep failed:\ntimed out after 2000 ms");
    expect(performance.now() - started).toBeLessThan(4_500);
    expect(await mcp.callTool("calc.sleep", { ms: 10 })).toBe("Tool calc.sleep executed successfully:\nslept 10 ms");
  });

  it("answers a call that crashes the server with an error, then starts the server again", async () => {
    const crashed = await mcp.callTool("calc.crash", {});
    expect(crashed).toMatch(/^Tool calc\.crash failed:\n.*Connection closed/);
    expect(await mcp.callTool("add", { a: 3, b: 4 })).toBe("Tool calc.add executed successfully:\n7");
  });
});

describe("MCPToolTransform setup", () => {
  it("asks for server.tool when two servers have the tool", async () => {
    const mcp = new MCPToolTransform({ servers: { one: server(), two: server() } });
    try {
      expect(await mcp.callTool("add", { a: 1, b: 2 })).toBe("Tool add failed:\nambiguous tool name: servers one, two all have it; call it as server.add");
      expect(await mcp.callTool("two.add", { a: 1, b: 2 })).toBe("Tool two.add executed successfully:\n3");
    } finally {
      await mcp.close();
    }
  });

  it("throws MCPConnectionError naming the server when it cannot start", async () => {
    const mcp = new MCPToolTransform({ servers: { broken: { command: process.execPath, args: ["-e", "process.stderr.write('no mcp here'); process.exit(1)"] } } });
    const err = await mcp.connect().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MCPConnectionError);
    expect((err as MCPConnectionError).code).toBe("MCP_CONNECTION_FAILED");
    expect((err as MCPConnectionError).server).toBe("broken");
    expect((err as Error).message).toMatch(/^MCP server "broken": could not connect/);
    expect((err as Error).message).toContain("no mcp here");
    await mcp.close();
  });

  it.each([
    [{ servers: {} }, /MCPToolTransform options\.servers: at least one server is needed/],
    [{ servers: { calc: { args: [] } } }, /MCPToolTransform options\.servers\.calc\.command:/],
    [{ servers: { calc: { command: "node", args: "x" } } }, /MCPToolTransform options\.servers\.calc\.args:/],
    [{ servers: { "a.b": { command: "node" } } }, /MCPToolTransform options\.servers\.a\.b: a server name/],
    [{ servers: { calc: { command: "node" } }, timeoutMs: 0 }, /MCPToolTransform options\.timeoutMs:/],
  ])("rejects options %# with InvalidArgumentError naming the field", (options, pattern) => {
    const make = (): MCPToolTransform => new MCPToolTransform(options as never);
    expect(make).toThrow(InvalidArgumentError);
    expect(make).toThrow(pattern);
  });
});
