// GRPO step benchmark (issues 6 and 18). Prints one JSON object; progress goes to stderr.
//   npm run bench:grpo [-- --model tiny|small|medium --steps 50 --warmup 3 --last 10 --sft-steps 100
//                          --max-new-tokens 6 --prompts-per-step 16 --group-size 8 --threads N --skip-trl --quick
//                          --worker-timing]     (the defaults shown are the tiny model's: bench/grpo-options.ts)
// Seconds per GRPO step (generate, score, loss, optimizer step) of four systems, in one run on one machine, on
// the same model, prompts, group size, lengths, learning rate and seed:
//   (a)    sdk:           posttrain's GRPOTrainer (TS env, rewards, advantages; one local CPU worker, colocated);
//   (fair) inProcessFair: bench/grpo_inprocess_fair.py, the SDK's own compute (generation with the prompt shared
//                         across its group, the shared-prefix training forward, the SDK's loss, optimizer and
//                         sampling seeds) called in one Python process with no bridge;
//   (b)    inProcess:     bench/grpo_inprocess.py, a plain PyTorch loop (HF generate, no prompt sharing);
//   (c)    trl:           bench/grpo_trl.py, TRL's GRPOTrainer.
// The model is a preset of bench/model-presets.ts (`--model`, default tiny); the tiny model gets a short SFT
// warm-up on digit sorting (bench/grpo_warmup.py) so that the rewards move, the random small and medium models
// none. The prompts are the digit-sort task's training stream. The systems take their steps in turns (a, fair, b,
// c, a, ...) so they all see the same machine state; the first `--warmup` steps of each are not timed. Reported:
// median and p10/p90 seconds per step, the ratios a/fair (`fair`, target <= 1.05: the bridge's and the SDK's cost
// over the same compute), a/b and a/c, the mean reward over the last `--last` steps of each, whether the fair
// baseline's rewards, losses and completion lengths equal the SDK's step for step (same seeds, same compute: they
// should; a first step that differs exits 1), and for the SDK where a step's time goes (the worker calls timed from
// TS, by method, and the rest; with --worker-timing also inside the worker), with `fairGap` splitting the SDK's time
// over the fair baseline into its parts. Every Python process runs in a session of its own (bench/grpo-python.ts).
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { resolvePython } from "../bridge/index.js";
import { stepSeed } from "../sdk/collectors/generator-pool.js";
import { GRPOTrainer, WorkerPool, digitSortExamples, type StepRecord } from "../sdk/index.js";
import { grpoBenchConfig, parseGrpoFlags } from "./grpo-options.js";
import { startPythonStepper, type PythonRequest, type PythonStepper } from "./grpo-python.js";
import { RpcTimer } from "./grpo-profile.js";
import { WorkerTimings } from "./grpo-worker-timing.js";
import { buildBenchModel } from "./model-presets.js";
import { machineFacts, quantile, round } from "./stats.js";

const flags = parseGrpoFlags();
const config = grpoBenchConfig(flags);
const totalSteps = config.warmup + config.steps;
// The worker and every baseline inherit this environment, so they run with the same torch thread count.
if (flags.threads !== undefined) process.env.OMP_NUM_THREADS = String(flags.threads);
const python = resolvePython();

const started = performance.now();

