// Experiment trackers (`loggers`, docs/trackers.md): one short real GRPO run (tiny model, a shared CPU worker, real
// ZeroMQ and torch) logging to TensorBoard, W&B (offline), MLflow (local store) and trackio (local store) through the
// real logger process, then each tracker read back by its own library (test/python/tracking_readback.py) and checked
// against metrics.jsonl under TRL's names; a tracker whose package is missing refused at create; a logger process
// killed mid-run reported without stopping anything; `--loggers` reaching the config.
import { execFile, spawn } from "node:child_process";
import { chmod, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePython } from "../../bridge/index.js";
import { GRPOTrainer, TrackerUnavailableError, WorkerPool, type GRPOTrainerConfigInput, type StepRecord } from "../../sdk/index.js";
import { SFTTrainerConfigSchema } from "../../sdk/runs/sft-config.js";
import { trackerMetricName } from "../../sdk/runs/trackers/metric-names.js";
import { RunTrackers } from "../../sdk/runs/trackers/run-trackers.js";
import { startTinyModelPool, stopTinyModelPool } from "./tiny-policy.js";

const ROOT = resolve(import.meta.dirname, "..", "..");
const READBACK = join(ROOT, "test", "python", "tracking_readback.py");
const TRACKERS = ["tensorboard", "wandb", "mlflow", "trackio"] as const;

interface Readback {
  readonly metrics: Record<string, [number, number][]>;
  readonly samples: Record<string, unknown>[];
  readonly config: Record<string, unknown>;
  readonly runs: string[];
}

let dir: string;
let modelPath: string;
let pool: WorkerPool;

beforeAll(async () => {
  ({ dir, modelPath, pool } = await startTinyModelPool("posttrain-trackers-"));
});

afterAll(() => stopTinyModelPool(dir, pool));

