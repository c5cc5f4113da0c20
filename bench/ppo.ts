// Classic-RL collection benchmark (issue 19). Prints one JSON object; progress goes to stderr.
//   npm run bench:ppo [-- --num-envs 8 --frames-per-batch 2048 --total-frames 4096 --reps 5 --warmup 1
//                        --hidden 64,64 --activation tanh --threads 1 --train --epochs 10 --mini-batch-size 256
//                        --no-sdk-parallel --no-torchrl-parallel --quick [--torchrl-parallel]]
// Environment steps (frames) per second of CartPole-v1 collection, in one run on one machine:
//   sdk.serial / sdk.parallel:         posttrain's CartPoleEnv (TS) in a SerialEnv / ParallelEnv of N copies, the
//                                      policy a ProbabilisticActor over a worker-held MLP actor (one control_act
//                                      call per step for all N copies), batches from SyncDataCollector;
//   sdk.serialNoWorker:                sdk.serial with the actions drawn in TS: the envs' and the collector's share
//                                      of the SDK's step (`sdkSplit`), the rest being the worker call;
//   torchrl.serial / torchrl.parallel: bench/ppo_torchrl.py, Gymnasium's CartPole-v1 through TorchRL's GymEnv in
//                                      a SerialEnv / ParallelEnv (one subprocess per copy) of N copies, the same
//                                      MLP as a TorchRL ProbabilisticActor, TorchRL's collector, in one Python
//                                      process.
// Same N, framesPerBatch, MLP (hidden sizes, activation, categorical head) and torch threads on every side (the
// worker and the baseline get OMP_NUM_THREADS / MKL_NUM_THREADS = --threads). A timed run is `--total-frames`
// frames (totalFrames / framesPerBatch batches) from a collector built once, so episodes run on across runs, as
// in training. The sides take their runs in turns, every order in turn (bench/stats.ts timeBalanced), so they see
// the same machine state; the baseline reports the time measured inside Python. `--train` also times PPO end to
// end on the SerialEnv sides (each batch followed by GAE and `epochs` passes of ClipPPOLoss over mini-batches, Adam
// with grad clipping: PPOTrainer's step in the SDK, TorchRL's recipe in the baseline). Reported: frames/s per
// side (median run), the ratios SDK / TorchRL, the load average before and after, and the settings.
import { spawn } from "node:child_process";
import { loadavg } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { z } from "zod";
import { resolvePython } from "../bridge/index.js";
import { parseOptions } from "../sdk/core/index.js";
import {
  CartPoleEnv,
  ClipPPOLoss,
  ControlAgent,
  GAE,
  ParallelEnv,
  ProbabilisticActor,
  SerialEnv,
  SyncDataCollector,
  Tensor,
  WorkerPool,
  type EnvBase,
  type TensorDict,
  type WorkerClient,
} from "../sdk/index.js";
import { compactJSON, machineFacts, median, round, timeBalanced } from "./stats.js";

