/**
 * Rewards as plain TypeScript functions: `RewardFn` scores one sample (sync or async) from its conversation, its
 * response and its dataset fields; `RewardTransform` runs several of them with weights over a batch, concurrently
 * with a bound, and writes `("next", "reward")` and one `("next", "reward_components", name)` per reward.
 */
import { z } from "zod";
import { History, HistoryBatch } from "../data/index.js";
import { Tensor, TensorDict, type NestedKey } from "../tensordict/index.js";
import { parseOptions } from "../core/index.js";
import { ChatEnv } from "./chat-env.js";
import { mapBounded } from "./concurrency.js";
import { DataLoadingPrimer } from "./data/primer.js";
import { throwIfAborted, type EnvCallOptions } from "./env-base.js";
import { EnvStateError, RewardError } from "./errors.js";
import { HISTORY_FULL_KEY, HISTORY_PROMPT_KEY, REWARD_COMPONENTS_KEY, REWARD_KEY, TEXT_FULL_KEY, TEXT_RESPONSE_KEY } from "./keys.js";
import { markDone, readColumn, rewardColumn } from "./rows.js";
import { Transform } from "./transform.js";

/** A dataset field of one sample: a string, a number, a boolean or a conversation. */
export type FieldValue = string | number | boolean | History;

/** What a reward function sees of one sample. */
export interface RewardSample {
  /** The sample's row in the batch (row-major over the batch size). */
  readonly index: number;
  /** The sample's id (the `idKey` field), when the data has one. */
  readonly id: string | undefined;
  /** The conversation, the policy's response included (and tool messages added by earlier transforms). */
  readonly history: History;
  /** The text of the policy's last message (history mode), or `("text", "response")` as generated. */
  readonly response: string;
  /** The dataset fields of the sample, by key (e.g. `fields.answer`). */
  readonly fields: Readonly<Record<string, FieldValue>>;
}

/** A reward function: a score for one sample, sync or async. Throwing (or a non-finite result) is an error. */
export type RewardFn = (sample: RewardSample) => number | Promise<number>;

/** One reward: a name (for errors and metrics), a function and a weight. */
export const RewardSpecSchema = z.strictObject({
  /** The reward's name: its component key and how errors name it. */
  name: z.string().min(1),
  /** The function. */
  fn: z.custom<RewardFn>((v) => typeof v === "function", { message: "expected a function (sample) => number | Promise<number>" }),
  /** The weight of this reward in the sum (default 1). */
  weight: z.number().refine(Number.isFinite, { message: "expected a finite number" }).default(1),
});

/** One reward: `{ name, fn, weight }`. */
export type RewardSpec = z.input<typeof RewardSpecSchema>;

/** Options of {@link RewardTransform}. */
export const RewardTransformOptionsSchema = z.strictObject({
  /** The rewards; the step's reward is Σ weight × value (added to a reward already in `next`). */
  rewards: z
    .array(RewardSpecSchema)
    .min(1)
    .refine((rs) => new Set(rs.map((r) => r.name)).size === rs.length, { message: "reward names must be unique" }),
  /** The most reward calls in flight at once (default 8). */
  concurrency: z.number().int().min(1).default(8),
  /** When a reward throws: `{ default: v }` uses `v` for that sample; without it, the step fails with RewardError. */
  onError: z.strictObject({ default: z.number().refine(Number.isFinite, { message: "expected a finite number" }) }).optional(),
  /** Mark every row `terminated` once rewarded (single-turn tasks; default false). */
  done: z.boolean().default(false),
  /** The field that identifies a sample in error messages (default `"id"`, when present). */
  idKey: z.string().min(1).default("id"),
  /** The fields given to the rewards (default: the keys of the env's DataLoadingPrimer, else every string leaf). */
  fieldKeys: z.array(z.string().min(1)).optional(),
});

/** Options of {@link RewardTransform}. */
export type RewardTransformOptions = z.input<typeof RewardTransformOptionsSchema>;
type Resolved = z.output<typeof RewardTransformOptionsSchema>;

const EOS = /(<\|im_end\|>|<\|endoftext\|>)$/;

/**
 * Scores each step with reward functions (TorchRL's reward transforms, with TRL's several weighted functions).
 * Writes `("next", "reward_components", name)` (`[...batch, 1]` float32, unweighted) for each reward and adds
 * Σ weight × value to `("next", "reward")` (created at 0 when absent).
 *
 * ```ts
 * const rewards = new RewardTransform({
 *   rewards: [
 *     { name: "correct", fn: (s) => (s.response.includes(String(s.fields.answer)) ? 1 : 0) },
 *     { name: "short", fn: async (s) => (s.response.length < 200 ? 1 : 0), weight: 0.1 },
 *   ],
 *   concurrency: 8,
 *   done: true,
 * });
 * ```
 */
export class RewardTransform extends Transform {
  /** The resolved options. */
  readonly config: Readonly<Resolved>;

  constructor(options: RewardTransformOptions) {
    super();
    this.config = parseOptions(RewardTransformOptionsSchema, options, "RewardTransform options");
  }

