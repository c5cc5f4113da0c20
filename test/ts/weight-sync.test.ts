// Weight sync from a Trainer to generators through real workers on the tiny model: colocated (shared
// parameters), direct ZeroMQ transfer between workers, and a gloo broadcast. After each sync the generator's
// log-probs for a fixed sequence equal the trainer's (float32, CPU, within 1e-5), and they differed before;
// the generator's policy version moves on every sync. Also a reference model living in another worker.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DistributedWeightSyncScheme,
  GRPOLoss,
  InvalidArgumentError,
  RaggedTensor,
  ReferenceModel,
  SharedWeightSyncScheme,
  Tensor,
  TensorDict,
  Trainer,
  WorkerError,
  WorkerPool,
  ZMQWeightSyncScheme,
  makeTinyModel,
  type TinyModel,
  type WorkerClient,
} from "../../sdk/index.js";

const FIXED = ["The quick brown fox jumps over the lazy dog", "2+2=4"];

/** The fixed sequences as token ids (the tiny tokenizer: printable ASCII c is id c - 30). */
function fixed(): TensorDict {
  const rows = FIXED.map((text) => Tensor.from(Array.from(text, (c) => BigInt(c.charCodeAt(0) - 30)), { dtype: "int64" }));
  return new TensorDict({ tokens: { full: RaggedTensor.fromRows(rows) } }, { batchSize: [FIXED.length] });
}

async function logProbs(worker: WorkerClient, model: string): Promise<Float32Array> {
  const scored = await worker.score(model, fixed());
  return Float32Array.from(scored.getRagged(["log_probs", "full"], "float32").values);
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  return a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);
}

async function version(worker: WorkerClient, model: string): Promise<number> {
  const info = (await worker.listModels()).find((m) => m.name === model);
  return info!.policyVersion;
}

