// ArithmeticToolEnv without a model: the problem stream, the calculator's call syntax and answers, the reward at the
// step that ends an episode, the required turn limit, and SimpleToolTransform's `parser` and `history` that it uses.
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  ArithmeticToolEnv,
  ArithmeticToolGenerator,
  arithmeticToolAnswer,
  arithmeticToolReward,
  History,
  InvalidArgumentError,
  parseCalculatorCalls,
  readFlags,
  runCalculator,
  SimpleToolTransform,
  type TensorDict,
} from "../../sdk/index.js";
import { ScriptedPolicy } from "./tools.helpers.js";

/** Per step of a `[B, T]` rollout: `(next, key)` per row. */
function perStep(rollout: TensorDict, key: string, flags = false): (number | boolean)[][] {
  return Array.from({ length: rollout.batchSize[1]! }, (_, t) => {
    const next = rollout.index({ start: t, stop: t + 1 }, 1).squeeze(1).getTensorDict("next");
    return flags ? readFlags(next, key) : next.getTensor(key).toNumbers().map((v) => Math.round(v * 1000) / 1000);
  });
}

describe("ArithmeticToolEnv", () => {
  it("draws seeded problems a op b within the operand range", () => {
    const a = new ArithmeticToolGenerator({ seed: 3, operations: ["+", "-", "*"], minOperand: 2, maxOperand: 20 });
    const b = new ArithmeticToolGenerator({ seed: 3, operations: ["+", "-", "*"], minOperand: 2, maxOperand: 20 });
    const problems = Array.from({ length: 200 }, () => a.problem());
    expect(Array.from({ length: 200 }, () => b.problem())).toEqual(problems);
    for (const p of problems) {
      const [, x, op, y] = /^(\d+)([-+*])(\d+)$/.exec(p.query)!;
      expect(Number(x)).toBeGreaterThanOrEqual(2);
      expect(Number(y)).toBeLessThanOrEqual(20);
      expect(p.answer).toBe(runCalculator(p.query));
      if (op === "-") expect(Number(p.answer)).toBeGreaterThanOrEqual(0);
    }
    expect(new Set(problems.map((p) => /[-+*]/.exec(p.query)![0]))).toEqual(new Set(["+", "-", "*"]));
  });

  it("reads calculator calls and answers", () => {
    expect(parseCalculatorCalls("=")).toEqual([{ ok: true, name: "calc", arguments: {}, format: "custom" }]);
    expect(parseCalculatorCalls("x=q")).toHaveLength(1);
    expect(parseCalculatorCalls("42")).toEqual([]);
    expect(parseCalculatorCalls('<tool>calc\n{"expression": "6*7"}</tool> and =')).toEqual([
      { ok: true, name: "calc", arguments: { expression: "6*7" }, format: "tool-block" },
    ]);
    expect(runCalculator("", "7*8")).toBe("56");
    expect(runCalculator("7/2", "1+1")).toBe("7/2");
    expect(() => runCalculator("(2")).toThrow(/missing "\)"/);
    expect(() => runCalculator("")).toThrow(/nothing to evaluate/);
    expect(arithmeticToolAnswer("42 apples")).toBe("42");
    expect(arithmeticToolAnswer("06<|im_end|>")).toBe("06");
    expect(arithmeticToolAnswer("I think <answer> 12 </answer>")).toBe("12");
    expect(arithmeticToolAnswer("4=")).toBeNull(); // a call, not an answer
    expect(arithmeticToolAnswer("four")).toBeNull();
    const levels = { correctReward: 1, formatReward: 0.1 };
    expect(arithmeticToolReward("06", "6", levels)).toEqual({ reward: 1, success: true });
    expect(arithmeticToolReward("7", "6", levels)).toEqual({ reward: 0.1, success: false });
    expect(arithmeticToolReward("x", "6", levels)).toEqual({ reward: 0, success: false });
  });

  it("runs episodes: calculator, answer or turn limit, rewarded at the step that ends them", async () => {
    // Row 0: "=" then copies the result. Row 1: "=" forever (truncated at maxTurns). Row 2: a wrong number at once.
    // Row 3: TorchRL's named call on its own expression, then an <answer> block.
    const policy = new ScriptedPolicy((turn, prompt, row) => {
      const result = prompt.messages.findLast((m) => m.role === "tool")?.content.split("\n")[1] ?? "?";
      if (row === 1) return "=";
      if (row === 2) return "1000";
      if (row === 3) return turn === 0 ? '<tool>calc\n{"expression": "2*3"}</tool>' : `<answer>${result}</answer>`;
      return turn === 0 ? "=" : result;
    });
    await using env = new ArithmeticToolEnv({ maxTurns: 3, batchSize: [4], seed: 1, maxOperand: 9, toolReward: 0.2, systemPrompt: null });
    const rollout = await env.rollout(3, policy, { breakWhenAnyDone: false, breakWhenAllDone: true, autoReset: false, tensordict: await env.reset() });
    expect(rollout.batchSize).toEqual([4, 3]);
    // Done rows are stepped again by the rollout (no auto-reset) and scored again: read each row up to its end.
    expect(perStep(rollout, "done", true).map((s) => s.slice(0, 4))).toEqual([
      [false, false, true, false],
      [true, false, true, true],
      [true, true, true, true],
    ]);
    expect(perStep(rollout, "truncated", true)[2]![1]).toBe(true);
    const rewards = perStep(rollout, "reward");
    expect([rewards[0]![0], rewards[1]![0]]).toEqual([0, 1.2]); // right, after the calculator
    expect([rewards[0]![1], rewards[1]![1], rewards[2]![1]]).toEqual([0, 0, 0]); // calling forever earns nothing
    expect(rewards[0]![2]).toBe(0.1); // a wrong number
    expect(rewards[1]![3]).toBe(0.3); // 2*3 is not its question: a wrong number (0.1), after using the calculator (0.2)
    expect(perStep(rollout, "success")[1]).toEqual([1, 0, 0, 0]);
    expect(perStep(rollout, "used_tool")[2]).toEqual([1, 1, 0, 1]);
    const last = rollout.index({ start: 1, stop: 2 }, 1).squeeze(1).getTensorDict("next").getHistory(["history", "prompt"]);
    const answer = rollout.getStrings("answer")[0]!;
    expect(last.row(0).toJSON()).toEqual([
      { role: "user", content: rollout.getStrings("query")[0] },
      { role: "assistant", content: "=" },
      { role: "tool", content: `Tool calc executed successfully:\n${answer}` },
      { role: "assistant", content: answer },
    ]);
    expect(last.row(3).at(2)?.content).toBe("Tool calc executed successfully:\n6");
  });

  it("requires a turn limit and checks its options, naming the field", () => {
    const cases: [unknown, RegExp][] = [
      [{}, /^ArithmeticToolEnv options\.maxTurns: required: a tool episode needs a turn limit/],
      [{ maxTurns: 0 }, /ArithmeticToolEnv options\.maxTurns: Too small/],
      [{ maxTurns: 2, minOperand: 5, maxOperand: 3 }, /ArithmeticToolEnv options\.maxOperand: must be at least minOperand \(5\), got 3/],
      [{ maxTurns: 2, operations: ["/"] }, /ArithmeticToolEnv options\.operations\.0/],
      [{ maxTurns: 2, inputMode: "text" }, /ArithmeticToolEnv options\.inputMode: unknown field/],
    ];
    for (const [options, message] of cases) {
      const err = (() => {
        try {
          new ArithmeticToolEnv(options as never);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(err, String(message)).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toMatch(message);
    }
  });
});

describe("SimpleToolTransform parser and history", () => {
  it("reads calls with a custom parser and gives the tool the conversation", async () => {
    const seen: (string | undefined)[] = [];
    const tools = new SimpleToolTransform({
      tools: {
        echo: {
          schema: z.object({}),
          run: (_args, { history }) => {
            seen.push(history?.messages[0]?.content);
            return "ok";
          },
        },
      },
      parser: (message) => (message.content.startsWith("!") ? [{ ok: true, name: "echo", arguments: {}, format: "custom" }] : []),
    });
    const history = History.from([{ role: "user", content: "the question" }, { role: "assistant", content: "!" }]);
    expect(await tools.toolMessages("!", { history })).toEqual([{ role: "tool", content: "Tool echo executed successfully:\nok" }]);
    expect(await tools.toolMessages("<tool>echo</tool>")).toEqual([]); // the default syntax is not read any more
    expect(seen).toEqual(["the question"]);
    expect(() => new SimpleToolTransform({ tools: { echo: { schema: z.object({}), run: () => 1 } }, parser: "x" as never })).toThrow(
      /SimpleToolTransform options\.parser: expected a function/,
    );
  });
});
