// Data-parallel scaling benchmark. Prints one JSON object; progress goes to stderr.
//   npm run bench:scale [-- --quick --model tiny|small|medium --steps 5 --warmup 1 --rows 16 --group 4 --new-tokens 64
//                          --hidden 512 --layers 8 --intermediate 1408 --heads 8 --kv-heads 4 --strategies ddp,fsdp --sync-hidden 1024
//                          --sync-layers 6 --sync-intermediate 4096 --syncs 5 --threads 1]
// Two parts, every worker with `--threads` torch threads (WorkerPool.local's `env`: OMP_NUM_THREADS, MKL_NUM_THREADS):
//   1. Trainer step time and peak memory, one rank (`Trainer.create`, and a group of one: `Trainer.createGroup` over
//      one worker, the forward path of a group without the shared prompt forward of a lone trainer) against two
//      ranks (`Trainer.createGroup`, DDP and FSDP), on a bench/model-presets.ts preset (`--model`, default `small`,
//      `tiny` with `--quick`; a size flag overrides the preset's) big enough that compute dominates, AdamW, GRPOLoss. Every config trains
//      on the same global batch: `--rows` sampled completions (`--rows / --group` prompts × `--group`, up to
//      `--new-tokens` tokens each) generated once on the one-rank worker, with random advantages. Each config has
//      its own workers (2 + 2 per strategy, all in one pool, started together); after `--warmup` untimed steps
//      each, the configs step in turns (1, 1 group, ddp, fsdp, 1, ...) so that they see the same machine state,
//      and the median of `--steps` steps is reported with the speedup of two ranks over one. Memory: each
//      worker's peak RSS (VmHWM, /proc/<pid>/status) while setting up (model load, trainer creation, and for the
//      one-rank worker the generation of the batch) and, after resetting it (/proc/<pid>/clear_refs = 5), over the
//      warm-up-free steps. Two ranks × one thread each on a 2-core machine is the fair comparison against one
//      rank × one thread: the same cores per rank, twice the cores in all.
//   2. Weight sync (ZMQWeightSyncScheme.updateWeights, ipc) from a trainer-side worker to one and to two
//      generator workers, for a ~100M-parameter model; the generators start from different weights (another seed)
//      and `weightsDigest` checks afterwards that every generator holds the source's bytes. The two target counts
//      take turns; the median of `--syncs` syncs after one untimed sync.
import { readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import {
  GRPOLoss,
  Tensor,
  TensorDict,
  Trainer,
  WorkerPool,
  ZMQWeightSyncScheme,
  makeTinyModel,
  type ParallelStrategy,
  type TinyModel,
  type TrainStepResult,
  type WorkerClient,
} from "../sdk/index.js";
import { parseOptions } from "../sdk/core/index.js";
import { MODEL_PRESETS, MODEL_PRESET_NAMES } from "./model-presets.js";
import { compactJSON, machineFacts, median, quantile, round } from "./stats.js";

const FlagsSchema = z.strictObject({
  /** A smoke run: small models, a few steps and syncs. */
  quick: z.boolean(),
  /** Timed trainer steps per config (after the warm-up). */
  steps: z.coerce.number().int().min(1).max(1000),
  /** Untimed trainer steps per config first. */
  warmup: z.coerce.number().int().min(0).max(100),
  /** Rows of the global batch (a multiple of `group`, at least 2). */
  rows: z.coerce.number().int().min(2).max(4096),
  /** Completions per prompt. */
  group: z.coerce.number().int().min(1).max(256),
  /** The trained model's preset (bench/model-presets.ts); the size flags below override its sizes. */
  model: z.enum(MODEL_PRESET_NAMES),
  /** Tokens sampled per completion (at most; the prompt adds its own). */
  newTokens: z.coerce.number().int().min(1).max(2048),
  /** The trained model's sizes (tiny builder). */
  hidden: z.coerce.number().int().min(8),
  layers: z.coerce.number().int().min(1),
  intermediate: z.coerce.number().int().min(1),
  heads: z.coerce.number().int().min(1),
  kvHeads: z.coerce.number().int().min(1),
  /** The data-parallel strategies to compare with one rank, comma-separated. */
  strategies: z.string().regex(/^(ddp|fsdp)(,(ddp|fsdp))*$/),
  /** The synced model's sizes (tiny builder; heads = kv heads = 8). */
  syncHidden: z.coerce.number().int().min(8),
  syncLayers: z.coerce.number().int().min(1),
  syncIntermediate: z.coerce.number().int().min(1),
  /** Timed syncs per target count (after one untimed). */
  syncs: z.coerce.number().int().min(1).max(100),
  /** Torch threads of each worker (OMP_NUM_THREADS, MKL_NUM_THREADS). */
  threads: z.coerce.number().int().min(1).max(256),
});

const { values: raw } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    model: { type: "string" },
    steps: { type: "string" },
    warmup: { type: "string", default: "1" },
    rows: { type: "string", default: "16" },
    group: { type: "string", default: "4" },
    "new-tokens": { type: "string" },
    hidden: { type: "string" },
    layers: { type: "string" },
    intermediate: { type: "string" },
    heads: { type: "string" },
    "kv-heads": { type: "string" },
    strategies: { type: "string", default: "ddp,fsdp" },
    "sync-hidden": { type: "string" },
    "sync-layers": { type: "string" },
    "sync-intermediate": { type: "string" },
    syncs: { type: "string" },
    threads: { type: "string", default: "1" },
  },
});
const quick = raw.quick;
const modelName = raw.model ?? (quick ? "tiny" : "small");
// An unknown name falls back to tiny's sizes here; the schema below then rejects it, naming `model`.
const preset = MODEL_PRESETS[(MODEL_PRESET_NAMES as readonly string[]).includes(modelName) ? (modelName as keyof typeof MODEL_PRESETS) : "tiny"];
const flags = parseOptions(
  FlagsSchema,
  {
    quick,
    steps: raw.steps ?? (quick ? "2" : "5"),
    warmup: raw.warmup,
    rows: raw.rows,
    group: raw.group,
    model: modelName,
    newTokens: raw["new-tokens"] ?? (quick ? "16" : "64"),
    hidden: raw.hidden ?? String(preset.hiddenSize),
    layers: raw.layers ?? String(preset.numLayers),
    intermediate: raw.intermediate ?? String(preset.intermediateSize),
    heads: raw.heads ?? String(preset.numHeads),
    kvHeads: raw["kv-heads"] ?? String(preset.numKvHeads),
    strategies: raw.strategies,
    syncHidden: raw["sync-hidden"] ?? (quick ? "256" : "1024"),
    syncLayers: raw["sync-layers"] ?? (quick ? "2" : "6"),
    syncIntermediate: raw["sync-intermediate"] ?? (quick ? "1024" : "4096"),
    syncs: raw.syncs ?? (quick ? "2" : "5"),
    threads: raw.threads,
  },
  "bench:scale flags",
);
if (flags.rows % flags.group !== 0) throw new Error(`bench:scale flags: --rows (${flags.rows}) must be a multiple of --group (${flags.group})`);
const strategies = [...new Set(flags.strategies.split(","))] as ParallelStrategy[];
const SEED = 0;
const MB = 2 ** 20;

