// Asynchronous GRPO benchmark. Prints one JSON object; progress goes to stderr.
//   npm run bench:async [-- --quick --model tiny|small|medium --rounds 2 --steps 80 --prompts 32 --group 8 --max-new-tokens 6 --lr 1e-3
//                          --eval-every 5 --eval-prompts 256 --target 0.7 --sft-steps 100 --threads 1 --ks 0,1,2]
// GRPOTrainer's collector → replay buffer → trainer pipeline with a separate generator worker and a trainer worker
// (`workers: { generator: { count: 1 } }`, one torch thread each), on the digit-sort task, for maxPolicyAge k = 0
// (synchronous: generate, then train), 1 and 2 (the collector samples the next batches on the generator while the
// trainer trains). Every run starts from the same SFT warm-up checkpoint (made once, like `npm run demo`'s) with
// the same seed and settings, and the runs take turns (k0, k1, k2, k0, k1, k2, ...) so that they see the same
// machine state. Measured per run:
//   - samples/s: completions trained per second of training wall time (the time the run's steps took, evaluations
//     excluded), and the same from the median step;
//   - the held-out reward (GRPOTrainer.evaluate(): the eval config's prompts, greedy) every `--eval-every` steps,
//     the training seconds and samples at which it first reached `--target`, and its value after the run's last
//     step (the same number of trained samples for every k);
//   - from the step records: generator and trainer busy fractions, policy age, stale samples dropped, queue depth;
//   - where the time goes: each worker's requests by method (timed from TS, bench/grpo-profile.ts) and the CPU
//     seconds of this process and of each worker (/proc) per second of step time.
// Reported: per-k means over the rounds, the ratios of samples/s of k = 1 and k = 2 over k = 0, the reward
// differences against k = 0, and `overlap`: the ratio a perfect overlap would give at k = 0's phase times, how much
// slower each worker computed when both ran at once, and the CPU cores the run got. Workers get their thread count
// through WorkerPool.local's `env` (OMP_NUM_THREADS, MKL_NUM_THREADS). `--model` picks a bench/model-presets.ts
// preset (default tiny; small/medium have a 32000-token vocabulary) and `--max-new-tokens` the completion length
// (the digit-sort answer needs 6; longer completions, up to 256, make generation dominate).
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { GRPOTrainer, SFTTrainer, WorkerPool, type EvalRecord, type StepRecord } from "../sdk/index.js";
import { parseOptions } from "../sdk/core/index.js";
import { RpcTimer } from "./grpo-profile.js";
import { MODEL_PRESETS, MODEL_PRESET_NAMES } from "./model-presets.js";
import { compactJSON, machineFacts, median, round } from "./stats.js";

const FlagsSchema = z.strictObject({
  /** A smoke run: a few steps of each k, one round, a short warm-up. */
  quick: z.boolean(),
  /** The model preset (bench/model-presets.ts). */
  model: z.enum(MODEL_PRESET_NAMES),
  /** Rounds of (k0, k1, k2, ...). */
  rounds: z.coerce.number().int().min(1).max(20),
  /** GRPO steps per run. */
  steps: z.coerce.number().int().min(1).max(10_000),
  /** Distinct prompts per step. */
  prompts: z.coerce.number().int().min(1).max(1024),
  /** Completions per prompt. */
  group: z.coerce.number().int().min(2).max(256),
  maxNewTokens: z.coerce.number().int().min(1).max(512),
  /** AdamW learning rate of GRPO. */
  lr: z.coerce.number().gt(0),
  /** Held-out evaluation every this many steps (and after the last). */
  evalEvery: z.coerce.number().int().min(1),
  /** Held-out prompts per evaluation. */
  evalPrompts: z.coerce.number().int().min(1).max(1934),
  /** Held-out reward to reach. */
  target: z.coerce.number().min(0).max(1),
  /** SFT warm-up steps (batch 16, lr 3e-3, as the demo). */
  sftSteps: z.coerce.number().int().min(1),
  /** Torch threads of each worker (OMP_NUM_THREADS, MKL_NUM_THREADS). */
  threads: z.coerce.number().int().min(1).max(256),
  /** The maxPolicyAge values, comma-separated; the first is the baseline of the ratios. */
  ks: z.string().regex(/^\d+(,\d+)*$/),
});

