// Multi-turn tool episodes: ChatEnv + PythonInterpreter + ToolEpisodeEnd rolled out with a scripted policy (a TS
// object writing fixed assistant messages, standing in for a model that calls tools) and with the real tiny model
// in a worker. Episodes end on an answer (an <answer> tag, or a message no tool answered) or at maxTurns.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, readFlags, TensorDict, TransformedEnv, TransformersWrapper, type History } from "../../sdk/index.js";
import { ChatEnv } from "../../sdk/envs/chat-env.js";
import { hasToolCall, PythonInterpreter, SimpleToolTransform, ToolEpisodeEnd } from "../../sdk/envs/tools/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";
import { ScriptedPolicy, toolReplies } from "./tools.helpers.js";
import { z } from "zod";

const queries = (n: number): TensorDict => new TensorDict({ query: Array.from({ length: n }, (_, i) => `task ${i}`) }, { batchSize: [n] });
const py = (code: string): string => `\`\`\`python\n${code}\n\`\`\``;

/** The number the last tool message reports (`... executed successfully:\n<n>`). */
function lastToolNumber(prompt: History): string {
  const tool = [...prompt.messages].reverse().find((m) => m.role === "tool");
  return tool?.content.split("\n")[1] ?? "none";
}

/** Per step (last batch dim), per row: [done, terminated, truncated]. */
function doneFlags(rollout: TensorDict): boolean[][][] {
  const steps = rollout.batchSize.at(-1)!;
  return Array.from({ length: steps }, (_, t) => {
    const next = rollout.index({ start: t, stop: t + 1 }, rollout.batchDims - 1).squeeze(rollout.batchDims - 1).getTensorDict("next");
    const [d, te, tr] = ["done", "terminated", "truncated"].map((k) => readFlags(next, k));
    return d!.map((_, r) => [d![r]!, te![r]!, tr![r]!]);
  });
}