const FlagsSchema = z.strictObject({
  /** A short crash check for `npm run bench` (small batches, 2 reps); explicit flags still win. */
  quick: z.boolean(),
  /** Copies of the env on every side. */
  numEnvs: z.coerce.number().int().min(1).max(256).optional(),
  /** Frames per collector batch (a multiple of numEnvs). */
  framesPerBatch: z.coerce.number().int().min(1).max(1_000_000).optional(),
  /** Frames per timed run (a multiple of framesPerBatch). */
  totalFrames: z.coerce.number().int().min(1).max(10_000_000).optional(),
  /** Timed runs per side. */
  reps: z.coerce.number().int().min(1).max(1000).optional(),
  /** Untimed runs per side before them. */
  warmup: z.coerce.number().int().min(0).max(100).optional(),
  /** The MLP's hidden sizes, comma-separated ("" for none). */
  hidden: z
    .string()
    .transform((s) => (s.trim() === "" ? [] : s.split(",").map(Number)))
    .pipe(z.array(z.number().int().min(1).max(4096)).max(8)),
  activation: z.enum(["tanh", "relu", "elu"]),
  /** Torch threads of the worker and the baseline. */
  threads: z.coerce.number().int().min(1).max(256),
  /** Leave TorchRL's ParallelEnv out (N subprocesses, each importing torch: a minute to start on a busy 2-core VM). */
  noTorchrlParallel: z.boolean(),
  /** Time TorchRL's ParallelEnv in --quick mode too (left out there by default). */
  torchrlParallel: z.boolean(),
  /** Leave the SDK's ParallelEnv out. */
  noSdkParallel: z.boolean(),
  /** Also time PPO end to end (SerialEnv sides; always in --quick, with 2 epochs, as a crash check of the update). */
  train: z.boolean(),
  /** PPO epochs per batch (--train; default 10, as examples/configs/ppo-cartpole.yaml). */
  epochs: z.coerce.number().int().min(1).max(100).optional(),
  /** PPO mini-batch rows (--train; default 256, as examples/configs/ppo-cartpole.yaml). */
  miniBatchSize: z.coerce.number().int().min(1),
  seed: z.coerce.number().int().min(0),
});

const { values: raw } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    "num-envs": { type: "string" },
    "frames-per-batch": { type: "string" },
    "total-frames": { type: "string" },
    reps: { type: "string" },
    warmup: { type: "string" },
    hidden: { type: "string", default: "64,64" },
    activation: { type: "string", default: "tanh" },
    threads: { type: "string", default: "1" },
    "no-torchrl-parallel": { type: "boolean", default: false },
    "torchrl-parallel": { type: "boolean", default: false },
    "no-sdk-parallel": { type: "boolean", default: false },
    train: { type: "boolean", default: false },
    epochs: { type: "string" },
    "mini-batch-size": { type: "string", default: "256" },
    seed: { type: "string", default: "0" },
  },
});
const flags = parseOptions(
  FlagsSchema,
  {
    quick: raw.quick,
    numEnvs: raw["num-envs"],
    framesPerBatch: raw["frames-per-batch"],
    totalFrames: raw["total-frames"],
    reps: raw.reps,
    warmup: raw.warmup,
    hidden: raw.hidden,
    activation: raw.activation,
    threads: raw.threads,
    noTorchrlParallel: raw["no-torchrl-parallel"],
    torchrlParallel: raw["torchrl-parallel"],
    noSdkParallel: raw["no-sdk-parallel"],
    train: raw.train,
    epochs: raw.epochs,
    miniBatchSize: raw["mini-batch-size"],
    seed: raw.seed,
  },
  "bench:ppo flags",
);

// Full: PPOTrainer's defaults (8 copies, 2048 frames per batch); quick: a crash check in about a minute (4 copies, 256
// frames per batch, 2 reps, TorchRL's ParallelEnv left out unless --torchrl-parallel).
const numEnvs = flags.numEnvs ?? (flags.quick ? 4 : 8);
const framesPerBatch = flags.framesPerBatch ?? (flags.quick ? 256 : 2048);
const config = {
  env: "CartPole-v1",
  numEnvs,
  framesPerBatch,
  totalFrames: flags.totalFrames ?? 2 * framesPerBatch,
  reps: flags.reps ?? (flags.quick ? 2 : 5),
  warmup: flags.warmup ?? 1,
  actor: { hidden: flags.hidden, activation: flags.activation },
  critic: { hidden: flags.hidden, activation: flags.activation },
  threads: flags.threads,
  seed: flags.seed,
  // --train: examples/configs/ppo-cartpole.yaml's PPO settings, on both sides
  ppo: {
    epochs: flags.epochs ?? (flags.quick ? 2 : 10),
    miniBatchSize: flags.miniBatchSize,
    lr: 1e-3,
    maxGradNorm: 0.5,
    gamma: 0.99,
    lmbda: 0.95,
    clipEpsilon: 0.2,
    entropyCoeff: 0,
    criticCoeff: 0.5,
    lossCriticType: "l2" as const,
  },
};
if (config.framesPerBatch % config.numEnvs !== 0) throw new Error(`bench:ppo flags --frames-per-batch: expected a multiple of --num-envs (${String(config.numEnvs)})`);
if (config.totalFrames % config.framesPerBatch !== 0) throw new Error(`bench:ppo flags --total-frames: expected a multiple of --frames-per-batch (${String(config.framesPerBatch)})`);
const batchesPerRun = config.totalFrames / config.framesPerBatch;
const withTrain = flags.train || flags.quick;
const withTorchrlParallel = !flags.noTorchrlParallel && (flags.torchrlParallel || !flags.quick);

