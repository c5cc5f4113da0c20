/**
 * `ArithmeticToolEnv`: a multi-turn tool task small enough for the tiny model. The user asks `"37*48"`; the policy
 * may use the calculator (`=` evaluates the question; TorchRL's `<tool>calc\n{"expression": "12*7"}</tool>` an
 * expression of its own), reads the result in a `tool` message, and answers with the number.
 * The reward is the correctness of the final answer (partial credit for a wrong number), given when the episode
 * ends: on an answer, or at the required turn limit `maxTurns`. Problems are procedural and seeded.
 */
import { z } from "zod";
import { InvalidArgumentError } from "../../core/errors.js";
import { parseOptions } from "../../core/validation.js";
import type { ChatMessage, History } from "../../data/index.js";
import { Tensor, type NestedKey, type TensorDict } from "../../tensordict/index.js";
import { ChatEnv, ChatEnvOptionsSchema } from "../chat-env.js";
import { GeneratorPrimer, GeneratorPrimerOptionsSchema } from "../data/primer-base.js";
import { throwIfAborted, type EnvCallOptions } from "../env-base.js";
import { DONE_KEY, HISTORY_PROMPT_KEY, REWARD_KEY, TERMINATED_KEY } from "../keys.js";
import { readColumn, readFlags, rewardColumn } from "../rows.js";
import { parseToolCalls, type ToolCallMatch } from "../tools/parse.js";
import { SimpleToolTransform } from "../tools/simple-tool-transform.js";
import { ToolEpisodeEnd } from "../tools/tool-episode-end.js";
import { Transform, TransformedEnv } from "../transform.js";
import { evaluateArithmetic } from "./arithmetic.js";
import { SeededRandom } from "./random.js";
import { DEFAULT_EOS_TOKENS, extractTags, stripEos } from "./tags.js";

/** The operations a problem may use. */
export type ArithmeticToolOperation = "+" | "-" | "*";

/** Options of the arithmetic problem stream. */
export const ArithmeticToolOptionsSchema = z.strictObject({
  /** The operations drawn from, uniformly (default `["+", "*"]`). `-` keeps the result non-negative. */
  operations: z.array(z.enum(["+", "-", "*"])).min(1).default(["+", "*"]),
  /** The smallest operand (default 2). */
  minOperand: z.number().int().min(0).default(2),
  /** The largest operand (default 99); at least `minOperand`. */
  maxOperand: z.number().int().min(0).max(1_000_000).default(99),
  /** Seed of the stream; the same seed gives the same problems (default 0). */
  seed: z.number().int().default(0),
  ...GeneratorPrimerOptionsSchema.shape,
});

/** Options of {@link ArithmeticToolPrimer} (and the stream of {@link ArithmeticToolEnv}). */
export type ArithmeticToolOptions = z.input<typeof ArithmeticToolOptionsSchema>;

/** One problem: the question is the expression itself. */
export interface ArithmeticToolProblem {
  /** The user message, e.g. `"37*48"` (also what `=` alone evaluates). */
  readonly query: string;
  /** The value, e.g. `"1776"`. */
  readonly answer: string;
}

function checkOperands(o: { minOperand: number; maxOperand: number }, where: string): void {
  if (o.maxOperand < o.minOperand) {
    throw new InvalidArgumentError(`${where}.maxOperand: must be at least minOperand (${o.minOperand}), got ${o.maxOperand}`);
  }
}

/** An endless, seeded stream of arithmetic problems `a op b`. */
export class ArithmeticToolGenerator {
  readonly #o: z.output<typeof ArithmeticToolOptionsSchema>;
  readonly #random: SeededRandom;

