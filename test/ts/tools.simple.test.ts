// SimpleToolTransform on a real ChatEnv with a scripted policy: TS functions with zod argument schemas; results,
// and every kind of failure (unknown tool, malformed JSON, schema violations, a throwing or hanging tool) as error
// tool messages while the env goes on; the call layouts; JSON Schemas of the tools; bad options.
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { InvalidArgumentError, RequestAbortedError, TransformedEnv } from "../../sdk/index.js";
import { ChatEnv } from "../../sdk/envs/chat-env.js";
import { SimpleToolTransform } from "../../sdk/envs/tools/index.js";
import { resetWith, ScriptedPolicy, toolReplies } from "./tools.helpers.js";

let env: TransformedEnv | undefined;

afterEach(async () => {
  await env?.close();
  env = undefined;
});

const abortedCalls: string[] = [];

function makeTools(timeoutMs = 2_000): SimpleToolTransform {
  return new SimpleToolTransform({
    timeoutMs,
    tools: {
      add: {
        description: "Adds two numbers.",
        schema: z.object({ a: z.number(), b: z.number() }),
        run: ({ a, b }) => a + b,
      },
      lookup: {
        description: "Looks a word up.",
        schema: z.object({ word: z.string().min(1) }),
        run: async ({ word }, { row }) => {
          await new Promise((resolve) => setTimeout(resolve, 5));
          return { word, length: word.length, row };
        },
      },
      boom: { schema: z.object({}), run: () => { throw new RangeError("out of range"); } },
      hang: {
        schema: z.object({}),
        run: (_args, { signal }) =>
          new Promise<never>(() => {
            signal.addEventListener("abort", () => abortedCalls.push("hang"));
          }),
      },
    },
  });
}

/** Steps a one-row env whose policy says `content`; returns the tool messages appended. */
async function reply(transform: SimpleToolTransform, content: string): Promise<{ role: string; content: string }[]> {
  env = new TransformedEnv(new ChatEnv({ batchSize: [1] }), [transform]);
  const stepped = await env.step(new ScriptedPolicy(() => content).forward(await resetWith(env, ["q"])));
  return toolReplies(stepped.getTensorDict("next").getHistory(["history", "prompt"]).row(0));
}