describe("weight sync", () => {
  let dir: string;
  let tiny: TinyModel;
  let pool: WorkerPool;
  let trainerWorker: WorkerClient;
  let generatorWorker: WorkerClient;
  let trainer: Trainer;

  /** One GRPO step on a fresh rollout of the trainer's model. */
  async function train(seed: number): Promise<void> {
    const prompts = new TensorDict({ text: { prompt: ["Hello", "Sum: 1+1"] } }, { batchSize: [2] });
    const batch = await trainerWorker.generate("policy", prompts, { maxNewTokens: 8, numSamples: 2, seed });
    batch.set("advantage", Tensor.from([[1, -1], [-0.5, 0.5]], { dtype: "float32" }));
    await trainer.step(batch);
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-sync-"));
    [tiny, pool] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed: 2 }), WorkerPool.local({ workers: 2, device: "cpu" })]);
    trainerWorker = pool.worker(0);
    generatorWorker = pool.worker(1);
    await Promise.all([
      trainerWorker.loadModel({ name: "policy", path: tiny.path }),
      generatorWorker.loadModel({ name: "generator", path: tiny.path }),
    ]);
    trainer = await Trainer.create(trainerWorker, { model: "policy", loss: new GRPOLoss(), optimizer: { type: "adam", lr: 1e-2 } });
  });

  afterAll(async () => {
    await pool.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("colocated: the generator shares the trainer's parameters, a sync only moves the version", async () => {
    const scheme = await SharedWeightSyncScheme.create(trainer, { target: "colocated" });
    await train(1);
    expect(await logProbs(trainerWorker, "colocated")).toEqual(await logProbs(trainerWorker, "policy"));
    const result = await scheme.updateWeights();
    expect(result.bytes).toBe(0);
    expect(await version(trainerWorker, "colocated")).toBe(result.policyVersion);
    expect((await scheme.updateWeights()).policyVersion).toBe(result.policyVersion + 1);
    expect((await trainer.state()).policyVersion).toBe(result.policyVersion + 1);
    await scheme.close();
  });

  it("ZeroMQ: raw frames in buckets from the trainer's worker straight to the generator's", async () => {
    const scheme = new ZMQWeightSyncScheme(trainer, [{ worker: generatorWorker, model: "generator" }], { bucketBytes: 32_768 });
    for (let round = 0; round < 2; round++) {
      await train(10 + round);
      const before = await logProbs(generatorWorker, "generator");
      const target = await logProbs(trainerWorker, "policy");
      expect(maxDiff(before, target)).toBeGreaterThan(1e-4);
      const result = await scheme.updateWeights();
      expect(result.bytes).toBe(tiny.parameters * 4);
      expect(maxDiff(await logProbs(generatorWorker, "generator"), target)).toBeLessThan(1e-5);
      expect(await version(generatorWorker, "generator")).toBe(result.policyVersion);
      expect((await trainer.state()).policyVersion).toBe(result.policyVersion);
    }
  });

  it("ZeroMQ in the background: the copy taken at startUpdate is delivered after the generation in flight", async () => {
    const scheme = new ZMQWeightSyncScheme(trainer, [{ worker: generatorWorker, model: "generator" }], { background: true });
    await train(30);
    const target = await logProbs(trainerWorker, "policy");
    // a long generation holds the generator's worker: the sync's receive queues behind it, but its receiving end
    // opens at once, so the trainer's worker hands over its copy and is free again
    const prompts = new TensorDict({ text: { prompt: Array.from({ length: 32 }, (_, i) => `row ${i}`) } }, { batchSize: [32] });
    let generated = false;
    const generation = generatorWorker.generate("generator", prompts, { maxNewTokens: 120, seed: 1 }).then(() => {
      generated = true;
    });
    const started = await scheme.startUpdate();
    expect(generated).toBe(false);
    expect(started.policyVersion).toBe((await trainer.state()).policyVersion);
    await train(31); // the trainer steps on; the copy already taken is what the generator gets
    expect(maxDiff(await logProbs(trainerWorker, "policy"), target)).toBeGreaterThan(1e-4);
    const delivered = await started.delivered;
    await generation;
    expect(delivered.policyVersion).toBe(started.policyVersion);
    expect(delivered.bytes).toBe(tiny.parameters * 4);
    expect(maxDiff(await logProbs(generatorWorker, "generator"), target)).toBeLessThan(1e-5);
    expect(await version(generatorWorker, "generator")).toBe(started.policyVersion);
  });

  it("torch.distributed: a gloo broadcast from the trainer's worker", async () => {
    const scheme = await DistributedWeightSyncScheme.init(trainer, [{ worker: generatorWorker, model: "generator" }], { bucketBytes: 65_536 });
    try {
      const start = await version(generatorWorker, "generator");
      for (let round = 0; round < 2; round++) {
        await train(20 + round);
        const target = await logProbs(trainerWorker, "policy");
        expect(maxDiff(await logProbs(generatorWorker, "generator"), target)).toBeGreaterThan(1e-4);
        const result = await scheme.updateWeights();
        expect(result.policyVersion).toBe(start + round + 1);
        expect(maxDiff(await logProbs(generatorWorker, "generator"), target)).toBeLessThan(1e-5);
        expect(await version(generatorWorker, "generator")).toBe(result.policyVersion);
      }
    } finally {
      await scheme.close();
    }
    await expect(scheme.updateWeights()).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it("scores the KL term with a reference model in another worker", async () => {
    await generatorWorker.loadModel({ name: "ref", path: tiny.path, replace: true });
    const reference = new ReferenceModel(generatorWorker, "ref");
    const klTrainer = await Trainer.create(trainerWorker, {
      model: "policy",
      loss: new GRPOLoss({ klToRefCoeff: 0.5 }),
      reference,
      replace: true,
    });
    expect(klTrainer.needs.refLogProbs).toBe(true);
    const prompts = new TensorDict({ text: { prompt: ["Hello"] } }, { batchSize: [1] });
    const batch = await trainerWorker.generate("policy", prompts, { maxNewTokens: 8, numSamples: 2, seed: 3 });
    batch.set("advantage", Tensor.from([[1, -1]], { dtype: "float32" }));
    const viaReference = await klTrainer.computeLoss(batch);
    const sent = await klTrainer.computeLoss(await reference.forward(batch));
    expect(viaReference.metrics).toEqual(sent.metrics);
    expect(viaReference.metrics.loss_kl_to_ref).toBeGreaterThan(0); // the policy was trained, the reference was not
  });

  it("rejects bad schemes and weights that do not fit", async () => {
    expect(() => new ZMQWeightSyncScheme(trainer, [])).toThrow(InvalidArgumentError);
    expect(() => new ZMQWeightSyncScheme(trainer, [{ worker: generatorWorker, model: "generator" }], { bucketBytes: 0 })).toThrow(
      /ZMQWeightSyncScheme options.bucketBytes/,
    );
    await expect(DistributedWeightSyncScheme.init(trainer, [{ worker: trainerWorker, model: "other" }])).rejects.toThrow(/its own worker/);
    await expect(SharedWeightSyncScheme.create(trainer, { target: "policy" })).rejects.toBeInstanceOf(InvalidArgumentError);
    const small = await makeTinyModel(join(dir, "small"), { seed: 2, hiddenSize: 32 });
    await generatorWorker.loadModel({ name: "small", path: small.path, replace: true });
    const scheme = new ZMQWeightSyncScheme(trainer, [{ worker: generatorWorker, model: "small" }], { timeoutMs: 10_000 });
    const err = await scheme.updateWeights().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerError);
    expect((err as WorkerError).code).toBe("WEIGHT_SYNC_FAILED");
    expect(await version(generatorWorker, "small")).toBe(0);
    expect(await generatorWorker.ping()).toBeGreaterThan(0); // both workers keep serving
    expect(await trainerWorker.ping()).toBeGreaterThan(0);
  });
});
