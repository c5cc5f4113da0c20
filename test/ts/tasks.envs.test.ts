// Task environments end to end on the fixture datasets: reset puts the system prompt and the query in the history,
// a fixed response goes through step and comes back scored with TorchRL's keys and done flags; bad datasets and
// bad options fail with typed errors naming the field. One GSM8K rollout runs the real tiny-policy worker.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CountdownEnv,
  CountdownGenerator,
  COUNTDOWN_SYSTEM_PROMPT,
  flagColumn,
  GSM8K_SYSTEM_PROMPT,
  GSM8KEnv,
  gsm8kScore,
  IFEvalEnv,
  MATHEnv,
  readColumn,
  readFlags,
  TensorDict,
  TransformersWrapper,
  type ChatMessage,
  type EnvBase,
} from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

const FIXTURES = join(import.meta.dirname, "..", "fixtures", "datasets");
const GSM8K = join(FIXTURES, "gsm8k_mini.jsonl");
const MATH = join(FIXTURES, "math_mini.jsonl");
const IFEVAL = join(FIXTURES, "ifeval_mini.jsonl");

/** Steps `env` from `td` with one assistant message per row, as a policy in history mode would. */
async function respond(env: EnvBase, td: TensorDict, contents: readonly string[]): Promise<TensorDict> {
  const prompt = td.getHistory(["history", "prompt"]);
  const response: ChatMessage[][] = contents.map((content) => [{ role: "assistant", content }]);
  td.set(["history", "full"], prompt.appendEach(response));
  return env.step(td);
}

const col = (td: TensorDict, key: string | string[]): number[] => readColumn(td, ["next", ...(typeof key === "string" ? [key] : key)])!.map((v) => Math.round(v * 1e6) / 1e6);
const flags = (td: TensorDict, key: string): boolean[] => readFlags(td, ["next", key]);

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "posttrain-tasks-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("GSM8KEnv", () => {
  it("resets with the system prompt and a question, and scores 1.0 / 0.1 / 0 with TorchRL's keys", async () => {
    const env = new GSM8KEnv({ dataset: { files: GSM8K, shuffle: false, repeats: 3 }, batchSize: [3] });
    const td = await env.reset();
    const histories = td.getHistory(["history", "prompt"]);
    expect(histories.row(0).messages.map((m) => m.role)).toEqual(["system", "user"]);
    expect(histories.row(0).at(0)?.content).toBe(GSM8K_SYSTEM_PROMPT);
    expect(histories.row(0).at(1)?.content).toMatch(/^A baker makes 4 trays/);
    expect(new Set(histories.rows.map((h) => h.at(1)?.content)).size).toBe(1); // one group of 3 repeats
    const out = await respond(env, td, ["<think>4*9=36, 36-30=6</think> <answer>6</answer><|im_end|>", "<answer>7</answer>", "6 rolls"]);
    expect(col(out, "reward")).toEqual([1, 0.1, 0]);
    expect(col(out, "reward_answer")).toEqual([1, 1, 0]);
    expect(col(out, "reward_think")).toEqual([1, 0, 0]);
    expect(col(out, "reward_right")).toEqual([1, 0.1, 0]);
    expect(flags(out, "success")).toEqual([true, false, false]);
    // Answered rows terminate; maxSteps = 1 truncates every row.
    expect(flags(out, "terminated")).toEqual([true, true, false]);
    expect(flags(out, "truncated")).toEqual([true, true, true]);
    expect(flags(out, "done")).toEqual([true, true, true]);
    // stepMdp drops the reward keys.
    const next = env.stepMdp(out);
    expect(next.has("reward_answer") || next.has("success")).toBe(false);
    await env.close();
  });

  it("matches gsm8kScore on every fixture row and keeps going without maxSteps", async () => {
    const env = new GSM8KEnv({ dataset: { files: GSM8K, shuffle: true, seed: 3 }, batchSize: [4], maxSteps: null, setDoneIfAnswer: false, correctReward: 2 });
    const td = await env.reset();
    const answers = td.getStrings("answer");
    const responses = answers.map((a, i) => (i % 2 === 0 ? `<answer>${a.split("####")[1]!.trim()}</answer>` : "<answer>-1</answer>"));
    const out = await respond(env, td, responses);
    expect(col(out, "reward")).toEqual(responses.map((r, i) => gsm8kScore(r, answers[i]!, { correctReward: 2 }).reward));
    expect(col(out, "reward")).toEqual([2, 0.1, 2, 0.1]);
    expect(flags(out, "done")).toEqual([false, false, false, false]);
  });

  it("with maxSteps 2, a row without an answer goes on", async () => {
    const env = new GSM8KEnv({ dataset: { files: GSM8K, shuffle: false }, batchSize: [2], maxSteps: 2 });
    const out = await respond(env, await env.reset(), ["<answer>6</answer>", "let me think"]);
    expect(flags(out, "done")).toEqual([true, false]);
    expect(flags(out, "truncated")).toEqual([false, false]);
  });

  it("rejects a dataset row without '#### N', naming the file, row and column", async () => {
    const file = join(dir, "bad_gsm8k.jsonl");
    await writeFile(file, `${JSON.stringify({ question: "q1", answer: "#### 1" })}\n${JSON.stringify({ question: "q2", answer: "no final answer" })}\n`);
    const env = new GSM8KEnv({ dataset: { files: file } });
    await expect(env.reset()).rejects.toMatchObject({ code: "DATASET_FIELD", row: 1, field: "answer", file });
  });

  it("rejects bad options naming the field", () => {
    expect(() => new GSM8KEnv({ dataset: { files: GSM8K }, correctReward: "1" as never })).toThrow(/GSM8KEnv options\.correctReward/);
    expect(() => new GSM8KEnv({} as never)).toThrow(/GSM8KEnv options\.dataset/);
    expect(() => new GSM8KEnv({ dataset: { files: GSM8K }, maxSteps: 0 })).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
    expect(() => new GSM8KEnv({ dataset: { files: GSM8K }, rewards: [] } as never)).toThrow(/rewards/);
  });
});

