/**
 * KL to a reference model, as a reward penalty (TorchRL's `KLComputation`, `RetrieveKL` and `KLRewardTransform`,
 * with their key names). The KL of a sample is the sum over its response (assistant) tokens of
 * `logp − logp_ref` (the estimator of KL(π‖π_ref) on a sample of π); the penalty subtracts `coeff × KL` from
 * `("next", "reward")` (`[...batch, 1]` float32). TorchRL keeps the per-token terms; here they are summed per
 * sample, so the reward stays one value per sample.
 */
import { z } from "zod";
import { RaggedTensor, TensorDict, type NestedKey } from "../../tensordict/index.js";
import { WorkerClient } from "../../workers/client.js";
import { parseOptions } from "../../core/index.js";
import { throwIfAborted, type EnvCallOptions } from "../env-base.js";
import { EnvStateError } from "../errors.js";
import {
  ASSISTANT_MASK_KEY,
  KL_PENALTY_KEY,
  LOG_PROBS_FULL_KEY,
  REF_LOG_PROBS_FULL_KEY,
  REWARD_KEY,
  TOKENS_FULL_KEY,
  TOKENS_PROMPT_KEY,
} from "../keys.js";
import { readColumn, rewardColumn } from "../rows.js";
import { Compose, Transform } from "../transform.js";
import { maskLogProbs, RetrieveLogProb } from "./log-probs.js";

const KeySchema = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);
const Coefficient = z.number().refine(Number.isFinite, { message: "expected a finite number" });

/** Per row, Σ_t (a_t − b_t), NaN terms counting 0 (TorchRL's alignment padding). Rows must have equal lengths. */
export function sequenceKl(gen: RaggedTensor, ref: RaggedTensor, what: string): number[] {
  if (gen.rows !== ref.rows) throw new EnvStateError(`${what}: ${gen.rows} rows of log-probs but ${ref.rows} reference rows`);
  const out: number[] = [];
  for (let r = 0; r < gen.rows; r++) {
    const a = gen.row(r).toFloat32Array();
    const b = ref.row(r).toFloat32Array();
    if (a.length !== b.length) {
      throw new EnvStateError(`${what}: row ${r} has ${a.length} log-probs but ${b.length} reference log-probs (score the same tokens with both models)`);
    }
    let sum = 0;
    for (let t = 0; t < a.length; t++) {
      const d = a[t]! - b[t]!;
      if (!Number.isNaN(d)) sum += d;
    }
    out.push(sum);
  }
  return out;
}

/** Writes `kl` at `klKey` and subtracts `coeff × kl` from the reward of `next` (0 when absent), in place. */
function applyKl(next: TensorDict, kl: readonly number[], klKey: NestedKey, coeff: number, addToReward: boolean): TensorDict {
  next.set(klKey, rewardColumn(next.batchSize, kl));
  if (addToReward) {
    const reward = readColumn(next, REWARD_KEY) ?? new Array<number>(kl.length).fill(0);
    next.set(REWARD_KEY, rewardColumn(next.batchSize, reward.map((v, i) => v - coeff * kl[i]!)));
  }
  return next;
}

/** Options of {@link KLComputation}. */
export const KLComputationOptionsSchema = z.strictObject({
  /** The policy's log-probs in `next` (default `("log_probs", "full")`). */
  genLogProbsFullKey: KeySchema.default([...LOG_PROBS_FULL_KEY]),
  /** The reference log-probs in `next` (default `("ref_log_probs", "full")`). */
  refLogProbsFullKey: KeySchema.default([...REF_LOG_PROBS_FULL_KEY]),
  /** Where the per-sample KL goes in `next` (default `"kl_penalty"`), `[...batch, 1]` float32. */
  klKey: KeySchema.default(KL_PENALTY_KEY),
  /** Subtract `coeff × KL` from the reward (default true). */
  addToReward: z.boolean().default(true),
  /** The KL coefficient (default 1). */
  coeff: Coefficient.default(1),
});

/** Options of {@link KLComputation}. */
export type KLComputationOptions = z.input<typeof KLComputationOptionsSchema>;

/** KL between two log-prob entries of `next`, summed per sample, optionally subtracted from the reward. */
export class KLComputation extends Transform {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof KLComputationOptionsSchema>>;