function config(runDir: string, extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput {
  return {
    model: { path: modelPath },
    task: { type: "digit-sort" },
    groupSize: 2,
    promptsPerStep: 2,
    maxNewTokens: 4,
    steps: 2,
    eval: { every: 2, prompts: 2 },
    runDir,
    ...extra,
  };
}

async function jsonLines(path: string): Promise<Record<string, unknown>[]> {
  return (await readFile(path, "utf8"))
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("a run with every tracker", () => {
  let runDir: string;
  let records: StepRecord[];
  let samples: Record<string, unknown>[];
  let read: Record<(typeof TRACKERS)[number], Readback>;

  beforeAll(async () => {
    runDir = join(dir, "all");
    const trainer = await GRPOTrainer.create(config(runDir, { loggers: ["jsonl", ...TRACKERS], tracking: { project: "trackers-test", runName: "all" } }), { pool });
    try {
      await trainer.train(); // returns once the logger handed every step to the trackers
    } finally {
      await trainer.close(); // ends the tracker runs: W&B and trackio are complete on disk
    }
    records = (await jsonLines(join(runDir, "metrics.jsonl"))) as unknown as StepRecord[];
    samples = await jsonLines(join(runDir, "samples.jsonl"));
    const { stdout } = await promisify(execFile)(resolvePython(), [READBACK, join(runDir, "trackers"), "trackers-test", "all"], { maxBuffer: 64 << 20 });
    read = JSON.parse(stdout) as typeof read;
  }, 300_000);

  it.each(TRACKERS)("%s holds every finite metric of metrics.jsonl, by step, under TRL's names", (tracker) => {
    const metrics = read[tracker].metrics;
    let checked = 0;
    for (const record of records) {
      for (const [name, value] of Object.entries(record)) {
        if (name === "step" || typeof value !== "number" || !Number.isFinite(value)) continue;
        const points = metrics[trackerMetricName(name)] ?? [];
        const at = points.filter(([step]) => step === record.step).map(([, v]) => v);
        expect(at, `${tracker}: ${trackerMetricName(name)} (${name}) at step ${String(record.step)}`).toHaveLength(1);
        // TensorBoard keeps float32 scalars
        expect(at[0]).toBeCloseTo(value, Math.abs(value) > 100 ? 1 : 5);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(20);
    for (const name of ["reward", "reward_std", "completions/mean_length", "learning_rate", "grad_norm", "eval_reward", "clip_ratio/region_mean"]) {
      expect(Object.keys(metrics), tracker).toContain(name);
    }
    // metrics.jsonl's own names are not duplicated where TRL's name stands
    expect(Object.keys(metrics)).not.toContain("reward_mean");
  });

  it.each(["wandb", "mlflow", "trackio"] as const)("%s holds the sample completions as a table", (tracker) => {
    const rows = read[tracker].samples;
    expect(rows.map((r) => [r.step, r.prompt, r.completion, r.reward])).toEqual(samples.map((s) => [s.step, s.prompt, s.completion, s.reward]));
  });

  it("TensorBoard holds the samples as text and the config as hparams", () => {
    const steps = [...new Set(samples.map((s) => s.step))];
    expect(read.tensorboard.samples.map((s) => s.step)).toEqual(steps);
    expect(String(read.tensorboard.samples[0]!.markdown)).toContain("| step | prompt | completion | reward |");
    expect(read.tensorboard.config.hparams_tags).toContain("_hparams_/experiment");
  });

  it("the run config is each tracker's hyperparameters", async () => {
    expect(read.wandb.config.groupSize).toBe(2);
    expect(read.trackio.config.groupSize).toBe(2);
    expect(Number(read.mlflow.config["optimizer.lr"])).toBe(1e-5); // params are text
    expect(read.wandb.runs).toHaveLength(1);
    expect(read.trackio.runs).toEqual(["all"]);
    // the config.yaml the run wrote records the loggers
    expect(await readFile(join(runDir, "config.yaml"), "utf8")).toMatch(/loggers:\n {2}- jsonl\n {2}- tensorboard/);
  });
});

describe("failures", () => {
  it("a tracker whose package is missing fails create with the extra to install, before any step", async () => {
    // an interpreter that cannot find wandb: the logger process runs under it (POSTTRAIN_PYTHON)
    const wrapper = join(dir, "python-without-wandb");
    const python = resolvePython();
    const code = "import runpy, sys; sys.modules['wandb'] = None; runpy.run_module('posttrain_worker.tracking', run_name='__main__')";
    await writeFile(wrapper, `#!/bin/sh\nexec ${JSON.stringify(python)} -c ${JSON.stringify(code)}\n`);
    await chmod(wrapper, 0o755);
    const saved = process.env.POSTTRAIN_PYTHON;
    process.env.POSTTRAIN_PYTHON = wrapper;
    let error: unknown;
    try {
      await GRPOTrainer.create(config(join(dir, "missing"), { loggers: ["tensorboard", "wandb"] }), { pool }).catch((e: unknown) => (error = e));
    } finally {
      if (saved === undefined) delete process.env.POSTTRAIN_PYTHON;
      else process.env.POSTTRAIN_PYTHON = saved;
    }
    expect(error).toBeInstanceOf(TrackerUnavailableError);
    const unavailable = error as TrackerUnavailableError;
    expect(unavailable.code).toBe("TRACKER_UNAVAILABLE");
    expect(unavailable.tracker).toBe("wandb");
    expect(unavailable.message).toContain("npx posttrain setup --extras trackers");
    expect(unavailable.message).toContain("posttrain setup --extras trackers");
  }, 60_000);

  it("a logger process that dies is reported once and the run's records go on without it", async () => {
    const lines: string[] = [];
    const trackers = await RunTrackers.start({
      trackers: ["trackio"],
      dir: join(dir, "killed", "trackers"),
      project: "killed",
      runName: "killed",
      resume: false,
      config: {},
      log: (line) => {
        lines.push(line);
      },
    });
    await trackers.open(0);
    trackers.record({ step: 1, reward_mean: 0.5 }, []);
    const exited = new Promise((done) => trackers.child.once("exit", done));
    trackers.child.kill("SIGKILL");
    await exited;
    await expect.poll(() => trackers.exited).toBe(true);
    expect(() => {
      trackers.record({ step: 2, reward_mean: 0.25 }, []);
    }).not.toThrow();
    await trackers.close();
    const notes = lines.filter((l) => l.includes("the logger process exited"));
    expect(notes).toHaveLength(1);
    expect(notes[0]).toContain("after step 1");
    expect(notes[0]).toContain("metrics.jsonl stays complete");
  }, 120_000);

  it("flush (the end of each run()) answers in order and keeps the trackers logging for a later run()", async () => {
    const trackersDir = join(dir, "flushed", "trackers");
    const trackers = await RunTrackers.start({ trackers: ["tensorboard"], dir: trackersDir, project: "flushed", runName: "flushed", resume: false, config: {}, log: () => undefined });
    try {
      await trackers.open(0);
      trackers.record({ step: 1, reward_mean: 0.5 }, []);
      await trackers.flush();
      expect(trackers.exited).toBe(false);
      trackers.record({ step: 2, reward_mean: 0.25 }, []);
      await trackers.flush();
    } finally {
      await trackers.close();
    }
    const { stdout } = await promisify(execFile)(resolvePython(), [READBACK, trackersDir, "flushed", "flushed", "tensorboard"]);
    const read = JSON.parse(stdout) as { tensorboard: Readback };
    expect(read.tensorboard.metrics.reward).toEqual([
      [1, 0.5],
      [2, 0.25],
    ]);
  }, 120_000);

  it("close ends the logger process (nothing left running)", async () => {
    const trackers = await RunTrackers.start({ trackers: ["trackio"], dir: join(dir, "closed", "trackers"), project: "closed", runName: "closed", resume: false, config: {}, log: () => undefined });
    await trackers.open(0);
    await trackers.close();
    expect(trackers.exited).toBe(true);
    expect(trackers.child.exitCode).toBe(0);
  }, 120_000);
});

describe("config and CLI", () => {
  it("loggers default to jsonl, reject unknown and repeated names, and SFT configs take them too", () => {
    const base = { model: { path: "tiny" }, data: { type: "digit-sort" as const }, steps: 1, runDir: "r" };
    const parsed = SFTTrainerConfigSchema.parse(base);
    expect(parsed.loggers).toEqual(["jsonl"]);
    expect(parsed.tracking).toEqual({ project: "posttrain", dir: "trackers" });
    expect(SFTTrainerConfigSchema.parse({ ...base, loggers: ["mlflow"] }).loggers).toEqual(["mlflow"]);
    const unknown = SFTTrainerConfigSchema.safeParse({ ...base, loggers: ["neptune"] });
    expect(unknown.success).toBe(false);
    expect(unknown.error?.issues[0]?.path).toEqual(["loggers", 0]);
    const twice = SFTTrainerConfigSchema.safeParse({ ...base, loggers: ["wandb", "wandb"] });
    expect(twice.error?.issues[0]?.message).toContain('"wandb" is listed twice');
  });

  it("--loggers sets the config's loggers (a wrong name is a config error, exit 2)", async () => {
    const cli = spawn(process.execPath, ["--import", "tsx", join(ROOT, "sdk", "cli", "main.ts"), "grpo", "--config", join(ROOT, "examples", "configs", "grpo-digit-sort.yaml"), "--run-dir", join(dir, "cli"), "--loggers", "tensorboard,neptune"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    cli.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const code = await new Promise<number | null>((done) => cli.once("close", done));
    expect(code).toBe(2);
    expect(stderr).toContain("loggers.1");
    expect(stderr).toContain("neptune");
  }, 60_000);
});