function log(message: string): void {
  process.stderr.write(`[bench:grpo ${((performance.now() - started) / 1000).toFixed(1)}s] ${message}\n`);
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

/** The shared starting model: the preset (bench/model-presets.ts), then bench/grpo_warmup.py unless `sftSteps` is 0. */
async function buildModel(dir: string): Promise<{ path: string; parameters: number; vocabSize: number; sftSeconds: number | null }> {
  const built = await buildBenchModel(config.model.preset, join(dir, config.model.preset), { seed: config.model.seed, python });
  const base = { parameters: built.parameters, vocabSize: built.vocabSize };
  if (config.sftWarmup.steps === 0) return { path: built.path, ...base, sftSeconds: null };
  const out = join(dir, "warm");
  const w = config.sftWarmup;
  const args = [join(import.meta.dirname, "grpo_warmup.py"), built.path, out, "--steps", String(w.steps), "--batch", String(w.batch), "--lr", String(w.lr), "--seed", String(w.seed)];
  const { stdout } = await promisify(execFile)(python, args, { timeout: 600_000 });
  const result = z.object({ seconds: z.number() }).parse(JSON.parse(stdout.trim().split("\n").at(-1) ?? "null"));
  return { path: out, ...base, sftSeconds: round(result.seconds, 1) };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "posttrain-bench-grpo-"));
  const stoppers: (() => Promise<void>)[] = [];
  const starting: Promise<unknown>[] = [];
  const loadBefore = round(loadavg()[0] ?? 0, 2);
  if (loadBefore > cpus().length / 2 && flags.threads === undefined) {
    log(`the machine is busy (load ${loadBefore} on ${cpus().length} cores): timings will be noisy; --threads 1 suffers less`);
  }
  try {
    log(`building the ${config.model.preset} model and its SFT warm-up (${config.sftWarmup.steps} steps)`);
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

    // (b) and (c) need nothing from the SDK: they load their models while it starts (startup is never timed)
    const launch = (script: string): Promise<PythonStepper> => {
      const start = startPythonStepper(python, script, request);
      // a failure is reported where the start is awaited below; here it only must not be an unhandled rejection
      starting.push(start.then((s) => stoppers.unshift(() => s.stop()), () => undefined));
      return start;
    };
    log(`starting (b) the plain in-process loop${config.skipTrl ? "" : " and (c) TRL's GRPOTrainer"}, and (a) the SDK's GRPOTrainer`);
    const inProcessStart = launch("grpo_inprocess.py");
    const trlStart = config.skipTrl ? null : launch("grpo_trl.py");
    const workerTimings = config.workerTiming ? await WorkerTimings.create(dir, python) : null;
    const pool = await WorkerPool.local({ workers: 1, device: config.device, ...(workerTimings !== null ? { python: workerTimings.python } : {}) });
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

    // the fair baseline trains with the worker's own configs and samples with the collector's seeds
    const { result: trainerState } = await pool.worker(0).invoke("trainer_state", { model: "policy" });
    const fairRequest: PythonRequest = {
      ...request,
      sampleSeeds: Array.from({ length: totalSteps }, (_, i) => stepSeed(config.seed, i)),
      trainer: trainerState,
    };
    log("starting (fair) the in-process loop with the SDK's prompt sharing");
    const fair = await startPythonStepper(python, "grpo_inprocess_fair.py", fairRequest);
    stoppers.unshift(() => fair.stop());
    const inProcess = await inProcessStart;
    let trl: PythonStepper | null = null;
    let trlError: string | null = config.skipTrl ? `skipped (${flags.quick ? "--quick" : "--skip-trl"})` : null;
    if (trlStart !== null) {
      try {
        trl = await trlStart;
      } catch (err) {
        // TRL comes with the worker's test extras; without it the bench still measures a/fair and a/b.
        trlError = err instanceof Error ? err.message : String(err);
        log(`TRL is not available, going on without (c): ${trlError}`);
      }
    }

    const newSeries = (): Series => ({ ms: [], rewards: [], phases: [] });
    const series = { sdk: newSeries(), inProcessFair: newSeries(), inProcess: newSeries(), trl: newSeries() };
    const baselines: readonly [keyof typeof series, PythonStepper | null][] = [
      ["inProcessFair", fair],
      ["inProcess", inProcess],
      ["trl", trl],
    ];
    const sdkRecords: StepRecord[] = [];
    const rpc: Record<string, number>[] = [];
    const inWorker: Record<string, number>[] = [];
    // every step (warm-up included) of the SDK and the fair baseline: same seeds and compute, same outcomes
    const trace = { sdk: [] as Outcome[], fair: [] as Outcome[] };
    log(`${config.warmup} warm-up + ${config.steps} timed steps per system, interleaved`);
    for (let i = 0; i < totalSteps; i++) {
      const timed = i >= config.warmup;
      timer.reset();
      const t0 = performance.now();
      const next = await sdkSteps.next();
      const sdkMs = performance.now() - t0;
      if (next.done === true) throw new Error(`the SDK's run ended after ${i} steps`);
      const record = next.value;
      trace.sdk.push({ reward: record.reward_mean ?? Number.NaN, loss: record.loss ?? Number.NaN, length: record.completion_length_mean ?? Number.NaN });
      if (timed) {
        series.sdk.ms.push(sdkMs);
        series.sdk.rewards.push(record.reward_mean ?? Number.NaN);
        sdkRecords.push(record);
        rpc.push(timer.totals());
      }
      const workerSide = await workerTimings?.take();
      if (timed && workerSide !== undefined) inWorker.push(workerSide);
      const fmt = (ms: number, reward: number | null | undefined): string => `${Math.round(ms)} ms (reward ${(reward ?? Number.NaN).toFixed(3)})`;
      const line = [`sdk ${fmt(sdkMs, record.reward_mean)}`];
      for (const [name, stepper] of baselines) {
        if (stepper === null) continue;
        const step = await stepper.step();
        if (name === "inProcessFair") trace.fair.push({ reward: step.reward, loss: step.loss ?? Number.NaN, length: step.completionLength ?? Number.NaN });
        line.push(`${name} ${fmt(step.ms, step.reward)}`);
        if (!timed) continue;
        series[name].ms.push(step.ms);
        series[name].rewards.push(step.reward);
        if (step.phases !== undefined) series[name].phases.push(step.phases);
      }
      log(`step ${i + 1}/${totalSteps}${timed ? "" : " (warm-up)"}: ${line.join(", ")}`);
    }

    const median = (s: Series): number => quantile(s.ms, 0.5);
    const over = (s: Series): number => median(series.sdk) / median(s);
    const aFair = over(series.inProcessFair);
    const ab = over(series.inProcess);
    const ac = trl !== null ? over(series.trl) : null;
    const same = sameWork(trace.sdk, trace.fair);
    const report = {
      bench: "grpo",
      command: ["npm run bench:grpo --", ...process.argv.slice(2)].join(" "),
      config: {
        ...config,
        model: { ...config.model, parameters: model.parameters, vocabSize: model.vocabSize },
        sftWarmup: { ...config.sftWarmup, seconds: model.sftSeconds },
      },
      machine: {
        ...machineFacts(pool.worker(0).info.torch, loadBefore),
        ompNumThreads: process.env.OMP_NUM_THREADS ?? null,
        torchThreads: { inProcessFair: fair.threads, inProcess: inProcess.threads, trl: trl?.threads ?? null },
      },
      sdk: {
        ...summarize(series.sdk),
        profile: { ...profile(sdkRecords, rpc, series.sdk.ms), ...(inWorker.length > 0 ? { inWorkerMedianMs: medianByKey(inWorker) } : {}) },
      },
      inProcessFair: { ...summarize(series.inProcessFair), sameWorkAsSdk: same },
      inProcess: summarize(series.inProcess),
      trl: trl !== null ? summarize(series.trl) : { unavailable: trlError },
      fairGap: fairGap(series.sdk.ms, rpc, series.inProcessFair, inWorker),
      ratios: { fair: round(aFair), "a/b": round(ab), "a/c": ac !== null ? round(ac) : null },
      targets: { "fair <= 1.05": aFair <= 1.05, "a/b <= 1.10": ab <= 1.1, "a/c <= 1.0": ac !== null ? ac <= 1.0 : null },
      sdkPrompts: await checkPrompts(runDir, problems.map((p) => p.query)),
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    if (same.firstDifferent === 1) {
      // not a timing: the fair baseline no longer computes what the SDK computes, so `ratios.fair` means nothing
      log("the fair baseline's first step differs from the SDK's (reward, loss or completion length): update bench/grpo_inprocess_fair.py");
      // --quick is `npm run bench`'s crash guard: the JSON's sameWorkAsSdk records it there, without failing CI.
      if (!flags.quick) process.exitCode = 1;
    }
  } finally {
    await Promise.allSettled(starting); // a baseline still starting gets its stopper first
    for (const stop of stoppers) {
      await stop().catch((err: unknown) => {
        log(`cleanup: ${String(err)}`);
      });
    }
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Where the SDK's time over the fair baseline goes, in median milliseconds per step: the `generate` call against the
 * baseline's templating and generation, the `train_step` call against its training, the other worker calls (weight
 * sync), and the TypeScript work outside worker calls (env, rewards, advantages, batch assembly, run-directory
 * writes). Each call's figure includes its encoding, transfer and the worker's checks besides the same compute; with
 * worker-side timings (`inWorker`) each call is split further into `transport` (the round trip seen from TS less the
 * worker's `run_call`: TS encode/decode, ZeroMQ, the I/O thread and the hop to the compute thread), `workerGlue`
 * (`run_call` less the compute: payload decode, argument checks, prompt rendering, reply encoding) and `compute`
 * (the worker's compute less the baseline's same compute: noise, or a real difference).
 */
function fairGap(sdkMs: readonly number[], rpc: readonly Record<string, number>[], fair: Series, inWorker: readonly Record<string, number>[]): Record<string, unknown> {
  const med = (xs: readonly number[]): number => quantile(xs, 0.5);
  const phase = (name: string): number => med(fair.phases.map((p) => p[name] ?? 0));
  const call = (name: string): number => med(rpc.map((r) => r[name] ?? 0));
  const worker = (name: string): number => med(inWorker.map((r) => r[name] ?? 0));
  const workerMs = rpc.map((r) => Object.values(r).reduce((x, y) => x + y, 0));
  const other = rpc.map((r) => Object.entries(r).reduce((x, [k, v]) => (k === "generate" || k === "train_step" ? x : x + v), 0));
  const split = (method: string, compute: string, baseline: number): Record<string, number> => ({
    transport: round(call(method) - worker(`call.${method}`), 1),
    workerGlue: round(worker(`call.${method}`) - worker(compute), 1),
    compute: round(worker(compute) - baseline, 1),
  });
  return {
    step: round(med(sdkMs) - med(fair.ms), 1),
    generateCall: round(call("generate") - phase("template") - phase("generate"), 1),
    trainStepCall: round(call("train_step") - phase("train"), 1),
    otherWorkerCalls: round(med(other), 1),
    outsideWorkerCalls: round(med(sdkMs.map((w, i) => w - (workerMs[i] ?? 0))) - phase("reward"), 1),
    ...(inWorker.length > 0
      ? { generateSplit: split("generate", "generation", phase("generate")), trainStepSplit: split("train_step", "step", phase("train")) }
      : {}),
  };
}

/** What a step produced, to compare the SDK's and the fair baseline's. */
interface Outcome {
  reward: number;
  loss: number;
  length: number;
}

/**
 * Whether the fair baseline did the SDK's work: with the same weights, prompts and sampling seeds its completions are
 * the SDK's, hence the same mean reward and completion length (to 1e-6) and loss (to 1e-4 relative), step after step,
 * until float rounding in the update (or a change on either side) sets them apart. Reports the steps compared, those
 * that agree, and the first that does not.
 */
function sameWork(sdk: readonly Outcome[], fair: readonly Outcome[]): { steps: number; equal: number; firstDifferent: number | null } {
  const steps = Math.min(sdk.length, fair.length);
  const close = (a: number, b: number, tol: number): boolean => Math.abs(a - b) <= tol * Math.max(1, Math.abs(a));
  const agree = Array.from({ length: steps }, (_, i) => {
    const a = sdk[i]!;
    const b = fair[i]!;
    return close(a.reward, b.reward, 1e-6) && close(a.length, b.length, 1e-6) && close(a.loss, b.loss, 1e-4);
  });
  const first = agree.indexOf(false);
  return { steps, equal: agree.filter(Boolean).length, firstDifferent: first === -1 ? null : first + 1 };
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
