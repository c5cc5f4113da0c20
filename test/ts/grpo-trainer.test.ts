import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import {
  GRPOTrainer,
  InvalidArgumentError,
  RunConfigMismatchError,
  RunDirectoryError,
  WorkerPool,
  digitSortExamples,
  digitSortProblem,
  digitSortReward,
  GRPOTrainerConfigSchema,
  TaskConfigSchema,
  type ChatMessage,
  type GRPOTrainerConfigInput,
  type RewardSample,
  type StepRecord,
} from "../../sdk/index.js";
import { lossOf } from "../../sdk/runs/grpo-config.js";
import { rewardMeans } from "../../sdk/runs/step-metrics.js";
import { createTaskEnv } from "../../sdk/runs/task-env.js";
import { startTinyModelPool, stopTinyModelPool } from "./tiny-policy.js";

let dir: string;
let modelPath: string;
let pool: WorkerPool;

beforeAll(async () => {
  ({ dir, modelPath, pool } = await startTinyModelPool("posttrain-grpo-trainer-"));
});

afterAll(() => stopTinyModelPool(dir, pool));

const P = 4;
const G = 4;

function config(runDir: string, extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput {
  return {
    model: { path: modelPath },
    task: { type: "digit-sort" },
    groupSize: G,
    promptsPerStep: P,
    maxNewTokens: 6,
    optimizer: { lr: 1e-3 },
    steps: 3,
    runDir,
    ...extra,
  };
}

async function lines(path: string): Promise<Record<string, unknown>[]> {
  const text = await readFile(path, "utf8");
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

async function collect(trainer: GRPOTrainer, onRecord?: (r: StepRecord) => Promise<void>): Promise<StepRecord[]> {
  const out: StepRecord[] = [];
  for await (const r of trainer.run()) {
    out.push(r);
    await onRecord?.(r);
  }
  return out;
}

const STEP_KEYS = [
  "step",
  "policy_version",
  "reward_mean",
  "reward_std",
  "reward/sorted",
  "reward/exact",
  "loss",
  "loss_objective",
  "loss_entropy",
  "kl_approx",
  "entropy",
  "clip_fraction",
  "completion_length_mean",
  "completion_length_max",
  "tokens_per_s",
  "step_time_s",
  "grad_norm",
  "lr",
];

/** The digits of a digit-sort prompt. */
const digitsOf = (prompt: string): string => prompt.slice(prompt.lastIndexOf(" ") + 1);

// real workers on a shared 2-core machine: steps are fast, but starting and loading take a while under load
describe("GRPOTrainer", { timeout: 120_000 }, () => {
  it("trains a few steps on digit-sort and writes the run directory", async () => {
    const runDir = join(dir, "run-basic");
    const logged: string[] = [];
    await using trainer = await GRPOTrainer.create(
      config(runDir, { eval: { every: 2, prompts: 8 }, checkpoint: { every: 2, keepLast: 1 }, log: { samplesPerStep: 2 } }),
      { pool, log: (l) => logged.push(l) },
    );
    expect(trainer.totalSteps).toBe(3);
    const records = await collect(trainer);
    expect(records.map((r) => r.step)).toEqual([1, 2, 3]);
    // the policy version moves by one with every step's weight sync
    const versions = records.map((r) => r.policy_version!);
    expect(versions[1]! - versions[0]!).toBe(1);
    expect(versions[2]! - versions[1]!).toBe(1);
    for (const r of records) {
      for (const key of STEP_KEYS) expect(r, key).toHaveProperty(key);
      expect(r.reward_mean).toBeGreaterThanOrEqual(0);
      expect(r.reward_mean).toBeLessThanOrEqual(1);
      expect(r.completion_length_max).toBeLessThanOrEqual(6);
      expect(r.lr).toBeCloseTo(1e-3, 10);
    }
    expect(records.map((r) => "eval_reward_mean" in r)).toEqual([false, true, true]);

    const metrics = await lines(join(runDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.step)).toEqual([0, 1, 2, 3]);
    expect(metrics[0]).toHaveProperty("eval_reward_mean");
    expect(metrics.slice(1)).toEqual(JSON.parse(JSON.stringify(records)));

    // training samples: the first completion of the first groups, scored with the task's reward; the prompts are
    // the training stream's problems in order (P per step)
    const stream = digitSortExamples({ count: 3 * P, split: "train", seed: 0 });
    const samples = (await lines(join(runDir, "samples.jsonl"))).filter((s) => s.eval !== true);
    expect(samples.map((s) => s.step)).toEqual([1, 1, 2, 2, 3, 3]);
    samples.forEach((s, i) => {
      const step = Number(s.step);
      expect(s.prompt).toBe(stream[(step - 1) * P + (i % 2)]!.query);
      expect(s.reward).toBe(digitSortReward(String(s.completion), digitSortProblem(digitsOf(String(s.prompt))).answer));
    });

    const saved = parseYaml(await readFile(join(runDir, "config.yaml"), "utf8")) as Record<string, unknown>;
    expect(saved).toMatchObject({ groupSize: G, promptsPerStep: P, steps: 3, loss: { variant: "grpo" }, sampling: { temperature: 1 }, seed: 0 });
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-3"]);
    expect((await stat(join(runDir, "checkpoints", "step-3", "model.safetensors"))).size).toBeGreaterThan(0);
    expect(await readFile(join(runDir, "report.html"), "utf8")).toContain("<svg");
    expect(logged.some((l) => l.startsWith("step 3/3"))).toBe(true);
    expect((await trainer.trainer.state()).step).toBe(3);
  });

  it("stop() saves a checkpoint; resume continues the data stream and metrics.jsonl", async () => {
    const runDir = join(dir, "run-resume");
    const first = await GRPOTrainer.create(config(runDir, { steps: 5, log: { samplesPerStep: 1 } }), { pool });
    const before = await collect(first, async (r) => {
      if (r.step === 2) await first.stop();
    });
    const summary = first.summary();
    await first.close();
    expect(before.map((r) => r.step)).toEqual([1, 2]);
    expect(summary).toMatchObject({ steps: 2, stopped: true, runDir, checkpoint: join(runDir, "checkpoints", "step-2") });
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-2"]);

    // a fresh run may not reuse the directory, and a resume may not change a field that matters
    await expect(GRPOTrainer.create(config(runDir, { steps: 5 }), { pool })).rejects.toThrow(RunDirectoryError);
    const mismatch = GRPOTrainer.create(config(runDir, { steps: 5, loss: { clipEpsilon: 0.3 } }), { pool, resume: true });
    await expect(mismatch).rejects.toThrow(RunConfigMismatchError);
    await expect(mismatch).rejects.toThrow(/loss\.clipEpsilon/);

    // a run directory written before a field with a default existed still resumes (the saved config is resolved)
    const saved = parseYaml(await readFile(join(runDir, "config.yaml"), "utf8")) as { workers: { trainer: Record<string, unknown> } };
    expect(saved.workers.trainer).toHaveProperty("strategy");
    delete saved.workers.trainer.strategy;
    delete saved.workers.trainer.gradientCheckpointing;
    await writeFile(join(runDir, "config.yaml"), stringifyYaml(saved));

    await using resumed = await GRPOTrainer.create(config(runDir, { steps: 5, log: { samplesPerStep: 1 } }), { pool, resume: true });
    expect(resumed.step).toBe(2);
    const after = await collect(resumed);
    expect(after.map((r) => r.step)).toEqual([3, 4, 5]);
    // the resume publishes the restored weights to the generator as a version of their own, then the step adds one
    expect(after[0]!.policy_version).toBe(before[1]!.policy_version! + 2);
    const metrics = await lines(join(runDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.step)).toEqual([1, 2, 3, 4, 5]);
    // the prompts continue where the stopped run left them
    const stream = digitSortExamples({ count: 5 * P, split: "train", seed: 0 });
    const samples = await lines(join(runDir, "samples.jsonl"));
    expect(samples.map((s) => s.prompt)).toEqual([0, 1, 2, 3, 4].map((k) => stream[k * P]!.query));
  });

  it("is reproducible: the same config and seed give the same rewards and losses, another seed does not", async () => {
    const run = async (name: string, seed: number): Promise<StepRecord[]> => {
      await using trainer = await GRPOTrainer.create(config(join(dir, name), { steps: 2, seed }), { pool });
      return await collect(trainer);
    };
    const pick = (records: StepRecord[]): unknown[] => records.map((r) => [r.reward_mean, r.loss]);
    const a = await run("repro-a", 7);
    const b = await run("repro-b", 7);
    const c = await run("repro-c", 8);
    expect(pick(b)).toEqual(pick(a));
    expect(pick(c)).not.toEqual(pick(a));
  });

  it("trains a dataset task with custom TS rewards, async ones included, and a KL term", async () => {
    const data = join(dir, "echo.jsonl");
    const rows = ["7", "42", "5", "19"].map((n) => ({ question: `say ${n}`, answer: n }));
    await writeFile(data, rows.map((r) => JSON.stringify(r)).join("\n"));
    const seen: string[] = [];
    const rewards = [
      {
        name: "has_digit",
        fn: async (s: RewardSample): Promise<number> => {
          await new Promise((resolve) => setTimeout(resolve, 1));
          seen.push(String(s.fields.answer));
          return /\d/.test(s.response) ? 1 : 0;
        },
      },
      { name: "short", fn: (s: RewardSample) => (s.response.length <= 4 ? 1 : 0), weight: 0.5 },
    ];
    const runDir = join(dir, "run-dataset");
    await using trainer = await GRPOTrainer.create(
      config(runDir, {
        task: { type: "dataset", files: data, fields: { query: "question", answer: "answer" }, reward: "exact-match" },
        steps: 2,
        klToRefCoeff: 0.05,
        eval: { every: 2, prompts: 4 },
      }),
      { pool, rewards },
    );
    const records = await collect(trainer);
    expect(records).toHaveLength(2);
    for (const r of records) {
      const sum = r["reward/exact_match"]! + r["reward/has_digit"]! + 0.5 * r["reward/short"]!;
      expect(r.reward_mean).toBeCloseTo(sum, 5);
      expect(r).toHaveProperty("kl_to_ref");
      expect(r).toHaveProperty("loss_kl_to_ref");
    }
    // 2 steps × P × G training completions and 2 evaluations of 4 held-out prompts, each with its dataset answer
    expect(seen).toHaveLength(2 * P * G + 2 * 4);
    expect(new Set(seen)).toEqual(new Set(rows.map((r) => r.answer)));
  });

  it("runs the separate layout: a generator worker gets the weights every step", async () => {
    const runDir = join(dir, "run-separate");
    const two = await WorkerPool.local({ workers: 2, device: "cpu" });
    try {
      const trainer = await GRPOTrainer.create(config(runDir, { steps: 2, workers: { layout: "separate" } }), { pool: two });
      const records = await collect(trainer);
      const generator = (await two.worker(1).listModels()).find((m) => m.name === "policy");
      expect(generator?.policyVersion).toBe(records[1]!.policy_version);
      await trainer.close();
      expect(await two.worker(1).listModels()).toEqual([]);
    } finally {
      await two.close();
    }
  });

  it("rejects bad configs naming the field, the value and what is allowed", async () => {
    const runDir = join(dir, "run-bad");
    const bad = async (extra: Record<string, unknown>, pattern: RegExp, options = {}): Promise<void> => {
      const attempt = GRPOTrainer.create({ ...config(runDir), ...extra }, { pool, ...options });
      await expect(attempt).rejects.toThrow(InvalidArgumentError);
      await expect(attempt).rejects.toThrow(pattern);
    };
    await bad({ groupSize: 1 }, /GRPOTrainer config\.groupSize: .*>=2.*\(got 1\)/);
    await bad({ loss: { variant: "ppo" } }, /config\.loss\.variant: .*"grpo".*"sapo".*\(got "ppo"\)/);
    await bad({ loss: { variant: "grpo", temperaturePos: 2 } }, /config\.loss: not a field of loss variant "grpo": temperaturePos/);
    await bad({ loss: { variant: "gspo", clipEpsilon: 1.5 } }, /config\.loss\.clipEpsilon: .*loss variant "gspo"/);
    await bad({ loss: { klToRefCoeff: 0.1 } }, /config\.loss\.klToRefCoeff: set the run's top-level klToRefCoeff/);
    await bad({ task: { type: "digit-sort", numDigits: 12 } }, /config\.task\.numDigits: .*<=9.*\(got 12\)/);
    await bad({ task: { type: "sorting" } }, /config\.task\.type: .*'digit-sort'.*\(got "sorting"\)/);
    await bad({ steps: undefined }, /config\.steps: is required/);
    await bad({ optimizer: { type: "sgd", betas: [0.9, 0.99] } }, /config\.optimizer\.betas: not a field of optimizer type "sgd"/);
    await bad({ model: { path: "x", tiny: { hiddenSize: 32 } } }, /config\.model\.tiny: only used with path "tiny"/);
    await bad(
      { model: { path: "tiny", chatTemplateFile: "a.jinja", tiny: { chatTemplateFile: "b.jinja" } } },
      /config\.model\.chatTemplateFile: not together with tiny\.chatTemplateFile/,
    );
    await bad({ sampling: { topP: 0 } }, /config\.sampling\.topP: .*\(got 0\)/);
    await bad({ stepz: 3 }, /GRPOTrainer config\.stepz: unknown field; did you mean "steps"\?; allowed: .*groupSize.*steps/);
    await bad({ optimizer: { type: "adamw", learningRate: 1e-5 } }, /config\.optimizer\.learningRate: unknown field; allowed: .*\blr\b/);
    await bad({ task: { type: "countdown" }, steps: undefined, epochs: 1 }, /config\.epochs: .*endless procedural stream/);
    await bad({ task: { type: "dataset", files: "x.jsonl", fields: { question: "q" } } }, /config\.task\.fields: must map "query"/);
    await bad({ task: { type: "dataset", files: "x.jsonl", fields: { query: "q" } } }, /config\.task\.reward: a "dataset" task needs a reward/);
    await bad({}, /GRPOTrainer options\.rewards: only used with task type "dataset"/, { rewards: [{ name: "r", fn: () => 1 }] });
    await bad({}, /GRPOTrainer options\.resume: .*boolean/, { resume: "yes" });
  });
});

describe("GRPOTrainerConfigSchema", () => {
  it("fills the defaults and builds each loss variant with the run's KL coefficient", () => {
    const base = { model: { path: "tiny" }, task: { type: "digit-sort" as const }, steps: 1, runDir: "r" };
    const c = GRPOTrainerConfigSchema.parse(base);
    expect(c).toMatchObject({ groupSize: 8, promptsPerStep: 8, maxNewTokens: 64, klToRefCoeff: 0, gradClip: 1, seed: 0 });
    expect(c.optimizer).toEqual({ type: "adamw", lr: 1e-5 });
    expect(c.eval).toEqual({ every: 0, prompts: 64, greedy: true });
    expect(c.supervision).toEqual({ maxRestarts: 3, backoffMs: 1000, maxBackoffMs: 30_000, healthySteps: 20, callWatchdogMs: 0 });
    expect(c.checkpoint).toEqual({ every: 100, everyMinutes: 10, keepLast: 2 });
    expect(lossOf(c).toWire()).toMatchObject({ type: "grpo", clipEpsilon: [0.2, 0.2], klToRefCoeff: null });
    const wire = (loss: Record<string, unknown>, klToRefCoeff = 0.04) => lossOf(GRPOTrainerConfigSchema.parse({ ...base, loss, klToRefCoeff })).toWire();
    expect(wire({ variant: "dapo" })).toMatchObject({ type: "grpo", clipEpsilon: [0.2, 0.28], dualClip: 3, klToRefCoeff: 0.04 });
    expect(wire({ variant: "dapo", dualClip: null })).toMatchObject({ clipEpsilon: [0.2, 0.28], dualClip: null });
    expect(wire({ variant: "cispo" })).toMatchObject({ type: "cispo", clipEpsilon: [1, 4] });
    expect(wire({ variant: "gspo", aggregation: "token_mean" })).toMatchObject({ type: "gspo", aggregation: "token_mean" });
    expect(wire({ variant: "sapo", temperatureNeg: 2 })).toMatchObject({ type: "sapo", temperaturePos: 1, temperatureNeg: 2 });
    expect(wire({ entropyCoeff: 0, lossType: "dr_grpo", maxCompletionLength: 6 }, 0)).toMatchObject({ entropyCoeff: 0, lossType: "dr_grpo", klToRefCoeff: null });
  });
});

describe("createTaskEnv", () => {
  const FIXTURES = join(import.meta.dirname, "..", "fixtures", "datasets");
  const build = (task: Record<string, unknown>, split: "train" | "eval" = "train", position?: number | { epoch: number; index: number }) =>
    createTaskEnv(TaskConfigSchema.parse(task), { batchSize: 4, repeats: 2, seed: 0, split, where: "task", ...(position !== undefined ? { position } : {}) });

  it("builds every task type with groups in a row and a resumable position", async () => {
    const tasks = [
      { type: "digit-sort" },
      { type: "countdown", numCount: 3 },
      { type: "gsm8k", files: join(FIXTURES, "gsm8k_mini.jsonl") },
      { type: "math", files: join(FIXTURES, "math_mini.jsonl"), equivalence: "string" },
      { type: "ifeval", files: join(FIXTURES, "ifeval_mini.jsonl") },
    ];
    for (const task of tasks) {
      const made = build(task);
      const first = (await made.env.reset()).getStrings("query");
      expect(first[0], task.type).toBe(first[1]);
      expect(first[2], task.type).toBe(first[3]);
      const position = made.position();
      const second = (await made.env.reset()).getStrings("query");
      const resumed = build(task, "train", position as never);
      expect((await resumed.env.reset()).getStrings("query"), task.type).toEqual(second);
      made.restart();
      expect((await made.env.reset()).getStrings("query"), task.type).toEqual(first);
      await made.env.close();
      await resumed.env.close();
    }
    expect(await build(tasks[2]!).epochSize()).toBe(28);
    expect(await build(tasks[1]!).epochSize()).toBeNull();
  });

  it("reports per-reward means of tiered tasks", async () => {
    const made = build({ type: "gsm8k", files: join(FIXTURES, "gsm8k_mini.jsonl"), shuffle: false });
    const td = await made.env.reset();
    const response: ChatMessage[][] = ["<answer>6</answer>", "<answer>7</answer>", "no tags", "<think>x</think><answer>1</answer>"].map((content) => [
      { role: "assistant", content },
    ]);
    td.set(["history", "full"], td.getHistory(["history", "prompt"]).appendEach(response));
    const next = (await made.env.step(td)).getTensorDict("next");
    const means = rewardMeans(next);
    expect(Object.keys(means).sort()).toEqual(["answer", "right", "think"]);
    // rows: right (1), well-formed but wrong (0.1), no answer (0), wrong with a think block (0.1)
    expect(means.right).toBeCloseTo((1 + 0.1 + 0 + 0.1) / 4, 6);
    expect(means.answer).toBeCloseTo(3 / 4, 6);
    expect(means.think).toBeCloseTo(1 / 4, 6);
  });
});