  constructor(options: KLComputationOptions = {}) {
    super();
    this.config = parseOptions(KLComputationOptionsSchema, options, "KLComputation options");
  }

  override step(td: TensorDict, next: TensorDict, options: EnvCallOptions): TensorDict {
    throwIfAborted(options.signal, "KLComputation.step");
    const { genLogProbsFullKey, refLogProbsFullKey, klKey, coeff, addToReward } = this.config;
    for (const key of [genLogProbsFullKey, refLogProbsFullKey]) {
      if (!next.has(key)) throw new EnvStateError(`KLComputation: next has no ${JSON.stringify(key)} (put RetrieveLogProb transforms before it)`);
    }
    const kl = sequenceKl(next.getRagged(genLogProbsFullKey), next.getRagged(refLogProbsFullKey), "KLComputation");
    return applyKl(next, kl, klKey, coeff, addToReward);
  }
}

/** Options of {@link RetrieveKL}. */
export const RetrieveKLOptionsSchema = z.strictObject({
  /** The worker holding the policy (and, without `refWorker`, the reference model). */
  worker: z.instanceof(WorkerClient),
  /** The worker holding the reference model (default: `worker`). */
  refWorker: z.instanceof(WorkerClient).optional(),
  /** The policy's model name (default `"policy"`). */
  genModel: z.string().min(1).default("policy"),
  /** The reference model's name (default `"ref"`). */
  refModel: z.string().min(1).default("ref"),
  /** Which sequence both models score (default `"history"`; see `RetrieveLogProb`). */
  inputMode: z.enum(["history", "text", "tokens"]).default("history"),
  /** Only the assistant's tokens count (default true). */
  assistantOnly: z.boolean().default(true),
  /** Default `("log_probs", "full")`. */
  genLogProbsFullKey: KeySchema.default([...LOG_PROBS_FULL_KEY]),
  /** Default `("ref_log_probs", "full")`. */
  refLogProbsFullKey: KeySchema.default([...REF_LOG_PROBS_FULL_KEY]),
  /** Default `"kl_penalty"`. */
  klKey: KeySchema.default(KL_PENALTY_KEY),
  /** Subtract `coeff × KL` from the reward (default true). */
  addToReward: z.boolean().default(true),
  /** The KL coefficient (default 1). */
  coeff: Coefficient.default(1),
  /** Rows per forward pass in the workers (default all). */
  microBatchSize: z.number().int().min(1).optional(),
});

/** Options of {@link RetrieveKL}. */
export type RetrieveKLOptions = z.input<typeof RetrieveKLOptionsSchema>;

/**
 * TorchRL's `RetrieveKL`: scores each conversation under the policy and the reference model (two
 * {@link RetrieveLogProb}s, so both see the same tokens) and applies {@link KLComputation}.
 */
export class RetrieveKL extends Compose {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof RetrieveKLOptionsSchema>>;

  constructor(options: RetrieveKLOptions) {
    const c = parseOptions(RetrieveKLOptionsSchema, options, "RetrieveKL options");
    const common = { inputMode: c.inputMode, assistantOnly: c.assistantOnly, ...(c.microBatchSize === undefined ? {} : { microBatchSize: c.microBatchSize }) };
    super(
      new RetrieveLogProb({ worker: c.worker, model: c.genModel, logProbsFullKey: c.genLogProbsFullKey, ...common }),
      new RetrieveLogProb({ worker: c.refWorker ?? c.worker, model: c.refModel, logProbsFullKey: c.refLogProbsFullKey, ...common }),
      new KLComputation({ genLogProbsFullKey: c.genLogProbsFullKey, refLogProbsFullKey: c.refLogProbsFullKey, klKey: c.klKey, addToReward: c.addToReward, coeff: c.coeff }),
    );
    this.config = c;
  }
}

