// The one GRPO pipeline (collector → replay buffer with MCAdvantage → trainer) and its asynchronous mode: k = 0
// equals the synchronous loop assembled by hand from the public pieces; k = 1 trains on rows one version old, sampled
// while the trainer trained; two generators pull every batch in chunks of whole groups, each row names its generator
// and version, and every sync leaves them with the trainer's exact weights (weightsDigest); stale rows are dropped and
// counted; a full buffer pauses collection; a generator that dies fails the step at once. Real workers (four, one
// pool for the file) and the tiny model.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DigitSortEnv,
  GENERATOR_KEY,
  GRPOTrainer,
  LazyStackStorage,
  LLMCollector,
  MCAdvantage,
  POLICY_VERSION_KEY,
  ReplayBuffer,
  SharedWeightSyncScheme,
  Tensor,
  TensorDict,
  TransformersWrapper,
  WorkerPool,
  type GRPOTrainerConfigInput,
  type StepRecord,
} from "../../sdk/index.js";
import { lossOf, GRPOTrainerConfigSchema } from "../../sdk/runs/grpo-config.js";
import { stepSeed } from "../../sdk/runs/grpo-trainer.js";
import { TRAIN_KEYS } from "../../sdk/runs/grpo-step.js";
import { createPolicyTrainer, loadPolicy } from "../../sdk/runs/setup.js";
import { trainedBatches } from "./grpo.helpers.js";
import { startTinyModelPool, stopTinyModelPool } from "./tiny-policy.js";

let dir: string;
let modelPath: string;
let pool: WorkerPool;

beforeAll(async () => {
  ({ dir, modelPath, pool } = await startTinyModelPool("posttrain-grpo-async-", { workers: 4 }));
});

afterAll(() => stopTinyModelPool(dir, pool));

const P = 4;
const G = 4;