const { values: raw } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    model: { type: "string", default: "tiny" },
    rounds: { type: "string" },
    steps: { type: "string" },
    prompts: { type: "string", default: "32" },
    group: { type: "string", default: "8" },
    "max-new-tokens": { type: "string", default: "6" },
    lr: { type: "string", default: "1e-3" },
    "eval-every": { type: "string" },
    "eval-prompts": { type: "string", default: "256" },
    target: { type: "string", default: "0.7" },
    "sft-steps": { type: "string" },
    threads: { type: "string", default: "1" },
    ks: { type: "string", default: "0,1,2" },
  },
});
const quick = raw.quick;
const flags = parseOptions(
  FlagsSchema,
  {
    quick,
    model: raw.model,
    rounds: raw.rounds ?? (quick ? "1" : "2"),
    steps: raw.steps ?? (quick ? "4" : "80"),
    prompts: quick ? "4" : raw.prompts,
    group: raw.group,
    maxNewTokens: raw["max-new-tokens"],
    lr: raw.lr,
    evalEvery: raw["eval-every"] ?? (quick ? "2" : "5"),
    evalPrompts: quick ? "16" : raw["eval-prompts"],
    target: raw.target,
    sftSteps: raw["sft-steps"] ?? (quick ? "4" : "100"),
    threads: raw.threads,
    ks: raw.ks,
  },
  "bench:async flags",
);
const ks = flags.ks.split(",").map(Number);
const baselineK = ks[0]!;
const SEED = 0;
const rowsPerStep = flags.prompts * flags.group;

function log(message: string): void {
  process.stderr.write(`[bench:async] ${message}\n`);
}

const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
const numbers = (records: readonly StepRecord[], key: string): number[] =>
  records.map((r) => r[key]).filter((v): v is number => typeof v === "number" && Number.isFinite(v));

/** One held-out evaluation of a run. */
interface EvalPoint {
  readonly step: number;
  readonly samples: number;
  /** Training seconds before it (evaluations excluded). */
  readonly trainSeconds: number;
  readonly reward: number;
}

/** One run's figures. */
interface RunResult {
  readonly k: number;
  readonly round: number;
  readonly steps: number;
  readonly samples: number;
  readonly trainSeconds: number;
  readonly samplesPerS: number;
  readonly samplesPerSMedianStep: number;
  /** Training seconds at the first evaluation with reward ≥ target. */
  readonly secondsToTarget: number | null;
  readonly samplesToTarget: number | null;
  /** The same from the first evaluation after which every later one stays ≥ target (less sensitive to eval noise). */
  readonly secondsToTargetSustained: number | null;
  readonly rewardBefore: number;
  readonly rewardAfter: number;
  /** The held-out evaluations, by column: after `step` steps, `trainSeconds` of training, `reward`. */
  readonly evals: { readonly step: readonly number[]; readonly trainSeconds: readonly number[]; readonly reward: readonly number[] };
  readonly evalSeconds: number;
  readonly pipeline: Record<string, number | null>;
  /** Milliseconds per step in each worker's requests, by method, as seen from TypeScript (evaluations excluded). */
  readonly rpcMsPerStep: { readonly trainer: Record<string, number>; readonly generator: Record<string, number> };
  /** CPU seconds per second of step wall time of each process (2 = both cores of a 2-core machine). */
  readonly cpuPerWallSecond: Record<string, number | null>;
}

/** CPU seconds (user + system) of process `pid` from /proc (Linux), or NaN. */
function cpuSecondsOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${String(pid)}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // fields from the 3rd (state) on
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return Number.NaN;
  }
}

