// GRPO step benchmark (issue 6). Prints one JSON object; progress goes to stderr.
//   npm run bench:grpo [-- --steps 50 --warmup 3 --last 10 --sft-steps 100 --threads N --skip-trl]
// Seconds per GRPO step (generate, score, loss, optimizer step) of three systems, in one run on one machine, on
// the same model, prompts, group size, lengths, learning rate and seed:
//   (a) sdk:       posttrain's GRPOTrainer (TS env, rewards, advantages; one local CPU worker, colocated);
//   (b) inProcess: bench/grpo_inprocess.py, a plain PyTorch loop in one Python process;
//   (c) trl:       bench/grpo_trl.py, TRL's GRPOTrainer.
// The model is the tiny model (makeTinyModel, seed 0) after a short SFT warm-up on digit sorting
// (bench/grpo_warmup.py), so that the rewards move; the prompts are the digit-sort task's training stream. The
// systems take their steps in turns (a, b, c, a, b, c, ...) so they all see the same machine state; the first
// `--warmup` steps of each are not timed. Reported: median and p10/p90 seconds per step, the ratios a/b and a/c
// against the targets (a/b <= 1.10, a/c <= 1.0), and the mean reward over the last `--last` steps of each. For
// the SDK it also reports where a step's time goes: the worker calls (timed from TS, by method) and the rest.
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";
import { z } from "zod";
import { resolvePython } from "../bridge/index.js";
import { GRPOTrainer, WorkerPool, digitSortExamples, makeTinyModel, type StepRecord } from "../sdk/index.js";
import { parseOptions } from "../sdk/core/index.js";
import { startPythonStepper, type PythonRequest, type PythonStepper } from "./grpo-python.js";
import { RpcTimer } from "./grpo-profile.js";
import { machineFacts, quantile, round } from "./stats.js";

const FlagsSchema = z.strictObject({
  /** Timed steps per system. */
  steps: z.coerce.number().int().min(1).max(10_000),
  /** Untimed steps per system before them. */
  warmup: z.coerce.number().int().min(0).max(1000),
  /** Steps at the end whose rewards are averaged. */
  last: z.coerce.number().int().min(1),
  /** SFT warm-up steps of the shared starting model (0: start from the random tiny model). */
  sftSteps: z.coerce.number().int().min(0),
  /** Leave TRL out (for a quick look at a/b). */
  skipTrl: z.boolean(),
  /** Torch threads of every Python process (OMP_NUM_THREADS); default: torch's own choice. */
  threads: z.coerce.number().int().min(1).max(256).optional(),
});

const { values: rawFlags } = parseArgs({
  options: {
    steps: { type: "string", default: "50" },
    warmup: { type: "string", default: "3" },
    last: { type: "string", default: "10" },
    "sft-steps": { type: "string", default: "100" },
    "skip-trl": { type: "boolean", default: false },
    threads: { type: "string" },
  },
});
const flags = parseOptions(
  FlagsSchema,
  {
    steps: rawFlags.steps,
    warmup: rawFlags.warmup,
    last: rawFlags.last,
    sftSteps: rawFlags["sft-steps"],
    skipTrl: rawFlags["skip-trl"],
    ...(rawFlags.threads !== undefined ? { threads: rawFlags.threads } : {}),
  },
  "bench:grpo flags",
);

const config = {
  model: { seed: 0, hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, intermediateSize: 128 },
  sftWarmup: { steps: flags.sftSteps, batch: 16, lr: 3e-3, seed: 1 },
  task: { type: "digit-sort" as const, numDigits: 4, split: "train", seed: 0 },
  groupSize: 8,
  promptsPerStep: 16,
  maxNewTokens: 6,
  sampling: { temperature: 1, topP: 1, topK: 0 },
  loss: { variant: "grpo" as const, clipEpsilon: 0.2, entropyCoeff: 0.01, aggregation: "token_mean" },
  klToRefCoeff: 0,
  optimizer: { type: "adamw" as const, lr: 3e-4, weightDecay: 0.01 },
  gradClip: 1,
  seed: 0,
  device: "cpu" as const,
  steps: flags.steps,
  warmup: flags.warmup,
  lastK: Math.min(flags.last, flags.steps),
};
const totalSteps = config.warmup + config.steps;
// The worker and both baselines inherit this environment, so they run with the same torch thread count.
if (flags.threads !== undefined) process.env.OMP_NUM_THREADS = String(flags.threads);
const python = resolvePython();

