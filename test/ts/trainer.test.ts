// The Trainer through a real worker on the tiny model, with the real loss objects: steps and their TorchRL
// metrics for every loss of the family, SFT on chat-templated conversations, micro-batches equal to the whole
// batch, a frozen reference copy, checkpoints that resume exactly, and typed errors for bad options and batches.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CISPOLoss,
  DAPOLoss,
  GRPOLoss,
  GSPOLoss,
  HistoryBatch,
  InvalidArgumentError,
  NonFiniteLossError,
  RaggedTensor,
  ReferenceModel,
  SAPOLoss,
  SFTLoss,
  Tensor,
  TensorDict,
  Trainer,
  WorkerError,
  type LossConfigLike,
  type TrainerOptions,
  type WorkerClient,
} from "../../sdk/index.js";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

const PROMPTS = ["What is 2+2?", "Say hi", "Count: 1 2 3"];

/** Sampled completions (3 prompts x 2 samples, batch [3, 2]) with advantages of both signs per group. */
async function rollout(worker: WorkerClient, seed: number, model = "policy"): Promise<TensorDict> {
  const prompts = new TensorDict({ text: { prompt: PROMPTS } }, { batchSize: [3] });
  const out = await worker.generate(model, prompts, { maxNewTokens: 8, numSamples: 2, seed });
  return out.set("advantage", Tensor.from([[1, -1], [0.5, -0.5], [-0.25, 0.25]], { dtype: "float32" }));
}