  override get rewardKeys(): readonly NestedKey[] {
    return [REWARD_COMPONENTS_KEY];
  }

  /** The chat env underneath, if any. */
  #chatEnv(): ChatEnv | undefined {
    const base = this.parent?.baseEnv;
    return base instanceof ChatEnv ? base : undefined;
  }

  #fieldKeys(td: TensorDict): string[] {
    if (this.config.fieldKeys !== undefined) return this.config.fieldKeys;
    const primer = this.parent?.transform.find(DataLoadingPrimer);
    if (primer !== undefined) {
      try {
        return [...primer.fieldKinds.keys()];
      } catch {
        // Not loaded (reset was not called through this env): fall back to the string leaves.
      }
    }
    return td.keys().filter((k): k is string => typeof k === "string" && Array.isArray(td.get(k)));
  }

  /** The dataset fields of each row. */
  #fields(td: TensorDict): Record<string, FieldValue>[] {
    const rows = td.numel();
    const out = Array.from({ length: rows }, (): Record<string, FieldValue> => ({}));
    for (const key of this.#fieldKeys(td)) {
      const value = td.get(key, undefined);
      if (value === undefined || value instanceof TensorDict) continue;
      if (value instanceof HistoryBatch) value.rows.forEach((h, r) => (out[r]![key] = h));
      else if (value instanceof Tensor) {
        if (value.numel() !== rows) continue;
        const nums = value.toNumbers();
        nums.forEach((v, r) => (out[r]![key] = value.dtype === "bool" ? v !== 0 : v));
      } else if (Array.isArray(value)) (value as readonly string[]).forEach((s, r) => (out[r]![key] = s));
    }
    return out;
  }

  /** The conversation and response of each row. */
  #conversations(td: TensorDict, next: TensorDict): { history: History; response: string }[] {
    const env = this.#chatEnv();
    const policyRole = env?.config.policyRole ?? "assistant";
    const historyKey = next.has(HISTORY_PROMPT_KEY) ? next : td.has(HISTORY_FULL_KEY) ? td : undefined;
    if (historyKey !== undefined) {
      const histories = historyKey === next ? next.getHistory(HISTORY_PROMPT_KEY) : td.getHistory(HISTORY_FULL_KEY);
      return histories.rows.map((history) => {
        const last = [...history.messages].reverse().find((m) => m.role === policyRole);
        return { history, response: last?.content ?? "" };
      });
    }
    const responses = td.has(TEXT_RESPONSE_KEY) ? td.getStrings(TEXT_RESPONSE_KEY) : undefined;
    if (responses === undefined) {
      throw new EnvStateError('RewardTransform: nothing to score: the data has neither ("history", "full") nor ("text", "response"); run the policy before step');
    }
    const fulls = td.has(TEXT_FULL_KEY) ? td.getStrings(TEXT_FULL_KEY) : undefined;
    return responses.map((response, r) => {
      let history: History | undefined;
      if (fulls !== undefined) {
        try {
          history = History.fromText(fulls[r]!, env === undefined ? {} : { chatTemplate: env.config.chatTemplate });
        } catch {
          history = undefined;
        }
      }
      history ??= History.from([{ role: policyRole, content: response.replace(EOS, "") }]);
      return { history, response };
    });
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    throwIfAborted(options.signal, "RewardTransform.step");
    const { rewards, concurrency, onError, idKey } = this.config;
    const conversations = this.#conversations(td, next);
    const fields = this.#fields(td);
    const ids = td.has(idKey) && Array.isArray(td.get(idKey)) ? td.getStrings(idKey) : undefined;
    const samples: RewardSample[] = conversations.map(({ history, response }, index) =>
      Object.freeze({ index, id: ids?.[index], history, response, fields: Object.freeze(fields[index]!) }),
    );
    const jobs = samples.flatMap((sample) => rewards.map((spec, k) => ({ sample, spec, k })));
    const values = await mapBounded(
      jobs,
      concurrency,
      async ({ sample, spec }) => {
        let value: number;
        try {
          value = await spec.fn(sample);
          if (typeof value !== "number" || !Number.isFinite(value)) {
            throw new TypeError(`returned ${typeof value === "number" ? String(value) : typeof value}, expected a finite number`);
          }
        } catch (err) {
          if (onError !== undefined) return onError.default;
          const reason = err instanceof Error ? err.message : String(err);
          throw new RewardError(spec.name, sample.index, sample.id, reason, { cause: err });
        }
        return value;
      },
      options.signal,
    );
    const rows = samples.length;
    const total = readColumn(next, REWARD_KEY) ?? new Array<number>(rows).fill(0);
    rewards.forEach((spec, k) => {
      const column = Array.from({ length: rows }, (_, r) => values[r * rewards.length + k]!);
      next.set([REWARD_COMPONENTS_KEY, spec.name], rewardColumn(next.batchSize, column));
      column.forEach((v, r) => (total[r] = total[r]! + spec.weight * v));
    });
    next.set(REWARD_KEY, rewardColumn(next.batchSize, total));
    if (this.config.done) markDone(next, new Array<boolean>(rows).fill(true));
    return next;
  }
}
