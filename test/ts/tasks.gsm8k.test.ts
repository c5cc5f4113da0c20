// GSM8K parser and reward: "####" answers, <think>/<answer> tags, number normalisation and the three reward levels.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { extractGSM8KAnswer, extractTags, gsm8kScore, normalizeGSM8KAnswer, stripEos } from "../../sdk/envs/tasks/index.js";

const SOLUTION = "Each box holds 12 pens, so 3 boxes hold 3 * 12 = 36 pens.\n#### 36";

describe("GSM8K answers", () => {
  it("takes the text after the last ####", () => {
    expect(extractGSM8KAnswer(SOLUTION)).toBe("36");
    expect(extractGSM8KAnswer("a #### b\n####   1,250  ")).toBe("1,250");
  });

  it("rejects a solution without an answer, naming GSM8K", () => {
    expect(() => extractGSM8KAnswer("no marker here")).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
    expect(() => extractGSM8KAnswer("no marker here")).toThrow(/GSM8K answer: no "####" marker/);
    expect(() => extractGSM8KAnswer("work #### ")).toThrow(/nothing after/);
  });

  it.each([
    ["1,000", "1000"],
    ["$5", "5"],
    ["5.0", "5"],
    ["120.00", "120"],
    ["0.50", "0.5"],
    ["45%", "45"],
    ["  7. ", "7"],
    ["-3", "-3"],
    ["$1,234.50", "1234.5"],
    ["100", "100"],
  ])("normalises %j to %j", (raw, expected) => {
    expect(normalizeGSM8KAnswer(raw)).toBe(expected);
  });

  it("keeps non-numeric text (it only matches itself)", () => {
    expect(normalizeGSM8KAnswer("36 pens")).toBe("36 pens");
  });
});

describe("think/answer tags", () => {
  it("extracts the first think and answer blocks, trimmed, across lines", () => {
    expect(extractTags("<think>\n a \n</think> <answer> 4 </answer><answer>5</answer>")).toEqual({ think: "a", answer: "4" });
  });

  it("treats unclosed or missing tags as absent", () => {
    expect(extractTags("<think>never closed <answer>4")).toEqual({ think: "", answer: "" });
    expect(extractTags("just text 4")).toEqual({ think: "", answer: "" });
  });

  it("strips trailing eos markers", () => {
    expect(stripEos("<answer>4</answer><|im_end|>")).toBe("<answer>4</answer>");
    expect(stripEos("x <|im_end|>\n<|endoftext|>")).toBe("x");
    expect(stripEos("x</s>", ["</s>"])).toBe("x");
    expect(stripEos("<|im_end|> in the middle")).toBe("<|im_end|> in the middle");
  });
});

describe("gsm8kScore", () => {
  it("gives 1.0 for the right number in the answer tag", () => {
    const s = gsm8kScore("<think>3 * 12 = 36</think> <answer>36</answer><|im_end|>", SOLUTION);
    expect(s).toMatchObject({ reward: 1, rewardRight: 1, rewardAnswer: 1, rewardThink: 1, success: true, answer: "36" });
  });

  it("compares normalised numbers", () => {
    const thousand = "#### 1000";
    expect(gsm8kScore("<answer>1,000</answer>", thousand).reward).toBe(1);
    expect(gsm8kScore("<answer>$1000.00</answer>", thousand).reward).toBe(1);
    expect(gsm8kScore("<answer>5</answer>", "#### $5").reward).toBe(1);
    expect(gsm8kScore("<answer>5.0</answer>", "#### 5").reward).toBe(1);
    expect(gsm8kScore("<answer>5.01</answer>", "#### 5").reward).toBe(0.1);
  });

  it("gives 0 for the right number without tags (TorchRL: no parseable answer)", () => {
    expect(gsm8kScore("The answer is 36.", SOLUTION)).toMatchObject({ reward: 0, success: false, rewardAnswer: 0 });
  });

  it("gives 0.1 for a well-formed wrong answer, and counts the think block separately", () => {
    expect(gsm8kScore("<answer>35</answer>", SOLUTION)).toMatchObject({ reward: 0.1, rewardAnswer: 1, rewardThink: 0, success: false });
    expect(gsm8kScore("<answer>36 pens</answer>", SOLUTION).reward).toBe(0.1);
  });

  it("gives 0 for a wrong or malformed answer without a usable tag", () => {
    expect(gsm8kScore("<think>hmm</think>", SOLUTION)).toMatchObject({ reward: 0, rewardThink: 1 });
    expect(gsm8kScore("<answer></answer>", SOLUTION).reward).toBe(0);
    expect(gsm8kScore("<answer>36", SOLUTION).reward).toBe(0);
    expect(gsm8kScore("", SOLUTION).reward).toBe(0);
  });

  it("uses custom reward levels", () => {
    expect(gsm8kScore("<answer>36</answer>", SOLUTION, { correctReward: 2 }).reward).toBe(2);
    expect(gsm8kScore("<answer>1</answer>", SOLUTION, { formatReward: 0 }).reward).toBe(0);
  });

  it("rejects bad options with a typed error naming the field", () => {
    const bad = (): unknown => gsm8kScore("<answer>36</answer>", SOLUTION, { correctReward: Number.NaN });
    expect(bad).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
    expect(bad).toThrow(/gsm8kScore options\.correctReward/);
    expect(() => gsm8kScore("x", SOLUTION, { formatReward: "0.1" as unknown as number })).toThrow(/options\.formatReward/);
  });
});

describe("the gsm8k_mini fixture", () => {
  it("has a final answer equal to the last calculator annotation of each solution", () => {
    const file = join(import.meta.dirname, "..", "fixtures", "datasets", "gsm8k_mini.jsonl");
    const rows = readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { question: string; answer: string });
    expect(rows.length).toBeGreaterThanOrEqual(20);
    for (const row of rows) {
      const results = [...row.answer.matchAll(/<<[^=]+=([^>]+)>>/g)].map((m) => m[1]!);
      expect(results.length).toBeGreaterThan(0);
      expect(normalizeGSM8KAnswer(extractGSM8KAnswer(row.answer))).toBe(normalizeGSM8KAnswer(results[results.length - 1]!));
    }
  });
});