/** The pids of this process's `posttrain_worker` children by worker id (Linux; empty elsewhere). */
function workerPids(): Map<number, number> {
  const out = new Map<number, number>();
  let entries: string[];
  try {
    entries = readdirSync("/proc").filter((e) => /^\d+$/.test(e));
  } catch {
    return out;
  }
  for (const entry of entries) {
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid !== process.pid) continue;
      const args = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      const id = args.indexOf("--worker-id");
      if (args.includes("posttrain_worker") && id >= 0) out.set(Number(args[id + 1]), Number(entry));
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}

/** CPU seconds of this process and of the trainer and generator workers, summed over the step windows of a run. */
class StepCpu {
  readonly #pids: readonly (number | undefined)[];
  #start: number[] = [];
  readonly #sums = [0, 0, 0];

  constructor(pids: ReadonlyMap<number, number>) {
    this.#pids = [pids.get(0), pids.get(1)];
  }

  #now(): number[] {
    const usage = process.cpuUsage();
    return [(usage.user + usage.system) / 1e6, ...this.#pids.map((pid) => (pid === undefined ? Number.NaN : cpuSecondsOf(pid)))];
  }

  begin(): void {
    this.#start = this.#now();
  }

  end(): void {
    this.#now().forEach((v, i) => (this.#sums[i]! += v - (this.#start[i] ?? Number.NaN)));
  }

  /** CPU seconds per second of step wall time: `node` (this process: envs, rewards, buffer, encoding), `trainer`, `generator`. */
  perWallSecond(wallSeconds: number): Record<string, number | null> {
    const [node, trainer, generator] = this.#sums.map((v) => (Number.isFinite(v) ? round(v / wallSeconds, 3) : null));
    return { node: node ?? null, trainer: trainer ?? null, generator: generator ?? null };
  }
}

/** Sums each worker's request times over the step windows of a run. */
class StepRpc {
  readonly #timers: readonly RpcTimer[];
  readonly #sums: Map<string, number>[];
  #start: Record<string, number>[] = [];

  constructor(timers: readonly RpcTimer[]) {
    this.#timers = timers;
    this.#sums = timers.map(() => new Map<string, number>());
  }

  begin(): void {
    this.#start = this.#timers.map((t) => t.totals());
  }