function config(runDir: string, extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput {
  return { model: { path: modelPath }, task: { type: "digit-sort" }, groupSize: G, promptsPerStep: P, maxNewTokens: 6, optimizer: { lr: 1e-3 }, steps: 3, runDir, ...extra };
}

async function collect(trainer: GRPOTrainer): Promise<StepRecord[]> {
  const out: StepRecord[] = [];
  for await (const r of trainer.run()) out.push(r);
  return out;
}

/** The fields of a record that do not depend on timing. */
function learned(r: StepRecord): unknown[] {
  return [r.step, r.policy_version, r.reward_mean, r.reward_std, r.loss, r.grad_norm, r.kl_approx, r.completion_length_mean, r.policy_age_max];
}

describe("GRPOTrainer on the pipeline", () => {
  it("k = 0 is the synchronous loop: the same metrics and weights as no async, and as the loop by hand", async () => {
    const sync = await GRPOTrainer.create(config(join(dir, "sync")), { pool });
    const syncRecords = await collect(sync);
    const syncProbe = await sync.trainer.computeLoss(await probeBatch(sync));
    await sync.close();
    const k0 = await GRPOTrainer.create(config(join(dir, "k0"), { async: { maxPolicyAge: 0 } }), { pool });
    const k0Records = await collect(k0);
    const k0Probe = await k0.trainer.computeLoss(await probeBatch(k0));
    await k0.close();
    expect(k0Records.map(learned)).toEqual(syncRecords.map(learned));
    expect(k0Records.every((r) => r.policy_age_max === 0 && r.stale_samples_dropped === 0)).toBe(true);
    expect(k0Probe.metrics).toEqual(syncProbe.metrics); // same weights: the same loss on the same batch

    // the same loop assembled by hand from the public pieces, iterating the collector synchronously
    const worker = pool.worker(0);
    const resolved = GRPOTrainerConfigSchema.parse(config(join(dir, "hand")));
    await loadPolicy(worker, modelPath, resolved.model);
    const trainer = await createPolicyTrainer(worker, resolved, lossOf(resolved), 3, null);
    const weights = await SharedWeightSyncScheme.create(trainer, { target: "generator" });
    const wrapper = new TransformersWrapper(worker, { model: "generator", generateKwargs: { max_new_tokens: 6, temperature: 1, top_p: 1, top_k: 0, repetition_penalty: 1 } });
    let call = 0;
    const rb = new ReplayBuffer({ storage: new LazyStackStorage({ maxSize: P * G }), transforms: [new MCAdvantage({ groupSize: G, promptKey: ["history", "prompt"] })] });
    const collector = new LLMCollector({
      env: new DigitSortEnv({ batchSize: [P * G], repeats: G, seed: 0, split: "train" }),
      policy: (td, options) => wrapper.forward(td, { ...options, seed: stepSeed(0, call++) }),
      dialogTurnsPerBatch: P * G,
      totalDialogTurns: 3 * P * G,
      replayBuffer: rb,
      resetAtEachIter: true,
      trackPolicyVersion: true,
      weightUpdater: async () => {
        await weights.updateWeights();
      },
    });
    const losses: number[] = [];
    for await (const collected of collector) {
      expect(collected.numel()).toBe(P * G);
      const { metrics } = await trainer.step(rb.take(P * G).select(...TRAIN_KEYS));
      losses.push(metrics.loss!);
      await collector.updatePolicyWeights();
    }
    await collector.close();
    await trainer.close();
    expect(losses).toEqual(syncRecords.map((r) => r.loss));
  });

  it("k = 1 with a separate generator trains on rows one version old, sampled while the trainer trained", async () => {
    const trainer = await GRPOTrainer.create(config(join(dir, "k1"), { steps: 4, async: { maxPolicyAge: 1 }, workers: { generator: { count: 1 } } }), { pool });
    const records = await collect(trainer);
    await trainer.close();
    expect(records.map((r) => r.step)).toEqual([1, 2, 3, 4]);
    // step 1 trains the batch sampled by the initial weights; every later one a batch sampled by the weights one
    // version behind the trainer's, i.e. generated while the previous step trained
    expect(records.map((r) => r.policy_age_max)).toEqual([0, 1, 1, 1]);
    expect(records.map((r) => r.policy_age_min)).toEqual([0, 1, 1, 1]);
    // the last batch was sampled during step 3, so step 4's window has no generation in it
    expect(records.slice(0, 3).every((r) => r.generator_busy_frac! > 0)).toBe(true);
    for (const r of records) {
      expect(r.stale_samples_dropped).toBe(0);
      expect(r.generator_busy_frac).toBeGreaterThanOrEqual(0);
      expect(r.generator_busy_frac).toBeLessThanOrEqual(1);
      expect(r.trainer_busy_frac).toBeGreaterThan(0);
      expect(r.queue_depth).toBeGreaterThanOrEqual(0);
      expect(r.queue_depth).toBeLessThanOrEqual(P);
      expect(Number.isFinite(r.loss)).toBe(true);
    }
  });

  it("two trainer ranks and two generators: each generator samples a share of every batch and gets the weights after each step", async () => {
    const workers = { trainer: { count: 2 }, generator: { count: 2 } };
    const trainer = await GRPOTrainer.create(config(join(dir, "two-generators"), { steps: 2, async: { maxPolicyAge: 1 }, workers }), { pool });
    expect(trainer.trainer.worldSize).toBe(2);
    const trained = trainedBatches(trainer);
    const records: StepRecord[] = [];
    for await (const r of trainer.run()) {
      records.push(r);
      // after each sync every generator holds rank 0's weights, bit for bit (a background delivery still in flight
      // runs first: the digest queues behind it on each generator's compute thread), and so does rank 1 (DDP)
      const [source, rank1, ...generators] = await Promise.all([0, 1, 2, 3].map((i) => pool.worker(i).weightsDigest("policy")));
      expect(source!.policyVersion).toBe(r.policy_version);
      expect(rank1!.digest).toBe(source!.digest);
      for (const digest of generators) expect(digest).toEqual(source);
    }
    for (const w of [pool.worker(2), pool.worker(3)]) {
      const policy = (await w.listModels()).find((m) => m.name === "policy");
      expect(policy?.policyVersion, w.name).toBe(records.at(-1)!.policy_version);
    }
    const sampledRows = trainer.generatorPool.stats.map((s) => s.rows);
    expect(sampledRows.every((rows) => rows > 0)).toBe(true);
    expect(sampledRows.reduce((a, b) => a + b, 0)).toBe(records.length * P * G);
    await trainer.close();
    expect(records.map((r) => r.policy_age_max)).toEqual([0, 1]);
    expect(records.every((r) => Number.isFinite(r.loss) && r.completion_length_mean! > 0)).toBe(true);
    // every trained row names the generator that sampled it and the version it was sampled with; both generators
    // sample part of every batch (they pull chunks of whole groups, so the split may be uneven), and a group stays on
    // one generator and one version (a background delivery may land between two chunks, so a batch may mix versions;
    // the record's ages span them)
    expect(trained).toHaveLength(records.length);
    trained.forEach((batch, i) => {
      const generators = batch.getTensor([...GENERATOR_KEY]).toNumbers();
      const versions = batch.getTensor(POLICY_VERSION_KEY).toNumbers();
      expect(generators).toHaveLength(P * G);
      expect(new Set(generators)).toEqual(new Set([0, 1]));
      for (let g = 0; g < P; g++) {
        expect(new Set(generators.slice(g * G, (g + 1) * G)).size).toBe(1);
        expect(new Set(versions.slice(g * G, (g + 1) * G)).size).toBe(1);
      }
      const record = records[i]!;
      expect(Math.min(...versions)).toBe(record.policy_version! - 1 - record.policy_age_max!);
      expect(Math.max(...versions)).toBe(record.policy_version! - 1 - record.policy_age_min!);
    });
  });

  it("a generator that dies while the trainer waits fails the step within a second; the checkpoint stays", async () => {
    const two = await WorkerPool.local({ workers: 2, device: "cpu" });
    try {
      const runDir = join(dir, "dies");
      const trainer = await GRPOTrainer.create(config(runDir, { steps: 6, checkpoint: { every: 1 }, async: { maxPolicyAge: 1 }, workers: { layout: "separate" } }), { pool: two });
      const seen: StepRecord[] = [];
      let killedAt = 0;
      const failure = (async () => {
        for await (const r of trainer.run()) {
          seen.push(r);
          if (r.step === 1) {
            process.kill(two.worker(1).info.pid, "SIGKILL");
            killedAt = performance.now();
          }
        }
      })();
      const err = await failure.then(
        () => null,
        (e: unknown) => e,
      );
      const waited = performance.now() - killedAt;
      await trainer.close().catch(() => undefined);
      // the workers are the caller's pool: the run cannot restart them, so it ends, naming the death as the cause
      expect(err).toMatchObject({ code: "RUN_WORKER_LOST", restarts: 0, cause: { code: "WORKER_DIED" } });
      expect(waited).toBeLessThan(5_000); // generous on a loaded CI machine; typically well under a second
      expect(seen.map((r) => r.step)).toEqual([1]);
      expect(await readdir(join(runDir, "checkpoints"))).toContain("step-1");
    } finally {
      await two.close();
    }
  });
});

/** A fixed batch to compare two trainers' weights by their loss on it. */
async function probeBatch(run: GRPOTrainer): Promise<TensorDict> {
  const worker = run.trainer.worker;
  const prompts = new TensorDict({ text: { prompt: ["sort 4 digits: 4312", "sort 4 digits: 9051"] } }, { batchSize: [2] });
  const out = await worker.generate("policy", prompts, { maxNewTokens: 5, seed: 3 });
  return out.set("advantage", new Tensor("float32", [2], Float32Array.from([1, -1])));
}

describe("LLMCollector background collection", () => {
  function digitEnv(): DigitSortEnv {
    return new DigitSortEnv({ batchSize: [P * G], repeats: G, seed: 1, split: "train" });
  }
  /** A policy written in TypeScript (no worker): answers every prompt with the same digits. */
  function answer(td: TensorDict): TensorDict {
    const out = td.exclude();
    const rows = td.numel();
    const history = td.getHistory(["history", "prompt"]);
    out.set(["history", "full"], history.appendEach(Array.from({ length: rows }, () => [{ role: "assistant", content: "1234" }])));
    out.set(["text", "response"], new Array<string>(rows).fill("1234"));
    return out;
  }

  it("drops and counts rows older than maxPolicyAge, and pauses when the buffer is full", async () => {
    const rb = new ReplayBuffer({ storage: new LazyStackStorage({ maxSize: 2 * P * G }), transforms: [new MCAdvantage({ groupSize: G, promptKey: ["history", "prompt"] })] });
    await using collector = new LLMCollector({ env: digitEnv(), policy: answer, dialogTurnsPerBatch: P * G, replayBuffer: rb, resetAtEachIter: true, trackPolicyVersion: true });
    collector.start({ maxPolicyAge: 5 });
    // two batches fill the buffer; the collector then waits for room although its gate would allow more
    while (rb.length < 2 * P * G) await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 100));
    expect(collector.stats.batches).toBe(2);
    expect(rb.length).toBe(2 * P * G);
    // three versions later both batches (version 0) are too old for maxPolicyAge 1: dropped, counted, and fresh
    // rows (version 3) are collected in their place
    for (let i = 0; i < 3; i++) await collector.updatePolicyWeights();
    const { batch, dropped } = await collector.takeBatch(P * G, { maxPolicyAge: 1 });
    expect(dropped).toBe(2 * P * G);
    expect(collector.stats.droppedStale).toBe(2 * P * G);
    expect(new Set(batch.getTensor("policy_version").toNumbers().map(Number))).toEqual(new Set([3]));
    expect(batch.getTensor("advantage").shape[0]).toBe(P * G);
    await collector.shutdown();
    expect(collector.running).toBe(false);
  });

  it("rejects a buffer smaller than one batch, and a start without a buffer", () => {
    const small = new ReplayBuffer({ storage: new LazyStackStorage({ maxSize: P * G - 1 }) });
    const c = new LLMCollector({ env: digitEnv(), policy: answer, dialogTurnsPerBatch: P * G, replayBuffer: small });
    expect(() => {
      c.start();
    }).toThrow(/replayBuffer: its storage holds at most 15 rows, less than one batch/);
    const none = new LLMCollector({ env: digitEnv(), policy: answer, dialogTurnsPerBatch: P * G });
    expect(() => {
      none.start();
    }).toThrow(/options\.replayBuffer: start\(\) collects into a replay buffer/);
    expect(() => {
      c.start({ maxPolicyAge: -1 });
    }).toThrow(/maxPolicyAge/);
  });
});

