// Supervision: real runs whose real workers SIGKILL themselves (the fault-injection extension,
// test/python/extensions/fault_injection.py) at chosen points of the real code — during generation, right after the
// optimizer step, during a checkpoint save between writing the files and the rename — and are restarted by the run
// from their last checkpoint. With fixed seeds the supervised run ends with the same final weights, byte for byte
// (CPU float32), and the same per-step losses and rewards as an uninterrupted run, each step once in metrics.jsonl.
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  GRPOTrainer,
  RunWorkerLostError,
  SFTTrainer,
  WorkerDiedError,
  WorkerPool,
  type GRPOTrainerConfigInput,
  type SFTTrainerConfigInput,
} from "../../sdk/index.js";
import { readRunEvents } from "../../sdk/reports/report.js";
import { POOL_OPTIONS, type RunPoolOptions } from "../../sdk/runs/setup.js";
import { startTinyModelPool, stopTinyModelPool } from "./tiny-policy.js";

const FAULTS = resolve("test/python/extensions/fault_injection.py");

let dir: string;
let modelPath: string;
/** The uninterrupted baselines share one pool (three workers: two generators' run); the supervised runs start (and restart) their own. */
let pool: WorkerPool;

beforeAll(async () => {
  ({ dir, modelPath, pool } = await startTinyModelPool("posttrain-supervision-", { workers: 3 }));
});

afterAll(() => stopTinyModelPool(dir, pool));

type Point = "generate" | "optimizer_step" | "checkpoint_save";

/**
 * Faults for the pools the run starts (`options`, given to `create` or spread into its options): each fires at the `at`-th time a
 * worker reaches `point`, once (a marker file), and SIGKILLs the worker (or, with `action: "hang"`, blocks its
 * compute thread for good).
 */
function inject(
  name: string,
  faults: readonly { point: Point; at: number; action?: "kill" | "hang" }[],
): { markers: string[]; options: { resume: false; [POOL_OPTIONS]: RunPoolOptions } } {
  const markers = faults.map((f, i) => join(dir, `${name}-markers`, `${String(i)}-${f.point}`));
  const spec = faults.map((f, i) => ({ ...f, marker: markers[i] }));
  // resume: false, a field the options type knows, lets the object pass for them
  return { markers, options: { resume: false, [POOL_OPTIONS]: { extensions: [FAULTS], env: { POSTTRAIN_TEST_FAULTS: JSON.stringify(spec) } } } };
}