describe("MATHEnv", () => {
  it("scores the boxed answer with the string fallback (math-verify not installed here) and closes", async () => {
    const env = new MATHEnv({ dataset: { files: MATH, shuffle: false }, batchSize: [2], equivalence: "string" });
    const td = await env.reset();
    expect(td.getHistory(["history", "prompt"]).row(0).at(1)?.content).toBe("Solve for $x$: $3x + 7 = 22$.");
    const out = await respond(env, td, ["<think>3x = 15</think><answer>x = 5</answer>", "<answer>\\frac{5}{7}</answer>"]);
    expect(col(out, "reward")).toEqual([1, 0.1]);
    expect(flags(out, "success")).toEqual([true, false]);
    expect((await env.verifier()).backend).toBe("string");
    await env.close();
  });

  it("nested braces: \\dfrac{5}{6} matches the solution's \\boxed{\\frac{5}{6}}", async () => {
    const env = new MATHEnv({ dataset: { files: MATH, shuffle: false, position: { epoch: 0, index: 1 } }, batchSize: [1] });
    const td = await env.reset();
    expect(td.getStrings("answer")[0]).toContain("\\boxed{\\frac{5}{6}}");
    const out = await respond(env, td, ["<answer>$\\dfrac{5}{6}$</answer>"]);
    expect(col(out, "reward")).toEqual([1]);
    const verifier = await env.verifier();
    if (verifier.backend === "string") expect(verifier.fallbackReason).toMatch(/math-verify is not available/);
    await env.close();
  });

  it("rejects a bad equivalence option naming the field", () => {
    expect(() => new MATHEnv({ dataset: { files: MATH }, equivalence: "sympy" as never })).toThrow(/MATHEnv options\.equivalence/);
  });
});

describe("CountdownEnv", () => {
  it("serves seeded puzzles in groups and scores the expression", async () => {
    const env = new CountdownEnv({ seed: 11, repeats: 2, batchSize: [4], numCount: 4, maxNumber: 20, maxTarget: 200 });
    const td = await env.reset();
    const queries = td.getHistory(["history", "prompt"]).rows.map((h) => h.at(1)?.content);
    expect(td.getHistory(["history", "prompt"]).row(0).at(0)?.content).toBe(COUNTDOWN_SYSTEM_PROMPT);
    expect(queries[0]).toBe(queries[1]);
    expect(queries[2]).toBe(queries[3]);
    expect(queries[0]).not.toBe(queries[2]);
    const reference = new CountdownGenerator({ seed: 11, numCount: 4, maxNumber: 20, maxTarget: 200 });
    const [first, second] = [reference.problem(), reference.problem()];
    expect(td.getStrings("answer")).toEqual([first.answer, first.answer, second.answer, second.answer]);
    const n = first.numbers;
    const out = await respond(env, td, [
      `<think>try</think><answer>${first.solution}</answer>`,
      `<answer>${n[0]} + ${n[0]}</answer>`, // reuses a number (or is wrong)
      `<answer>${second.solution} = ${second.target}</answer>`, // "=" is not allowed
      second.solution, // no tags
    ]);
    expect(col(out, "reward")).toEqual([1, 0.1, 0.1, 0]);
    expect(flags(out, "terminated")).toEqual([true, true, true, false]);
    expect(env.primer.position).toBe(4);
  });

  it("partial reset gives new puzzles only to the reset rows", async () => {
    const env = new CountdownEnv({ seed: 2, batchSize: [2] });
    const td = await env.reset();
    const before = td.getStrings("answer");
    td.set("_reset", flagColumn([2], [false, true]));
    const again = await env.reset(td);
    const after = again.getStrings("answer");
    expect(after[0]).toBe(before[0]);
    expect(after[1]).not.toBe(before[1]);
  });

  it("rejects bad options naming the field", () => {
    expect(() => new CountdownEnv({ numCount: 1 })).toThrow(/CountdownEnv options\.numCount/);
    expect(() => new CountdownEnv({ repeats: 0 })).toThrow(/CountdownEnv options\.repeats/);
    expect(() => new CountdownEnv({ formatReward: Number.NaN })).toThrow(/CountdownEnv options\.formatReward/);
  });
});