function log(message: string): void {
  process.stderr.write(`[bench:grpo] ${message}\n`);
}

/** One system's timed steps. */
interface Series {
  ms: number[];
  rewards: number[];
  phases: Record<string, number>[];
}

/** Median and p10/p90 seconds per step, and the reward over the first and last `lastK` steps. */
function summarize(series: Series): Record<string, unknown> {
  const s = series.ms.map((ms) => ms / 1000);
  const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
  return {
    secondsPerStep: { median: round(quantile(s, 0.5), 4), p10: round(quantile(s, 0.1), 4), p90: round(quantile(s, 0.9), 4) },
    rewardFirstK: round(mean(series.rewards.slice(0, config.lastK))),
    rewardLastK: round(mean(series.rewards.slice(-config.lastK))),
    rewards: series.rewards.map((r) => round(r)),
    ...(series.phases.length > 0 ? { medianMsByPhase: medianByKey(series.phases) } : {}),
  };
}

/** The median of each key over `rows` (a missing key counts as 0), rounded to `digits` decimals. */
function medianByKey(rows: readonly Record<string, number>[], digits = 1): Record<string, number> {
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].sort();
  return Object.fromEntries(keys.map((k) => [k, round(quantile(rows.map((r) => r[k] ?? 0), 0.5), digits)]));
}

