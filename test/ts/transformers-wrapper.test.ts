// TransformersWrapper through a real worker on the tiny model: TorchRL's input modes and keys, numSamples
// groups, scoring mode, and option validation.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HistoryBatch, InvalidArgumentError, TensorDict, TransformersWrapper, type WorkerClient } from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

describe("TransformersWrapper", () => {
  let setup: TinyPolicy;
  let worker: WorkerClient;

  beforeAll(async () => {
    setup = await startTinyPolicy(6);
    worker = setup.worker;
  });

  afterAll(async () => {
    await setup.close();
  });

  const chats = (): TensorDict =>
    new TensorDict(
      {
        history: { prompt: HistoryBatch.from([[{ role: "user", content: "2+2?" }], [{ role: "user", content: "Hi" }]]) },
        id: ["a", "b"],
      },
      { batchSize: [2] },
    );

  it("generates in history mode with TorchRL's keys and a response History", async () => {
    const policy = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 6, seed: 0 } });
    const input = chats();
    const out = await policy.forward(input);
    expect(input.keys({ nested: true, leavesOnly: true })).toEqual([["history", "prompt"], "id"]); // input untouched
    expect(out.batchSize).toEqual([2]);
    for (const key of [["tokens", "response"], ["text", "full"], ["log_probs", "response"], ["masks", "all_assistant_mask"]]) {
      expect(out.has(key)).toBe(true);
    }
    expect(out.getStrings("id")).toEqual(["a", "b"]);
    const full = out.getHistory(["history", "full"]);
    const response = out.getHistory(["history", "response"]);
    expect(full.row(0).length).toBe(2);
    expect(full.row(0).last?.role).toBe("assistant");
    expect(response.row(0).last?.content).not.toMatch(/<\|im_end\|>$/);
    expect(out.getStrings(["text", "prompt"])[0]).toBe("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  });

  it("strips exactly the model's eos token text from responses that ended on it", async () => {
    const [info] = (await worker.listModels()).filter((m) => m.name === "policy");
    expect(info?.eosTokens).toContain("<|im_end|>");
    const policy = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 48, n: 16, seed: 3 } });
    const out = (await policy.forward(chats())).reshape([32]);
    const texts = out.getStrings(["text", "response"]);
    const reasons = out.getStrings("finish_reason");
    const contents = out.getHistory(["history", "response"]).rows.map((h) => h.last?.content);
    expect(reasons).toContain("eos"); // the seed is chosen so that some rows end on eos
    reasons.forEach((reason, r) => {
      const text = texts[r] ?? "";
      const eos = (info?.eosTokens ?? []).find((t) => text.endsWith(t));
      expect(contents[r]).toBe(reason === "eos" && eos !== undefined ? text.slice(0, -eos.length) : text);
    });
  });

  it("makes GRPO groups with numSamples (or the n alias): batch [B, n], inputs repeated", async () => {
    const policy = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_tokens: 4, n: 3, seed: 1 } });
    const out = await policy.forward(chats());
    expect(out.batchSize).toEqual([2, 3]);
    expect(out.getStrings("id")).toEqual(["a", "a", "a", "b", "b", "b"]);
    expect(out.getHistory(["history", "full"]).rows).toHaveLength(6);
  });

  it("generates in text and tokens modes, and drops log-probs when asked", async () => {
    const text = new TransformersWrapper(worker, { model: "policy", inputMode: "text", returnLogProbs: false, generateKwargs: { max_new_tokens: 3, do_sample: false } });
    const prompts = new TensorDict({ text: { prompt: ["abc", "xyz"] } }, { batchSize: [2] });
    const fromText = await text.forward(prompts);
    expect(fromText.has(["log_probs", "response"])).toBe(false);
    const tokens = new TransformersWrapper(worker, { model: "policy", inputMode: "tokens", generateKwargs: { max_new_tokens: 3, do_sample: false } });
    const fromTokens = await tokens.forward(fromText.select(["tokens", "prompt"]));
    // Greedy decoding from the same tokens gives the same response.
    expect(fromTokens.getStrings(["text", "response"])).toEqual(fromText.getStrings(["text", "response"]));
  });

  it("scores full sequences (generate: false) in history and text modes", async () => {
    const generated = await new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 5, seed: 2 } }).forward(chats());
    const scorer = new TransformersWrapper(worker, { model: "policy", generate: false });
    const fullOnly = generated.select(["history", "full"]);
    const scored = await scorer.forward(fullOnly);
    expect(fullOnly.has(["log_probs", "full"])).toBe(false); // input untouched
    expect(scored.has(["log_probs", "full"])).toBe(true);
    expect(scored.getRagged(["masks", "all_assistant_mask"]).rows).toBe(2);
    const textScorer = new TransformersWrapper(worker, { model: "policy", generate: false, inputMode: "text" });
    const byText = await textScorer.forward(generated.select(["text", "full"]));
    const lp = byText.getRagged(["log_probs", "full"]);
    expect(Array.from(lp.lengths())).toEqual(Array.from(byText.getRagged(["tokens", "full"]).lengths()));
  });

  it("validates its options, naming the field", () => {
    expect(() => new TransformersWrapper(worker, { model: "policy" })).toThrow(InvalidArgumentError);
    expect(() => new TransformersWrapper(worker, { model: "policy" })).toThrow(/max_new_tokens/);
    expect(() => new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 2, beams: 4 } as never })).toThrow(/generateKwargs/);
    expect(() => new TransformersWrapper(worker, { model: "policy", inputMode: "audio" as "text" })).toThrow(/inputMode/);
  });
});