async function jsonLines(path: string): Promise<Record<string, unknown>[]> {
  const text = await readFile(path, "utf8");
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** The final checkpoint's weights file (the bytes of every float32 parameter). */
const finalWeights = (runDir: string, step: number): Promise<Buffer> => readFile(join(runDir, "checkpoints", `step-${String(step)}`, "model.safetensors"));

/** What must match between a supervised run and its baseline, step by step (times and policy versions differ). */
const EXACT = ["step", "reward_mean", "reward_std", "loss", "loss_objective", "kl_approx", "entropy", "grad_norm", "lr", "completion_length_mean"];
const pick = (records: Record<string, unknown>[], keys: readonly string[]): unknown[][] => records.map((r) => keys.map((k) => r[k]));

const grpoConfig = (runDir: string, extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput => ({
  model: { path: modelPath, device: "cpu" },
  task: { type: "digit-sort" },
  groupSize: 4,
  promptsPerStep: 4,
  maxNewTokens: 6,
  optimizer: { lr: 1e-3 },
  steps: 8,
  checkpoint: { every: 2, keepLast: 2 },
  supervision: { backoffMs: 10 },
  seed: 3,
  runDir,
  ...extra,
});

const sftConfig = (runDir: string, extra: Partial<SFTTrainerConfigInput> = {}): SFTTrainerConfigInput => ({
  model: { path: modelPath, device: "cpu" },
  data: { type: "digit-sort", examples: 64 },
  batchSize: 8,
  optimizer: { lr: 3e-3 },
  steps: 4,
  checkpoint: { every: 2, keepLast: 2 },
  supervision: { backoffMs: 10 },
  runDir,
  ...extra,
});

// real workers started and SIGKILLed on a shared 2-core machine: each restart starts a fresh worker process
describe("supervision", { timeout: 180_000 }, () => {
  it("a GRPO run SIGKILLed in a checkpoint save, in generation and after an optimizer step ends as the uninterrupted run", async () => {
    const baselineDir = join(dir, "grpo-baseline");
    await using baseline = await GRPOTrainer.create(grpoConfig(baselineDir), { pool });
    await baseline.train();

    // worker process 1 dies saving step 2 (nothing to resume: it starts over), process 2 generating step 3
    // (resumes at 2), process 3 right after step 5's optimizer step (resumes at 4); process 4 finishes
    const { markers, options } = inject("grpo", [
      { point: "checkpoint_save", at: 1 },
      { point: "generate", at: 3 },
      { point: "optimizer_step", at: 3 },
    ]);
    const lines: string[] = [];
    const runDir = join(dir, "grpo-supervised");
    await using run = await GRPOTrainer.create(grpoConfig(runDir), { ...options, log: (l) => lines.push(l) });
    const summary = await run.train();
    expect(summary.steps).toBe(8);
    expect(run.restarts).toBe(3);
    for (const marker of markers) expect(await readFile(marker, "utf8")).toMatch(/pid \d+/);

    const weights = await finalWeights(baselineDir, 8);
    expect(weights.equals(await finalWeights(baselineDir, 6))).toBe(false); // the steps do move the weights
    expect((await finalWeights(runDir, 8)).equals(weights)).toBe(true);
    const metrics = await jsonLines(join(runDir, "metrics.jsonl"));
    const expected = await jsonLines(join(baselineDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(pick(metrics, EXACT)).toEqual(pick(expected, EXACT));
    const samples = await jsonLines(join(runDir, "samples.jsonl"));
    expect(samples.map((s) => [s.step, s.prompt, s.completion])).toEqual((await jsonLines(join(baselineDir, "samples.jsonl"))).map((s) => [s.step, s.prompt, s.completion]));

    const events = await readRunEvents(runDir);
    expect(events.map((e) => [e.kind, e.step, e.role, e.cause, e.signal, e.attempt, e.resumeStep])).toEqual([
      ["restart", 2, "trainer", "WORKER_DIED", "SIGKILL", 1, 0],
      ["restart", 3, "trainer", "WORKER_DIED", "SIGKILL", 2, 2],
      ["restart", 5, "trainer", "WORKER_DIED", "SIGKILL", 3, 4],
    ]);
    expect(events.map((e) => e.backoffMs)).toEqual([10, 20, 40]);
    expect(events.every((e) => e.worker === "worker 0" && !Number.isNaN(Date.parse(e.time)))).toBe(true);
    expect(lines.filter((l) => /worker 0 \(trainer\) failed at step \d \(killed by SIGKILL\): restarting/.test(l))).toHaveLength(3);
    const report = await readFile(join(runDir, "report.html"), "utf8");
    expect(report).toContain("Restarts and worker failures");
    expect(report).toContain("<td>WORKER_DIED (SIGKILL)</td>");
    // the save killed before its rename left no checkpoint behind, only complete ones
    expect((await readdir(join(runDir, "checkpoints"))).sort()).toEqual(["step-6", "step-8"]);
  });

  it("with two generators, one SIGKILLed mid-batch is dropped: its chunk is sampled on the other and the run goes on", async () => {
    const generators = (runDir: string): GRPOTrainerConfigInput => grpoConfig(runDir, { steps: 3, workers: { generator: { count: 2 } } });
    const baselineDir = join(dir, "generators-baseline");
    await using baseline = await GRPOTrainer.create(generators(baselineDir), { pool });
    await baseline.train();

    // every worker gets the fault; the marker lets only the first generator to sample die. Step 3's log line then
    // throws: an error that is not a worker's ends the run as it is, though the dropped generator's connection is dead
    const { markers, options } = inject("generators", [{ point: "generate", at: 1 }]);
    const logFailure = new Error("the log is full");
    const log = (line: string): void => {
      if (line.startsWith("step 3/")) throw logFailure;
    };
    const runDir = join(dir, "generators-supervised");
    await using run = await GRPOTrainer.create(generators(runDir), { ...options, log });
    await expect(run.train()).rejects.toBe(logFailure);
    expect(run.restarts).toBe(0);
    expect(run.generatorPool.lost).toHaveLength(1);
    const events = await readRunEvents(runDir);
    expect(events.map((e) => [e.kind, e.step, e.role, e.signal, e.worker])).toEqual([
      ["generator_failure", 1, "generator", "SIGKILL", `worker ${String(1 + run.generatorPool.lost[0]!)}`],
    ]);
    expect(await readFile(markers[0]!, "utf8")).toMatch(/^generate 1 pid/);
    // step 3 failed before its save: the weights of step 2 (after the drop) and the lines of all three steps match
    expect((await finalWeights(runDir, 2)).equals(await finalWeights(baselineDir, 2))).toBe(true);
    const keys = EXACT.filter((k) => k !== "step");
    expect(pick(await jsonLines(join(runDir, "metrics.jsonl")), keys)).toEqual(pick(await jsonLines(join(baselineDir, "metrics.jsonl")), keys));
  });

  it("an SFT run hung in a step (call watchdog), then SIGKILLed after an optimizer step, ends as the uninterrupted run", async () => {
    const baselineDir = join(dir, "sft-baseline");
    await using baseline = await SFTTrainer.create(sftConfig(baselineDir), { pool });
    await baseline.train();

    // process 1 hangs after step 2's optimizer step (before the first checkpoint: it starts over); process 2 dies
    // after step 3's (resumes at 2); process 3 finishes
    const { options } = inject("sft", [
      { point: "optimizer_step", at: 2, action: "hang" },
      { point: "optimizer_step", at: 3 },
    ]);
    const runDir = join(dir, "sft-supervised");
    await using run = await SFTTrainer.create(sftConfig(runDir, { supervision: { backoffMs: 10, callWatchdogMs: 4000 } }), options);
    await run.train();
    expect(run.restarts).toBe(2);
    expect(run.trainer.options.callWatchdogMs).toBe(4000); // the restarted trainer's calls are watched too
    expect((await finalWeights(runDir, 4)).equals(await finalWeights(baselineDir, 4))).toBe(true);
    const metrics = await jsonLines(join(runDir, "metrics.jsonl"));
    const keys = ["step", "loss", "grad_norm", "lr", "epoch"];
    expect(pick(metrics, keys)).toEqual(pick(await jsonLines(join(baselineDir, "metrics.jsonl")), keys));
    expect((await readRunEvents(runDir)).map((e) => [e.kind, e.step, e.cause, e.resumeStep])).toEqual([
      ["restart", 2, "WORKER_HUNG", 0],
      ["restart", 3, "WORKER_DIED", 2],
    ]);
  });

  it("gives up after maxRestarts with a typed error saying how to resume, and does not restart a given pool", async () => {
    const { options } = inject("give-up", [{ point: "optimizer_step", at: 2 }]);
    const runDir = join(dir, "sft-give-up");
    await using run = await SFTTrainer.create(sftConfig(runDir, { supervision: { maxRestarts: 0 } }), options);
    const failure = await run.train().catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(RunWorkerLostError);
    const lost = failure as RunWorkerLostError;
    expect(lost).toMatchObject({ code: "RUN_WORKER_LOST", restarts: 0, step: 2 });
    expect(lost.cause).toBeInstanceOf(WorkerDiedError);
    expect(lost.message).toMatch(/gave up after 0 restart\(s\) \(supervision\.maxRestarts = 0\)/);
    expect(lost.message).toContain(`SFTTrainer.create(config, { resume: true }) with runDir ${JSON.stringify(runDir)}`);
    expect(lost.message).toContain("posttrain sft --config <the run's config file> --resume");
    expect((await readRunEvents(runDir)).map((e) => [e.kind, e.step, e.signal])).toEqual([["gave_up", 2, "SIGKILL"]]);

    // the caller's pool: the run cannot restart it, and says so
    const given = await WorkerPool.local({ device: "cpu", extensions: [FAULTS], env: { POSTTRAIN_TEST_FAULTS: JSON.stringify([{ point: "optimizer_step", at: 1, marker: join(dir, "given-marker") }]) } });
    try {
      await using inPool = await SFTTrainer.create(sftConfig(join(dir, "sft-given-pool")), { pool: given });
      const error = await inPool.train().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RunWorkerLostError);
      expect((error as RunWorkerLostError).message).toMatch(/cannot restart it \(its worker is options\.pool's: restart it, then resume\)/);
      expect((error as RunWorkerLostError).restarts).toBe(0);
    } finally {
      await given.close();
    }
  });
});