describe("Trainer", () => {
  let policy: TinyPolicy;
  let worker: WorkerClient;
  let batch: TensorDict;
  let scratch: string;

  const create = (loss: LossConfigLike, options: Partial<TrainerOptions> = {}): Promise<Trainer> =>
    Trainer.create(worker, { model: "policy", loss, optimizer: { type: "adam", lr: 1e-3 }, replace: true, ...options });

  beforeAll(async () => {
    policy = await startTinyPolicy(7);
    worker = policy.worker;
    batch = await rollout(worker, 1);
    scratch = await mkdtemp(join(tmpdir(), "posttrain-trainer-"));
  });

  afterAll(async () => {
    await policy.close();
    await rm(scratch, { recursive: true, force: true });
  });

  it("steps with GRPOLoss: TorchRL's metrics, one step, the loss moves", async () => {
    const trainer = await create(new GRPOLoss());
    expect(trainer.needs).toEqual({ oldLogProbs: true, refLogProbs: false, advantages: true });
    const before = await trainer.computeLoss(batch);
    expect(before.step).toBe(0);
    const result = await trainer.step(batch);
    expect(result.step).toBe(1);
    expect(result.lr).toBeCloseTo(1e-3, 12);
    for (const key of ["loss", "loss_objective", "clip_fraction", "kl_approx", "ESS", "entropy", "loss_entropy", "grad_norm"]) {
      expect(Number.isFinite(result.metrics[key])).toBe(true);
    }
    expect(result.metrics.loss).toBeCloseTo(before.metrics.loss!, 6);
    expect(result.numSequences).toBe(6);
    const after = await trainer.computeLoss(batch);
    expect(after.metrics.loss).not.toBe(before.metrics.loss);
    const state = await trainer.state();
    expect(state.step).toBe(1);
    expect(state.lastMetrics.grad_norm).toBe(result.metrics.grad_norm);
    expect(state.loss).toEqual(new GRPOLoss().toWire());
  });

  it("trains with every loss of the family", async () => {
    const losses: LossConfigLike[] = [
      new DAPOLoss(),
      new CISPOLoss(),
      new GSPOLoss(),
      new SAPOLoss(),
      new GRPOLoss({ lossType: "dr_grpo", maxCompletionLength: 8 }),
    ];
    for (const loss of losses) {
      const trainer = await create(loss);
      const before = await trainer.computeLoss(batch);
      const result = await trainer.step(batch);
      expect(result.step).toBe(1);
      expect(Number.isFinite(result.metrics.loss)).toBe(true);
      expect((await trainer.computeLoss(batch)).metrics.loss).not.toBe(before.metrics.loss);
    }
  });

  it("lowers the SFT loss of chat-templated conversations", async () => {
    const conversations = new TensorDict(
      {
        history: {
          full: HistoryBatch.from([
            [
              { role: "user", content: "2+2?" },
              { role: "assistant", content: "4" },
            ],
            [
              { role: "user", content: "Hi" },
              { role: "assistant", content: "Hello there" },
            ],
          ]),
        },
      },
      { batchSize: [2] },
    );
    const rendered = await worker.applyChatTemplate("policy", conversations, { key: "full" });
    const trainer = await create(new SFTLoss(), { optimizer: { type: "adam", lr: 1e-2 } });
    expect(trainer.needs).toEqual({ oldLogProbs: false, refLogProbs: false, advantages: false });
    const losses: number[] = [];
    for (let i = 0; i < 5; i++) losses.push((await trainer.step(rendered)).metrics.loss!);
    expect(losses[4]!).toBeLessThan(losses[0]!);
  });

  it("gives the whole batch's loss and metrics in micro-batches", async () => {
    await worker.loadModel({ name: "twin", path: policy.tiny.path, replace: true });
    await worker.loadModel({ name: "policy", path: policy.tiny.path, replace: true });
    const loss = new GRPOLoss({ clipEpsilon: [0.2, 0.28] });
    const whole = await create(loss);
    const parts = await Trainer.create(worker, { model: "twin", loss, microBatchTokens: 24, replace: true });
    const a = await whole.computeLoss(batch);
    const b = await parts.computeLoss(batch);
    expect(a.microBatches).toBe(1);
    expect(b.microBatches).toBeGreaterThan(2);
    expect(Object.keys(b.metrics).sort()).toEqual(Object.keys(a.metrics).sort());
    for (const [key, value] of Object.entries(a.metrics)) expect(Math.abs(b.metrics[key]! - value!)).toBeLessThan(1e-6);
  });

  it("uses a frozen reference copy in the worker for the KL term", async () => {
    await worker.loadModel({ name: "policy", path: policy.tiny.path, replace: true });
    const reference = await ReferenceModel.copyOf(worker, "policy", "ref");
    const trainer = await create(new GRPOLoss({ klToRefCoeff: 0.5 }), { reference });
    expect(trainer.needs.refLogProbs).toBe(false);
    expect((await trainer.step(batch)).metrics.loss_kl_to_ref).toBe(0);
    expect((await trainer.step(batch)).metrics.loss_kl_to_ref).toBeGreaterThan(0);
    const withRef = await reference.forward(batch);
    expect(batch.has(["ref_log_probs", "full"])).toBe(false);
    expect(withRef.getRagged(["ref_log_probs", "full"]).lengths()).toEqual(batch.getRagged(["tokens", "full"]).lengths());
  });

  it("resumes from a checkpoint to exactly the steps the saving run took", async () => {
    const options = { schedule: { type: "cosine" as const, warmupSteps: 1, totalSteps: 6 }, optimizer: { type: "adamw" as const, lr: 3e-3 } };
    const trainer = await create(new GRPOLoss(), options);
    await trainer.step(batch);
    const dir = join(scratch, "ckpt");
    const saved = await trainer.saveCheckpoint(dir, { dataPosition: { epoch: 1, cursor: [3, 4] } });
    expect(saved).toMatchObject({ step: 1, dataPosition: { epoch: 1, cursor: [3, 4] }, path: dir });
    const next = await rollout(worker, 2);
    const first = [await trainer.step(next), await trainer.step(batch)];
    const restored = await trainer.loadCheckpoint(dir);
    expect(restored.step).toBe(1);
    expect(restored.dataPosition).toEqual({ epoch: 1, cursor: [3, 4] });
    const again = [await trainer.step(next), await trainer.step(batch)];
    expect(again).toEqual(first);
    await expect(trainer.loadCheckpoint(join(scratch, "nothing"))).rejects.toMatchObject({ code: "CHECKPOINT_NOT_FOUND" });
  });

  it("rejects bad options before sending, naming the field", async () => {
    const cases: [Partial<TrainerOptions>, string][] = [
      [{ optimizer: { type: "lamb", lr: 1 } as never }, "Trainer options.optimizer.type: Invalid discriminator"],
      [{ optimizer: { type: "sgd", lr: 1, betas: [0.9, 0.9] } as never }, 'Trainer options.optimizer.betas: unknown field'],
      [{ optimizer: { type: "adam", lr: 1, betas: [0.9, 1] } }, "Trainer options.optimizer.betas.1"],
      [{ schedule: { type: "linear", warmupSteps: 5, totalSteps: 5 } }, "Trainer options.schedule.warmupSteps: warmupSteps must be less"],
      [{ schedule: { type: "cosine" } as never }, "Trainer options.schedule.totalSteps"],
      [{ gradClip: 0 }, "Trainer options.gradClip"],
      [{ microBatchTokens: 0.5 }, "Trainer options.microBatchTokens"],
      [{ lora: { r: 0 } }, "Trainer options.lora.r"],
      [{ autocast: "float8" as never }, "Trainer options.autocast"],
      [{ loss: { type: "grpo" } as never }, "Trainer options.loss: expected a loss object with toWire()"],
      [{ stepsPerBatch: 2 } as never, 'Trainer options.stepsPerBatch: unknown field'],
    ];
    for (const [options, expected] of cases) {
      const err = await create(new GRPOLoss(), options).catch((e: unknown) => e);
      expect(err, expected).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toContain(expected);
    }
  });

  it("answers bad batches with typed errors and keeps serving", async () => {
    const trainer = await create(new GRPOLoss());
    const bare = batch.exclude(["log_probs", "full"], "advantage", ["masks", "all_assistant_mask"], ["tokens", "prompt"]);
    const missing = await trainer.step(bare).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(WorkerError);
    expect((missing as WorkerError).code).toBe("BAD_PAYLOAD");
    for (const key of ['("log_probs", "full")', '("advantage")', '("masks", "all_assistant_mask") or ("tokens", "prompt")']) {
      expect((missing as Error).message).toContain(key);
    }
    const wide = batch.exclude("advantage").set("advantage", Tensor.zeros("float32", [3, 2, 3]));
    await expect(trainer.step(wide)).rejects.toMatchObject({ code: "BAD_PAYLOAD", message: expect.stringContaining("does not broadcast") as string });
    const before = await trainer.computeLoss(batch);
    const old = batch.getRagged(["log_probs", "full"]);
    const huge = new RaggedTensor("float32", new Float32Array(old.values.length).fill(-1e30), old.offsets);
    const overflow = batch.exclude(["log_probs", "full"], "advantage").set(["log_probs", "full"], huge).set("advantage", Tensor.full("float32", [3, 2], -1));
    const err = await trainer.step(overflow).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NonFiniteLossError);
    expect((err as NonFiniteLossError).code).toBe("NON_FINITE_LOSS");
    expect((err as NonFiniteLossError).step).toBe(1);
    expect(await trainer.computeLoss(batch)).toEqual(before); // nothing was applied
    expect((await trainer.step(batch)).step).toBe(1);
  });
});
