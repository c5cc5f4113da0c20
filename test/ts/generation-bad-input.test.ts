// Bad inputs to generation and scoring from TypeScript, through WorkerClient.generate/score and TransformersWrapper
// on a real worker with the tiny model: prompts longer than the context (the error names the limit; truncation when
// asked), empty prompts, token ids outside the vocabulary, missing keys, invalid sampling options, models that are
// not loaded. Each is a typed error naming what was wrong, and the worker keeps serving. (generation.test.ts and
// transformers-wrapper.test.ts cover the first few option checks, an unknown model and an empty text prompt.)
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  HistoryBatch,
  InvalidArgumentError,
  KeyNotFoundError,
  RaggedTensor,
  Tensor,
  TensorDict,
  TransformersWrapper,
  WorkerError,
  type TransformersWrapperOptions,
  type WorkerClient,
} from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

/** A `("tokens", key)` batch with these rows of token ids. */
function tokenBatch(rows: readonly (readonly number[])[], key = "prompt"): TensorDict {
  const tensors = rows.map((r) => (r.length === 0 ? Tensor.zeros("int64", [0]) : Tensor.from(r.map(BigInt), { dtype: "int64" })));
  return new TensorDict({ tokens: { [key]: RaggedTensor.fromRows(tensors) } }, { batchSize: [rows.length] });
}

const textBatch = (texts: string[]): TensorDict => new TensorDict({ text: { prompt: texts } }, { batchSize: [texts.length] });

/** The rejection of `promise` (fails the test when it resolves). */
async function rejection(promise: Promise<unknown>): Promise<Error> {
  const outcome = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(outcome).toBeInstanceOf(Error);
  return outcome as Error;
}

/** Expects a WorkerError with `code` whose message contains each of `parts`. */
async function expectWorkerError(promise: Promise<unknown>, code: string, ...parts: string[]): Promise<void> {
  const err = await rejection(promise);
  expect(err).toBeInstanceOf(WorkerError);
  expect(err).toMatchObject({ code });
  for (const part of parts) expect(err.message).toContain(part);
}