  end(): void {
    this.#timers.forEach((t, i) => {
      const before = this.#start[i] ?? {};
      for (const [method, ms] of Object.entries(t.totals())) {
        const sums = this.#sums[i]!;
        sums.set(method, (sums.get(method) ?? 0) + ms - (before[method] ?? 0));
      }
    });
  }

  /** Milliseconds per step of worker `i`, by method. */
  perStep(i: number, steps: number): Record<string, number> {
    return Object.fromEntries([...(this.#sums[i] ?? new Map<string, number>())].sort().map(([m, ms]) => [m, round(ms / Math.max(steps, 1), 1)]));
  }
}

/** Means of the pipeline metrics over the steps whose window held no evaluation (step 1 and those right after one excluded). */
function pipelineMeans(records: readonly StepRecord[], evalSteps: ReadonlySet<number>): Record<string, number | null> {
  const clean = records.filter((r) => r.step > 1 && !evalSteps.has(r.step - 1));
  const m = (key: string): number | null => {
    const xs = numbers(clean, key);
    return xs.length === 0 ? null : round(mean(xs), 3);
  };
  const ageMax = numbers(records, "policy_age_max");
  return {
    stepsAveraged: clean.length,
    generatorBusyFrac: m("generator_busy_frac"),
    trainerBusyFrac: m("trainer_busy_frac"),
    policyAgeMean: m("policy_age_mean"),
    policyAgeMax: ageMax.length === 0 ? null : Math.max(...ageMax),
    staleSamplesDropped: numbers(records, "stale_samples_dropped").reduce((a, b) => a + b, 0),
    queueDepthMean: m("queue_depth"),
    medianStepTimeS: round(median(numbers(clean, "step_time_s")), 4),
    medianGenerateTimeS: round(median(numbers(clean, "generate_time_s")), 4),
    medianTrainTimeS: round(median(numbers(clean, "train_time_s")), 4),
    trainingRewardLast10: round(mean(numbers(records, "reward_mean").slice(-10)), 3),
  };
}

/** One GRPO run with maxPolicyAge `k` from the warm-up checkpoint; evaluations are not timed. */
async function runOnce(pool: WorkerPool, timers: readonly RpcTimer[], pids: ReadonlyMap<number, number>, model: string, dir: string, k: number, round_: number, steps: number): Promise<RunResult> {
  const trainer = await GRPOTrainer.create(
    {
      model: { path: model, device: "cpu" },
      task: { type: "digit-sort", numDigits: 4 },
      groupSize: flags.group,
      promptsPerStep: flags.prompts,
      maxNewTokens: flags.maxNewTokens,
      sampling: { temperature: 1 },
      loss: { variant: "grpo" },
      optimizer: { type: "adamw", lr: flags.lr },
      steps,
      eval: { every: 0, prompts: flags.evalPrompts },
      checkpoint: { every: 0 },
      log: { samplesPerStep: 0 },
      workers: { generator: { count: 1 } },
      async: { maxPolicyAge: k },
      seed: SEED,
      runDir: join(dir, `k${String(k)}-round${String(round_)}`),
    },
    { pool, log: () => undefined },
  );
  try {
    const evals: EvalPoint[] = [];
    const evalSteps = new Set<number>();
    let trainSeconds = 0;
    let evalSeconds = 0;
    const evaluate = async (step: number): Promise<EvalRecord> => {
      const t0 = performance.now();
      const e = await trainer.evaluate();
      evalSeconds += (performance.now() - t0) / 1000;
      evals.push({ step, samples: step * rowsPerStep, trainSeconds: round(trainSeconds, 3), reward: round(e.rewardMean ?? Number.NaN, 4) });
      evalSteps.add(step);
      return e;
    };
    const before = await evaluate(0);
    const records: StepRecord[] = [];
    const stepSeconds: number[] = [];
    const rpc = new StepRpc(timers);
    const cpu = new StepCpu(pids);
    const it = trainer.run()[Symbol.asyncIterator]();
    for (;;) {
      rpc.begin();
      cpu.begin();
      const t0 = performance.now();
      const next = await it.next();
      if (next.done === true) break;
      const seconds = (performance.now() - t0) / 1000;
      cpu.end();
      rpc.end();
      stepSeconds.push(seconds);
      trainSeconds += seconds;
      const record = next.value;
      records.push(record);
      // held while the loop is paused at this record: the next step's timing starts after it
      if (record.step % flags.evalEvery === 0 || record.step === steps) await evaluate(record.step);
    }
    const reached = evals.find((e) => e.reward >= flags.target);
    const sustained = evals.find((e, i) => evals.slice(i).every((later) => later.reward >= flags.target));
    const samples = records.length * rowsPerStep;
    return {
      k,
      round: round_,
      steps: records.length,
      samples,
      trainSeconds: round(trainSeconds, 3),
      samplesPerS: round(samples / trainSeconds, 1),
      samplesPerSMedianStep: round(rowsPerStep / median(stepSeconds), 1),
      secondsToTarget: reached === undefined ? null : reached.trainSeconds,
      samplesToTarget: reached === undefined ? null : reached.samples,
      secondsToTargetSustained: sustained === undefined ? null : sustained.trainSeconds,
      rewardBefore: round(before.rewardMean ?? Number.NaN, 4),
      rewardAfter: evals.at(-1)!.reward,
      evals: { step: evals.map((e) => e.step), trainSeconds: evals.map((e) => e.trainSeconds), reward: evals.map((e) => e.reward) },
      evalSeconds: round(evalSeconds, 2),
      pipeline: pipelineMeans(records, evalSteps),
      rpcMsPerStep: { trainer: rpc.perStep(0, records.length), generator: rpc.perStep(1, records.length) },
      cpuPerWallSecond: cpu.perWallSecond(trainSeconds),
    };
  } finally {
    await trainer.close();
  }
}

/** The mean of `pick` over a k's runs (null when any is null). */
function meanOf(runs: readonly RunResult[], pick: (r: RunResult) => number | null, digits = 3): number | null {
  const xs = runs.map(pick);
  return xs.some((x) => x === null) ? null : round(mean(xs as number[]), digits);
}

function summarize(runs: readonly RunResult[]): Record<string, unknown> {
  const pipe = (key: string): number | null => meanOf(runs, (r) => r.pipeline[key] ?? null);
  return {
    runs: runs.length,
    samplesPerS: meanOf(runs, (r) => r.samplesPerS, 1),
    samplesPerSMedianStep: meanOf(runs, (r) => r.samplesPerSMedianStep, 1),
    secondsToTarget: runs.map((r) => r.secondsToTarget),
    secondsToTargetMean: meanOf(runs, (r) => r.secondsToTarget, 2),
    samplesToTarget: runs.map((r) => r.samplesToTarget),
    secondsToTargetSustained: runs.map((r) => r.secondsToTargetSustained),
    secondsToTargetSustainedMean: meanOf(runs, (r) => r.secondsToTargetSustained, 2),
    rewardAfter: meanOf(runs, (r) => r.rewardAfter, 4),
    rewardAfterByRound: runs.map((r) => r.rewardAfter),
    generatorBusyFrac: pipe("generatorBusyFrac"),
    trainerBusyFrac: pipe("trainerBusyFrac"),
    policyAgeMean: pipe("policyAgeMean"),
    policyAgeMax: Math.max(...runs.map((r) => r.pipeline.policyAgeMax ?? Number.NaN)),
    staleSamplesDropped: runs.reduce((a, r) => a + (r.pipeline.staleSamplesDropped ?? 0), 0),
    queueDepthMean: pipe("queueDepthMean"),
    medianStepTimeS: pipe("medianStepTimeS"),
    medianGenerateTimeS: pipe("medianGenerateTimeS"),
    medianTrainTimeS: pipe("medianTrainTimeS"),
    rpcMsPerStep: { trainer: meanByKey(runs.map((r) => r.rpcMsPerStep.trainer)), generator: meanByKey(runs.map((r) => r.rpcMsPerStep.generator)) },
    cpuPerWallSecond: {
      node: meanOf(runs, (r) => r.cpuPerWallSecond.node ?? null),
      trainer: meanOf(runs, (r) => r.cpuPerWallSecond.trainer ?? null),
      generator: meanOf(runs, (r) => r.cpuPerWallSecond.generator ?? null),
    },
  };
}

/** The mean of each key over `rows` (a missing key counts as 0). */
function meanByKey(rows: readonly Record<string, number>[]): Record<string, number> {
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].sort();
  return Object.fromEntries(keys.map((k) => [k, round(mean(rows.map((r) => r[k] ?? 0)), 1)]));
}

async function main(): Promise<void> {
  const started = performance.now();
  const dir = await mkdtemp(join(tmpdir(), "posttrain-bench-async-"));
  const loadBefore = round(loadavg()[0] ?? 0, 2);
  if (loadBefore > cpus().length / 2) log(`the machine is busy (load ${loadBefore} on ${cpus().length} cores): timings will be noisy`);
  const threads = String(flags.threads);
  const pool = await WorkerPool.local({ workers: 2, device: "cpu", env: { OMP_NUM_THREADS: threads, MKL_NUM_THREADS: threads } });
  const timers = [new RpcTimer(pool.worker(0)), new RpcTimer(pool.worker(1))];
  const pids = workerPids();
  try {
    log(`SFT warm-up: ${flags.sftSteps} steps on the ${flags.model} model (once, shared by every run)`);
    const sftStart = performance.now();
    const sft = await SFTTrainer.create(
      {
        model: { path: "tiny", tiny: { ...MODEL_PRESETS[flags.model] }, device: "cpu" },
        data: { type: "digit-sort", examples: 2000, numDigits: 4 },
        batchSize: 16,
        optimizer: { type: "adamw", lr: 3e-3 },
        steps: flags.sftSteps,
        seed: SEED,
        runDir: join(dir, "sft"),
      },
      { pool, log: () => undefined },
    );
    const warm = await sft.train();
    await sft.close();
    if (warm.checkpoint === null) throw new Error("the SFT warm-up wrote no checkpoint");
    const sftSeconds = round((performance.now() - sftStart) / 1000, 1);

    // an untimed run first: both workers load torch's kernels and allocate before any measured step
    log("untimed warm-up run (3 steps)");
    await runOnce(pool, timers, pids, warm.checkpoint, join(dir, "warm-up"), Math.max(...ks), 0, 3);

    const runs: RunResult[] = [];
    for (let r = 1; r <= flags.rounds; r++) {
      for (const k of ks) {
        const result = await runOnce(pool, timers, pids, warm.checkpoint, dir, k, r, flags.steps);
        runs.push(result);
        const p = result.pipeline;
        log(
          `round ${r}/${flags.rounds} k=${k}: ${result.samplesPerS} samples/s (median step ${String(p.medianStepTimeS)} s: generate ` +
            `${String(p.medianGenerateTimeS)} s, train ${String(p.medianTrainTimeS)} s), busy generator ${String(p.generatorBusyFrac)} trainer ` +
            `${String(p.trainerBusyFrac)}, age ${String(p.policyAgeMean)}, reward ${result.rewardBefore} → ${result.rewardAfter}, ` +
            `≥ ${flags.target} after ${result.secondsToTarget === null ? "-" : `${result.secondsToTarget} s`}`,
        );
      }
    }

    const byK = Object.fromEntries(ks.map((k) => [`k${String(k)}`, summarize(runs.filter((r) => r.k === k))]));
    const base = runs.filter((r) => r.k === baselineK);
    const baseRate = mean(base.map((r) => r.samplesPerS));
    const baseMedianRate = mean(base.map((r) => r.samplesPerSMedianStep));
    const baseReward = mean(base.map((r) => r.rewardAfter));
    const ratios: Record<string, number> = {};
    const rewardDiff: Record<string, number> = {};
    const targets: Record<string, boolean> = {};
    for (const k of ks.filter((k) => k !== baselineK)) {
      const mine = runs.filter((r) => r.k === k);
      const name = `k${String(k)}/k${String(baselineK)}`;
      ratios[name] = round(mean(mine.map((r) => r.samplesPerS)) / baseRate);
      ratios[`${name} (median step)`] = round(mean(mine.map((r) => r.samplesPerSMedianStep)) / baseMedianRate);
      rewardDiff[`k${String(k)}-k${String(baselineK)}`] = round(mean(mine.map((r) => r.rewardAfter)) - baseReward, 4);
    }
    // Why the ratio is what it is: the most overlap could give at the baseline's own phase times (the step bound by
    // the longer of generation and training, plus what neither covers), how much slower each side computed when
    // both ran at once, and the CPU our three processes got (out of the machine's cores).
    const rpcOf = (rs: readonly RunResult[], side: "trainer" | "generator", method: string): number =>
      mean(rs.map((r) => r.rpcMsPerStep[side][method] ?? Number.NaN));
    const ceiling = mean(
      base.map((r) => {
        const step = r.pipeline.medianStepTimeS ?? Number.NaN;
        const gen = r.pipeline.medianGenerateTimeS ?? Number.NaN;
        const train = r.pipeline.medianTrainTimeS ?? Number.NaN;
        return step / (Math.max(gen, train) + Math.max(0, step - gen - train));
      }),
    );
    const overlap: Record<string, unknown> = { [`ceilingFromK${String(baselineK)}Phases`]: round(ceiling) };
    for (const k of ks) {
      const mine = runs.filter((r) => r.k === k);
      const cores = mean(mine.map((r) => Object.values(r.cpuPerWallSecond).reduce<number>((a, v) => a + (v ?? Number.NaN), 0)));
      overlap[`k${String(k)}`] = {
        cpuCoresUsed: round(cores, 2),
        generateSlowdown: round(rpcOf(mine, "generator", "generate") / rpcOf(base, "generator", "generate")),
        trainStepSlowdown: round(rpcOf(mine, "trainer", "train_step") / rpcOf(base, "trainer", "train_step")),
      };
    }
    if (ks.includes(1) && baselineK === 0) {
      targets["samples/s k1/k0 >= 1.6"] = (ratios["k1/k0"] ?? 0) >= 1.6;
      targets["|reward k1 - k0| <= 0.05"] = Math.abs(rewardDiff["k1-k0"] ?? Infinity) <= 0.05;
    }
    const report = {
      bench: "async",
      quick,
      config: {
        task: "digit-sort (4 digits)",
        model: { preset: flags.model, tiny: MODEL_PRESETS[flags.model], sftWarmup: { steps: flags.sftSteps, batchSize: 16, lr: 3e-3, seconds: sftSeconds } },
        workers: { trainer: 1, generator: 1, torchThreadsEach: flags.threads },
        promptsPerStep: flags.prompts,
        groupSize: flags.group,
        samplesPerStep: rowsPerStep,
        maxNewTokens: flags.maxNewTokens,
        lr: flags.lr,
        steps: flags.steps,
        samplesPerRun: flags.steps * rowsPerStep,
        eval: { every: flags.evalEvery, prompts: flags.evalPrompts, greedy: true, target: flags.target },
        ks,
        rounds: flags.rounds,
        order: runs.map((r) => `k${String(r.k)}`),
        seed: SEED,
      },
      machine: machineFacts(pool.worker(0).info.torch, loadBefore),
      byK,
      ratios: { samplesPerS: ratios, rewardAfterDiff: rewardDiff },
      overlap,
      targets,
      runs,
      notes: [
        "samplesPerS: completions trained / seconds of the run's steps (held-out evaluations excluded); (median step): the same from the median step",
        `secondsToTarget: training seconds at the first evaluation with held-out reward >= ${String(flags.target)}; (Sustained): at the first one after which every evaluation stays >= it; null: not reached`,
        "train_time_s (hence trainerBusyFrac) includes the weight sync, which waits for the generator's batch in flight; rpcMsPerStep.trainer.train_step is the trainer's own step",
        `overlap: ceilingFromK${String(baselineK)}Phases = median step / (max(generate, train) + the rest) of the baseline, the samples/s ratio a perfect overlap would give at its phase times; *Slowdown = the worker's generate / train_step request time against the baseline's; cpuCoresUsed = the three processes' CPU per second of step time`,
        "cpuPerWallSecond: CPU seconds of each process (this node process, the trainer worker, the generator worker) per second of step wall time, from /proc; their sum cannot pass the machine's cores",
        "busy fractions, policy age, queue depth: means over the steps whose window held no evaluation (step 1 and the steps right after an evaluation left out)",
        `rewardAfter: held-out reward (greedy, ${String(flags.evalPrompts)} prompts) after the last step, i.e. after the same number of trained samples for every k`,
      ],
      totalSeconds: round((performance.now() - started) / 1000, 1),
    };
    process.stdout.write(`${compactJSON(report)}\n`);
  } finally {
    await pool.close();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
