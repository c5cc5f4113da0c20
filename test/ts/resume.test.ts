// Resuming real runs (SFTTrainer: tiny model, one local CPU worker shared by the file, real ZeroMQ and torch): a resume
// whose newest checkpoints are unreadable (half-written, truncated trainer_state.json, an empty weight file, a
// truncated DCP shard that only the worker's load finds out) falls back to the newest readable one, says so, and
// renames the bad ones aside without deleting them; a resume with no checkpoint, or none readable, refuses with
// NoCheckpointError instead of starting over; and the checkpoint.everyMinutes trigger with a real clock.
import { existsSync } from "node:fs";
import { readdir, readFile, rm, stat, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NoCheckpointError, SFTTrainer, WorkerPool, type SFTTrainerConfigInput } from "../../sdk/index.js";
import { startTinyModelPool, stopTinyModelPool } from "./tiny-policy.js";

let dir: string;
let modelPath: string;
let pool: WorkerPool;

beforeAll(async () => {
  ({ dir, modelPath, pool } = await startTinyModelPool("posttrain-resume-"));
});

afterAll(() => stopTinyModelPool(dir, pool));

function config(runDir: string, extra: Partial<SFTTrainerConfigInput> = {}): SFTTrainerConfigInput {
  return { model: { path: modelPath }, data: { type: "digit-sort", examples: 64 }, batchSize: 8, optimizer: { lr: 3e-3 }, steps: 5, runDir, ...extra };
}

/** Runs `steps` steps in a fresh `runDir`, saving after every step (all kept). */
async function trainedRun(name: string, steps: number): Promise<string> {
  const runDir = join(dir, name);
  await using sft = await SFTTrainer.create(config(runDir, { steps, checkpoint: { every: 1, everyMinutes: 0, keepLast: 100 } }), { pool });
  await sft.train();
  return runDir;
}

async function metricSteps(runDir: string): Promise<{ step: number; loss: number }[]> {
  const text = await readFile(join(runDir, "metrics.jsonl"), "utf8");
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as { step: number; loss: number });
}

const checkpoint = (runDir: string, name: string): string => join(runDir, "checkpoints", name);

