/**
 * `DigitSortEnv`: the built-in demo task. The user asks `"sort 4 digits: 3817"`; the answer is the digits in
 * ascending order (`"1378"`). The reward is the fraction of positions that are right when the response has the
 * answer's length, else 0, so it needs content: repeating one character scores little. Prompts are procedural and
 * seeded; a hash of the digit string splits them into a training and a held-out split that never meet.
 */
import { z } from "zod";
import { parseOptions } from "../../core/validation.js";
import { ChatEnv, ChatEnvOptionsSchema } from "../chat-env.js";
import { GeneratorPrimer, GeneratorPrimerOptionsSchema } from "../data/primer-base.js";
import { RewardTransform } from "../rewards.js";
import { TransformedEnv } from "../transform.js";
import { SeededRandom } from "./random.js";
import { DEFAULT_EOS_TOKENS, stripEos } from "./tags.js";

/** Which prompts a stream draws: the training split or the held-out (evaluation) split. */
export type DigitSortSplit = "train" | "eval";

/** Options of the digit-sort prompt stream. */
export const DigitSortOptionsSchema = z
  .strictObject({
    /** Digits per prompt, 2..9 (default 4). */
    numDigits: z.number().int().min(2).max(9).default(4),
    /** Share of all digit strings held out for evaluation, in (0, 1) (default 0.2). */
    heldOutFraction: z.number().gt(0).lt(1).default(0.2),
    /** `"train"` (default) or `"eval"` (the held-out prompts). */
    split: z.enum(["train", "eval"]).default("train"),
    /** Seed of the stream; the same seed gives the same prompts (default 0). */
    seed: z.number().int().default(0),
    ...GeneratorPrimerOptionsSchema.shape,
  });

/** Options of {@link DigitSortPrimer} (and the stream of {@link DigitSortEnv}). */
export type DigitSortOptions = z.input<typeof DigitSortOptionsSchema>;

/** One digit-sort problem. */
export interface DigitSortProblem {
  /** The digits as shown, e.g. `"3817"`. */
  readonly digits: string;
  /** The user message, e.g. `"sort 4 digits: 3817"`. */
  readonly query: string;
  /** The digits in ascending order, e.g. `"1378"`. */
  readonly answer: string;
}

/** 32-bit FNV-1a of a string: the split hash (stable across platforms). */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** The split a digit string belongs to, given the held-out share: a hash decides, so the splits never meet. */
export function digitSortSplitOf(digits: string, heldOutFraction = 0.2): DigitSortSplit {
  return fnv1a(digits) / 4294967296 < heldOutFraction ? "eval" : "train";
}

/** The problem for a digit string (`"3817"` → query `"sort 4 digits: 3817"`, answer `"1378"`). */
export function digitSortProblem(digits: string): DigitSortProblem {
  const answer = Array.from({ length: digits.length }, (_, i) => digits.charAt(i)).sort().join("");
  return { digits, query: `sort ${digits.length} digits: ${digits}`, answer };
}

/**
 * The digit-sort reward of a response: the fraction of positions equal to `answer` when the response (trimmed,
 * end-of-sequence markers stripped) has the answer's length, else 0.
 */
export function digitSortReward(response: string, answer: string, eosTokens: readonly string[] = DEFAULT_EOS_TOKENS): number {
  const text = stripEos(response, eosTokens).trim();
  if (text.length !== answer.length || answer.length === 0) return 0;
  let right = 0;
  for (let i = 0; i < answer.length; i++) if (text[i] === answer[i]) right++;
  return right / answer.length;
}

/** An endless, seeded stream of digit-sort problems of one split. */
export class DigitSortGenerator {
  readonly #numDigits: number;
  readonly #heldOut: number;
  readonly #split: DigitSortSplit;
  readonly #random: SeededRandom;

  constructor(options: { numDigits: number; heldOutFraction: number; split: DigitSortSplit; seed: number }) {
    this.#numDigits = options.numDigits;
    this.#heldOut = options.heldOutFraction;
    this.#split = options.split;
    this.#random = new SeededRandom(options.seed);
  }

