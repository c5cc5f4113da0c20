// KL transforms against real workers: the tiny policy, the same model loaded again as "ref" (KL 0), and a tiny
// model built with another seed as "other" (KL ≠ 0). Expected KLs are recomputed from the worker's own scores.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ChatEnv,
  EnvStateError,
  InvalidArgumentError,
  KLComputation,
  KLRewardTransform,
  RetrieveKL,
  RetrieveLogProb,
  RewardTransform,
  StepCounter,
  TensorDict,
  TransformedEnv,
  TransformersWrapper,
  makeTinyModel,
  type RaggedTensor,
  type Transform,
  type WorkerClient,
} from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

/** Per row, Σ over the mask of a_t − b_t (computed here, independently of the transforms). */
function maskedKl(a: RaggedTensor, b: RaggedTensor, mask: RaggedTensor): number[] {
  return Array.from({ length: a.rows }, (_, r) => {
    const x = a.row(r).toNumbers();
    const y = b.row(r).toNumbers();
    const m = mask.row(r).toNumbers();
    return x.reduce((sum, v, t) => sum + (m[t] !== 0 ? v - y[t]! : 0), 0);
  });
}

describe("KL to a reference model", () => {
  let setup: TinyPolicy;
  let worker: WorkerClient;
  let otherDir: string;

  beforeAll(async () => {
    setup = await startTinyPolicy(21);
    worker = setup.worker;
    otherDir = await mkdtemp(join(tmpdir(), "posttrain-other-"));
    const other = await makeTinyModel(join(otherDir, "tiny"), { seed: 22 });
    await worker.loadModel({ name: "ref", path: setup.tiny.path });
    await worker.loadModel({ name: "other", path: other.path });
  });

  afterAll(async () => {
    await setup.close();
    await rm(otherDir, { recursive: true, force: true });
  });

  const policy = (): TransformersWrapper => new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 6, seed: 5 } });
  const start = (): TensorDict => new TensorDict({ query: ["2+2?", "Name a color"] }, { batchSize: [2] });

  async function stepWith(...transforms: Transform[]): Promise<TensorDict> {
    const env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), transforms);
    return env.step(await policy().forward(await env.reset(start())));
  }

  it("RetrieveKL: KL 0 against the same model loaded twice", async () => {
    const out = await stepWith(new RetrieveKL({ worker, refModel: "ref" }));
    const kl = out.getTensor(["next", "kl_penalty"], "float32");
    expect(kl.shape).toEqual([2, 1]);
    for (const v of kl.toNumbers()) expect(Math.abs(v)).toBeLessThan(1e-5);
    const reward = out.getTensor(["next", "reward"]).toNumbers();
    kl.toNumbers().forEach((v, i) => {
      expect(reward[i]).toBeCloseTo(-v, 6);
    });
    const gen = out.getRagged(["next", "log_probs", "full"]);
    expect(gen.row(0).toNumbers().some((v) => v !== 0)).toBe(true); // assistant tokens were scored
  });

  it("RetrieveKL: the sum over assistant tokens of logp − logp_ref against another model", async () => {
    const out = await stepWith(new RetrieveKL({ worker, refModel: "other", coeff: 0.5 }));
    const kl = out.getTensor(["next", "kl_penalty"]).toNumbers();
    // Recompute from scratch: score the full conversation under both models, mask with the chat template's mask.
    const fullOnly = out.select(["history", "full"]);
    const a = await new TransformersWrapper(worker, { model: "policy", generate: false }).forward(fullOnly);
    const b = await new TransformersWrapper(worker, { model: "other", generate: false }).forward(fullOnly);
    const expected = maskedKl(a.getRagged(["log_probs", "full"]), b.getRagged(["log_probs", "full"]), a.getRagged(["masks", "all_assistant_mask"]));
    expected.forEach((e, i) => {
      expect(kl[i]).toBeCloseTo(e, 3);
    });
    expect(kl.every((v) => Math.abs(v) > 1e-3)).toBe(true);
    out.getTensor(["next", "reward"]).toNumbers().forEach((r, i) => {
      expect(r).toBeCloseTo(-0.5 * kl[i]!, 4);
    });
  });

  it("KLRewardTransform: scores the generated tokens with the reference and subtracts coef × KL from the reward", async () => {
    const same = await stepWith(new KLRewardTransform({ worker, model: "ref" }));
    // Generation (KV cache, token by token) and scoring (one pass) agree to float32 rounding.
    for (const v of same.getTensor(["next", "kl_penalty"]).toNumbers()) expect(Math.abs(v)).toBeLessThan(1e-3);
    const out = await stepWith(
      new RewardTransform({ rewards: [{ name: "one", fn: () => 1 }] }),
      new KLRewardTransform({ worker, model: "other", coef: 0.25 }),
    );
    const kl = out.getTensor(["next", "kl_penalty"]).toNumbers();
    const tokens = out.getRagged(["tokens", "full"]);
    const scored = await worker.score("other", new TensorDict({ tokens: { full: tokens } }, { batchSize: [2] }));
    const expected = maskedKl(out.getRagged(["log_probs", "full"]), scored.getRagged(["log_probs", "full"]), out.getRagged(["masks", "all_assistant_mask"]));
    expected.forEach((e, i) => {
      expect(kl[i]).toBeCloseTo(e, 3);
    });
    expect(kl.every((v) => Math.abs(v) > 1e-3)).toBe(true);
    out.getTensor(["next", "reward"]).toNumbers().forEach((r, i) => {
      expect(r).toBeCloseTo(1 - 0.25 * kl[i]!, 4);
    });
    const ref = out.getRagged(["next", "ref_log_probs", "full"]);
    expect(Array.from(ref.lengths())).toEqual(Array.from(tokens.lengths()));
    expect(ref.row(0).toNumbers()[0]).toBe(0); // prompt positions are masked out
  });

  it("a two-turn rollout with RetrieveKL has a KL per step", async () => {
    const env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [new StepCounter({ maxSteps: 2 }), new RetrieveKL({ worker, refModel: "other" })]);
    const out = await env.rollout(4, policy(), { tensordict: start() });
    expect(out.batchSize).toEqual([2, 2]);
    expect(out.getTensor(["next", "kl_penalty"]).shape).toEqual([2, 2, 1]);
    expect(out.getTensor(["next", "kl_penalty"]).toNumbers().every((v) => Math.abs(v) > 1e-3)).toBe(true);
  });

  it("RetrieveLogProb in tokens mode gives back the generation's log-probs on the response", async () => {
    const out = await stepWith(new RetrieveLogProb({ worker, model: "policy", inputMode: "tokens", logProbsFullKey: ["rescored", "full"] }));
    const rescored = out.getRagged(["next", "rescored", "full"]);
    const generated = out.getRagged(["log_probs", "full"]);
    for (let r = 0; r < 2; r++) {
      const x = rescored.row(r).toNumbers();
      generated.row(r).toNumbers().forEach((v, t) => {
        expect(x[t]).toBeCloseTo(v, 4);
      });
    }
  });

  it("fails clearly without the policy's outputs, and validates options", async () => {
    const env = new TransformedEnv(new ChatEnv({ batchSize: [1] }), new KLRewardTransform({ worker }));
    const td = await env.reset(new TensorDict({ query: ["q"] }, { batchSize: [1] }));
    td.set(["history", "full"], td.getHistory(["history", "prompt"]).appendEach([{ role: "assistant", content: "a" }]));
    await expect(env.step(td)).rejects.toThrow(EnvStateError);
    await expect(env.step(td)).rejects.toThrow(/no \["tokens","full"\]/);
    const klOnly = new TransformedEnv(new ChatEnv({ batchSize: [1] }), new KLComputation());
    await expect(klOnly.step(td)).rejects.toThrow(/KLComputation: next has no \["log_probs","full"\]/);
    expect(() => new KLRewardTransform({ worker, coef: Number.NaN })).toThrow(/KLRewardTransform options\.coef/);
    expect(() => new RetrieveKL({ worker: "w" as unknown as WorkerClient })).toThrow(/RetrieveKL options\.worker/);
    expect(() => new RetrieveLogProb({ worker, model: "" })).toThrow(InvalidArgumentError);
    const missing = new TransformedEnv(new ChatEnv({ batchSize: [2] }), new RetrieveKL({ worker, refModel: "nope" }));
    const acted = await policy().forward(await missing.reset(start()));
    await expect(missing.step(acted)).rejects.toMatchObject({ code: "MODEL_NOT_LOADED" });
  });
});