// The worker and the baseline inherit this environment: the same torch thread count on both sides.
process.env.OMP_NUM_THREADS = String(config.threads);
process.env.MKL_NUM_THREADS = String(config.threads);
const python = resolvePython();
const started = performance.now();

function log(message: string): void {
  process.stderr.write(`[bench:ppo ${((performance.now() - started) / 1000).toFixed(1)}s] ${message}\n`);
}

/** One timed run of a side: its time and the episodes that finished in it. */
interface Run {
  readonly ms: number;
  readonly frames: number;
  readonly episodes: number;
  readonly returnMean: number | null;
}

const RunSchema = z.looseObject({ ms: z.number(), frames: z.number(), episodes: z.number(), returnMean: z.number().nullable() });
const ReadySchema = z.looseObject({
  ready: z.literal(true),
  threads: z.number().int(),
  torch: z.string(),
  torchrl: z.string(),
  gymnasium: z.string(),
  env: z.string(),
  actorParameters: z.number().int(),
});

/** bench/ppo_torchrl.py in serve mode, its env and collector built. */
interface TorchRLSide {
  readonly ready: z.infer<typeof ReadySchema>;
  run(command: "collect" | "train"): Promise<Run>;
  stop(): Promise<void>;
}

async function startTorchRL(parallel: boolean): Promise<TorchRLSide> {
  const request = {
    numEnvs: config.numEnvs,
    parallel,
    framesPerBatch: config.framesPerBatch,
    totalFrames: config.totalFrames,
    actor: config.actor,
    critic: config.critic,
    threads: config.threads,
    seed: config.seed,
    ppo: config.ppo,
  };
  // A session of its own, as the SDK's worker has (see bench/grpo-python.ts: Linux's autogroup shares the CPU between
  // sessions first); it still ends with its stdin.
  const child = spawn(python, [join(import.meta.dirname, "ppo_torchrl.py"), "--serve"], { stdio: ["pipe", "pipe", "inherit"], detached: process.platform !== "win32" });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const exited = new Promise<never>((_, reject) => {
    child.once("exit", (code, signal) => {
      reject(new Error(`ppo_torchrl.py exited (code ${String(code)}, signal ${String(signal)})`));
    });
  });
  exited.catch(() => undefined);
  const readJson = async (): Promise<unknown> => {
    const line = await Promise.race([lines.next(), exited]);
    if (line.done === true) throw new Error("ppo_torchrl.py closed its stdout");
    const value = JSON.parse(line.value) as unknown;
    if (typeof value === "object" && value !== null && "error" in value) throw new Error(`ppo_torchrl.py: ${String(value.error)}`);
    return value;
  };
  child.stdin.write(`${JSON.stringify(request)}\n`);
  const ready = ReadySchema.parse(await readJson());
  return {
    ready,
    run: async (command) => {
      child.stdin.write(`${command}\n`);
      return RunSchema.parse(await readJson());
    },
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const done = new Promise((resolve) => child.once("exit", resolve));
      child.stdin.end("quit\n");
      await done;
    },
  };
}