/** Options of {@link KLRewardTransform}. */
export const KLRewardTransformOptionsSchema = z.strictObject({
  /** The worker holding the reference model. */
  worker: z.instanceof(WorkerClient),
  /** The reference model's name (default `"ref"`). */
  model: z.string().min(1).default("ref"),
  /** The KL coefficient (default 1). */
  coef: Coefficient.default(1),
  /** The policy's log-probs over the generated tokens (default `("log_probs", "full")`). */
  logProbKey: KeySchema.default([...LOG_PROBS_FULL_KEY]),
  /** The generated tokens the reference model scores (default `("tokens", "full")`). */
  tokensKey: KeySchema.default([...TOKENS_FULL_KEY]),
  /**
   * Only the response tokens count (default true): the generation's `("masks", "all_assistant_mask")`, or the
   * positions after `("tokens", "prompt")` when there is no mask.
   */
  assistantOnly: z.boolean().default(true),
  /** Subtract `coef × KL` from the reward (default true). */
  addToReward: z.boolean().default(true),
  /** Where the per-sample KL goes in `next` (default `"kl_penalty"`). */
  klKey: KeySchema.default(KL_PENALTY_KEY),
  /** Where the reference log-probs go in `next` (default `("ref_log_probs", "full")`). */
  refLogProbsKey: KeySchema.default([...REF_LOG_PROBS_FULL_KEY]),
  /** Rows per forward pass in the worker (default all). */
  microBatchSize: z.number().int().min(1).optional(),
});

/** Options of {@link KLRewardTransform}. */
export type KLRewardTransformOptions = z.input<typeof KLRewardTransformOptionsSchema>;

/**
 * TorchRL's `KLRewardTransform`: scores the generated `("tokens", "full")` under the reference model with
 * `WorkerClient.score`, and sets `reward ← reward − coef · Σ_t (logp − logp_ref)` over the response tokens, using
 * the log-probs the policy reported while generating. Writes `kl_penalty` and `("ref_log_probs", "full")` too.
 */
export class KLRewardTransform extends Transform {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof KLRewardTransformOptionsSchema>>;

  constructor(options: KLRewardTransformOptions) {
    super();
    this.config = parseOptions(KLRewardTransformOptionsSchema, options, "KLRewardTransform options");
  }

  #responseMask(flat: TensorDict, tokens: RaggedTensor): RaggedTensor {
    if (flat.has(ASSISTANT_MASK_KEY)) return flat.getRagged(ASSISTANT_MASK_KEY);
    if (!flat.has(TOKENS_PROMPT_KEY)) {
      throw new EnvStateError(`KLRewardTransform: assistantOnly needs ("masks", "all_assistant_mask") or ("tokens", "prompt") from the policy`);
    }
    const promptLengths = flat.getRagged(TOKENS_PROMPT_KEY).lengths();
    const lengths = tokens.lengths();
    const rows = Array.from(lengths, (n, r) => Uint8Array.from({ length: n }, (_, t) => (t >= promptLengths[r]! ? 1 : 0)));
    const offsets = new Int32Array(rows.length + 1);
    rows.forEach((row, r) => (offsets[r + 1] = offsets[r]! + row.length));
    const values = new Uint8Array(offsets[rows.length]!);
    rows.forEach((row, r) => {
      values.set(row, offsets[r]);
    });
    return new RaggedTensor("bool", values, offsets);
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    throwIfAborted(options.signal, "KLRewardTransform.step");
    const { worker, model, coef, logProbKey, tokensKey, assistantOnly, addToReward, klKey, refLogProbsKey, microBatchSize } = this.config;
    for (const key of [tokensKey, logProbKey]) {
      if (!td.has(key)) throw new EnvStateError(`KLRewardTransform: the data has no ${JSON.stringify(key)} (the policy must generate with log-probs)`);
    }
    const flat = td.reshape([td.numel()]);
    const tokens = flat.getRagged(tokensKey);
    const request = new TensorDict({ tokens: { full: tokens } }, { batchSize: [tokens.rows] });
    const scored = await worker.score(
      model,
      request,
      microBatchSize === undefined ? {} : { microBatchSize },
      options.signal === undefined ? {} : { signal: options.signal },
    );
    let ref = scored.getRagged(LOG_PROBS_FULL_KEY);
    let gen = flat.getRagged(logProbKey);
    if (assistantOnly) {
      const mask = this.#responseMask(flat, tokens);
      ref = maskLogProbs(ref, mask, "KLRewardTransform (reference)");
      gen = maskLogProbs(gen, mask, "KLRewardTransform (policy)");
    }
    const kl = sequenceKl(gen, ref, "KLRewardTransform");
    next.set(refLogProbsKey, ref);
    return applyKl(next, kl, klKey, coef, addToReward);
  }
}
