/**
 * `RetrieveLogProb`: per-token log-probabilities of the conversation under a model held by a worker (TorchRL's
 * `RetrieveLogProb`), written into `next`, with the tokens outside the assistant's turns zeroed.
 */
import { z } from "zod";
import { RaggedTensor, TensorDict, type NestedKey } from "../../tensordict/index.js";
import { TransformersWrapper } from "../../modules/transformers.js";
import { WorkerClient } from "../../workers/client.js";
import { parseOptions } from "../../core/index.js";
import { throwIfAborted, type EnvCallOptions } from "../env-base.js";
import { EnvStateError } from "../errors.js";
import { ASSISTANT_MASK_KEY, REF_LOG_PROBS_FULL_KEY, modeKey } from "../keys.js";
import { Transform } from "../transform.js";

const KeySchema = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);

/** Options of {@link RetrieveLogProb}. */
export const RetrieveLogProbOptionsSchema = z.strictObject({
  /** The worker holding the model. */
  worker: z.instanceof(WorkerClient),
  /** The model's name in the worker (e.g. `"ref"`). */
  model: z.string().min(1),
  /** Where the log-probs go in `next` (default `("ref_log_probs", "full")`). */
  logProbsFullKey: KeySchema.default([...REF_LOG_PROBS_FULL_KEY]),
  /**
   * Which sequence is scored: `"history"` (default: `("history", "full")` rendered by the model's chat template),
   * `"text"` (`("text", "full")`) or `"tokens"` (`("tokens", "full")` as generated).
   */
  inputMode: z.enum(["history", "text", "tokens"]).default("history"),
  /**
   * Zero the log-probs outside the assistant's tokens (default true): the chat template's assistant mask in
   * history mode, the generation's `("masks", "all_assistant_mask")` otherwise.
   */
  assistantOnly: z.boolean().default(true),
  /** Rows per forward pass in the worker (default all). */
  microBatchSize: z.number().int().min(1).optional(),
});

/** Options of {@link RetrieveLogProb}. */
export type RetrieveLogProbOptions = z.input<typeof RetrieveLogProbOptionsSchema>;
type Resolved = z.output<typeof RetrieveLogProbOptionsSchema>;

/** `lp` with every position where `mask` is false set to 0 (a new ragged float32 tensor). Rows must align. */
export function maskLogProbs(lp: RaggedTensor, mask: RaggedTensor, what: string): RaggedTensor<"float32"> {
  const rows: Float32Array[] = [];
  for (let r = 0; r < lp.rows; r++) {
    const values = lp.row(r).toFloat32Array();
    const m = mask.row(r).toNumbers();
    if (m.length !== values.length) {
      throw new EnvStateError(`${what}: row ${r} has ${values.length} log-probs but its assistant mask has ${m.length} entries`);
    }
    rows.push(values.map((v, t) => (m[t] === 0 ? 0 : v)));
  }
  const offsets = new Int32Array(rows.length + 1);
  rows.forEach((row, r) => (offsets[r + 1] = offsets[r]! + row.length));
  const values = new Float32Array(offsets[rows.length]!);
  rows.forEach((row, r) => {
    values.set(row, offsets[r]);
  });
  return new RaggedTensor("float32", values, offsets);
}

/**
 * Scores the conversation of each row under `model` and writes the per-token log-probs (TorchRL convention: one
 * per token of the full sequence) at `logProbsFullKey` in `next`. Use two of them and `KLComputation` — or
 * `RetrieveKL` — for a KL penalty to a reference model.
 */
export class RetrieveLogProb extends Transform {
  /** The resolved options. */
  readonly config: Readonly<Resolved>;
  readonly #scorer: TransformersWrapper;

  constructor(options: RetrieveLogProbOptions) {
    super();
    this.config = parseOptions(RetrieveLogProbOptionsSchema, options, "RetrieveLogProb options");
    const { worker, model, inputMode, microBatchSize } = this.config;
    this.#scorer = new TransformersWrapper(worker, { model, generate: false, inputMode, ...(microBatchSize === undefined ? {} : { microBatchSize }) });
  }

  /** The key the log-probs are written at. */
  get logProbsFullKey(): NestedKey {
    return this.config.logProbsFullKey;
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    throwIfAborted(options.signal, "RetrieveLogProb.step");
    const { inputMode, assistantOnly, model } = this.config;
    const full = modeKey(inputMode, "full");
    if (!td.has(full)) throw new EnvStateError(`RetrieveLogProb (${model}): the data has no ${JSON.stringify(full)} to score; run the policy first`);
    const flat = td.reshape([td.numel()]).select(full);
    const scored = await this.#scorer.forward(flat, options.signal === undefined ? {} : { signal: options.signal });
    let lp = scored.getRagged(["log_probs", "full"]);
    if (assistantOnly) {
      const source = inputMode === "history" ? scored : td.reshape([td.numel()]);
      if (!source.has(ASSISTANT_MASK_KEY)) {
        throw new EnvStateError(`RetrieveLogProb (${model}): assistantOnly needs ("masks", "all_assistant_mask") from the policy in ${inputMode} mode`);
      }
      lp = maskLogProbs(lp, source.getRagged(ASSISTANT_MASK_KEY), `RetrieveLogProb (${model})`);
    }
    return next.set(this.config.logProbsFullKey, lp);
  }
}
