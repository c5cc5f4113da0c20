// Reward functions through RewardTransform on a DatasetChatEnv over the JSONL fixture: sync and async rewards,
// weights, the concurrency bound (measured), RewardError naming the reward and the sample, defaults on error,
// `done`, and the sample each reward sees. The policy is a plain function answering each question.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  ChatEnv,
  DatasetChatEnv,
  HistoryBatch,
  InvalidArgumentError,
  RewardError,
  RewardTransform,
  Tensor,
  TensorDict,
  Transform,
  TransformedEnv,
  readFlags,
  type RewardSample,
} from "../../sdk/index.js";

const jsonl = join(import.meta.dirname, "..", "fixtures", "datasets", "arith.jsonl");

/** Answers "What is a + b?" correctly on even rows and with "0" on odd rows. */
function answerPolicy(td: TensorDict): TensorDict {
  const prompts = td.getHistory(["history", "prompt"]);
  const responses = prompts.rows.map((h, r) => {
    const [a, b] = (h.last?.content.match(/\d+/g) ?? []).map(Number);
    return [{ role: "assistant", content: `<answer>${r % 2 === 0 ? a! + b! : 0}</answer>` }];
  });
  const response = HistoryBatch.from(responses);
  return td.set(["history", "response"], response).set(["history", "full"], prompts.appendEach(response.rows.map((h) => h.messages)));
}

const correct = (s: RewardSample): number => (s.response === `<answer>${String(s.fields.answer)}</answer>` ? 1 : 0);

function makeEnv(rewards: ConstructorParameters<typeof DatasetChatEnv>[0]["rewards"], rewardOptions = {}, batch = 4): DatasetChatEnv {
  return new DatasetChatEnv({
    dataset: { files: jsonl, fields: { query: "question", answer: "answer", id: "id", level: "level" }, shuffle: false },
    batchSize: [batch],
    ...(rewards === undefined ? {} : { rewards, rewardOptions }),
  });
}

