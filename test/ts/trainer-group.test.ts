// Data-parallel trainer groups (Trainer.createGroup): shardByTokens balances rows by tokens and keeps their order; two
// ranks on shards train exactly as one worker on the whole batch (DDP and FSDP, every aggregation and TRL loss type);
// a checkpoint saved by two ranks resumes on one and the reverse; bad batches fail with typed errors and the group
// keeps serving. Real workers (three, one pool for the file: worker 0 trains alone, workers 1 and 2 are the ranks).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  asNestedTensor,
  GRPOLoss,
  GRPOTrainer,
  InvalidArgumentError,
  makeTinyModel,
  ReferenceModel,
  shardByTokens,
  Tensor,
  TensorDict,
  Trainer,
  WorkerError,
  WorkerPool,
  type GRPOTrainerConfigInput,
  type LossConfigLike,
  type OptimizerConfig,
  type ParallelStrategy,
  type StepRecord,
  type WorkerClient,
} from "../../sdk/index.js";

/** A batch of rows with these lengths: row r's tokens are `r * 100 + t` and its `"id"` is r. */
function rowsOf(lengths: readonly number[], batchSize: readonly number[] = [lengths.length]): TensorDict {
  const tokens = asNestedTensor(
    lengths.map((n, r) => Array.from({ length: n }, (_, t) => r * 100 + t)),
    { dtype: "int64" },
  );
  const id = Tensor.from(lengths.map((_, r) => r), { dtype: "int64" });
  return new TensorDict({ tokens: { full: tokens }, id }, { batchSize: [lengths.length] }).reshape(batchSize);
}

const idsOf = (td: TensorDict): number[] => td.getTensor("id").toNumbers().map(Number);
const loadOf = (td: TensorDict): number => td.getRagged(["tokens", "full"]).lengths().reduce((a, b) => a + b, 0);

describe("shardByTokens", () => {
  it("deals the longest rows first to the lightest shard, each shard in batch order", () => {
    expect(shardByTokens(rowsOf([3, 8, 2, 5, 4]), 2).map(idsOf)).toEqual([[0, 1], [2, 3, 4]]);
    expect(shardByTokens(rowsOf([3, 8, 2, 5, 4]), 3).map(idsOf)).toEqual([[1], [2, 3], [0, 4]]);
    // equal loads: the shard with fewer rows, then the lower rank
    expect(shardByTokens(rowsOf([1, 1, 1, 1]), 2).map(idsOf)).toEqual([[0, 2], [1, 3]]);
  });

  it("keeps each shard within one row of the others, every row once, rows intact", () => {
    let state = 12345;
    const next = (): number => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let trial = 0; trial < 20; trial++) {
      const lengths = Array.from({ length: 5 + Math.floor(next() * 40) }, () => 1 + Math.floor(next() * 60));
      for (const n of [2, 3, 4]) {
        const shards = shardByTokens(rowsOf(lengths), n);
        const loads = shards.map(loadOf);
        expect(Math.max(...loads) - Math.min(...loads)).toBeLessThanOrEqual(Math.max(...lengths));
        const ids = shards.map(idsOf);
        for (const shard of ids) expect(shard).toEqual([...shard].sort((a, b) => a - b));
        expect(ids.flat().sort((a, b) => a - b)).toEqual(lengths.map((_, r) => r));
        for (const shard of shards) {
          const tokens = shard.getRagged(["tokens", "full"]);
          idsOf(shard).forEach((r, i) => {
            expect(Number(tokens.values[tokens.offsets[i]!])).toBe(r * 100);
            expect(tokens.lengths()[i]).toBe(lengths[r]);
          });
        }
      }
    }
  });

  it("flattens several batch dimensions row-major, and is deterministic", () => {
    const batch = rowsOf([2, 9, 4, 4, 7, 1], [2, 3]);
    const shards = shardByTokens(batch, 2);
    expect(shards.map((s) => s.batchSize)).toEqual([[3], [3]]);
    expect(shards.map(idsOf)).toEqual(shardByTokens(batch, 2).map(idsOf));
    expect(shards.map(idsOf)).toEqual([[1, 3, 5], [0, 2, 4]]);
  });

  it("counts dense tokens by their attention mask, else by their width", () => {
    const tokens = Tensor.from([[1, 2, 3, 4, 5, 6], [1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 2, 3, 4, 0, 0]], { dtype: "int64" });
    const mask = Tensor.from([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]], { dtype: "bool" });
    const id = Tensor.from([0, 1, 2, 3], { dtype: "int64" });
    const masked = new TensorDict({ tokens: { full: tokens }, masks: { all_attention_mask: mask }, id }, { batchSize: [4] });
    expect(shardByTokens(masked, 2).map(idsOf)).toEqual([[0], [1, 2, 3]]);
    const plain = new TensorDict({ tokens: { full: tokens }, id }, { batchSize: [4] });
    expect(shardByTokens(plain, 2).map(idsOf)).toEqual([[0, 2], [1, 3]]);
  });

  it("gives the batch itself for one rank, and names the batch when a rank would get no row", () => {
    const batch = rowsOf([3, 4]);
    expect(shardByTokens(batch, 1)[0]).toBe(batch);
    expect(() => shardByTokens(batch, 3)).toThrow(InvalidArgumentError);
    expect(() => shardByTokens(batch, 3)).toThrow(/shardByTokens batch: 2 row\(s\) \(batch size \[2\]\) for 3 rank\(s\); every rank needs at least one row/);
    expect(() => shardByTokens(batch, 0)).toThrow(/shardByTokens n: /);
  });
});