/** The keys `control_update` reads of a collected batch (as PPOTrainer selects them). */
const UPDATE_KEYS = ["observation", "action", "action_log_prob", ["next", "observation"], ["next", "reward"], ["next", "done"], ["next", "terminated"]];

/** An SDK side: a batched env, an agent in the worker, a collector built once; `run` times `batchesPerRun` batches. */
class SdkSide {
  readonly #env: EnvBase;
  readonly #agent: ControlAgent;
  readonly #collector: SyncDataCollector;

  private constructor(env: EnvBase, agent: ControlAgent) {
    this.#env = env;
    this.#agent = agent;
    this.#collector = new SyncDataCollector({ env, policy: new ProbabilisticActor(agent), framesPerBatch: config.framesPerBatch });
  }

  static async create(worker: WorkerClient, name: string, env: EnvBase & { setSeed(seed: number): void }): Promise<{ side: SdkSide; actorParameters: number }> {
    env.setSeed(config.seed);
    const { agent, actorParameters } = await ControlAgent.create(worker, {
      name,
      observationSize: 4,
      action: { type: "categorical", n: 2 },
      actor: config.actor,
      critic: config.critic,
      optimizer: { type: "adam", lr: config.ppo.lr, eps: 1e-8, weightDecay: 0 },
      loss: new ClipPPOLoss(
        { clipEpsilon: config.ppo.clipEpsilon, entropyCoeff: config.ppo.entropyCoeff, criticCoeff: config.ppo.criticCoeff, lossCriticType: config.ppo.lossCriticType },
        "bench:ppo loss",
      ).toWire(),
      advantage: new GAE({ gamma: config.ppo.gamma, lmbda: config.ppo.lmbda }, "bench:ppo advantage").toWire(),
      maxGradNorm: config.ppo.maxGradNorm,
      seed: config.seed,
      replace: true,
    });
    return { side: new SdkSide(env, agent), actorParameters };
  }

  async run(train: boolean): Promise<Run> {
    const t0 = performance.now();
    for (let b = 0; b < batchesPerRun; b++) {
      const batch = await this.#collector.next();
      if (train) {
        const rows = batch.reshape([batch.numel()]).select(...UPDATE_KEYS);
        await this.#agent.update(rows, { numEnvs: this.#collector.numEnvs, epochs: config.ppo.epochs, miniBatchSize: config.ppo.miniBatchSize });
      }
    }
    const ms = performance.now() - t0;
    const episodes = this.#collector.takeFinishedEpisodes();
    const returnMean = episodes.length === 0 ? null : episodes.reduce((s, e) => s + e.return, 0) / episodes.length;
    return { ms, frames: config.totalFrames, episodes: episodes.length, returnMean };
  }

  async close(): Promise<void> {
    await this.#agent.close().catch(() => undefined);
    await this.#env.close();
  }
}

/**
 * The SDK's collection without the worker: the same SerialEnv and SyncDataCollector, the actions drawn in TS (a
 * fixed-seed LCG, 0 or 1). Its time against sdk.serial's splits the SDK's cost into the envs and the policy call.
 */
class NoWorkerSide {
  readonly #env = new SerialEnv(config.numEnvs, () => new CartPoleEnv());
  readonly #collector: SyncDataCollector;
  #state = 12345;