function log(message: string): void {
  process.stderr.write(`[bench:scale] ${message}\n`);
}

// ---- memory (/proc, Linux) ---------------------------------------------------------------------------------

/** A field of /proc/<pid>/status in MiB (VmHWM: peak RSS, VmRSS: current RSS), or null where unreadable. */
function statusMB(pid: number, field: "VmHWM" | "VmRSS"): number | null {
  try {
    const status = readFileSync(`/proc/${String(pid)}/status`, "utf8");
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
    return match === null ? null : round(Number(match[1]) / 1024, 1);
  } catch {
    return null;
  }
}

/** Resets the peak RSS of `pid` to its current RSS (Linux ≥ 4.0, our own child); false where not possible. */
function resetPeak(pid: number): boolean {
  try {
    writeFileSync(`/proc/${String(pid)}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

const pidOf = (worker: WorkerClient): number => worker.info.pid;

// ---- part 1: trainer step time and memory ------------------------------------------------------------------

/** One trainer config: one rank or a group, its workers, its step times. */
interface Config {
  readonly name: string;
  readonly strategy: ParallelStrategy | null;
  readonly workers: readonly WorkerClient[];
  trainer: Trainer | null;
  readonly ms: number[];
  readonly losses: number[];
  readonly setupPeakMB: (number | null)[];
  readonly stepsStartRssMB: (number | null)[];
  readonly peakReset: boolean[];
  first: TrainStepResult | null;
}

/** `n` standard-normal-ish numbers from a seeded generator (sum of uniforms), for the advantages. */
function randomAdvantages(n: number, seed: number): number[] {
  let state = seed + 1;
  const next = (): number => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  return Array.from({ length: n }, () => round(next() + next() + next() + next() - 2, 4));
}

/** The global batch: `rows` completions sampled on `worker` (`rows / group` prompts), random advantages. */
async function makeBatch(worker: WorkerClient): Promise<TensorDict> {
  const prompts = flags.rows / flags.group;
  const text = Array.from({ length: prompts }, (_, i) => `Sort these digits: ${String(i % 10)} 7 3 9 1 4`);
  const batch = await worker.generate("policy", new TensorDict({ text: { prompt: text } }, { batchSize: [prompts] }), {
    maxNewTokens: flags.newTokens,
    numSamples: flags.group,
    seed: SEED,
  });
  const advantage = Tensor.from(randomAdvantages(flags.rows, SEED), { dtype: "float32" }).reshape(batch.batchSize);
  return batch.set("advantage", advantage);
}

/** Tokens per row of the batch (its ragged `("tokens","full")`). */
function rowTokens(batch: TensorDict): number[] {
  return Array.from(batch.reshape([batch.numel()]).getRagged(["tokens", "full"]).lengths());
}

/** Part 1's figures, and the workers' torch version. */
async function trainerPart(dir: string): Promise<{ torch: string; report: Record<string, unknown> }> {
  const threads = String(flags.threads);
  const sizes = {
    hiddenSize: flags.hidden,
    numLayers: flags.layers,
    intermediateSize: flags.intermediate,
    numHeads: flags.heads,
    numKvHeads: flags.kvHeads,
    maxPositionEmbeddings: preset.maxPositionEmbeddings,
    ...(preset.vocabSize === undefined ? {} : { vocabSize: preset.vocabSize }),
  };
  const workerCount = 2 + 2 * strategies.length;
  log(`part 1: building the model (${JSON.stringify(sizes)}) and starting ${workerCount} workers`);
  const [tiny, pool] = await Promise.all([
    makeTinyModel(join(dir, "train-model"), { ...sizes, seed: SEED }),
    WorkerPool.local({ workers: workerCount, device: "cpu", env: { OMP_NUM_THREADS: threads, MKL_NUM_THREADS: threads } }),
  ]);
  const configs: Config[] = [];
  try {
    log(`model: ${(tiny.parameters / 1e6).toFixed(1)}M parameters; loading it in every worker`);
    await Promise.all(pool.workers.map((w) => w.loadModel({ name: "policy", path: tiny.path })));
    const batch = await makeBatch(pool.worker(0));
    const tokens = rowTokens(batch);
    log(`batch: ${tokens.length} rows, ${tokens.reduce((a, b) => a + b, 0)} tokens (rows of ${Math.min(...tokens)}..${Math.max(...tokens)})`);

    const common = { model: "policy", loss: new GRPOLoss(), optimizer: { type: "adamw" as const, lr: 1e-5 }, replace: true };
    const blank = (name: string, strategy: ParallelStrategy | null, workers: WorkerClient[]): Config => ({
      name,
      strategy,
      workers,
      trainer: null,
      ms: [],
      losses: [],
      setupPeakMB: [],
      stepsStartRssMB: [],
      peakReset: [],
      first: null,
    });
    configs.push(blank("1 rank", null, [pool.worker(0)]));
    // a group of one: the forward path of every group (no shared prompt forward) with no one to share the work with
    configs.push(blank("1 rank group ddp", "ddp", [pool.worker(1)]));
    strategies.forEach((s, i) => configs.push(blank(`2 ranks ${s}`, s, [pool.worker(2 + 2 * i), pool.worker(3 + 2 * i)])));
    for (const c of configs) {
      c.trainer =
        c.strategy === null ? await Trainer.create(c.workers[0]!, common) : await Trainer.createGroup(c.workers, { ...common, parallel: { strategy: c.strategy } });
    }
    for (const c of configs) {
      for (let i = 0; i < flags.warmup; i++) {
        log(`${c.name}: warm-up step ${i + 1}/${flags.warmup}`);
        const result = await c.trainer!.step(batch);
        c.first ??= result;
      }
    }
    for (const c of configs) {
      for (const w of c.workers) {
        c.setupPeakMB.push(statusMB(pidOf(w), "VmHWM"));
        c.peakReset.push(resetPeak(pidOf(w)));
        c.stepsStartRssMB.push(statusMB(pidOf(w), "VmRSS"));
      }
    }
    for (let i = 0; i < flags.steps; i++) {
      for (const c of configs) {
        const t0 = performance.now();
        const result = await c.trainer!.step(batch);
        c.ms.push(performance.now() - t0);
        c.losses.push(result.metrics.loss ?? Number.NaN);
        c.first ??= result;
      }
      log(`step ${i + 1}/${flags.steps}: ${configs.map((c) => `${c.name} ${Math.round(c.ms.at(-1)!)} ms`).join(", ")}`);
    }
    const stepPeaks = configs.map((c) => c.workers.map((w) => statusMB(pidOf(w), "VmHWM")));

    const base = median(configs[0]!.ms);
    const groupBase = median(configs[1]!.ms);
    const byConfig = Object.fromEntries(
      configs.map((c, ci) => {
        const med = median(c.ms);
        return [
          c.name,
          {
            ranks: c.workers.length,
            strategy: c.strategy,
            medianStepMs: round(med, 1),
            minStepMs: round(Math.min(...c.ms), 1),
            p90StepMs: round(quantile(c.ms, 0.9), 1),
            stepMs: c.ms.map((ms) => round(ms, 1)),
            speedupOver1Rank: round(base / med),
            speedupOver1RankGroup: round(groupBase / med),
            tokensPerS: round(tokens.reduce((a, b) => a + b, 0) / (med / 1000), 1),
            lossTokens: c.first?.numTokens ?? null,
            rank0LossTokens: c.first?.localTokens ?? c.first?.numTokens ?? null,
            loss: c.losses.map((l) => round(l, 6)),
            maxLossDiffVs1Rank: round(Math.max(...c.losses.map((l, i) => Math.abs(l - (configs[0]!.losses[i] ?? Number.NaN)))), 7),
            perRank: c.workers.map((w, r) => ({
              rank: r,
              pid: pidOf(w),
              setupPeakRssMB: c.setupPeakMB[r] ?? null,
              stepsStartRssMB: c.stepsStartRssMB[r] ?? null,
              stepsPeakRssMB: c.peakReset[r] === true ? (stepPeaks[ci]![r] ?? null) : null,
              lifetimePeakRssMB:
                c.peakReset[r] === true
                  ? Math.max(c.setupPeakMB[r] ?? 0, stepPeaks[ci]![r] ?? 0)
                  : (stepPeaks[ci]![r] ?? null),
            })),
          },
        ];
      }),
    );
    const report = {
      model: { ...sizes, parameters: tiny.parameters, vocabSize: tiny.vocabSize, fp32MB: round((tiny.parameters * 4) / MB, 1) },
      optimizer: "adamw",
      loss: "GRPOLoss()",
      batch: {
        rows: tokens.length,
        prompts: flags.rows / flags.group,
        group: flags.group,
        maxNewTokens: flags.newTokens,
        tokens: tokens.reduce((a, b) => a + b, 0),
        rowTokens: { min: Math.min(...tokens), median: median(tokens), max: Math.max(...tokens) },
      },
      warmupSteps: flags.warmup,
      timedSteps: flags.steps,
      order: configs.map((c) => c.name),
      byConfig,
    };
    return { torch: pool.worker(0).info.torch, report };
  } finally {
    for (const c of configs) {
      await c.trainer?.close().catch((err: unknown) => {
        log(`closing ${c.name}: ${String(err)}`);
      });
    }
    await pool.close();
  }
}

// ---- part 2: weight sync -----------------------------------------------------------------------------------

async function syncPart(dir: string): Promise<Record<string, unknown>> {
  const threads = String(flags.threads);
  const sizes = { hiddenSize: flags.syncHidden, numLayers: flags.syncLayers, intermediateSize: flags.syncIntermediate, numHeads: 8, numKvHeads: 8 };
  log(`part 2: building two models (${JSON.stringify(sizes)}, seeds 1 and 2) and starting 3 workers`);
  // sequential builds (each is CPU- and disk-heavy), the workers starting meanwhile
  const build = async (): Promise<[TinyModel, TinyModel]> => [
    await makeTinyModel(join(dir, "sync-model-1"), { ...sizes, seed: 1 }),
    await makeTinyModel(join(dir, "sync-model-2"), { ...sizes, seed: 2 }),
  ];
  const [[source, other], pool] = await Promise.all([
    build(),
    WorkerPool.local({ workers: 3, device: "cpu", env: { OMP_NUM_THREADS: threads, MKL_NUM_THREADS: threads } }),
  ]);
  try {
    log(`model: ${(source.parameters / 1e6).toFixed(1)}M parameters; loading it (seed 1) in the source, seed 2 in the generators`);
    const [src, g1, g2] = [pool.worker(0), pool.worker(1), pool.worker(2)];
    await src.loadModel({ name: "policy", path: source.path });
    await g1.loadModel({ name: "generator", path: other.path });
    await g2.loadModel({ name: "generator", path: other.path });
    const digest = async (w: WorkerClient, model: string): Promise<string> => (await w.weightsDigest(model)).digest;
    const before = { source: await digest(src, "policy"), generators: [await digest(g1, "generator"), await digest(g2, "generator")] };
    const from = { worker: src, model: "policy" };
    const schemes = [
      { targets: 1, scheme: new ZMQWeightSyncScheme(from, [{ worker: g1, model: "generator" }]) },
      { targets: 2, scheme: new ZMQWeightSyncScheme(from, [{ worker: g1, model: "generator" }, { worker: g2, model: "generator" }]) },
    ];
    const results = schemes.map(() => [] as { ms: number; bytes: number; policyVersion: number }[]);
    let bytes = 0;
    for (let i = 0; i <= flags.syncs; i++) {
      for (const [k, { scheme }] of schemes.entries()) {
        const r = await scheme.updateWeights();
        bytes = r.bytes;
        if (i > 0) results[k]!.push({ ms: r.ms, bytes: r.bytes, policyVersion: r.policyVersion });
      }
      log(i === 0 ? "untimed sync done" : `sync ${i}/${flags.syncs}: ${schemes.map(({ targets }, k) => `${targets} generator(s) ${Math.round(results[k]!.at(-1)!.ms)} ms`).join(", ")}`);
    }
    const after = { source: await src.weightsDigest("policy"), generators: [await g1.weightsDigest("generator"), await g2.weightsDigest("generator")] };
    const GB = 1e9;
    const byTargets = Object.fromEntries(
      schemes.map(({ targets }, k) => {
        const ms = results[k]!.map((r) => r.ms);
        const med = median(ms);
        return [
          `${String(targets)} generator${targets === 1 ? "" : "s"}`,
          {
            medianMs: round(med, 1),
            syncMs: ms.map((x) => round(x, 1)),
            bytesPerGenerator: results[k]![0]?.bytes ?? null,
            totalBytes: (results[k]![0]?.bytes ?? 0) * targets,
            gbPerS: round(((results[k]![0]?.bytes ?? 0) * targets) / GB / (med / 1000)),
            gbPerSPerGenerator: round((results[k]![0]?.bytes ?? 0) / GB / (med / 1000)),
          },
        ];
      }),
    );
    return {
      model: { ...sizes, parameters: source.parameters, vocabSize: source.vocabSize, bytes },
      scheme: "ZMQWeightSyncScheme (ipc, 64 MiB buckets, background false)",
      timedSyncs: flags.syncs,
      order: schemes.map(({ targets }) => `${String(targets)} generator(s)`),
      byTargets,
      digest: {
        generatorsDifferedBefore: before.generators.every((d) => d !== before.source),
        generatorsEqualAfter: after.generators[0]!.digest === after.generators[1]!.digest,
        generatorsEqualSourceAfter: after.generators.every((g) => g.digest === after.source.digest),
        policyVersions: { source: after.source.policyVersion, generators: after.generators.map((g) => g.policyVersion) },
        digestBytes: after.source.bytes,
        sourceDigest: after.source.digest.slice(0, 16),
      },
      peakRssMB: { source: statusMB(pidOf(src), "VmHWM"), generators: [statusMB(pidOf(g1), "VmHWM"), statusMB(pidOf(g2), "VmHWM")] },
    };
  } finally {
    await pool.close();
  }
}

async function main(): Promise<void> {
  const started = performance.now();
  const dir = await mkdtemp(join(tmpdir(), "posttrain-bench-scale-"));
  const loadBefore = round(loadavg()[0] ?? 0, 2);
  if (loadBefore > cpus().length / 2) log(`the machine is busy (load ${loadBefore} on ${cpus().length} cores): timings will be noisy`);
  try {
    const { torch, report: trainer } = await trainerPart(dir);
    const trainerSeconds = round((performance.now() - started) / 1000, 1);
    const sync = await syncPart(dir);
    const report = {
      bench: "scale",
      quick,
      config: { model: flags.model, torchThreadsPerWorker: flags.threads, strategies, seed: SEED },
      machine: machineFacts(torch, loadBefore),
      trainer,
      weightSync: sync,
      notes: [
        "trainer: step ms = Trainer.step's wall time seen from TypeScript (sharding, Arrow encoding, the workers' forward/backward/all-reduce/optimizer step); the configs step in turns after the warm-up",
        "speedupOver1Rank = the 1-rank median step / this config's, in the same run; 2 ranks x 1 torch thread against 1 rank x 1 thread: on a 2-core machine the ranks use both cores",
        "speedupOver1RankGroup = the same against a group of one rank: a group runs one padded forward per micro-batch (DDP and FSDP need one forward of the wrapped module), where a lone trainer shares each prompt group's prompt forward, so this ratio isolates the data-parallel scaling",
        "memory: VmHWM of each worker (/proc/<pid>/status). setupPeakRssMB: before the timed steps (model load, trainer creation, warm-up steps, and the batch's generation on the 1-rank worker); stepsPeakRssMB: over the timed steps, after resetting the peak (clear_refs 5; null where that failed); stepsStartRssMB: RSS at that reset",
        "maxLossDiffVs1Rank: the largest |loss| difference against the 1-rank trainer at the same step (the same batch and weights, so it should be ~0)",
        "weightSync: ms = ZMQWeightSyncScheme.updateWeights wall time; the generators receive one after the other; gbPerS = bytes to all generators / median s (GB = 1e9 bytes), gbPerSPerGenerator = bytes per generator / median s",
      ],
      seconds: { trainer: trainerSeconds, total: round((performance.now() - started) / 1000, 1) },
    };
    process.stdout.write(`${compactJSON(report)}\n`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