/** The SFT-warmed shared starting model: makeTinyModel, then bench/grpo_warmup.py. */
async function buildModel(dir: string): Promise<{ path: string; parameters: number; sftSeconds: number | null }> {
  const tiny = await makeTinyModel(join(dir, "tiny"), config.model);
  if (config.sftWarmup.steps === 0) return { path: tiny.path, parameters: tiny.parameters, sftSeconds: null };
  const out = join(dir, "warm");
  const w = config.sftWarmup;
  const args = [join(import.meta.dirname, "grpo_warmup.py"), tiny.path, out, "--steps", String(w.steps), "--batch", String(w.batch), "--lr", String(w.lr), "--seed", String(w.seed)];
  const { stdout } = await promisify(execFile)(python, args, { timeout: 600_000 });
  const result = z.object({ seconds: z.number() }).parse(JSON.parse(stdout.trim().split("\n").at(-1) ?? "null"));
  return { path: out, parameters: tiny.parameters, sftSeconds: round(result.seconds, 1) };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "posttrain-bench-grpo-"));
  const stoppers: (() => Promise<void>)[] = [];
  const loadBefore = round(loadavg()[0] ?? 0, 2);
  if (loadBefore > cpus().length / 2 && flags.threads === undefined) {
    log(`the machine is busy (load ${loadBefore} on ${cpus().length} cores): timings will be noisy; --threads 1 suffers less`);
  }
  try {
    log(`building the tiny model and its SFT warm-up (${config.sftWarmup.steps} steps)`);
    const model = await buildModel(dir);
    const problems = digitSortExamples({ count: totalSteps * config.promptsPerStep, numDigits: config.task.numDigits, split: "train", seed: config.task.seed });
    const request: PythonRequest = {
      modelDir: model.path,
      prompts: problems.map((p) => ({ prompt: p.query, answer: p.answer })),
      groupSize: config.groupSize,
      promptsPerStep: config.promptsPerStep,
      maxNewTokens: config.maxNewTokens,
      temperature: config.sampling.temperature,
      topP: config.sampling.topP,
      topK: config.sampling.topK,
      lr: config.optimizer.lr,
      weightDecay: config.optimizer.weightDecay,
      gradClip: config.gradClip,
      clipEpsilon: config.loss.clipEpsilon,
      entropyCoeff: config.loss.entropyCoeff,
      seed: config.seed,
    };

    log("starting (a) the SDK's GRPOTrainer");
    const pool = await WorkerPool.local({ workers: 1, device: config.device });
    stoppers.push(() => pool.close());
    const timer = new RpcTimer(pool.worker(0));
    const runDir = join(dir, "run");
    const trainer = await GRPOTrainer.create(
      {
        model: { path: model.path, device: config.device },
        task: { type: "digit-sort", numDigits: config.task.numDigits, seed: config.task.seed },
        groupSize: config.groupSize,
        promptsPerStep: config.promptsPerStep,
        maxNewTokens: config.maxNewTokens,
        sampling: config.sampling,
        loss: { variant: config.loss.variant, clipEpsilon: config.loss.clipEpsilon, entropyCoeff: config.loss.entropyCoeff },
        klToRefCoeff: config.klToRefCoeff,
        optimizer: config.optimizer,
        gradClip: config.gradClip,
        steps: totalSteps,
        eval: { every: 0 },
        checkpoint: { every: 0 },
        seed: config.seed,
        runDir,
      },
      { pool },
    );
    stoppers.unshift(() => trainer.close());
    const sdkSteps = trainer.run()[Symbol.asyncIterator]();
    stoppers.unshift(async () => {
      await sdkSteps.return?.();
    });

    log("starting (b) the in-process loop");
    const inProcess = await startPythonStepper(python, "grpo_inprocess.py", request);
    stoppers.unshift(() => inProcess.stop());
    let trl: PythonStepper | null = null;
    let trlError: string | null = flags.skipTrl ? "skipped (--skip-trl)" : null;
    if (!flags.skipTrl) {
      log("starting (c) TRL's GRPOTrainer");
      try {
        const started = await startPythonStepper(python, "grpo_trl.py", request);
        trl = started;
        stoppers.unshift(() => started.stop());
      } catch (err) {
        // TRL comes with the worker's test extras; without it the bench still measures a/b.
        trlError = err instanceof Error ? err.message : String(err);
        log(`TRL is not available, going on without (c): ${trlError}`);
      }
    }

    const newSeries = (): Series => ({ ms: [], rewards: [], phases: [] });
    const series = { sdk: newSeries(), inProcess: newSeries(), trl: newSeries() };
    const sdkRecords: StepRecord[] = [];
    const rpc: Record<string, number>[] = [];
    log(`${config.warmup} warm-up + ${config.steps} timed steps per system, interleaved`);
    for (let i = 0; i < totalSteps; i++) {
      const timed = i >= config.warmup;
      timer.reset();
      const t0 = performance.now();
      const next = await sdkSteps.next();
      const sdkMs = performance.now() - t0;
      if (next.done === true) throw new Error(`the SDK's run ended after ${i} steps`);
      const record = next.value;
      const b = await inProcess.step();
      const c = trl !== null ? await trl.step() : null;
      if (timed) {
        series.sdk.ms.push(sdkMs);
        series.sdk.rewards.push(record.reward_mean ?? Number.NaN);
        sdkRecords.push(record);
        rpc.push(timer.totals());
        series.inProcess.ms.push(b.ms);
        series.inProcess.rewards.push(b.reward);
        if (b.phases !== undefined) series.inProcess.phases.push(b.phases);
        if (c !== null) {
          series.trl.ms.push(c.ms);
          series.trl.rewards.push(c.reward);
        }
      }
      const fmt = (ms: number, reward: number | null | undefined): string => `${Math.round(ms)} ms (reward ${(reward ?? Number.NaN).toFixed(3)})`;
      log(
        `step ${i + 1}/${totalSteps}${timed ? "" : " (warm-up)"}: sdk ${fmt(sdkMs, record.reward_mean)}, in-process ${fmt(b.ms, b.reward)}` +
          (c !== null ? `, trl ${fmt(c.ms, c.reward)}` : ""),
      );
    }

    const sdk = summarize(series.sdk);
    const inProc = summarize(series.inProcess);
    const median = (s: Series): number => quantile(s.ms, 0.5);
    const ab = median(series.sdk) / median(series.inProcess);
    const ac = trl !== null ? median(series.sdk) / median(series.trl) : null;
    const report = {
      bench: "grpo",
      config: { ...config, model: { ...config.model, parameters: model.parameters }, sftWarmup: { ...config.sftWarmup, seconds: model.sftSeconds } },
      machine: {
        ...machineFacts(pool.worker(0).info.torch, loadBefore),
        ompNumThreads: process.env.OMP_NUM_THREADS ?? null,
        torchThreads: { inProcess: inProcess.threads, trl: trl?.threads ?? null },
      },
      sdk: { ...sdk, profile: profile(sdkRecords, rpc, series.sdk.ms) },
      inProcess: inProc,
      trl: trl !== null ? summarize(series.trl) : { unavailable: trlError },
      ratios: { "a/b": round(ab), "a/c": ac !== null ? round(ac) : null },
      targets: { "a/b <= 1.10": ab <= 1.1, "a/c <= 1.0": ac !== null ? ac <= 1.0 : null },
      sdkPrompts: await checkPrompts(runDir, problems.map((p) => p.query)),
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } finally {
    for (const stop of stoppers) {
      await stop().catch((err: unknown) => {
        log(`cleanup: ${String(err)}`);
      });
    }
    await rm(dir, { recursive: true, force: true });
  }
}