  constructor(options: ArithmeticToolOptions = {}) {
    this.#o = parseOptions(ArithmeticToolOptionsSchema, options, "ArithmeticToolGenerator options");
    checkOperands(this.#o, "ArithmeticToolGenerator options");
    this.#random = new SeededRandom(this.#o.seed);
  }

  /** The next problem. */
  problem(): ArithmeticToolProblem {
    const { minOperand, maxOperand, operations } = this.#o;
    const op = this.#random.pick(operations);
    let a = this.#random.int(minOperand, maxOperand);
    let b = this.#random.int(minOperand, maxOperand);
    if (op === "-" && b > a) [a, b] = [b, a];
    const value = op === "+" ? a + b : op === "-" ? a - b : a * b;
    return { query: `${a}${op}${b}`, answer: String(value) };
  }
}

/** Feeds seeded arithmetic problems into a chat env at reset (`"query"`, `"answer"`), each `repeats` times in a row. */
export class ArithmeticToolPrimer extends GeneratorPrimer<ArithmeticToolProblem> {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof ArithmeticToolOptionsSchema>>;

  constructor(options: ArithmeticToolOptions = {}) {
    const config = parseOptions(ArithmeticToolOptionsSchema, options, "ArithmeticToolPrimer options");
    checkOperands(config, "ArithmeticToolPrimer options");
    super(() => new ArithmeticToolGenerator(config), config);
    this.config = config;
  }
}

/** The calculator's tool name. */
export const ARITHMETIC_TOOL_NAME = "calc";

/**
 * The calculator calls of a message: TorchRL's named calls when it has any (`<tool>calc\n{"expression": "3*4"}</tool>`,
 * `<tool_call>…`, for an expression of the policy's own), else the short form — a message holding `=` presses the
 * calculator's `=` key once, which evaluates the question (as a calculator's `=` evaluates what its display shows).
 * A message without either holds no call.
 */
export function parseCalculatorCalls(message: ChatMessage | string): ToolCallMatch[] {
  const named = parseToolCalls(message);
  if (named.length > 0) return named;
  const text = typeof message === "string" ? message : message.content;
  return text.includes("=") ? [{ ok: true, name: ARITHMETIC_TOOL_NAME, arguments: {}, format: "custom" }] : [];
}

/** The first user message of a conversation (the question), or `undefined`. */
function questionOf(history: History | undefined): string | undefined {
  return history?.messages.find((m) => m.role === "user")?.content;
}

/**
 * What the calculator answers: the exact value of `expression` (`"1776"`, or a fraction `"7/2"`), or of the
 * question when `expression` is empty. Throws (the model reads `Tool calc failed:\n...`) for an expression that
 * does not evaluate.
 */
export function runCalculator(expression: string, question?: string): string {
  const text = expression.trim() === "" ? (question ?? "") : expression;
  if (text.trim() === "") throw new Error("nothing to evaluate: no expression and no question");
  const result = evaluateArithmetic(text);
  if (!result.ok) throw new Error(result.message);
  const { num, den } = result.value;
  return den === 1n ? num.toString() : `${num.toString()}/${den.toString()}`;
}

/**
 * The final answer of a message: the content of its `<answer>…</answer>` block; else, when the message holds no
 * calculator call, its leading integer (`"42"`, `"42 apples"`); else `null`. End-of-sequence markers are stripped
 * first.
 */
export function arithmeticToolAnswer(text: string, eosTokens: readonly string[] = DEFAULT_EOS_TOKENS): string | null {
  const response = stripEos(text, eosTokens);
  if (/<answer>[\s\S]*?<\/answer>/.test(response)) return extractTags(response).answer;
  if (parseCalculatorCalls(response).length > 0) return null;
  return /^\s*(-?\d+)/.exec(response)?.[1] ?? null;
}

/** The reward levels of {@link ArithmeticToolEnv}'s final answer. */
export interface ArithmeticToolRewardLevels {
  /** Reward of a right answer. */
  readonly correctReward: number;
  /** Reward of a wrong answer that is a number. */
  readonly formatReward: number;
}

/**
 * The reward of a final message: `correctReward` when its answer ({@link arithmeticToolAnswer}) equals `answer` as an
 * integer, `formatReward` for another integer, 0 otherwise.
 */
export function arithmeticToolReward(
  response: string,
  answer: string,
  levels: ArithmeticToolRewardLevels,
  eosTokens: readonly string[] = DEFAULT_EOS_TOKENS,
): { reward: number; success: boolean } {
  const given = arithmeticToolAnswer(response, eosTokens);
  const number = given !== null && /^-?\d+$/.test(given);
  const success = number && BigInt(given) === BigInt(answer);
  return { reward: success ? levels.correctReward : number ? levels.formatReward : 0, success };
}

const TOOL_OK = `Tool ${ARITHMETIC_TOOL_NAME} executed successfully:`;

/** Scores the rows whose episode ended at this step (see {@link ArithmeticToolEnv}). */
class ArithmeticToolRewardTransform extends Transform {
  constructor(
    private readonly levels: ArithmeticToolRewardLevels & { readonly toolReward: number },
    private readonly eosTokens: readonly string[],
    private readonly toolRole: string,
  ) {
    super();
  }