  constructor() {
    this.#env.setSeed(config.seed);
    const policy = (td: TensorDict): TensorDict => {
      const actions = BigInt64Array.from({ length: config.numEnvs }, () => {
        this.#state = (this.#state * 1103515245 + 12345) % 2147483648;
        return BigInt(this.#state >> 16) & 1n;
      });
      return td.set("action", Tensor.from(actions, { dtype: "int64", shape: [config.numEnvs] }));
    };
    this.#collector = new SyncDataCollector({ env: this.#env, policy, framesPerBatch: config.framesPerBatch });
  }

  async run(): Promise<Run> {
    const t0 = performance.now();
    for (let b = 0; b < batchesPerRun; b++) await this.#collector.next();
    const ms = performance.now() - t0;
    const episodes = this.#collector.takeFinishedEpisodes();
    const returnMean = episodes.length === 0 ? null : episodes.reduce((s, e) => s + e.return, 0) / episodes.length;
    return { ms, frames: config.totalFrames, episodes: episodes.length, returnMean };
  }

  close(): Promise<void> {
    return this.#env.close();
  }
}

/** Frames per second of a side's median run, with the spread of its runs. */
function summarize(runs: readonly Run[]): Record<string, number | null> {
  const ms = runs.map((r) => r.ms);
  const mid = median(ms);
  const episodes = runs.reduce((s, r) => s + r.episodes, 0);
  const returns = runs.filter((r) => r.returnMean !== null).map((r) => r.returnMean! * r.episodes);
  return {
    framesPerS: round(config.totalFrames / (mid / 1000), 1),
    medianMs: round(mid, 1),
    minMs: round(Math.min(...ms), 1),
    maxMs: round(Math.max(...ms), 1),
    episodes,
    returnMean: episodes === 0 ? null : round(returns.reduce((s, x) => s + x, 0) / episodes, 2),
  };
}

function ratio(a: Record<string, number | null> | undefined, b: Record<string, number | null> | undefined): number | null {
  const x = a?.framesPerS;
  const y = b?.framesPerS;
  return x == null || y == null || y === 0 ? null : round(x / y, 3);
}

/**
 * Milliseconds per batched step (N frames) of sdk.serial, split into the envs and collector (sdk.serialNoWorker's
 * time) and the rest: the policy's worker call (`control_act`, with its TensorDict out and back).
 */
function stepSplit(withWorker: Record<string, number | null> | undefined, noWorker: Record<string, number | null> | undefined): Record<string, number> | null {
  const a = withWorker?.medianMs;
  const b = noWorker?.medianMs;
  if (a == null || b == null) return null;
  const steps = config.totalFrames / config.numEnvs;
  return { msPerStep: round(a / steps, 3), envsAndCollectorMs: round(b / steps, 3), policyCallMs: round((a - b) / steps, 3) };
}

interface Side {
  readonly name: string;
  run(train: boolean): Promise<Run>;
}

/** Times `sides` in balanced turns (warm-up untimed), `train` or collection only; frames/s per side by name. */
async function measure(sides: readonly Side[], train: boolean): Promise<Record<string, Record<string, number | null>>> {
  const runs = sides.map((): Run[] => []);
  const fns = sides.map((side, i) => async () => {
    runs[i]!.push(await side.run(train));
  });
  await timeBalanced(fns, config.reps, config.warmup);
  // timeBalanced's own clock includes the baseline's pipe round trip; each side's run reports its own time
  return Object.fromEntries(sides.map((side, i) => [side.name, summarize(runs[i]!.slice(config.warmup))]));
}

async function main(): Promise<void> {
  const loadBefore = round(loadavg()[0] ?? 0, 2);
  const closers: (() => Promise<void>)[] = [];
  let sdkParallelThreads: number | null = null;
  const pool = await WorkerPool.local({ workers: 1, device: "cpu", heartbeatIntervalMs: 0 });
  try {
    const worker = pool.worker(0);
    log(`sdk: SerialEnv(${String(config.numEnvs)}) of CartPoleEnv`);
    const serial = await SdkSide.create(worker, "bench-serial", new SerialEnv(config.numEnvs, () => new CartPoleEnv()));
    closers.push(() => serial.side.close());
    const sides: Side[] = [{ name: "sdk.serial", run: (t) => serial.side.run(t) }];
    if (!flags.noSdkParallel) {
      log(`sdk: ParallelEnv(${String(config.numEnvs)}) of CartPole-v1`);
      const threaded = new ParallelEnv(config.numEnvs, { env: "CartPole-v1" });
      sdkParallelThreads = threaded.numThreads;
      const parallel = await SdkSide.create(worker, "bench-parallel", threaded);
      closers.push(() => parallel.side.close());
      sides.push({ name: "sdk.parallel", run: (t) => parallel.side.run(t) });
    }
    const noWorker = new NoWorkerSide();
    closers.push(() => noWorker.close());
    sides.push({ name: "sdk.serialNoWorker", run: () => noWorker.run() });
    log("torchrl: SerialEnv baseline");
    const torchrlSerial = await startTorchRL(false);
    closers.push(() => torchrlSerial.stop());
    sides.push({ name: "torchrl.serial", run: (t) => torchrlSerial.run(t ? "train" : "collect") });
    if (withTorchrlParallel) {
      log(`torchrl: ParallelEnv baseline (${String(config.numEnvs)} subprocesses)`);
      const torchrlParallel = await startTorchRL(true);
      closers.push(() => torchrlParallel.stop());
      sides.push({ name: "torchrl.parallel", run: (t) => torchrlParallel.run(t ? "train" : "collect") });
    }

    log(`collect: ${sides.map((s) => s.name).join(", ")}; ${String(config.warmup)} warm-up + ${String(config.reps)} runs of ${String(config.totalFrames)} frames each`);
    const collect = await measure(sides, false);
    let train: Record<string, Record<string, number | null>> | undefined;
    if (withTrain) {
      const trainSides = sides.filter((s) => s.name === "sdk.serial" || s.name === "torchrl.serial");
      log(`train: ${trainSides.map((s) => s.name).join(", ")}; ${String(config.warmup)} warm-up + ${String(config.reps)} runs`);
      train = await measure(trainSides, true);
    }
    const report = {
      bench: "ppo",
      config: {
        ...config,
        actorParameters: serial.actorParameters,
        torchrlActorParameters: torchrlSerial.ready.actorParameters,
        sdkParallelThreads,
        train: withTrain,
        quick: flags.quick,
      },
      machine: {
        ...machineFacts(worker.info.torch, loadBefore),
        torchThreads: { worker: `OMP_NUM_THREADS=${String(config.threads)}`, torchrl: torchrlSerial.ready.threads },
        torchrl: torchrlSerial.ready.torchrl,
        gymnasium: torchrlSerial.ready.gymnasium,
      },
      collect,
      ratios: {
        serial: ratio(collect["sdk.serial"], collect["torchrl.serial"]),
        parallel: ratio(collect["sdk.parallel"], collect["torchrl.parallel"]),
        sdkParallelVsTorchrlSerial: ratio(collect["sdk.parallel"], collect["torchrl.serial"]),
        ...(train === undefined ? {} : { train: ratio(train["sdk.serial"], train["torchrl.serial"]) }),
      },
      sdkSplit: stepSplit(collect["sdk.serial"], collect["sdk.serialNoWorker"]),
      ...(train === undefined ? {} : { train }),
      notes: [
        "frames = env steps summed over the copies; each side reports the median of its timed runs",
        "sdk: TS CartPoleEnv, one control_act worker call per step for all copies; torchrl: Gymnasium CartPole-v1 via GymEnv, the actor in-process",
        "sdk.serialNoWorker: sdk.serial with actions drawn in TS (no worker call); sdkSplit divides sdk.serial's step time by it",
        "sdk.parallel spreads the copies over min(N, cores) worker threads; torchrl.parallel runs one subprocess per copy, which compete for the cores when there are fewer cores than copies",
      ],
    };
    process.stdout.write(`${compactJSON(report)}\n`);
  } finally {
    for (const close of closers.reverse()) {
      await close().catch((err: unknown) => {
        log(`close: ${String(err)}`);
      });
    }
    await pool.close();
  }
}

await main();
