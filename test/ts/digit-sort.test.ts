import { describe, expect, it } from "vitest";
import {
  DigitSortEnv,
  DigitSortPrimer,
  InvalidArgumentError,
  digitSortExamples,
  digitSortProblem,
  digitSortReward,
  digitSortSplitOf,
  digitSortSplitSize,
  readColumn,
  type ChatMessage,
  type TensorDict,
} from "../../sdk/index.js";

/** Steps `env` with one assistant message per row, as a policy in history mode would. */
async function respond(env: DigitSortEnv, td: TensorDict, contents: readonly string[]): Promise<TensorDict> {
  const prompt = td.getHistory(["history", "prompt"]);
  const response: ChatMessage[][] = contents.map((content) => [{ role: "assistant", content }]);
  td.set(["history", "full"], prompt.appendEach(response));
  return env.step(td);
}

const digitsOf = (query: string): string => query.slice(query.lastIndexOf(" ") + 1);

describe("digit-sort reward", () => {
  it("gives partial credit by position when the length matches, else 0", () => {
    expect(digitSortReward("1378", "1378")).toBe(1);
    expect(digitSortReward("1387", "1378")).toBe(0.5);
    expect(digitSortReward(" 1378 <|im_end|>", "1378")).toBe(1);
    expect(digitSortReward("137", "1378")).toBe(0);
    expect(digitSortReward("13788", "1378")).toBe(0);
    expect(digitSortReward("", "1378")).toBe(0);
    // repeating one character scores only where the answer has that character
    expect(digitSortReward("1111", "1378")).toBe(0.25);
    expect(digitSortReward("9999", "1378")).toBe(0);
  });

  it("builds the query and the ascending answer", () => {
    const p = digitSortProblem("3817");
    expect(p.query).toBe("sort 4 digits: 3817");
    expect(p.answer).toBe("1378");
    const q = digitSortProblem("90210");
    expect(q.answer).toBe([9, 0, 2, 1, 0].sort((a, b) => a - b).join(""));
  });
});

describe("digit-sort split and stream", () => {
  it("partitions every digit string into disjoint train and held-out splits", () => {
    const train = digitSortExamples({ count: 3000, split: "train", seed: 1 });
    const held = digitSortExamples({ count: 800, split: "eval", seed: 1 });
    const trainSet = new Set(train.map((p) => p.digits));
    for (const p of held) {
      expect(trainSet.has(p.digits)).toBe(false);
      expect(digitSortSplitOf(p.digits)).toBe("eval");
    }
    for (const p of train) expect(digitSortSplitOf(p.digits)).toBe("train");
    const evalSize = digitSortSplitSize(4, 0.2, "eval");
    expect(evalSize + digitSortSplitSize(4, 0.2, "train")).toBe(10_000);
    expect(evalSize).toBeGreaterThan(1700);
    expect(evalSize).toBeLessThan(2300);
    // a bigger held-out share moves strings from train to eval, never the other way
    for (const p of held) expect(digitSortSplitOf(p.digits, 0.5)).toBe("eval");
  });

  it("is deterministic per seed and differs across seeds", () => {
    const a = digitSortExamples({ count: 50, seed: 7 }).map((p) => p.digits);
    const b = digitSortExamples({ count: 50, seed: 7 }).map((p) => p.digits);
    const c = digitSortExamples({ count: 50, seed: 8 }).map((p) => p.digits);
    expect(a).toEqual(b);
    expect(a).not.toEqual(c);
    for (const d of a) expect(d).toMatch(/^\d{4}$/);
    expect(digitSortExamples({ count: 5, numDigits: 6 }).every((p) => p.digits.length === 6)).toBe(true);
  });

  it("repeats each prompt in a row and resumes from a position", () => {
    const primer = new DigitSortPrimer({ seed: 3, repeats: 3 });
    const first = primer.problems(7).map((p) => p.digits);
    expect(first[0]).toBe(first[1]);
    expect(first[1]).toBe(first[2]);
    expect(first[3]).not.toBe(first[2]);
    const rest = primer.problems(5).map((p) => p.digits);
    const resumed = new DigitSortPrimer({ seed: 3, repeats: 3, position: primer.position - 5 });
    expect(resumed.problems(5).map((p) => p.digits)).toEqual(rest);
    primer.resetDataloader();
    expect(primer.problems(7).map((p) => p.digits)).toEqual(first);
  });

  it("rejects bad options naming the field", () => {
    expect(() => new DigitSortEnv({ numDigits: 1 })).toThrow(InvalidArgumentError);
    expect(() => new DigitSortEnv({ numDigits: 1 })).toThrow(/DigitSortEnv options\.numDigits/);
    expect(() => new DigitSortEnv({ heldOutFraction: 1 })).toThrow(/heldOutFraction/);
    expect(() => digitSortExamples({ count: 0 })).toThrow(/digitSortExamples options\.count/);
  });
});

describe("DigitSortEnv", () => {
  it("asks for the next problems at reset and scores the responses at step", async () => {
    const env = new DigitSortEnv({ seed: 5, repeats: 2, batchSize: [4] });
    const td = await env.reset();
    const queries = td.getStrings("query");
    expect(queries[0]).toBe(queries[1]);
    expect(queries[2]).not.toBe(queries[1]);
    const answers = queries.map((q) => digitSortProblem(digitsOf(q)).answer);
    const wrongOrder = answers[1]!.split("").reverse().join("");
    const out = await respond(env, td, [`${answers[0]!}<|im_end|>`, wrongOrder, "x", `${answers[3]!.slice(0, 3)}0`]);
    const next = out.getTensorDict("next");
    const expected = [1, digitSortReward(wrongOrder, answers[1]!), 0, digitSortReward(`${answers[3]!.slice(0, 3)}0`, answers[3]!)];
    expect(readColumn(next, "reward")).toEqual(expected);
    expect(readColumn(next, ["reward_components", "sorted"])).toEqual(expected);
    expect(readColumn(next, ["reward_components", "exact"])).toEqual(expected.map((r) => (r === 1 ? 1 : 0)));
    expect(next.getTensor("done").toNumbers()).toEqual([1, 1, 1, 1]);
  });

  it("gives SFT examples of its own split without moving its stream", async () => {
    const env = new DigitSortEnv({ split: "eval", seed: 2, batchSize: [2] });
    const examples = env.sftExamples(20);
    expect(examples.every((e) => digitSortSplitOf(e.digits) === "eval" && e.answer === digitSortProblem(e.digits).answer)).toBe(true);
    const td = await env.reset();
    expect(td.getStrings("query")).toEqual(examples.slice(0, 2).map((e) => e.query));
  });
});