  override get rewardKeys(): readonly NestedKey[] {
    return ["success", "used_tool"];
  }

  override step(td: TensorDict, next: TensorDict, options: EnvCallOptions): TensorDict {
    throwIfAborted(options.signal, "ArithmeticToolEnv reward");
    const base = this.parent?.baseEnv;
    const policyRole = base instanceof ChatEnv ? base.config.policyRole : "assistant";
    const done = readFlags(next, DONE_KEY);
    const terminated = readFlags(next, TERMINATED_KEY);
    const answers = td.getStrings("answer");
    const rows = next.getHistory(HISTORY_PROMPT_KEY).rows.map((history, i) => {
      const messages = history.messages;
      const usedTool = messages.some((m) => m.role === this.toolRole && m.content.startsWith(TOOL_OK));
      if (done[i] !== true) return { reward: 0, success: false, usedTool };
      const last = [...messages].reverse().find((m) => m.role === policyRole)?.content ?? "";
      const { reward, success } = arithmeticToolReward(last, answers[i]!, this.levels, this.eosTokens);
      // The calculator bonus needs an episode that ended on an answer, not at the turn limit.
      const bonus = usedTool && terminated[i] === true ? this.levels.toolReward : 0;
      return { reward: reward + bonus, success, usedTool };
    });
    const batch = next.batchSize;
    const total = readColumn(next, REWARD_KEY) ?? new Array<number>(rows.length).fill(0);
    next.set(REWARD_KEY, rewardColumn(batch, rows.map((r, i) => total[i]! + r.reward)));
    next.set("success", new Tensor("bool", [...batch, 1], Uint8Array.from(rows, (r) => (r.success ? 1 : 0))));
    next.set("used_tool", new Tensor("bool", [...batch, 1], Uint8Array.from(rows, (r) => (r.usedTool ? 1 : 0))));
    return next;
  }

