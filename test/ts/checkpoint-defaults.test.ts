// When a run saves: the default checkpoint block of both run configs, and the step loop (RunLoop, over a real
// RunDirectory in a temporary directory) saving every N steps or every M minutes of its clock, whichever comes first,
// never twice for one step. The steps here are the loop's own callbacks with a clock the test moves, so the minutes
// are exact; test/ts/resume.test.ts checks the minutes trigger in a real SFT run with a real clock.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GRPOTrainerConfigSchema, SFTTrainerConfigSchema } from "../../sdk/runs/index.js";
import { RunDirectory } from "../../sdk/runs/run-directory.js";
import { RunLoop } from "../../sdk/runs/run-loop.js";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "posttrain-checkpoint-defaults-"));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

interface Timeline {
  /** The steps saved, in order. */
  readonly saved: number[];
  readonly loop: RunLoop;
}

/** A loop of `totalSteps` whose every step takes `stepSeconds` on the test's clock; each save is recorded and makes its directory. */
async function timeline(name: string, totalSteps: number, stepSeconds: number, checkpoint: { every: number; everyMinutes?: number }): Promise<Timeline> {
  let clock = 0;
  const saved: number[] = [];
  const runDir = new RunDirectory(join(dir, name));
  await runDir.prepare(false);
  const loop = new RunLoop({
    name: "TestRun",
    runDir,
    startStep: 0,
    totalSteps,
    evalEvery: 0,
    checkpoint: { ...checkpoint, keepLast: 100 },
    now: () => clock,
    log: () => undefined,
    signal: undefined,
    trainStep: (step) => {
      clock += stepSeconds * 1000;
      return Promise.resolve({ record: { step }, samples: [] });
    },
    evaluate: () => Promise.reject(new Error("evaluation is off")),
    saveCheckpoint: (path, step) => {
      saved.push(step);
      mkdirSync(path, { recursive: true });
      return Promise.resolve();
    },
    evalLine: () => ({}),
  });
  return { saved, loop };
}

async function drain(loop: RunLoop): Promise<number[]> {
  const steps: number[] = [];
  for await (const record of loop.run()) steps.push(record.step);
  return steps;
}

describe("checkpoint defaults", () => {
  it("both run configs save every 100 steps or every 10 minutes by default, keeping the last 2", () => {
    const grpo = GRPOTrainerConfigSchema.parse({ model: { path: "tiny" }, task: { type: "digit-sort" }, steps: 10, runDir: "r" });
    const sft = SFTTrainerConfigSchema.parse({ model: { path: "tiny" }, data: { type: "digit-sort" }, steps: 10, runDir: "r" });
    for (const config of [grpo, sft]) expect(config.checkpoint).toEqual({ every: 100, everyMinutes: 10, keepLast: 2 });
    expect(SFTTrainerConfigSchema.parse({ model: { path: "tiny" }, data: { type: "digit-sort" }, steps: 10, runDir: "r", checkpoint: { everyMinutes: 0.5 } }).checkpoint)
      .toEqual({ every: 100, everyMinutes: 0.5, keepLast: 2 });
  });

  it("a negative everyMinutes is refused, naming the field", () => {
    const parsed = SFTTrainerConfigSchema.safeParse({ model: { path: "tiny" }, data: { type: "digit-sort" }, steps: 10, runDir: "r", checkpoint: { everyMinutes: -1 } });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.path).toEqual(["checkpoint", "everyMinutes"]);
  });
});

describe("RunLoop: when to save", () => {
  it("whichever comes first: every 5 steps or a minute since the last save (25 s a step)", async () => {
    const { saved, loop } = await timeline("both", 12, 25, { every: 5, everyMinutes: 1 });
    expect(await drain(loop)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    // 3: 75 s since the start; 5: the step count; 8: 75 s since 5; 10: the count; 11 is 25 s after 10; the end saves 12
    expect(saved).toEqual([3, 5, 8, 10, 12]);
    expect(readdirSync(join(dir, "both", "checkpoints")).sort()).toEqual(["step-10", "step-12", "step-3", "step-5", "step-8"]);
  });

  it("steps only (everyMinutes 0), minutes only (every 0), and neither: the end alone", async () => {
    const steps = await timeline("steps", 7, 100, { every: 3, everyMinutes: 0 });
    await drain(steps.loop);
    expect(steps.saved).toEqual([3, 6, 7]);
    const minutes = await timeline("minutes", 7, 40, { every: 0, everyMinutes: 1.5 });
    await drain(minutes.loop);
    expect(minutes.saved).toEqual([3, 6, 7]); // 120 s > 90 s after step 3, then again after 6
    const neither = await timeline("neither", 4, 1000, { every: 0, everyMinutes: 0 });
    await drain(neither.loop);
    expect(neither.saved).toEqual([4]);
  });

  it("a step is never saved twice: due by steps and minutes at once, at the last step, or on stop() right after", async () => {
    const both = await timeline("once", 4, 60, { every: 2, everyMinutes: 1 });
    await drain(both.loop);
    expect(both.saved).toEqual([1, 2, 3, 4]);
    const stopped = await timeline("stopped", 100, 1, { every: 3 });
    for await (const record of stopped.loop.run()) {
      if (record.step === 3) await stopped.loop.stop(); // step 3 was just saved by the count
    }
    expect(stopped.saved).toEqual([3]);
    expect(stopped.loop.summary()).toMatchObject({ steps: 3, stopped: true });
    expect(existsSync(join(dir, "stopped", "report.html"))).toBe(true);
  });
});
