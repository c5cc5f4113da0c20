// Checkpoints of an asynchronous GRPO run (maxPolicyAge 1: the collector runs a batch ahead) hold what was collected
// but not trained: the replay buffer (rows with their policy versions, MCAdvantage's held-back groups) and where
// collection stood. A resumed run trains first on exactly the saved rows, then continues the data stream after the
// last collected batch: across the two runs every prompt is trained once. A run whose trainer worker is SIGKILLed
// (the fault-injection extension) restarts from such a snapshot, with the same guarantee. Real workers (a trainer
// and a generator), the tiny model, digit-sort.
import { readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DigitSortEnv, GRPOTrainer, ReplayBuffer, WorkerPool, type GRPOTrainerConfigInput, type StepRecord, type TensorDict } from "../../sdk/index.js";
import { BUFFER_FILE, CollectedSnapshotSchema, SNAPSHOT_FILE } from "../../sdk/runs/collected-snapshot.js";
import { promptTexts } from "../../sdk/runs/evaluation.js";
import { RunDirectory } from "../../sdk/runs/run-directory.js";
import { POOL_OPTIONS } from "../../sdk/runs/setup.js";
import { trainedBatches } from "./grpo.helpers.js";
import { startTinyModelPool, stopTinyModelPool } from "./tiny-policy.js";

const FAULTS = resolve("test/python/extensions/fault_injection.py");
const P = 2;
const G = 4;
const STEPS = 6;

let dir: string;
let modelPath: string;
/** The trainer (worker 0) and the generator (worker 1) of the stop-and-resume runs; the supervised run starts its own. */
let pool: WorkerPool;

beforeAll(async () => {
  ({ dir, modelPath, pool } = await startTinyModelPool("posttrain-grpo-async-resume-", { workers: 2 }));
});

afterAll(() => stopTinyModelPool(dir, pool));