  override toString(): string {
    return "ArithmeticToolRewardTransform";
  }
}

/** The default system prompt of {@link ArithmeticToolEnv}. */
export const ARITHMETIC_TOOL_SYSTEM_PROMPT =
  "Compute the user's expression. You have a calculator: write = to evaluate the question; its result comes back " +
  'in the next message (<tool>calc\n{"expression": "12*7"}</tool> evaluates an expression of your own). Then ' +
  "answer with the number alone.";

/** Options of {@link ArithmeticToolEnv}: `ChatEnv`'s (history mode), the problem stream's, the turn limit and rewards. */
export const ArithmeticToolEnvOptionsSchema = ChatEnvOptionsSchema.omit({ inputMode: true, tokenizer: true, dataKey: true, systemPrompt: true }).extend({
  ...ArithmeticToolOptionsSchema.shape,
  /**
   * Policy turns per episode, required: the episode is truncated after this many steps even if the policy keeps
   * calling the calculator (a tool episode without a turn limit may never end).
   */
  maxTurns: z.number({ error: (issue) => (issue.input === undefined ? "required: a tool episode needs a turn limit (a positive integer)" : undefined) }).int().min(1),
  /** The system prompt (default {@link ARITHMETIC_TOOL_SYSTEM_PROMPT}); `null` for none. */
  systemPrompt: z.string().nullable().default(ARITHMETIC_TOOL_SYSTEM_PROMPT),
  /** Reward of a right final answer (default 1). */
  correctReward: z.number().default(1),
  /** Reward of a final answer that is a wrong number (default 0.1). */
  formatReward: z.number().default(0.1),
  /**
   * Added to the final reward when the episode used the calculator successfully and ended on an answer rather than at
   * the turn limit (default 0). Reward shaping for small models, which find the calculator by chance.
   */
  toolReward: z.number().default(0),
  /** Milliseconds a calculator call may take (default 1000). */
  toolTimeoutMs: z.number().int().positive().default(1000),
  /** End-of-sequence markers stripped from responses before scoring. Default `<|im_end|>`, `<|endoftext|>`. */
  eosTokens: z.array(z.string()).optional(),
});

/** Options of {@link ArithmeticToolEnv}. */
export type ArithmeticToolEnvOptions = z.input<typeof ArithmeticToolEnvOptionsSchema>;

/**
 * Arithmetic with a calculator tool, as a multi-turn chat environment (history mode). Reset asks each row for the
 * next seeded problem (`"query"` = the expression, `"answer"` = its value). After each policy turn a
 * `SimpleToolTransform` answers calculator calls ({@link parseCalculatorCalls}) with `tool` messages
 * (`Tool calc executed successfully:\n1776`), a `ToolEpisodeEnd` ends the row on an answer (a message without a call,
 * or with `<answer>…</answer>`) or truncates it at `maxTurns`, and the row's final message is scored
 * ({@link arithmeticToolReward}) into `("next", "reward")` at the step that ends it (0 before). `("next", "success")`
 * and `("next", "used_tool")` (bool) are reported too.
 *
 * `maxTurns` is required: leaving it out throws `InvalidArgumentError` naming `ArithmeticToolEnv options.maxTurns`.
 *
 * ```ts
 * const env = new ArithmeticToolEnv({ maxTurns: 3, maxOperand: 99, repeats: 8, batchSize: [32], seed: 0 });
 * ```
 */
export class ArithmeticToolEnv extends TransformedEnv {
  /** The problem source (its `position` resumes the stream). */
  readonly primer: ArithmeticToolPrimer;
  /** The chat env underneath. */
  readonly chatEnv: ChatEnv;
  /** The calculator. */
  readonly tools: SimpleToolTransform;
  /** Ends episodes on an answer or at `maxTurns`. */
  readonly episodeEnd: ToolEpisodeEnd;

  constructor(options: ArithmeticToolEnvOptions) {
    const o = parseOptions(ArithmeticToolEnvOptionsSchema, options, "ArithmeticToolEnv options");
    checkOperands(o, "ArithmeticToolEnv options");
    const { operations, minOperand, maxOperand, seed, repeats, position, maxTurns, systemPrompt, correctReward, formatReward, toolReward, toolTimeoutMs, eosTokens, ...chat } = o;
    const primer = new ArithmeticToolPrimer({ operations, minOperand, maxOperand, seed, repeats, position });
    const chatEnv = new ChatEnv({ ...chat, ...(systemPrompt === null ? {} : { systemPrompt }) });
    const tools = new SimpleToolTransform({
      tools: {
        [ARITHMETIC_TOOL_NAME]: {
          description: "Evaluates an arithmetic expression (+ - * / and parentheses); without one, the question.",
          schema: z.object({ expression: z.string().default("") }),
          run: ({ expression }: { expression: string }, { history }: { history?: History }) => runCalculator(expression, questionOf(history)),
        },
      },
      parser: parseCalculatorCalls,
      timeoutMs: toolTimeoutMs,
    });
    const episodeEnd = new ToolEpisodeEnd({ maxTurns, answerTag: "answer", endWithoutToolCall: true });
    const reward = new ArithmeticToolRewardTransform({ correctReward, formatReward, toolReward }, eosTokens ?? DEFAULT_EOS_TOKENS, tools.toolRole);
    super(chatEnv, [primer, tools, episodeEnd, reward]);
    this.primer = primer;
    this.chatEnv = chatEnv;
    this.tools = tools;
    this.episodeEnd = episodeEnd;
  }
}