describe("SimpleToolTransform", () => {
  it("runs a call in TorchRL's <tool>name\\n{json}</tool> layout and appends the result", async () => {
    expect(await reply(makeTools(), 'Adding.\n<tool>add\n{"a": 2, "b": 3.5}</tool>')).toEqual([
      { role: "tool", content: "Tool add executed successfully:\n5.5" },
    ]);
  });

  it("runs several calls in order, in every layout, with object results as JSON", async () => {
    const text =
      '<tool name="lookup">{"word": "torch"}</tool> then <tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call> ' +
      'and <tool>{"name": "add", "arguments": {"a": 10, "b": -4}}</tool>';
    expect((await reply(makeTools(), text)).map((m) => m.content)).toEqual([
      'Tool lookup executed successfully:\n{"word":"torch","length":5,"row":0}',
      "Tool add executed successfully:\n2",
      "Tool add executed successfully:\n6",
    ]);
  });

  it("answers arguments the zod schema rejects with an error naming the tool and the fields", async () => {
    const [m] = await reply(makeTools(), '<tool>add\n{"a": "two"}</tool>');
    expect(m?.content).toMatch(/^Tool add failed:\ninvalid arguments: /);
    expect(m?.content).toContain("a: Invalid input: expected number, received string");
    expect(m?.content).toContain("b: Invalid input: expected number, received undefined");
  });

  it("answers malformed JSON, an unknown tool and a throwing tool with error messages", async () => {
    const text = '<tool>add\n{"a": 1,, "b": 2}</tool><tool>divide\n{"a": 1}</tool><tool>boom\n{}</tool>';
    const [json, unknown, thrown] = (await reply(makeTools(), text)).map((m) => m.content);
    expect(json).toMatch(/^Tool add failed:\nmalformed tool call: arguments are not valid JSON \(/);
    expect(unknown).toBe('Tool divide failed:\nunknown tool "divide"; the tools are: add, lookup, boom, hang');
    expect(thrown).toBe("Tool boom failed:\nRangeError: out of range");
  });

  it("gives up on a tool that hangs after timeoutMs, aborting its signal, and the env goes on", async () => {
    const tools = makeTools(200);
    abortedCalls.length = 0;
    env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [tools]);
    const policy = new ScriptedPolicy((turn, _p, row) => (turn === 0 && row === 0 ? "<tool>hang\n{}</tool>" : '<tool>add\n{"a": 1, "b": 2}</tool>'));
    const stepped = await env.step(policy.forward(await resetWith(env, ["q0", "q1"])));
    const first = stepped.getTensorDict("next").getHistory(["history", "prompt"]);
    expect(toolReplies(first.row(0))).toEqual([{ role: "tool", content: "Tool hang failed:\ntimed out after 200 ms" }]);
    expect(toolReplies(first.row(1))[0]?.content).toBe("Tool add executed successfully:\n3");
    expect(abortedCalls).toEqual(["hang"]);
    const second = await env.step(policy.forward(env.stepMdp(stepped)));
    const replies = second.getTensorDict("next").getHistory(["history", "prompt"]).rows.map((h) => toolReplies(h)[0]?.content);
    expect(replies).toEqual(["Tool add executed successfully:\n3", "Tool add executed successfully:\n3"]);
  });

  it("reads a message's structured toolCalls, and adds nothing to a message without calls", async () => {
    const tools = makeTools();
    const messages = await tools.toolMessages({ role: "assistant", content: "", toolCalls: [{ name: "add", arguments: { a: 4, b: 4 } }] });
    expect(messages).toEqual([{ role: "tool", content: "Tool add executed successfully:\n8" }]);
    expect(await tools.toolMessages("The answer is <answer>8</answer>.")).toEqual([]);
    expect(await reply(tools, "Plain text, no call.")).toEqual([]);
  });

  it("rejects with RequestAbortedError when the env call is cancelled during a call", async () => {
    const tools = makeTools(10_000);
    const controller = new AbortController();
    setTimeout(() => {
      controller.abort();
    }, 100);
    await expect(tools.toolMessages("<tool>hang\n{}</tool>", { signal: controller.signal })).rejects.toBeInstanceOf(RequestAbortedError);
  });

  it("describes its tools with JSON Schemas made from the zod schemas", () => {
    const specs = makeTools().specs;
    expect(specs.map((s) => s.name)).toEqual(["add", "lookup", "boom", "hang"]);
    expect(specs[0]).toMatchObject({
      description: "Adds two numbers.",
      inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
    });
    expect(specs[1]?.inputSchema).toMatchObject({ properties: { word: { type: "string", minLength: 1 } } });
  });

  it.each([
    [{ tools: {} }, /SimpleToolTransform options\.tools: at least one tool is needed/],
    [{ tools: { add: { run: (): number => 1 } } }, /SimpleToolTransform options\.tools\.add\.schema:/],
    [{ tools: { add: { schema: z.object({}), run: 3 } } }, /SimpleToolTransform options\.tools\.add\.run: expected a function/],
    [{ tools: { "bad name": { schema: z.object({}), run: (): number => 1 } } }, /SimpleToolTransform options\.tools\.bad name: a tool name/],
    [{ tools: { add: { schema: z.object({}), run: (): number => 1 } }, timeoutMs: -5 }, /SimpleToolTransform options\.timeoutMs:/],
  ])("rejects options %# with InvalidArgumentError naming the field", (options, pattern) => {
    const make = (): SimpleToolTransform => new SimpleToolTransform(options as never);
    expect(make).toThrow(InvalidArgumentError);
    expect(make).toThrow(pattern);
  });
});