describe("resume: unreadable checkpoints and no checkpoint", { timeout: 120_000 }, () => {
  it("falls back past four unreadable checkpoints to the newest readable one, says why, and renames them aside", async () => {
    const runDir = await trainedRun("fallback", 5);
    const before = await metricSteps(runDir);
    // step-5: half-written (only the model's config.json); step-4: trainer_state.json cut in half; step-3: an empty
    // model.safetensors; step-2: a DCP shard cut in half, which only the worker's load can tell
    for (const name of await readdir(checkpoint(runDir, "step-5"))) {
      if (name !== "config.json") await rm(join(checkpoint(runDir, "step-5"), name), { recursive: true });
    }
    const state4 = join(checkpoint(runDir, "step-4"), "trainer_state.json");
    await truncate(state4, Math.floor((await stat(state4)).size / 2));
    await truncate(join(checkpoint(runDir, "step-3"), "model.safetensors"), 0);
    const dcp2 = join(checkpoint(runDir, "step-2"), "dcp");
    const shard = (await readdir(dcp2)).find((n) => n.endsWith(".distcp"))!;
    await truncate(join(dcp2, shard), Math.floor((await stat(join(dcp2, shard))).size / 2));

    const lines: string[] = [];
    // a resume may change checkpoint: keep only the newest one from now on (what was set aside is never pruned)
    await using resumed = await SFTTrainer.create(config(runDir, { steps: 3, checkpoint: { every: 1, everyMinutes: 0, keepLast: 1 } }), {
      pool,
      resume: true,
      log: (line) => lines.push(line),
    });
    expect(resumed.step).toBe(1);
    const fallbacks = lines.filter((l) => l.includes("is unreadable"));
    expect(fallbacks).toHaveLength(4);
    const reasons = [
      [5, "trainer_state.json is missing (a half-written checkpoint)"],
      [4, "trainer_state.json does not parse"],
      [3, "its weight file model.safetensors is empty (0 bytes)"],
      [2, "the load failed: CHECKPOINT_INVALID"],
    ] as const;
    reasons.forEach(([step, reason], i) => {
      const path = checkpoint(runDir, `step-${String(step)}`);
      expect(fallbacks[i]).toContain(`checkpoint ${path} is unreadable (${reason}`);
      expect(fallbacks[i]).toContain(`renamed it to ${path}.corrupt and falling back to the one before it`);
    });
    expect(lines).toContain(`resumed ${runDir} at step 1 from ${checkpoint(runDir, "step-1")}`);

    await resumed.train();
    // the steps after the restored one are taken again, once each, and step 2 is the one the first run took
    const after = await metricSteps(runDir);
    expect(after.map((r) => r.step)).toEqual([1, 2, 3]);
    expect(after[1]!.loss).toBe(before[1]!.loss);
    // nothing saved was deleted: the set-aside directories keep their files, and pruning left them alone
    expect((await readdir(join(runDir, "checkpoints"))).sort()).toEqual(["step-2.corrupt", "step-3", "step-3.corrupt", "step-4.corrupt", "step-5.corrupt"]);
    expect(existsSync(join(checkpoint(runDir, "step-4.corrupt"), "trainer_state.json"))).toBe(true);
    expect(existsSync(join(checkpoint(runDir, "step-2.corrupt"), "dcp", shard))).toBe(true);
    expect(existsSync(join(checkpoint(runDir, "step-5.corrupt"), "config.json"))).toBe(true);
  });

  it("refuses when no checkpoint is readable: NoCheckpointError lists those set aside and says to use a fresh runDir", async () => {
    const runDir = await trainedRun("none-readable", 1);
    await writeFile(join(checkpoint(runDir, "step-1"), "trainer_state.json"), '{"step": 1, "policyVers');
    const lines: string[] = [];
    const err = await SFTTrainer.create(config(runDir), { pool, resume: true, log: (line) => lines.push(line) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoCheckpointError);
    const refusal = err as NoCheckpointError;
    expect(refusal.code).toBe("NO_CHECKPOINT");
    expect(refusal.runDir).toBe(runDir);
    expect(refusal.message).toContain(`cannot resume runDir ${JSON.stringify(runDir)}: no readable checkpoint`);
    expect(refusal.message).toContain("choose a fresh runDir (--run-dir): this one already holds metrics.jsonl");
    expect(refusal.setAside).toEqual([{ path: `${checkpoint(runDir, "step-1")}.corrupt`, step: 1, reason: expect.stringMatching(/^trainer_state.json does not parse/) as unknown }]);
    expect(lines.some((l) => l.includes(`checkpoint ${checkpoint(runDir, "step-1")} is unreadable`))).toBe(true);
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-1.corrupt"]);
    // the metrics were left alone, and the shared worker still serves
    expect((await metricSteps(runDir)).map((r) => r.step)).toEqual([1]);
    await using again = await SFTTrainer.create(config(join(dir, "after-refusal"), { steps: 1 }), { pool });
    expect((await again.train()).steps).toBe(1);
  });

  it("does not set aside a whole checkpoint of another setup: CHECKPOINT_MISMATCH ends the resume, every checkpoint kept", async () => {
    const runDir = await trainedRun("mismatch", 2);
    // both checkpoints say they were saved with SGD: whole files, another setup (what another config would give)
    for (const step of [1, 2]) {
      const path = join(checkpoint(runDir, `step-${String(step)}`), "trainer_state.json");
      const state = JSON.parse(await readFile(path, "utf8")) as { optimizer: { type: string } };
      await writeFile(path, JSON.stringify({ ...state, optimizer: { ...state.optimizer, type: "sgd" } }));
    }
    const lines: string[] = [];
    const err = await SFTTrainer.create(config(runDir), { pool, resume: true, log: (line) => lines.push(line) }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "CHECKPOINT_MISMATCH" });
    expect((err as Error).message).toContain("the checkpoint's optimizer is 'sgd', this trainer's is 'adamw'");
    expect(lines.filter((l) => l.includes("is unreadable"))).toEqual([]);
    expect((await readdir(join(runDir, "checkpoints"))).sort()).toEqual(["step-1", "step-2"]);
  });

  it("refuses a resume with no run or no checkpoint instead of starting over, before any model is loaded", async () => {
    const empty = join(dir, "empty");
    const noRun = await SFTTrainer.create(config(empty), { pool, resume: true }).catch((e: unknown) => e);
    expect(noRun).toBeInstanceOf(NoCheckpointError);
    expect((noRun as Error).message).toBe(`cannot resume runDir ${JSON.stringify(empty)}: it holds no run (no config.yaml); to start over, run without resume (--resume), or check the runDir`);
    expect(await readdir(empty)).toEqual([]); // nothing written

    // a run created and closed before its first step: config.yaml, no checkpoint, no metrics
    const unstarted = join(dir, "unstarted");
    await (await SFTTrainer.create(config(unstarted), { pool })).close();
    const noCheckpoint = await SFTTrainer.create(config(unstarted), { pool, resume: true }).catch((e: unknown) => e);
    expect(noCheckpoint).toBeInstanceOf(NoCheckpointError);
    expect((noCheckpoint as Error).message).toBe(
      `cannot resume runDir ${JSON.stringify(unstarted)}: it holds no checkpoint (the run stopped before its first save); to start over, run without resume (--resume), or choose a fresh runDir (--run-dir)`,
    );
    // the advice holds: without resume it starts over
    await using fresh = await SFTTrainer.create(config(unstarted, { steps: 1 }), { pool });
    expect((await fresh.train()).steps).toBe(1);
  });
});

describe("checkpoint.everyMinutes with a real clock", { timeout: 120_000 }, () => {
  it("saves between the step counts once the minutes have passed, each step at most once", async () => {
    const runDir = join(dir, "minutes");
    // 30 ms: longer than a step of this tiny run, so saves come every few steps, never after each one by the count
    await using sft = await SFTTrainer.create(config(runDir, { steps: 12, checkpoint: { every: 0, everyMinutes: 0.0005, keepLast: 100 } }), { pool });
    await sft.train();
    const saved = (await readdir(join(runDir, "checkpoints"))).map((n) => Number(/^step-(\d+)$/.exec(n)?.[1])).sort((a, b) => a - b);
    expect(saved.at(-1)).toBe(12);
    expect(saved.length).toBeGreaterThanOrEqual(3); // at least two saves the minutes triggered, and the end
    for (const step of saved) {
      const state = JSON.parse(await readFile(join(checkpoint(runDir, `step-${String(step)}`), "trainer_state.json"), "utf8")) as { step: number };
      expect(state.step).toBe(step);
    }
  });
});