// ---- real workers ------------------------------------------------------------------------------------------

let dir: string;
let modelPath: string;
let pool: WorkerPool;
let single: WorkerClient;
let ranks: WorkerClient[];
let vocabSize: number;
/** Three sampled batches of 4 prompts × 2 completions (rows of different lengths), advantages of both signs. */
let batches: TensorDict[];

const PROMPTS = ["What is 2+2?", "Say hi", "Count: 1 2 3 4 5", "x"];
const SGD: OptimizerConfig = { type: "sgd", lr: 0.05 };

async function reload(workers: readonly WorkerClient[]): Promise<void> {
  await Promise.all(workers.map((w) => w.loadModel({ name: "policy", path: modelPath, replace: true })));
}

/** The policy's weights in `worker`, by parameter name. */
async function weightsOf(worker: WorkerClient): Promise<Map<string, Float32Array>> {
  const { payloads } = await worker.invoke("weights_get", { model: "policy" });
  const out = new Map<string, Float32Array>();
  for (const p of payloads) {
    if (p.kind !== "tensor" || p.dtype !== "float32") throw new Error(`expected float32 tensors, got ${p.kind}`);
    out.set(p.name ?? String(out.size), new Float32Array(p.data.slice().buffer));
  }
  return out;
}

/** The largest absolute difference between two sets of weights (which must have the same names and shapes). */
function maxDifference(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  expect([...a.keys()].sort()).toEqual([...b.keys()].sort());
  let max = 0;
  for (const [name, x] of a) {
    const y = b.get(name)!;
    expect(y.length).toBe(x.length);
    for (let i = 0; i < x.length; i++) max = Math.max(max, Math.abs(x[i]! - y[i]!));
  }
  return max;
}

const group = (loss: LossConfigLike, strategy: ParallelStrategy, optimizer = SGD): Promise<Trainer> =>
  Trainer.createGroup(ranks, { model: "policy", loss, optimizer, replace: true, parallel: { strategy } });
const alone = (loss: LossConfigLike, optimizer = SGD): Promise<Trainer> => Trainer.create(single, { model: "policy", loss, optimizer, replace: true });