  /** The next problem of the split. */
  problem(): DigitSortProblem {
    for (;;) {
      let digits = "";
      for (let i = 0; i < this.#numDigits; i++) digits += String(this.#random.int(0, 9));
      if (digitSortSplitOf(digits, this.#heldOut) === this.#split) return digitSortProblem(digits);
    }
  }
}

/** How many distinct digit strings a split holds (`10^numDigits` strings, partitioned by the hash). */
export function digitSortSplitSize(numDigits: number, heldOutFraction: number, split: DigitSortSplit): number {
  let count = 0;
  const total = 10 ** numDigits;
  for (let i = 0; i < total; i++) {
    if (digitSortSplitOf(String(i).padStart(numDigits, "0"), heldOutFraction) === split) count++;
  }
  return count;
}

/**
 * Feeds seeded digit-sort problems into a chat env at reset (`"query"`, `"answer"`), each `repeats` times in a row,
 * like `CountdownPrimer`; `position` resumes the stream.
 */
export class DigitSortPrimer extends GeneratorPrimer<DigitSortProblem> {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof DigitSortOptionsSchema>>;

  constructor(options: DigitSortOptions = {}) {
    const config = parseOptions(DigitSortOptionsSchema, options, "DigitSortPrimer options");
    super(() => new DigitSortGenerator(config), config);
    this.config = config;
  }
}

/** Options of {@link DigitSortEnv}: `ChatEnv`'s and the prompt stream's. */
export const DigitSortEnvOptionsSchema = ChatEnvOptionsSchema.extend({
  ...DigitSortOptionsSchema.shape,
  /** End-of-sequence markers stripped from responses before scoring. Default `<|im_end|>`, `<|endoftext|>`. */
  eosTokens: z.array(z.string()).optional(),
});

/** Options of {@link DigitSortEnv}. */
export type DigitSortEnvOptions = z.input<typeof DigitSortEnvOptionsSchema>;

/** The reward names of {@link DigitSortEnv}: `sorted` (partial credit, weight 1) and `exact` (whole answer, weight 0). */
export const DIGIT_SORT_REWARDS = ["sorted", "exact"] as const;

/**
 * Digit sorting as a single-turn chat environment: reset asks each row for the next seeded problem of its split;
 * step writes `("next", "reward")` = {@link digitSortReward} and `("next", "reward_components", "sorted" | "exact")`
 * (`exact` has weight 0: it is reported, not rewarded), and ends every row.
 *
 * ```ts
 * const env = new DigitSortEnv({ numDigits: 4, seed: 0, repeats: 8, batchSize: [64] });
 * const heldOut = new DigitSortEnv({ split: "eval", batchSize: [64] });
 * ```
 */
export class DigitSortEnv extends TransformedEnv {
  /** The prompt source (its `position` resumes the stream). */
  readonly primer: DigitSortPrimer;
  /** The chat env underneath. */
  readonly chatEnv: ChatEnv;

  constructor(options: DigitSortEnvOptions = {}) {
    const o = parseOptions(DigitSortEnvOptionsSchema, options, "DigitSortEnv options");
    const { numDigits, heldOutFraction, split, seed, repeats, position, eosTokens, ...chat } = o;
    const primer = new DigitSortPrimer({ numDigits, heldOutFraction, split, seed, repeats, position });
    const eos = eosTokens ?? DEFAULT_EOS_TOKENS;
    const answerOf = (fields: Readonly<Record<string, unknown>>): string => (typeof fields.answer === "string" ? fields.answer : "");
    const reward = new RewardTransform({
      rewards: [
        { name: "sorted", fn: (s) => digitSortReward(s.response, answerOf(s.fields), eos) },
        { name: "exact", fn: (s) => (digitSortReward(s.response, answerOf(s.fields), eos) === 1 ? 1 : 0), weight: 0 },
      ],
      fieldKeys: ["answer"],
      done: true,
    });
    const chatEnv = new ChatEnv(chat);
    super(chatEnv, [primer, reward]);
    this.primer = primer;
    this.chatEnv = chatEnv;
  }

  /**
   * `count` supervised examples of this env's split and seed for an SFT warm-up: the user message and the correct
   * answer. They come from a fresh stream (the env's own stream does not move).
   */
  sftExamples(count: number, seed = this.primer.config.seed): DigitSortProblem[] {
    const { numDigits, heldOutFraction, split } = this.primer.config;
    return digitSortExamples({ count, numDigits, heldOutFraction, split, seed });
  }
}

/** Options of {@link digitSortExamples}. */
export const DigitSortExamplesOptionsSchema = DigitSortOptionsSchema.pick({ numDigits: true, heldOutFraction: true, split: true, seed: true }).extend({
  /** How many examples. */
  count: z.number().int().min(1),
});

/** `count` seeded digit-sort problems of one split (prompt + correct answer), for SFT. */
export function digitSortExamples(options: z.input<typeof DigitSortExamplesOptionsSchema>): DigitSortProblem[] {
  const o = parseOptions(DigitSortExamplesOptionsSchema, options, "digitSortExamples options");
  const generator = new DigitSortGenerator(o);
  return Array.from({ length: o.count }, () => generator.problem());
}