describe("RewardTransform", () => {
  it("sums weighted sync and async rewards and writes each component", async () => {
    const env = makeEnv([
      { name: "correct", fn: correct },
      { name: "zero", fn: async (s) => Promise.resolve(s.response.includes(">0<") ? 1 : 0), weight: 0.5 },
    ]);
    const out = await env.step(answerPolicy(await env.reset()));
    // Rows q0..q3: even rows answer 3 and 11 (correct), odd rows answer 0 (wrong).
    expect(out.getTensor(["next", "reward_components", "correct"], "float32").toNumbers()).toEqual([1, 0, 1, 0]);
    expect(out.getTensor(["next", "reward_components", "zero"]).toNumbers()).toEqual([0, 1, 0, 1]);
    expect(out.getTensor(["next", "reward"]).shape).toEqual([4, 1]);
    expect(out.getTensor(["next", "reward"]).toNumbers()).toEqual([1, 0.5, 1, 0.5]);
    expect(readFlags(out, ["next", "done"])).toEqual([false, false, false, false]);
    const next = env.stepMdp(out);
    expect(next.has("reward_components")).toBe(false);
    expect(next.has("reward")).toBe(false);
  });

  it("gives each reward the conversation, the response, the dataset fields and the id", async () => {
    const seen: RewardSample[] = [];
    const env = makeEnv([{ name: "spy", fn: (s) => (seen.push(s), s.index) }], { done: true }, 2);
    const out = await env.step(answerPolicy(await env.reset()));
    seen.sort((a, b) => a.index - b.index);
    expect(seen.map((s) => [s.index, s.id, s.fields.answer, s.fields.level])).toEqual([[0, "q0", "3", 0], [1, "q1", "7", 1]]);
    expect(seen[0]!.history.messages.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(seen[0]!.response).toBe("<answer>3</answer>");
    expect(out.getTensor(["next", "reward"]).toNumbers()).toEqual([0, 1]);
    expect(readFlags(out, ["next", "terminated"])).toEqual([true, true]);
    expect(readFlags(out, ["next", "done"])).toEqual([true, true]);
  });

  it("respects the concurrency bound", async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const slow = async (s: RewardSample): Promise<number> => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await new Promise((r) => setTimeout(r, 5 + (s.index % 3)));
      inFlight--;
      return 1;
    };
    const env = makeEnv([{ name: "a", fn: slow }, { name: "b", fn: slow }], { concurrency: 3 }, 8);
    await env.step(answerPolicy(await env.reset()));
    expect(maxInFlight).toBe(3);
    maxInFlight = 0;
    const wide = makeEnv([{ name: "a", fn: slow }], { concurrency: 16 }, 8);
    await wide.step(answerPolicy(await wide.reset()));
    expect(maxInFlight).toBe(8); // every row at once when the bound allows it
  });

  it("a reward that throws fails the step with RewardError naming the reward and the sample", async () => {
    const env = makeEnv([
      { name: "correct", fn: correct },
      { name: "fragile", fn: (s) => { if (s.index === 2) throw new Error("parse failed"); return 1; } },
    ]);
    const err: unknown = await env.step(answerPolicy(await env.reset())).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RewardError);
    expect(err).toMatchObject({ code: "REWARD_FAILED", reward: "fragile", sampleIndex: 2, sampleId: "q2" });
    expect((err as Error).message).toBe('reward "fragile" failed on sample 2 (id "q2"): parse failed');
    expect((err as Error).cause).toBeInstanceOf(Error);
    const nan = makeEnv([{ name: "nan", fn: async () => Promise.resolve(Number.NaN) }]);
    await expect(nan.step(answerPolicy(await nan.reset()))).rejects.toThrow(/reward "nan" failed on sample 0 \(id "q0"\): returned NaN/);
  });

  it("uses the configured default when a reward throws", async () => {
    const env = makeEnv(
      [
        { name: "correct", fn: correct },
        { name: "fragile", fn: async (s) => { if (s.index % 2 === 1) throw new Error("boom"); return Promise.resolve(1); }, weight: 2 },
      ],
      { onError: { default: -1 } },
    );
    const out = await env.step(answerPolicy(await env.reset()));
    expect(out.getTensor(["next", "reward_components", "fragile"]).toNumbers()).toEqual([1, -1, 1, -1]);
    expect(out.getTensor(["next", "reward"]).toNumbers()).toEqual([3, -2, 3, -2]);
  });

  it("adds to a reward already in next", async () => {
    class Bonus extends Transform {
      override step(td: TensorDict, next: TensorDict): TensorDict {
        return next.set("reward", Tensor.full("float32", [...next.batchSize, 1], 10));
      }
    }
    const env = new TransformedEnv(makeEnv(undefined), [new Bonus(), new RewardTransform({ rewards: [{ name: "correct", fn: correct }] })]);
    const out = await env.step(answerPolicy(await env.reset()));
    expect(out.getTensor(["next", "reward"]).toNumbers()).toEqual([11, 10, 11, 10]);
  });

  it('in text mode, reads ("text", "response") and parses the conversation', async () => {
    const seen: RewardSample[] = [];
    const env = new TransformedEnv(new ChatEnv({ batchSize: [1], inputMode: "text" }), new RewardTransform({ rewards: [{ name: "spy", fn: (s) => (seen.push(s), 0) }] }));
    const td = await env.reset(new TensorDict({ query: ["2+2?"] }, { batchSize: [1] }));
    const prompt = td.getStrings(["text", "prompt"])[0]!;
    expect(prompt).toBe("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    td.set(["text", "response"], ["4<|im_end|>"]).set(["text", "full"], [`${prompt}4<|im_end|>`]);
    const out = await env.step(td);
    expect(out.getStrings(["next", "text", "prompt"])).toEqual([`${prompt}4<|im_end|>`]);
    expect(seen[0]!.response).toBe("4<|im_end|>");
    expect(seen[0]!.history.toJSON()).toEqual([{ role: "user", content: "2+2?" }, { role: "assistant", content: "4" }]);
  });

  it("validates its options, naming the field", async () => {
    expect(() => new RewardTransform({ rewards: [] })).toThrow(/RewardTransform options\.rewards/);
    // Stepping before the policy answered: nothing to score.
    const env = new TransformedEnv(new ChatEnv({ batchSize: [1], inputMode: "text" }), new RewardTransform({ rewards: [{ name: "a", fn: correct }] }));
    const td = await env.reset(new TensorDict({ query: ["q"] }, { batchSize: [1] }));
    await expect(env.step(td.set(["text", "full"], ["x"]))).rejects.toThrow(/RewardTransform: nothing to score/);
    expect(() => new RewardTransform({ rewards: [{ name: "a", fn: correct }, { name: "a", fn: correct }] })).toThrow(/reward names must be unique/);
    expect(() => new RewardTransform({ rewards: [{ name: "a", fn: 3 as unknown as typeof correct }] })).toThrow(/options\.rewards\.0\.fn/);
    expect(() => new RewardTransform({ rewards: [{ name: "a", fn: correct, weight: Number.NaN }] })).toThrow(/rewards\.0\.weight/);
    expect(() => new RewardTransform({ rewards: [{ name: "a", fn: correct }], concurrency: 0 })).toThrow(InvalidArgumentError);
    expect(() => new RewardTransform({ rewards: [{ name: "a", fn: correct }], onError: { default: Infinity } })).toThrow(/onError\.default/);
  });
});
