import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, SFTTrainer, WorkerPool, type SFTTrainerConfigInput, type StepRecord } from "../../sdk/index.js";
import { startTinyModelPool, stopTinyModelPool } from "./tiny-policy.js";

let dir: string;
let modelPath: string;
let pool: WorkerPool;

beforeAll(async () => {
  ({ dir, modelPath, pool } = await startTinyModelPool("posttrain-sft-trainer-"));
});

afterAll(() => stopTinyModelPool(dir, pool));

function config(runDir: string, extra: Partial<SFTTrainerConfigInput> = {}): SFTTrainerConfigInput {
  return {
    model: { path: modelPath },
    data: { type: "digit-sort", examples: 256 },
    batchSize: 16,
    optimizer: { lr: 3e-3 },
    steps: 30,
    runDir,
    ...extra,
  };
}

async function steps(path: string): Promise<StepRecord[]> {
  const text = await readFile(path, "utf8");
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as StepRecord);
}

const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

// real workers on a shared 2-core machine: steps are fast, but starting and loading take a while under load
describe("SFTTrainer", { timeout: 120_000 }, () => {
  it("lowers the loss on digit-sort examples and the held-out loss with it", async () => {
    const runDir = join(dir, "run-loss");
    await using sft = await SFTTrainer.create(
      config(runDir, { steps: 24, eval: { every: 12, examples: 16, prompts: 8, maxNewTokens: 6 }, checkpoint: { every: 8, keepLast: 2 } }),
      { pool },
    );
    const summary = await sft.train();
    expect(summary.steps).toBe(24);
    expect(summary.stopped).toBe(false);
    const records = (await steps(join(runDir, "metrics.jsonl"))).filter((r) => r.step > 0);
    expect(records.map((r) => r.step)).toEqual(Array.from({ length: 24 }, (_, i) => i + 1));
    for (const r of records) for (const key of ["loss", "lr", "grad_norm", "tokens_per_s", "step_time_s", "policy_version"]) expect(r, key).toHaveProperty(key);
    const early = mean(records.slice(0, 5).map((r) => r.loss!));
    const late = mean(records.slice(-5).map((r) => r.loss!));
    expect(late).toBeLessThan(early * 0.8);
    // held-out: loss before training, at step 12 and at the end; greedy task reward on held-out prompts
    const first = summary.firstEval!;
    const last = summary.lastEval!;
    expect(first.step).toBe(0);
    expect(last.step).toBe(24);
    expect(last.loss!).toBeLessThan(first.loss!);
    expect(last.count).toBe(8);
    expect(last.rewardMean).toBeGreaterThanOrEqual(0);
    expect(records.filter((r) => "eval_loss" in r).map((r) => r.step)).toEqual([12, 24]);
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-16", "step-24"]);
    expect(summary.checkpoint).toBe(join(runDir, "checkpoints", "step-24"));
  });

  it("resumes from a checkpoint to exactly the losses of an uninterrupted run", async () => {
    const whole = await SFTTrainer.create(config(join(dir, "run-whole"), { steps: 6, data: { type: "digit-sort", examples: 40 } }), { pool });
    const reference: StepRecord[] = [];
    for await (const r of whole.run()) reference.push(r);
    await whole.close();

    const runDir = join(dir, "run-split");
    const controller = new AbortController();
    const part = await SFTTrainer.create(config(runDir, { steps: 6, data: { type: "digit-sort", examples: 40 } }), { pool, signal: controller.signal });
    for await (const r of part.run()) if (r.step === 3) controller.abort();
    expect(part.step).toBe(3);
    await part.close();
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-3"]);

    await using resumed = await SFTTrainer.create(config(runDir, { steps: 6, data: { type: "digit-sort", examples: 40 } }), { pool, resume: true });
    expect(resumed.step).toBe(3);
    const summary = await resumed.train();
    expect(summary.steps).toBe(6);
    const records = await steps(join(runDir, "metrics.jsonl"));
    expect(records.map((r) => r.step)).toEqual([1, 2, 3, 4, 5, 6]);
    // 40 examples in batches of 16: the resumed steps cross an epoch boundary at the same place
    records.forEach((r, i) => {
      expect(r.loss!).toBeCloseTo(reference[i]!.loss!, 5);
    });
  });

  it("trains on prompt/completion files", async () => {
    const data = join(dir, "pairs.jsonl");
    await writeFile(data, ["ab", "cd", "ef"].map((s) => JSON.stringify({ q: `repeat ${s}`, a: s })).join("\n"));
    await using sft = await SFTTrainer.create(config(join(dir, "run-files"), { data: { type: "dataset", files: data, fields: { prompt: "q", completion: "a" } }, batchSize: 2, epochs: 2 }), { pool });
    // epochs: 3 examples at 2 per step is 2 steps an epoch; steps (30) is the larger bound
    expect(sft.totalSteps).toBe(4);
    const summary = await sft.train();
    expect(summary.steps).toBe(4);
    expect(summary.firstEval).toBeNull();
  });

  it("rejects bad configs naming the field and the value", async () => {
    const runDir = join(dir, "run-bad");
    const bad = async (extra: Record<string, unknown>, pattern: RegExp): Promise<void> => {
      const attempt = SFTTrainer.create({ ...config(runDir), ...extra }, { pool });
      await expect(attempt).rejects.toThrow(InvalidArgumentError);
      await expect(attempt).rejects.toThrow(pattern);
    };
    await bad({ batchSize: 0 }, /SFTTrainer config\.batchSize: .*\(got 0\)/);
    await bad({ data: { type: "dataset", files: "x.jsonl", fields: { prompt: "q" } } }, /config\.data\.fields: must map either "messages"/);
    await bad({ data: { type: "digit-sort", examples: -1 } }, /config\.data\.examples: .*\(got -1\)/);
    await bad({ loss: { lossFunction: "dpo" } }, /config\.loss\.lossFunction: .*"minor_sft".*\(got "dpo"\)/);
    await bad({ schedule: { type: "constant", totalSteps: 10 } }, /config\.schedule\.totalSteps: not a field of schedule type "constant"/);
  });
});