describe("multi-turn tool episodes with a scripted policy", () => {
  it("runs code, feeds the result into the next turn, and terminates on the <answer>", async () => {
    await using env = new TransformedEnv(new ChatEnv({ batchSize: [2], systemPrompt: "Use python." }), [
      new PythonInterpreter({ timeoutMs: 5_000 }),
      new ToolEpisodeEnd({ maxTurns: 5 }),
    ]);
    const policy = new ScriptedPolicy((turn, prompt, row) =>
      turn === 0 ? `I will compute.\n${py(`print(sum(range(${10 * (row + 1)})))`)}` : `<answer>${lastToolNumber(prompt)}</answer>`,
    );
    const rollout = await env.rollout(5, policy, { tensordict: queries(2) });
    expect(rollout.batchSize).toEqual([2, 2]);
    expect(doneFlags(rollout)).toEqual([
      [[false, false, false], [false, false, false]],
      [[true, true, false], [true, true, false]],
    ]);
    const last = rollout.index({ start: 1, stop: 2 }, 1).squeeze(1).getTensorDict("next").getHistory(["history", "prompt"]);
    expect(last.row(0).messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant"]);
    expect(last.row(0).last?.content).toBe("<answer>45</answer>");
    expect(last.row(1).last?.content).toBe("<answer>190</answer>");
    expect(last.row(1).at(3)?.content).toBe("Code block 1 executed successfully:\n190\n");
  });

  it("truncates an episode that keeps calling tools at maxTurns", async () => {
    await using env = new TransformedEnv(new ChatEnv({ batchSize: [1] }), [new PythonInterpreter(), new ToolEpisodeEnd({ maxTurns: 3 })]);
    const policy = new ScriptedPolicy((turn) => py(`print(${turn})`));
    const rollout = await env.rollout(10, policy, { tensordict: queries(1) });
    expect(rollout.batchSize).toEqual([1, 3]);
    expect(doneFlags(rollout).map((step) => step[0])).toEqual([
      [false, false, false],
      [false, false, false],
      [true, false, true],
    ]);
    const final = rollout.index({ start: 2, stop: 3 }, 1).squeeze(1).getTensorDict("next");
    expect(final.getTensor("step_count").toNumbers()).toEqual([3]);
    const tools = final.getHistory(["history", "prompt"]).row(0).messages.filter((m) => m.role === "tool");
    expect(tools.map((m) => m.content)).toEqual([0, 1, 2].map((t) => `Code block 1 executed successfully:\n${t}\n`));
  });

  it("ends on an <answer> even next to a tool call, and not on plain text when endWithoutToolCall is false", async () => {
    const adder = new SimpleToolTransform({ tools: { add: { schema: z.object({ a: z.number(), b: z.number() }), run: ({ a, b }) => a + b } } });
    await using env = new TransformedEnv(new ChatEnv({ batchSize: [3] }), [adder, new ToolEpisodeEnd({ endWithoutToolCall: false })]);
    const policy = new ScriptedPolicy((_turn, _prompt, row) =>
      [ '<tool>add\n{"a": 1, "b": 2}</tool> <answer>3</answer>', '<tool>add\n{"a": 1, "b": 2}</tool>', "Thinking, no tool yet."][row]!,
    );
    const stepped = await env.step(policy.forward(await env.reset(queries(3))));
    const next = stepped.getTensorDict("next");
    expect(readFlags(next, "terminated")).toEqual([true, false, false]);
    expect(toolReplies(next.getHistory(["history", "prompt"]).row(0))).toEqual([{ role: "tool", content: "Tool add executed successfully:\n3" }]);
  });

  it("rejects bad options with InvalidArgumentError naming the field", () => {
    expect(() => new ToolEpisodeEnd({ maxTurns: 0 })).toThrow(/ToolEpisodeEnd options\.maxTurns:/);
    expect(() => new ToolEpisodeEnd({ answerTag: "a b" })).toThrow(InvalidArgumentError);
    expect(() => new ToolEpisodeEnd({ maxturns: 2 } as never)).toThrow(/ToolEpisodeEnd options\.maxturns: unknown field/);
  });
});

describe("multi-turn tool episodes with the tiny model in a worker", () => {
  let setup: TinyPolicy;

  beforeAll(async () => {
    setup = await startTinyPolicy(11);
  });

  afterAll(async () => {
    await setup.close();
  });

  it("a scripted first turn calls python, then the tiny model answers from a prompt holding the tool result", async () => {
    const model = new TransformersWrapper(setup.worker, { model: "policy", generateKwargs: { max_new_tokens: 12, seed: 3 } });
    const scripted = new ScriptedPolicy(() => py("print(6 * 7)"));
    const modelInputs: TensorDict[] = [];
    // Turn 0 from the scripted policy (the random tiny model never writes a python block); later turns from the model.
    const policy = async (td: TensorDict): Promise<TensorDict> => {
      const turn = td.getHistory(["history", "prompt"]).row(0).messages.filter((m) => m.role === "assistant").length;
      if (turn === 0) return scripted.forward(td);
      const out = await model.forward(td);
      modelInputs.push(out);
      return out;
    };
    await using env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [new PythonInterpreter(), new ToolEpisodeEnd({ maxTurns: 3 })]);
    // Stepped by hand: the two policies write different keys, so rollout could not stack their steps.
    const outcomes: TensorDict[] = [];
    let td = await env.reset(queries(2));
    for (let t = 0; t < 3; t++) {
      const stepped = await env.step(await policy(td));
      outcomes.push(stepped.getTensorDict("next"));
      if (readFlags(stepped.getTensorDict("next"), "done").some((d) => d)) break;
      td = env.stepMdp(stepped);
    }

    expect(outcomes).toHaveLength(2);
    expect(modelInputs).toHaveLength(1);
    const rendered = modelInputs[0]!.getStrings(["text", "prompt"]);
    for (const text of rendered) {
      expect(text).toContain("<|im_start|>tool\nCode block 1 executed successfully:\n42\n<|im_end|>");
      expect(text.endsWith("<|im_start|>assistant\n")).toBe(true);
    }
    for (const h of outcomes[1]!.getHistory(["history", "prompt"]).rows) {
      expect(h.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
      expect(hasToolCall(h.last!)).toBe(false);
    }
    expect(outcomes.map((next) => ["done", "terminated", "truncated"].map((k) => readFlags(next, k)))).toEqual([
      [[false, false], [false, false], [false, false]],
      [[true, true], [true, true], [false, false]],
    ]);
  });

  it("the tiny model alone runs turn after turn when only the turn limit ends the episode", async () => {
    const model = new TransformersWrapper(setup.worker, { model: "policy", generateKwargs: { max_new_tokens: 8, seed: 5 } });
    await using env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [
      new PythonInterpreter(),
      new ToolEpisodeEnd({ maxTurns: 3, endWithoutToolCall: false }),
    ]);
    const rollout = await env.rollout(10, model, { tensordict: queries(2) });
    expect(rollout.batchSize).toEqual([2, 3]);
    expect(doneFlags(rollout)[2]).toEqual([[true, false, true], [true, false, true]]);
    const prompts = [0, 1, 2].map((t) => rollout.index({ start: t, stop: t + 1 }, 1).squeeze(1).getTensorDict("next").getHistory(["history", "prompt"]));
    expect(prompts.map((p) => p.row(0).length)).toEqual([2, 3, 4]);
    expect(prompts[2]!.row(1).messages.map((m) => m.role)).toEqual(["user", "assistant", "assistant", "assistant"]);
  });
});
