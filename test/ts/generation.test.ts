// Generation and scoring through a real worker on the tiny model: TorchRL's keys and batch shapes, seeded
// determinism, scoring that reproduces generation's log-probs, and typed errors for bad options.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, TensorDict, WorkerError, type WorkerClient } from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

const prompts = (): TensorDict =>
  new TensorDict({ text: { prompt: ["What is 2+2?", "Say hi"] } }, { batchSize: [2] });

describe("generate and score", () => {
  let policy: TinyPolicy;
  let worker: WorkerClient;

  beforeAll(async () => {
    policy = await startTinyPolicy(3);
    worker = policy.worker;
  });

  afterAll(async () => {
    await policy.close();
  });

  it("samples responses with TorchRL's keys", async () => {
    const out = await worker.generate("policy", prompts(), { maxNewTokens: 8, seed: 1 });
    expect(out.batchSize).toEqual([2]);
    const prompt = out.getRagged(["tokens", "prompt"]);
    const response = out.getRagged(["tokens", "response"]);
    const full = out.getRagged(["tokens", "full"]);
    expect(full.dtype).toBe("int64");
    for (let r = 0; r < 2; r++) {
      expect(full.lengths()[r]).toBe(prompt.lengths()[r]! + response.lengths()[r]!);
      expect(response.lengths()[r]).toBeLessThanOrEqual(8);
      expect(out.getRagged(["log_probs", "response"]).lengths()[r]).toBe(response.lengths()[r]);
    }
    expect(out.getStrings(["text", "prompt"])).toEqual(["What is 2+2?", "Say hi"]);
    const reasons = out.getStrings("finish_reason");
    expect(reasons.every((r) => ["eos", "stop", "length"].includes(r))).toBe(true);
    const lp = out.getRagged(["log_probs", "response"]).values as Float32Array;
    expect(Array.from(lp).every((v) => v <= 0 && Number.isFinite(v))).toBe(true);
  });

  it("gives [B, numSamples] with numSamples, and the same output for the same seed", async () => {
    const a = await worker.generate("policy", prompts(), { maxNewTokens: 6, numSamples: 3, seed: 7 });
    const b = await worker.generate("policy", prompts(), { maxNewTokens: 6, numSamples: 3, seed: 7, microBatchSize: 1 });
    expect(a.batchSize).toEqual([2, 3]);
    expect(a.getStrings(["text", "response"])).toEqual(b.getStrings(["text", "response"]));
    expect(a.getStrings(["text", "prompt"]).slice(0, 3)).toEqual(["What is 2+2?", "What is 2+2?", "What is 2+2?"]);
  });

  it("scores generated sequences to the log-probs generation reported (float32, within 1e-4)", async () => {
    const out = await worker.generate("policy", prompts(), { maxNewTokens: 10, seed: 3 });
    const scored = await worker.score("policy", out.select(["tokens", "full"]));
    const full = scored.getRagged(["log_probs", "full"]);
    const prompt = out.getRagged(["tokens", "prompt"]);
    const response = out.getRagged(["log_probs", "response"]);
    for (let r = 0; r < 2; r++) {
      const row = full.row(r).toFloat32Array();
      expect(row[0]).toBe(0);
      const tail = row.subarray(prompt.lengths()[r]);
      const gen = response.row(r).toFloat32Array();
      expect(tail.length).toBe(gen.length);
      gen.forEach((v, i) => {
        expect(Math.abs(tail[i]! - v)).toBeLessThan(1e-4);
      });
    }
  });

  it("rejects bad sampling options before sending, naming the field", async () => {
    for (const [options, field] of [
      [{ maxNewTokens: 0 }, "maxNewTokens"],
      [{ maxNewTokens: 4, topP: 0 }, "topP"],
      [{ maxNewTokens: 4, temperature: -1 }, "temperature"],
      [{ maxNewTokens: 4, numSamples: 1.5 }, "numSamples"],
      [{ maxNewTokens: 4, maxTokens: 3 }, "maxTokens"],
    ] as const) {
      const err = await worker.generate("policy", prompts(), options as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toContain(field);
    }
  });

  it("answers an unknown model and an empty prompt with typed worker errors, and keeps serving", async () => {
    await expect(worker.generate("nobody", prompts(), { maxNewTokens: 2 })).rejects.toMatchObject({ code: "MODEL_NOT_LOADED" });
    const empty = new TensorDict({ text: { prompt: ["fine", ""] } }, { batchSize: [2] });
    const err = await worker.generate("policy", empty, { maxNewTokens: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerError);
    expect((err as WorkerError).code).toBe("BAD_ARGUMENTS");
    expect((err as WorkerError).message).toMatch(/row 1/);
    expect(await worker.ping()).toBeGreaterThan(0);
  });
});