const config = (runDir: string, extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput => ({
  model: { path: modelPath, device: "cpu" },
  task: { type: "digit-sort" },
  groupSize: G,
  promptsPerStep: P,
  maxNewTokens: 6,
  optimizer: { lr: 1e-3 },
  steps: STEPS,
  seed: 0,
  async: { maxPolicyAge: 1 },
  workers: { generator: { count: 1 } },
  log: { samplesPerStep: P },
  supervision: { backoffMs: 10 },
  runDir,
  ...extra,
});

/** The data stream of the run's task: the prompt of each group, step by step (what an uninterrupted run trains). */
async function promptStream(): Promise<string[]> {
  const env = new DigitSortEnv({ batchSize: [P * G], repeats: G, seed: 0, split: "train" });
  const out: string[] = [];
  for (let step = 0; step < STEPS; step++) {
    const texts = promptTexts(await env.reset());
    for (let g = 0; g < P; g++) out.push(texts[g * G]!);
  }
  await env.close();
  return out;
}

/** Prompt, response and policy version (relative to `base`) of each row. */
function rowsOf(td: TensorDict, base: number): [string, string, number][] {
  const prompts = promptTexts(td);
  const responses = td.getStrings(["text", "response"]);
  const versions = td.getTensor("policy_version").toNumbers();
  return prompts.map((p, i) => [p, responses[i]!, versions[i]! - base]);
}

async function jsonLines(path: string): Promise<Record<string, unknown>[]> {
  return (await readFile(path, "utf8"))
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** The prompts trained at each step, from `samples.jsonl` (`samplesPerStep` = P: every group). */
async function trainedPrompts(runDir: string): Promise<string[]> {
  const samples = await jsonLines(join(runDir, "samples.jsonl"));
  return samples.filter((s) => Number(s.step) > 0).map((s) => String(s.prompt));
}

describe("asynchronous GRPO checkpoints hold the collected rows", { timeout: 120_000 }, () => {
  it("a stopped run's checkpoint holds the rows collected ahead; the resumed run trains them first, every prompt once", async () => {
    const runDir = join(dir, "stop-resume");
    const first = await GRPOTrainer.create(config(runDir), { pool });
    const firstBatches = trainedBatches(first);
    for await (const r of first.run()) if (r.step === 3) await first.stop();
    await first.close();
    expect(firstBatches).toHaveLength(3);

    const checkpoint = join(runDir, "checkpoints", "step-3");
    const snapshot = CollectedSnapshotSchema.parse(JSON.parse(await readFile(join(checkpoint, SNAPSHOT_FILE), "utf8")));
    const saved = await ReplayBuffer.load(join(checkpoint, BUFFER_FILE));
    // the collector ran ahead: at least the batch of step 4 was collected while step 3 trained
    expect(snapshot.rows).toBeGreaterThanOrEqual(P * G);
    expect(snapshot.rows % (P * G)).toBe(0);
    expect(saved.length).toBe(snapshot.rows);
    expect(snapshot.nextBatch).toBe(3 + snapshot.rows / (P * G));
    expect(snapshot.heldBack).toBe(0); // whole groups per batch in this pipeline (held-back rows: replay-buffer.save.test.ts)
    const savedRows = rowsOf(saved.take(P * G), snapshot.policyVersion);

    const lines: string[] = [];
    const second = await GRPOTrainer.create(config(runDir), { pool, resume: true, log: (l) => lines.push(l) });
    const resumedAt = second.collector.policyVersion!;
    const secondBatches = trainedBatches(second);
    const records: StepRecord[] = [];
    for await (const r of second.run()) records.push(r);
    await second.close();
    expect(lines.some((l) => l.includes(`restored ${String(snapshot.rows)} collected rows`))).toBe(true);
    expect(records.map((r) => r.step)).toEqual([4, 5, 6]);
    // the first trained batch is the saved rows: same prompts, responses and policy ages
    expect(rowsOf(secondBatches[0]!, resumedAt)).toEqual(savedRows);
    expect(records.every((r) => r.stale_samples_dropped === 0)).toBe(true);
    // every prompt of the stream trained exactly once, in order, across the two runs
    const trained = [...firstBatches, ...secondBatches].flatMap((b) => promptTexts(b).filter((_, i) => i % G === 0));
    const stream = await promptStream();
    expect(trained).toEqual(stream);
    expect(await trainedPrompts(runDir)).toEqual(stream);
    expect((await jsonLines(join(runDir, "metrics.jsonl"))).map((r) => r.step)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it("a checkpoint without its buffer snapshot is unreadable for an async run: the resume falls back to the one before", async () => {
    const runDir = join(dir, "fallback");
    const run = await GRPOTrainer.create(config(runDir, { steps: 2, checkpoint: { every: 1, keepLast: 3 } }), { pool });
    await run.train();
    await run.close();
    await rm(join(runDir, "checkpoints", "step-2", SNAPSHOT_FILE)); // as a crash between the worker's save and the snapshot
    // a buffer file staged by a save the crash cut short goes at the resume; a file not of that pattern stays
    const staged = `.step-3.${BUFFER_FILE}.tmp`;
    await writeFile(join(runDir, "checkpoints", staged), "partial");
    await writeFile(join(runDir, "checkpoints", "notes.tmp"), "mine");
    const lines: string[] = [];
    const resumed = await GRPOTrainer.create(config(runDir, { steps: 2, checkpoint: { every: 1, keepLast: 3 } }), { pool, resume: true, log: (l) => lines.push(l) });
    expect(resumed.step).toBe(1);
    await resumed.close();
    expect(lines.some((l) => l.includes(`${SNAPSHOT_FILE} is missing`))).toBe(true);
    const names = await readdir(join(runDir, "checkpoints"));
    expect(names).toContain("step-2.corrupt");
    expect(names).toContain("notes.tmp");
    expect(names).not.toContain(staged);
  });

  it("a run whose trainer worker is SIGKILLed restarts from the snapshot and trains every prompt once", async () => {
    const runDir = join(dir, "supervised");
    // the trainer worker dies in its 3rd optimizer step (step 3): the run restarts from step 2's checkpoint
    const marker = join(dir, "kill-marker");
    const faults = { [POOL_OPTIONS]: { extensions: [FAULTS], env: { POSTTRAIN_TEST_FAULTS: JSON.stringify([{ point: "optimizer_step", at: 3, marker }]) } } };
    const lines: string[] = [];
    const run = await GRPOTrainer.create(config(runDir, { checkpoint: { every: 2, keepLast: 2 } }), { ...faults, log: (l) => lines.push(l) });
    try {
      await run.train();
      expect(run.restarts).toBe(1);
    } finally {
      await run.close();
    }
    expect((await stat(marker)).isFile()).toBe(true);
    expect(lines.some((l) => /restored \d+ collected rows .* from .*step-2/.test(l))).toBe(true);
    expect((await jsonLines(join(runDir, "metrics.jsonl"))).map((r) => r.step)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await trainedPrompts(runDir)).toEqual(await promptStream());
    expect((await new RunDirectory(runDir).checkpoints()).map((c) => c.step)).toEqual([4, 6]);
  });
});