/** Where the SDK's step time goes: per worker method (timed from TS), the rest, and the trainer's own figures. */
function profile(records: readonly StepRecord[], rpc: readonly Record<string, number>[], wallMs: readonly number[]): Record<string, unknown> {
  const med = (xs: readonly number[]): number => round(quantile(xs, 0.5), 1);
  const workerMs = rpc.map((r) => Object.values(r).reduce((a, b) => a + b, 0));
  return {
    medianMsPerStep: {
      wall: med(wallMs),
      workerCalls: med(workerMs),
      outsideWorkerCalls: med(wallMs.map((w, i) => w - (workerMs[i] ?? 0))),
      byMethod: medianByKey(rpc),
    },
    trainerSecondsByPhase: medianByKey(
      records.map((r) => Object.fromEntries(Object.entries(r).filter((e): e is [string, number] => e[0].endsWith("_time_s") && typeof e[1] === "number"))),
      4,
    ),
    tokensPerS: round(quantile(records.map((r) => r.tokens_per_s ?? Number.NaN), 0.5), 1),
    completionLengthMean: round(quantile(records.map((r) => r.completion_length_mean ?? Number.NaN), 0.5), 2),
  };
}

/**
 * Checks that the SDK trained on the prompts the baselines got: each sample of `samples.jsonl` (the first rows of
 * a step's groups) must show prompt `(step - 1) × promptsPerStep + g` of the shared list.
 */
async function checkPrompts(runDir: string, prompts: readonly string[]): Promise<{ checked: number; mismatched: number; first: unknown }> {
  const text = await readFile(join(runDir, "samples.jsonl"), "utf8").catch(() => "");
  const samples = text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => z.looseObject({ step: z.number().int(), prompt: z.string() }).parse(JSON.parse(l)));
  let mismatched = 0;
  let previous = -1;
  let g = 0;
  for (const sample of samples) {
    g = sample.step === previous ? g + 1 : 0;
    previous = sample.step;
    if (prompts[(sample.step - 1) * config.promptsPerStep + g] !== sample.prompt) mismatched++;
  }
  return { checked: samples.length, mismatched, first: samples[0] ?? null };
}

await main();