describe("GRPOTrainer async config", () => {
  const bad = async (extra: Partial<GRPOTrainerConfigInput>, pattern: RegExp): Promise<void> => {
    await expect(GRPOTrainer.create(config(join(dir, "never"), extra), { pool })).rejects.toThrow(pattern);
  };
  it("names the field of a bad async or workers block", async () => {
    await bad({ async: { maxPolicyAge: -1 } }, /async\.maxPolicyAge/);
    await bad({ async: { maxPolicyAge: 1.5 } }, /async\.maxPolicyAge/);
    await bad({ async: { maxPolicyAge: 1, bufferGroups: P - 1 } }, /async\.bufferGroups: must hold at least one step's groups \(promptsPerStep = 4\), got 3/);
    await bad({ workers: { trainer: { count: 0 } } }, /workers\.trainer\.count/);
    await bad({ workers: { trainer: { count: 2, strategy: "fsdp" } } }, /workers\.generator\.count: fsdp shards the policy: colocated generation needs the full weights/);
    await bad({ workers: { reference: { count: 1 } } }, /workers\.reference\.count: a reference worker scores the KL-to-reference term/);
    await bad({ workers: { layout: "colocated", generator: { count: 1 } } }, /workers\.generator\.count: 1 contradicts layout "colocated"/);
  });
});