describe("Trainer.createGroup", () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-trainer-group-"));
    const [tiny, started] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed: 3 }), WorkerPool.local({ workers: 3, device: "cpu" })]);
    modelPath = tiny.path;
    pool = started;
    single = pool.worker(0);
    ranks = [pool.worker(1), pool.worker(2)];
    const info = await single.loadModel({ name: "policy", path: modelPath });
    vocabSize = info.vocabSize;
    const prompts = new TensorDict({ text: { prompt: PROMPTS } }, { batchSize: [PROMPTS.length] });
    const signs = Tensor.from([[1, -1], [0.5, -0.5], [-0.25, 0.25], [2, -2]], { dtype: "float32" });
    batches = [];
    for (const seed of [1, 2, 3]) {
      const out = await single.generate("policy", prompts, { maxNewTokens: 8, numSamples: 2, seed });
      batches.push(out.set("advantage", signs));
    }
  });

  afterAll(async () => {
    await pool?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const LOSSES: readonly [string, LossConfigLike][] = [
    ["token_mean", new GRPOLoss({ aggregation: "token_mean" })],
    ["prompt_mean", new GRPOLoss({ aggregation: "prompt_mean" })],
    ["seq_mean_token_sum", new GRPOLoss({ aggregation: "seq_mean_token_sum" })],
    ["dr_grpo", new GRPOLoss({ lossType: "dr_grpo", maxCompletionLength: 8 })],
    ["dapo", new GRPOLoss({ lossType: "dapo" })],
    ["bnpo", new GRPOLoss({ lossType: "bnpo" })],
    ["grpo", new GRPOLoss({ lossType: "grpo" })],
  ];

  for (const strategy of ["ddp", "fsdp"] as const) {
    it(`${strategy}: two ranks on shards give one worker's weights after 3 steps, for every aggregation`, async () => {
      for (const [name, loss] of LOSSES) {
        await reload([single, ...ranks]);
        const one = await alone(loss);
        const two = await group(loss, strategy);
        expect(two.worldSize).toBe(2);
        expect(two.worker).toBe(ranks[0]);
        for (const batch of batches) {
          const [a, b] = await Promise.all([one.step(batch), two.step(batch)]);
          expect(b.numTokens, name).toBe(a.numTokens);
          expect(b.numSequences, name).toBe(a.numSequences);
          expect(b.step).toBe(a.step);
          expect(b.worldSize).toBe(2);
          expect(b.rank).toBe(0);
          expect(b.localSequences).toBeLessThan(a.numSequences);
          expect(b.metrics.loss!, name).toBeCloseTo(a.metrics.loss!, 5);
          expect(b.metrics.grad_norm!, name).toBeCloseTo(a.metrics.grad_norm!, 5);
        }
        const difference = maxDifference(await weightsOf(single), await weightsOf(ranks[0]!));
        expect(difference, `${strategy} ${name}`).toBeLessThanOrEqual(1e-6);
        const state = await two.state();
        expect(state.parallel).toEqual({ strategy, rank: 0, worldSize: 2 });
        expect(state.step).toBe(3);
        const loss1 = await one.computeLoss(batches[0]!);
        const loss2 = await two.computeLoss(batches[0]!);
        expect(loss2.metrics.loss!, name).toBeCloseTo(loss1.metrics.loss!, 5);
        await Promise.all([one.close(), two.close()]);
      }
    }, 300_000);
  }

  it("recomputes activations with gradientCheckpointing, to the same update", async () => {
    const loss = new GRPOLoss();
    await reload([single, ...ranks]);
    const one = await alone(loss);
    const two = await Trainer.createGroup(ranks, { model: "policy", loss, optimizer: SGD, replace: true, gradientCheckpointing: true, parallel: { strategy: "ddp" } });
    expect((await two.state()).gradientCheckpointing).toBe(true);
    expect((await one.state()).gradientCheckpointing).toBe(false);
    for (const batch of batches) await Promise.all([one.step(batch), two.step(batch)]);
    expect(maxDifference(await weightsOf(single), await weightsOf(ranks[0]!))).toBeLessThanOrEqual(1e-6);
    await Promise.all([one.close(), two.close()]);
  });

  it("scores the KL term with a reference in each rank's worker, as one worker does", async () => {
    const loss = new GRPOLoss({ klToRefCoeff: 0.1 });
    await reload([single, ...ranks]);
    const refs = await Promise.all(ranks.map((w) => ReferenceModel.copyOf(w, "policy", "ref")));
    const ref = await ReferenceModel.copyOf(single, "policy", "ref");
    const one = await Trainer.create(single, { model: "policy", loss, optimizer: SGD, replace: true, reference: ref });
    const two = await Trainer.createGroup(ranks, { model: "policy", loss, optimizer: SGD, replace: true, reference: refs, parallel: { strategy: "ddp" } });
    for (const batch of batches) {
      const [a, b] = await Promise.all([one.step(batch), two.step(batch)]);
      expect(b.metrics.kl_to_ref!).toBeCloseTo(a.metrics.kl_to_ref!, 6);
    }
    expect(maxDifference(await weightsOf(single), await weightsOf(ranks[0]!))).toBeLessThanOrEqual(1e-6);
    await Promise.all([one.close(), two.close()]);
    await expect(
      Trainer.createGroup(ranks, { model: "policy", loss, reference: refs[0]!, parallel: { strategy: "ddp" } }),
    ).rejects.toThrow(/Trainer\.createGroup options\.reference: a reference in a rank's worker must be given for every rank/);
    await expect(
      Trainer.createGroup(ranks, { model: "policy", loss, reference: [refs[1]!, refs[0]!], parallel: { strategy: "ddp" } }),
    ).rejects.toThrow(/options\.reference\[0\]: must be in rank 0's worker/);
    await Promise.all([single, ...ranks].map((w) => w.unloadModel("ref")));
  });

  it("resumes a checkpoint of two ranks on one, and of one on two: the next step equals the uninterrupted run's", async () => {
    const loss = new GRPOLoss();
    const momentum: OptimizerConfig = { type: "sgd", lr: 0.05, momentum: 0.9 };
    for (const [saver, loader] of [["fsdp", "alone"], ["alone", "ddp"]] as const) {
      const ckpt = join(dir, `ckpt-${saver}-${loader}`);
      await reload([single, ...ranks]);
      const writing = saver === "alone" ? await alone(loss, momentum) : await group(loss, saver, momentum);
      await writing.step(batches[0]!);
      await writing.step(batches[1]!);
      const saved = await writing.saveCheckpoint(ckpt, { dataPosition: { index: 2 } });
      expect(saved.step).toBe(2);
      const uninterrupted = await writing.step(batches[2]!);
      const expected = await weightsOf(writing.worker);
      await writing.close();

      await reload([single, ...ranks]);
      const reading = loader === "alone" ? await alone(loss, momentum) : await group(loss, loader, momentum);
      const restored = await reading.loadCheckpoint(ckpt);
      expect(restored.step).toBe(2);
      expect(restored.dataPosition).toEqual({ index: 2 });
      const resumed = await reading.step(batches[2]!);
      expect(resumed.step).toBe(uninterrupted.step);
      expect(resumed.metrics.loss!).toBeCloseTo(uninterrupted.metrics.loss!, 5);
      expect(maxDifference(await weightsOf(reading.worker), expected), `${saver} -> ${loader}`).toBeLessThanOrEqual(1e-6);
      await reading.close();
    }
  });

  it("rejects a batch with fewer rows than ranks, and a bad shard, and then steps as before", async () => {
    await reload(ranks);
    const two = await group(new GRPOLoss(), "ddp");
    const oneRow = batches[0]!.reshape([8]).index({ start: 0, stop: 1 });
    await expect(two.step(oneRow)).rejects.toThrow(InvalidArgumentError);
    await expect(two.step(oneRow)).rejects.toThrow(/Trainer\.step batch: 1 row\(s\) \(batch size \[1\]\) for 2 rank\(s\)/);
    await expect(two.computeLoss(oneRow)).rejects.toThrow(/Trainer\.computeLoss batch: 1 row/);

    // a token outside the vocabulary in one row: that rank's own error, every rank refuses, nothing applied
    const bad = batches[0]!.clone();
    const tokens = bad.getRagged(["tokens", "full"]);
    (tokens.values as BigInt64Array)[tokens.offsets[5]! + 1] = BigInt(vocabSize + 5);
    const failure = await two.step(bad).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(failure).toBeInstanceOf(WorkerError);
    expect((failure as WorkerError).code).toBe("BAD_ARGUMENTS");
    expect((failure as WorkerError).message).toMatch(/outside the model's vocabulary/);
    // a key missing on every rank: the worker lists it
    await expect(two.step(batches[0]!.exclude("advantage"))).rejects.toMatchObject({ code: "BAD_PAYLOAD" });
    await expect(two.step(batches[0]!.exclude("advantage"))).rejects.toThrow(/missing 1 key\(s\): \("advantage"\)/);
    expect((await two.state()).step).toBe(0);

    const good = await two.step(batches[0]!);
    expect(good.step).toBe(1);
    expect(good.numSequences).toBe(8);
    await two.close();
    await expect(ranks[0]!.invoke("trainer_state", { model: "policy" })).rejects.toMatchObject({ code: "TRAINER_NOT_FOUND" });
    // the process group was left: the workers may form another
    const again = await group(new GRPOLoss(), "ddp");
    await again.close();
  });

  describe("in GRPOTrainer (workers.trainer.count 2)", () => {
    const config = (name: string, workers: GRPOTrainerConfigInput["workers"], extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput => ({
      model: { path: modelPath },
      task: { type: "digit-sort" },
      groupSize: 4,
      promptsPerStep: 4,
      maxNewTokens: 6,
      optimizer: { type: "sgd", lr: 0.05 },
      steps: 2,
      workers,
      runDir: join(dir, name),
      ...extra,
    });
    const run = async (trainer: GRPOTrainer): Promise<StepRecord[]> => {
      const records: StepRecord[] = [];
      for await (const r of trainer.run()) records.push(r);
      return records;
    };
    const loaded = async (): Promise<string[][]> => Promise.all(pool.workers.map(async (w) => (await w.listModels()).map((m) => m.name)));

    it("trains as one rank does, sends rank 0's weights to the generator, and leaves nothing behind", async () => {
      const one = await GRPOTrainer.create(config("grpo-one", { trainer: { count: 1 }, generator: { count: 1 } }), { pool });
      const oneRecords = await run(one);
      await one.close();
      const two = await GRPOTrainer.create(config("grpo-two", { trainer: { count: 2 }, generator: { count: 1 } }), { pool });
      expect(two.trainer.worldSize).toBe(2);
      expect(two.trainer.workers).toEqual([pool.worker(0), pool.worker(1)]);
      const twoRecords = await run(two);
      const generator = (await pool.worker(2).listModels()).find((m) => m.name === "policy");
      expect(generator?.policyVersion).toBe(twoRecords[1]!.policy_version);
      expect(maxDifference(await weightsOf(pool.worker(0)), await weightsOf(pool.worker(2)))).toBe(0);
      for (const [a, b] of oneRecords.map((r, i) => [r, twoRecords[i]!] as const)) {
        expect(b.reward_mean).toBe(a.reward_mean);
        expect(b.loss!).toBeCloseTo(a.loss!, 5);
        expect(b.grad_norm!).toBeCloseTo(a.grad_norm!, 5);
      }
      await two.close();
      expect(await loaded()).toEqual([[], [], []]);
      // the ranks left their process group
      expect((await pool.worker(0).invoke("dist_close", {})).result.closed).toBe(false);
    });

    it("generates in rank 0's worker with DDP, a KL reference in each rank's worker", async () => {
      const trainer = await GRPOTrainer.create(config("grpo-colocated", { trainer: { count: 2 } }, { klToRefCoeff: 0.05 }), { pool });
      const records = await run(trainer);
      expect(records.map((r) => r.step)).toEqual([1, 2]);
      expect(records.every((r) => Number.isFinite(r.kl_to_ref))).toBe(true);
      expect((await loaded()).map((names) => [...names].sort())).toEqual([["generator", "policy", "ref"], ["policy", "ref"], []]);
      await trainer.close();
      expect(await loaded()).toEqual([[], [], []]);
    });

    it("scores the KL reference in a worker of its own", async () => {
      const trainer = await GRPOTrainer.create(config("grpo-ref-worker", { trainer: { count: 2 }, reference: { count: 1 } }, { klToRefCoeff: 0.05 }), { pool });
      expect((await pool.worker(2).listModels()).map((m) => m.name)).toEqual(["ref"]);
      const records = await run(trainer);
      expect(records.every((r) => Number.isFinite(r.kl_to_ref))).toBe(true);
      await trainer.close();
      expect(await loaded()).toEqual([[], [], []]);
    });
  });

  it("checks its options before anything is sent", async () => {
    const loss = new GRPOLoss();
    await expect(Trainer.createGroup([], { model: "policy", loss, parallel: { strategy: "ddp" } })).rejects.toThrow(/Trainer\.createGroup workers: /);
    await expect(Trainer.createGroup([ranks[0]!, ranks[0]!], { model: "policy", loss, parallel: { strategy: "ddp" } })).rejects.toThrow(
      /every rank must be a different worker/,
    );
    await expect(Trainer.createGroup(ranks, { model: "policy", loss, parallel: { strategy: "zero" as "ddp" } })).rejects.toThrow(
      /Trainer\.createGroup options\.parallel\.strategy/,
    );
    await expect(Trainer.createGroup(ranks, { model: "policy", loss, parallel: { strategy: "ddp", initMethod: "localhost" } })).rejects.toThrow(
      /options\.parallel\.initMethod: expected tcp:\/\/host:port/,
    );
  });
});