describe("bad generation inputs from TypeScript", () => {
  let setup: TinyPolicy;
  let worker: WorkerClient;
  let maxPositions: number;
  let vocabSize: number;

  beforeAll(async () => {
    setup = await startTinyPolicy(11);
    worker = setup.worker;
    const [info] = await worker.listModels();
    maxPositions = info!.maxPositionEmbeddings!;
    vocabSize = info!.vocabSize;
  });

  afterAll(async () => {
    await setup.close();
  });

  it("rejects a prompt longer than the context, naming the row, its length and the limit", async () => {
    const long = "a".repeat(maxPositions - 2); // one token per ASCII character
    const limit = maxPositions - 4;
    await expectWorkerError(
      worker.generate("policy", textBatch(["short", long]), { maxNewTokens: 4 }),
      "BAD_ARGUMENTS",
      "row 1",
      `${maxPositions - 2} tokens`,
      `limit of ${limit}`,
      `maxPositionEmbeddings ${maxPositions}`,
      'truncate: "left"',
    );
  });

  it("keeps the last tokens of a long prompt when asked to truncate", async () => {
    const ids = Array.from({ length: maxPositions + 20 }, (_, i) => 3 + (i % 90));
    const out = await worker.generate("policy", tokenBatch([[5, 6], ids]), { maxNewTokens: 4, truncate: "left", temperature: 0 });
    const limit = maxPositions - 4;
    const prompt = out.getRagged(["tokens", "prompt"]);
    expect(Array.from(prompt.lengths())).toEqual([2, limit]);
    expect(prompt.row(1).toArray()).toEqual(ids.slice(-limit).map(BigInt));
    expect(out.getRagged(["tokens", "full"]).lengths()[1]).toBeLessThanOrEqual(maxPositions);
    const text = out.getStrings(["text", "prompt"])[1]!;
    expect(text.length).toBe(limit); // re-decoded from the tokens the model saw
  });

  it("rejects maxNewTokens that leaves no room for a prompt", async () => {
    await expectWorkerError(
      worker.generate("policy", textBatch(["x"]), { maxNewTokens: maxPositions }),
      "BAD_ARGUMENTS",
      '"maxNewTokens"',
      `maxPositionEmbeddings ${maxPositions}`,
    );
  });

  it("rejects a scored sequence longer than the context", async () => {
    const ids = Array.from({ length: maxPositions + 1 }, (_, i) => i % 90);
    await expectWorkerError(
      worker.score("policy", tokenBatch([[1, 2], ids], "full")),
      "BAD_ARGUMENTS",
      "row 1",
      `${maxPositions + 1} tokens`,
      `maxPositionEmbeddings (${maxPositions})`,
    );
  });

  it("rejects an empty prompt given as tokens, naming the row", async () => {
    await expectWorkerError(worker.generate("policy", tokenBatch([[], [4, 5]]), { maxNewTokens: 2 }), "BAD_ARGUMENTS", "row 0", "empty");
  });

  it("rejects token ids outside the vocabulary, naming the row and the id", async () => {
    await expectWorkerError(
      worker.generate("policy", tokenBatch([[1, 2], [3, vocabSize]]), { maxNewTokens: 2 }),
      "BAD_ARGUMENTS",
      "row 1",
      `token id ${vocabSize}`,
      `[0, ${vocabSize})`,
    );
    await expectWorkerError(worker.score("policy", tokenBatch([[7, -1]], "full")), "BAD_ARGUMENTS", "row 0", "token id -1");
  });

  it("rejects a payload without the input key, naming the keys expected and present", async () => {
    const wrong = new TensorDict({ tokens: { full: tokenBatch([[1, 2]]).getRagged(["tokens", "prompt"]) } }, { batchSize: [1] });
    await expectWorkerError(
      worker.generate("policy", wrong, { maxNewTokens: 2 }),
      "BAD_PAYLOAD",
      '("tokens", "prompt")',
      '("text", "prompt")',
      'present keys: ("tokens", "full")',
    );
    await expectWorkerError(worker.score("policy", tokenBatch([[1, 2]])), "BAD_PAYLOAD", '("tokens", "full")', '("tokens", "prompt")');
    const floats = new TensorDict(
      { tokens: { prompt: RaggedTensor.fromRows([Tensor.from([1.5], { dtype: "float32" })]) } },
      { batchSize: [1] },
    );
    await expectWorkerError(worker.generate("policy", floats, { maxNewTokens: 2 }), "BAD_PAYLOAD", "integer");
  });

  it("rejects invalid sampling and scoring options before sending, naming the field", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ topK: -1 }, "topK"],
      [{ topK: 1.5 }, "topK"],
      [{ topP: 1.5 }, "topP"],
      [{ repetitionPenalty: 0 }, "repetitionPenalty"],
      [{ stop: [""] }, "stop.0"],
      [{ stop: "x" }, "stop"],
      [{ seed: -1 }, "seed"],
      [{ seed: 0.5 }, "seed"],
      [{ truncate: "right" }, "truncate"],
      [{ microBatchSize: 0 }, "microBatchSize"],
      [{ temperature: Number.POSITIVE_INFINITY }, "temperature"],
      [{ temperature: Number.NaN }, "temperature"],
    ];
    for (const [extra, field] of cases) {
      const err = await rejection(worker.generate("policy", textBatch(["x"]), { maxNewTokens: 2, ...extra }));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.message).toContain(`generate options.${field}`);
    }
    const score = await rejection(worker.score("policy", tokenBatch([[1, 2]], "full"), { microBatchSize: 0 }));
    expect(score).toBeInstanceOf(InvalidArgumentError);
    expect(score.message).toContain("score options.microBatchSize");
    const unknown = await rejection(worker.score("policy", tokenBatch([[1, 2]], "full"), { seed: 1 } as never));
    expect(unknown.message).toContain("score options");
    expect(unknown.message).toContain("seed");
    const unnamed = await rejection(worker.generate("", textBatch(["x"]), { maxNewTokens: 2 }));
    expect(unnamed).toBeInstanceOf(InvalidArgumentError);
    expect(unnamed.message).toContain("generate options.model");
  });

  it("answers the worker's own checks to a client that bypasses the SDK's", async () => {
    const payload = [{ kind: "tensordict" as const, data: textBatch(["x"]).toArrow() }];
    await expectWorkerError(worker.call("generate", { model: "policy", maxNewTokens: 2, topP: 0 }, payload), "BAD_ARGUMENTS", '"topP"');
    await expectWorkerError(worker.call("generate", { model: "policy", maxNewTokens: 2, max_new_tokens: 2 }, payload), "BAD_ARGUMENTS", '"max_new_tokens"');
  });

  it("answers a model that is not loaded with MODEL_NOT_LOADED listing the loaded ones", async () => {
    await expectWorkerError(worker.score("ref", tokenBatch([[1, 2]], "full")), "MODEL_NOT_LOADED", "'ref'", "loaded: policy");
    await expectWorkerError(
      worker.applyChatTemplate("ref", new TensorDict({ history: { prompt: HistoryBatch.from([[{ role: "user", content: "hi" }]]) } }, { batchSize: [1] })),
      "MODEL_NOT_LOADED",
      "'ref'",
    );
  });

  it("gives TransformersWrapper the same typed errors", async () => {
    const text = new TransformersWrapper(worker, { model: "policy", inputMode: "text", generateKwargs: { max_new_tokens: 4 } });
    await expectWorkerError(text.forward(textBatch(["a".repeat(maxPositions)])), "BAD_ARGUMENTS", `limit of ${maxPositions - 4}`);
    const missingKey = await rejection(text.forward(new TensorDict({ prompt: ["x"] }, { batchSize: [1] })));
    expect(missingKey).toBeInstanceOf(KeyNotFoundError);
    expect(missingKey.message).toContain("text");
    const chat = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 2 } });
    const empty = new TensorDict({ history: { prompt: HistoryBatch.from([[{ role: "user", content: "hi" }], []]) } }, { batchSize: [2] });
    await expectWorkerError(chat.forward(empty), "BAD_ARGUMENTS", "row 1", "empty conversation");
    const ghost = new TransformersWrapper(worker, { model: "ghost", inputMode: "text", generateKwargs: { max_new_tokens: 2 } });
    await expectWorkerError(ghost.forward(textBatch(["x"])), "MODEL_NOT_LOADED", "'ghost'");
    const scorer = new TransformersWrapper(worker, { model: "policy", generate: false, inputMode: "text" });
    const tooLong = new TensorDict({ text: { full: ["b".repeat(maxPositions + 1)] } }, { batchSize: [1] });
    await expectWorkerError(scorer.forward(tooLong), "BAD_ARGUMENTS", "row 0", `maxPositionEmbeddings (${maxPositions})`);
    const kwargsCases: [NonNullable<TransformersWrapperOptions["generateKwargs"]>, string][] = [
      [{ max_new_tokens: 2, top_p: 0 }, "generateKwargs.top_p"],
      [{ max_new_tokens: 2, temperature: -1 }, "generateKwargs.temperature"],
      [{ max_new_tokens: 2, stop: [""] }, "generateKwargs.stop.0"],
      [{ max_new_tokens: 0 }, "generateKwargs.max_new_tokens"],
      [{ max_tokens: 2, n: 0 }, "generateKwargs.n"],
    ];
    for (const [kwargs, field] of kwargsCases) {
      expect(() => new TransformersWrapper(worker, { model: "policy", generateKwargs: kwargs })).toThrow(`TransformersWrapper options.${field}`);
    }
    expect(() => new TransformersWrapper(worker, { model: "policy", numSamples: 0, generateKwargs: { max_tokens: 2 } })).toThrow(
      "TransformersWrapper options.numSamples",
    );
  });

  it("keeps serving after all of the above", async () => {
    const out = await worker.generate("policy", textBatch(["still here"]), { maxNewTokens: 3, temperature: 0 });
    expect(out.getStrings("finish_reason")[0]).toMatch(/^(eos|stop|length)$/);
    expect(out.getRagged(["tokens", "response"]).lengths()[0]).toBeGreaterThan(0);
  });
});