describe("IFEvalEnv", () => {
  it("scores the answer block strictly and loosely with TorchRL's reward", async () => {
    const env = new IFEvalEnv({ dataset: { files: IFEVAL, shuffle: false, repeats: 3 }, batchSize: [3] });
    const td = await env.reset();
    expect(td.getHistory(["history", "prompt"]).row(0).at(1)?.content).toMatch(/^Describe a sunrise/);
    const out = await respond(env, td, [
      "<think>short, no commas</think><answer>The sun climbs out of the calm sea and paints it gold</answer>",
      "<answer>Sure, here it is:\nThe sun climbs out of the calm sea</answer>", // comma only in the first line: loose passes
      "The sun climbs out of the calm sea", // no answer block: nothing followed
    ]);
    expect(readFlags(out, ["next", "ifeval_score", "prompt_level_strict_acc"])).toEqual([true, false, false]);
    expect(readFlags(out, ["next", "ifeval_score", "prompt_level_loose_acc"])).toEqual([true, true, false]);
    expect(col(out, ["ifeval_score", "inst_level_strict_acc"])).toEqual([1, 0.5, 0]);
    // 0.4 + 0.3 + 0.2 + 0.1 + 0.1 + 0.05; 0.3·0.5 + 0.2 + 0.1 + 0.1; 0
    expect(col(out, "reward")).toEqual([1.15, 0.55, 0]);
    expect(flags(out, "terminated")).toEqual([true, true, false]);
  });

  it("validates every row's instructions at load, naming the row and column", async () => {
    const file = join(dir, "bad_ifeval.jsonl");
    const rows = [
      { prompt: "ok", instruction_id_list: ["punctuation:no_comma"], kwargs: [{}] },
      { prompt: "bad", instruction_id_list: ["length_constraints:number_words"], kwargs: [{ num_words: 5, relation: "about" }] },
    ];
    await writeFile(file, rows.map((r) => JSON.stringify(r)).join("\n"));
    await expect(new IFEvalEnv({ dataset: { files: file } }).reset()).rejects.toMatchObject({ code: "DATASET_FIELD", row: 1, field: "kwargs" });
    await writeFile(file, JSON.stringify({ prompt: "x", instruction_id_list: ["language:response_language"], kwargs: [{ language: "de" }] }));
    // Unimplemented instructions are skipped by default (test/ts/hub-dataset.test.ts); "error" rejects them.
    await expect(new IFEvalEnv({ dataset: { files: file }, unsupportedInstructions: "error" }).reset()).rejects.toMatchObject({
      code: "DATASET_FIELD",
      row: 0,
      field: "instruction_id_list",
    });
  });

  it("loads every fixture row", async () => {
    const env = new IFEvalEnv({ dataset: { files: IFEVAL } });
    expect((await env.load()).size).toBeGreaterThanOrEqual(20);
  });
});

describe("GSM8KEnv with the tiny-policy worker", () => {
  let setup: TinyPolicy;

  beforeAll(async () => {
    setup = await startTinyPolicy(3);
  });

  afterAll(async () => {
    await setup.close();
  });

  it("rolls out one step: the reward is the GSM8K score of what the model wrote", async () => {
    const env = new GSM8KEnv({ dataset: { files: GSM8K, seed: 1, repeats: 2 }, batchSize: [2] });
    const policy = new TransformersWrapper(setup.worker, { model: "policy", generateKwargs: { max_new_tokens: 12, seed: 0 } });
    const rollout = await env.rollout(1, policy);
    expect(rollout.batchSize).toEqual([2, 1]);
    const flat = rollout.reshape([2]);
    const responses = flat.getHistory(["history", "full"]).rows.map((h) => h.last!);
    expect(responses.every((m) => m.role === "assistant")).toBe(true);
    const answers = flat.getStrings("answer");
    const expected = responses.map((m, i) => gsm8kScore(m.content, answers[i]!).reward);
    expect(col(flat, "reward")).toEqual(expected.map((v) => Math.round(v * 1e6) / 1e6));
    expect(readFlags(flat, ["next", "done"])).toEqual([true, true]);
    await env.close();
  });
});
