// History mode end to end through a real worker: conversations in a TensorDict leaf cross the wire as
// List<Struct>, the model's own chat template renders them, and the tokens feed generation.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HistoryBatch, InvalidArgumentError, TensorDict, type WorkerClient } from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

describe("applyChatTemplate", () => {
  let policy: TinyPolicy;
  let worker: WorkerClient;

  beforeAll(async () => {
    policy = await startTinyPolicy(4);
    worker = policy.worker;
  });

  afterAll(async () => {
    await policy.close();
  });

  const conversations = (): TensorDict =>
    new TensorDict(
      {
        history: {
          prompt: HistoryBatch.from([
            [{ role: "user", content: "2+2?" }],
            [
              { role: "system", content: "Be terse." },
              { role: "user", content: "Hi" },
            ],
          ]),
        },
      },
      { batchSize: [2] },
    );

  it("renders prompts with the generation prompt, as the worker's tokenizer does", async () => {
    const out = await worker.applyChatTemplate("policy", conversations());
    expect(out.getStrings(["text", "prompt"])).toEqual([
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    ]);
    // The TS ChatML mirror renders the same text.
    const mirror = conversations().getHistory(["history", "prompt"]).toText({ addGenerationPrompt: true });
    expect(mirror).toEqual(out.getStrings(["text", "prompt"]));
    const tokens = out.getRagged(["tokens", "prompt"]);
    expect(Array.from(tokens.lengths())).toEqual(out.getStrings(["text", "prompt"]).map((t) => t.replaceAll(/<\|im_(start|end)\|>/g, "#").length));
  });

  it("masks assistant tokens of full conversations, and the tokens feed generate", async () => {
    const full = new TensorDict(
      {
        history: {
          full: HistoryBatch.from([
            [
              { role: "user", content: "Hi" },
              { role: "assistant", content: "Hello" },
            ],
          ]),
        },
      },
      { batchSize: [1] },
    );
    const out = await worker.applyChatTemplate("policy", full, { key: "full" });
    const mask = out.getRagged(["masks", "all_assistant_mask"]).row(0).toArray() as boolean[];
    expect(mask.filter(Boolean)).toHaveLength("Hello".length + 1); // the content and <|im_end|>
    const prompts = await worker.applyChatTemplate("policy", conversations());
    const generated = await worker.generate("policy", prompts.select(["tokens", "prompt"]), { maxNewTokens: 3, seed: 1 });
    expect(generated.batchSize).toEqual([2]);
  });

  it("rejects bad options before sending", async () => {
    const err = await worker.applyChatTemplate("policy", conversations(), { key: "middle" as "full" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toContain("applyChatTemplate options.key");
  });
});
