import { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import { InvalidArgumentError } from "../core/errors.js";
import { HistoryBatch } from "../data/index.js";
import { TensorDict, type NestedKey } from "../tensordict/index.js";
import type { GenerateOptions } from "../workers/generation.js";
import type { WorkerClient } from "../workers/client.js";
import { parseOptions } from "../core/index.js";

/** Hugging Face-style generation kwargs (snake_case), with TorchRL's aliases `max_tokens` and `n`. */
export const GenerateKwargsSchema = z.strictObject({
  max_new_tokens: z.number().int().min(1).optional(),
  /** Alias of `max_new_tokens` (vLLM's name). */
  max_tokens: z.number().int().min(1).optional(),
  temperature: z.number().min(0).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  repetition_penalty: z.number().gt(0).optional(),
  /** `false` samples greedily (temperature 0). */
  do_sample: z.boolean().optional(),
  stop: z.array(z.string().min(1)).optional(),
  seed: z.number().int().nonnegative().optional(),
  /** Alias of the wrapper's `numSamples`. */
  n: z.number().int().min(1).optional(),
  num_return_sequences: z.number().int().min(1).optional(),
});

/** Options of the policy wrappers ({@link LLMWrapperBase}: `TransformersWrapper`, `vLLMWrapper`), TorchRL's names camelCased. */
export const LLMWrapperOptionsSchema = z.strictObject({
  /** Name of the model loaded in the worker (`worker.loadModel`). */
  model: z.string().min(1),
  /** `true` (default) samples responses; `false` scores full sequences and returns their log-probs. */
  generate: z.boolean().default(true),
  /** Which keys are read: `"history"` (default), `"text"` or `"tokens"`. */
  inputMode: z.enum(["history", "text", "tokens"]).default("history"),
  /** Keep `("log_probs", ...)` in the output (default true; scoring always returns them). */
  returnLogProbs: z.boolean().default(true),
  /** Sampling options, with HF names. `max_new_tokens` (or `max_tokens`) is required when generating. */
  generateKwargs: GenerateKwargsSchema.default({}),
  /** Responses per prompt; the output batch becomes `[...batch, numSamples]` when > 1. */
  numSamples: z.number().int().min(1).optional(),
  /** Rows per forward pass in the worker; default all at once. */
  microBatchSize: z.number().int().min(1).optional(),
});

/** Options of the policy wrappers (input form: defaults may be left out). */
export type LLMWrapperOptions = z.input<typeof LLMWrapperOptionsSchema>;

/** Options of the policy wrappers with their defaults filled in. */
export type ResolvedLLMWrapperOptions = z.output<typeof LLMWrapperOptionsSchema>;

const PROMPT_KEYS: Readonly<Record<ResolvedLLMWrapperOptions["inputMode"], NestedKey>> = {
  history: ["history", "prompt"],
  text: ["text", "prompt"],
  tokens: ["tokens", "prompt"],
};
const FULL_KEYS: Readonly<Record<ResolvedLLMWrapperOptions["inputMode"], NestedKey>> = {
  history: ["history", "full"],
  text: ["text", "full"],
  tokens: ["tokens", "full"],
};

/** Per-call options of `forward`: a timeout and an `AbortSignal`, and a sampling seed for this call only. */
export interface ForwardOptions extends RequestOptions {
  /** Overrides `generateKwargs.seed` for this call (e.g. a seed per training step, so a run is reproducible). */
  readonly seed?: number;
}

/**
 * What TorchRL's `TransformersWrapper` and `vLLMWrapper` share, over a model held by a worker: `forward(td)` reads
 * the input key of its `inputMode` and writes TorchRL's output keys into a copy of `td`. The worker's `generate` and
 * `score` answer with the same payload whatever backend the model was loaded with, so the subclasses differ only in
 * their name and in the checks they make.
 *
 * - Generating: reads `(mode, "prompt")`; writes `("tokens"|"text", "prompt"|"response"|"full")`,
 *   `("log_probs", "response"|"full")`, `("masks", ...)`, `finish_reason` and, in history mode,
 *   `("history", "response"|"full")` (the response as one assistant message, incomplete when cut by length).
 *   With `numSamples > 1` the batch gains a last dimension of that size; input leaves are repeated.
 * - Scoring (`generate: false`): reads `(mode, "full")`; writes `("tokens", "full")`, `("log_probs", "full")`
 *   and, in history mode, the masks of the worker's chat template (`all_assistant_mask`).
 */
export abstract class LLMWrapperBase {
  private readonly options: ResolvedLLMWrapperOptions;
  private readonly sampling: GenerateOptions | undefined;
  /** The model's end-of-generation token texts, fetched once (history mode strips them from responses). */
  private eosTokens: Promise<readonly string[]> | undefined;

  /** `where` names the options in error messages, e.g. `"TransformersWrapper options"`. */
  protected constructor(
    /** The worker holding the model. */
    protected readonly worker: WorkerClient,
    options: LLMWrapperOptions,
    where: string,
  ) {
    this.options = parseOptions(LLMWrapperOptionsSchema, options, where);
    this.sampling = this.options.generate ? toGenerateOptions(this.options, where) : undefined;
  }

  /** The resolved options (defaults filled in). */
  get config(): Readonly<ResolvedLLMWrapperOptions> {
    return this.options;
  }

  /** Runs the policy on `td` and returns a new TensorDict with the output keys added. */
  async forward(td: TensorDict, options: ForwardOptions = {}): Promise<TensorDict> {
    const { seed, ...requestOptions } = options;
    await this.beforeForward?.(requestOptions);
    if (this.sampling === undefined) return this.score(td, requestOptions);
    return this.generate(td, seed === undefined ? this.sampling : { ...this.sampling, seed }, requestOptions);
  }

  /** A check a subclass may make before each `forward`. */
  protected beforeForward?(requestOptions: RequestOptions): Promise<void>;

  private async generate(td: TensorDict, sampling: GenerateOptions, requestOptions: RequestOptions): Promise<TensorDict> {
    const { model, inputMode } = this.options;
    const rows = td.batchSize.reduce((a, b) => a * b, 1);
    const flat = td.reshape([rows]);
    // History prompts go as they are: the worker renders them with the model's chat template (one call).
    const prompts = flat.select(PROMPT_KEYS[inputMode]);
    const out = await this.worker.generate(model, prompts, sampling, requestOptions);
    const samples = sampling.numSamples ?? 1;
    const repeated = samples === 1 ? flat : flat.index(Int32Array.from({ length: rows * samples }, (_, i) => Math.floor(i / samples)));
    const result = repeated; // a new structure (reshape/index): setting keys leaves `td` untouched
    const flatOut = out.reshape([rows * samples]);
    for (const [key, value] of flatOut.entries({ nested: true, leavesOnly: true })) {
      if (!this.options.returnLogProbs && Array.isArray(key) && key[0] === "log_probs") continue;
      result.set(key, value);
    }
    if (inputMode === "history") {
      const promptHistories = repeated.getHistory(["history", "prompt"]);
      const texts = flatOut.getStrings(["text", "response"]);
      const reasons = flatOut.getStrings("finish_reason");
      // A row that stopped on an eos token ends with that token's text, which is not part of the message.
      const eosTokens = await this.modelEosTokens(requestOptions);
      const responses = HistoryBatch.from(
        texts.map((text, r) => [
          {
            role: "assistant",
            content: reasons[r] === "eos" ? stripEos(text, eosTokens) : text,
            ...(reasons[r] === "length" ? { isComplete: false } : {}),
          },
        ]),
      );
      result.set(["history", "response"], responses);
      result.set(["history", "full"], promptHistories.appendEach(responses.rows.map((h) => h.messages)));
    }
    const batch = samples === 1 ? [...td.batchSize] : [...td.batchSize, samples];
    return result.reshape(batch);
  }

  private modelEosTokens(requestOptions: RequestOptions): Promise<readonly string[]> {
    const { model } = this.options;
    this.eosTokens ??= this.worker.listModels(requestOptions).then((models) => models.find((m) => m.name === model)?.eosTokens ?? []);
    this.eosTokens.catch(() => (this.eosTokens = undefined)); // a failed lookup is retried next time
    return this.eosTokens;
  }

  private async score(td: TensorDict, requestOptions: RequestOptions): Promise<TensorDict> {
    const { model, inputMode, microBatchSize } = this.options;
    const scoreOptions = microBatchSize !== undefined ? { microBatchSize } : {};
    let full = td.select(FULL_KEYS[inputMode]);
    const result = td.exclude(); // new structure sharing the leaves: `td` is not modified
    if (inputMode === "history") {
      const rendered = await this.worker.applyChatTemplate(model, full, { key: "full" }, requestOptions);
      for (const [key, value] of rendered.entries({ nested: true, leavesOnly: true })) result.set(key, value);
      full = rendered.select(["tokens", "full"]);
    }
    const scored = await this.worker.score(model, full, scoreOptions, requestOptions);
    for (const [key, value] of scored.entries({ nested: true, leavesOnly: true })) result.set(key, value);
    return result;
  }
}

/** `text` without the longest of `eosTokens` it ends with. */
function stripEos(text: string, eosTokens: readonly string[]): string {
  let cut = 0;
  for (const eos of eosTokens) if (eos.length > cut && text.endsWith(eos)) cut = eos.length;
  return text.slice(0, text.length - cut);
}

function toGenerateOptions(options: ResolvedLLMWrapperOptions, where: string): GenerateOptions {
  const kw = options.generateKwargs;
  const maxNewTokens = kw.max_new_tokens ?? kw.max_tokens;
  if (maxNewTokens === undefined) {
    throw new InvalidArgumentError(`${where}.generateKwargs.max_new_tokens: required when generate is true (or max_tokens)`);
  }
  const numSamples = options.numSamples ?? kw.n ?? kw.num_return_sequences ?? 1;
  return {
    maxNewTokens,
    numSamples,
    ...(kw.do_sample === false ? { temperature: 0 } : kw.temperature !== undefined ? { temperature: kw.temperature } : {}),
    ...(kw.top_p !== undefined ? { topP: kw.top_p } : {}),
    ...(kw.top_k !== undefined ? { topK: kw.top_k } : {}),
    ...(kw.repetition_penalty !== undefined ? { repetitionPenalty: kw.repetition_penalty } : {}),
    ...(kw.stop !== undefined ? { stop: kw.stop } : {}),
    ...(kw.seed !== undefined ? { seed: kw.seed } : {}),
    ...(options.microBatchSize !== undefined ? { microBatchSize: options.microBatchSize } : {}),
  };
}
