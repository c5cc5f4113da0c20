/**
 * `AddThinkingPrompt`: when a condition holds after a step (typically a low reward), asks the policy to think again
 * (TorchRL's `AddThinkingPrompt`) — either by replacing the answer of its last message with a prompt it then
 * continues, or by adding a new message — and can undo `done` and zero the reward so the episode goes on.
 */
import { z } from "zod";
import { History, type ChatMessage } from "../../data/index.js";
import { TensorDict } from "../../tensordict/index.js";
import { parseOptions } from "../../core/index.js";
import { ChatEnv } from "../chat-env.js";
import { throwIfAborted, type EnvCallOptions, type MaybePromise } from "../env-base.js";
import { EnvStateError, InvalidArgumentError } from "../errors.js";
import { HISTORY_PROMPT_KEY, REWARD_KEY } from "../keys.js";
import { clearDone, readColumn, rewardColumn } from "../rows.js";
import { Transform } from "../transform.js";

/** Prompts written as the assistant's own words (`egocentric`). */
export const THINKING_PROMPTS_SELF: readonly string[] = Object.freeze([
  "Hold on, let me go over this again more carefully.",
  "Let me check my reasoning once more before answering.",
  "I am not sure that is right. Let me work through it step by step.",
]);

/** Prompts written as another speaker's words. */
export const THINKING_PROMPTS_OTHER: readonly string[] = Object.freeze([
  "Please go over this again more carefully.",
  "Check your reasoning once more before answering.",
  "That may not be right. Work through it step by step.",
]);

/** The condition: whether row `row` of `next` (given as a TensorDict of batch size `[]`) gets the prompt. */
export type ThinkingCondition = (next: TensorDict, row: number) => MaybePromise<boolean>;

/** Options of {@link AddThinkingPrompt}. */
export const AddThinkingPromptOptionsSchema = z.strictObject({
  /** Which rows get the prompt, e.g. `(next) => (next.getTensor("reward").item() as number) < 0.5`. */
  cond: z.custom<ThinkingCondition>((v) => typeof v === "function", { message: "expected a function (next, row) => boolean" }),
  /** The prompt (default: the first of the default prompts). */
  prompt: z.string().min(1).optional(),
  /** Pick one of the default prompts at random for each row (seeded by `seed`; default false). */
  randomPrompt: z.boolean().default(false),
  /** The seed of `randomPrompt` (default 0). */
  seed: z.number().int().default(0),
  /** `"assistant"` (default) or `"user"`: who says the prompt. */
  role: z.enum(["user", "assistant"]).default("assistant"),
  /** Replace the answer of the last assistant message (default true; only with role `"assistant"`). */
  editLastTurn: z.boolean().default(true),
  /** Set the reward of the prompted rows to 0 (default: `editLastTurn`). */
  zeroReward: z.boolean().optional(),
  /** Set `done` back to false for the prompted rows so the episode goes on (default true). */
  undoDone: z.boolean().default(true),
  /** Prompts in the assistant's own words (default: when role is `"assistant"`). */
  egocentric: z.boolean().optional(),
});

/** Options of {@link AddThinkingPrompt}. */
export type AddThinkingPromptOptions = z.input<typeof AddThinkingPromptOptionsSchema>;
type Resolved = z.output<typeof AddThinkingPromptOptionsSchema>;

const ANSWER = /<answer>[\s\S]*?<\/answer>/g;

/**
 * The content with its last `<answer>…</answer>` block (and what follows it) replaced by `prompt`; without an
 * answer block, `prompt` is appended after a blank line.
 */
export function replaceLastAnswer(content: string, prompt: string): string {
  const matches = [...content.matchAll(ANSWER)];
  const last = matches.at(-1);
  if (last === undefined) return `${content.trimEnd()}\n\n${prompt}`;
  const before = content.slice(0, last.index).trimEnd();
  return before === "" ? prompt : `${before}\n\n${prompt}`;
}

/**
 * After each step, for the rows where `cond` holds: edits `("next", "history", "prompt")` (the conversation of the
 * next turn) so the policy reconsiders. With `editLastTurn`, the last assistant message loses its answer, gains the
 * prompt and is marked incomplete, so the next generation continues it; otherwise a new `role` message is added.
 * Needs a `ChatEnv` in history mode underneath.
 */
export class AddThinkingPrompt extends Transform {
  /** The resolved options. */
  readonly config: Readonly<Resolved & { zeroReward: boolean; egocentric: boolean }>;
  #draws = 0;

  constructor(options: AddThinkingPromptOptions) {
    super();
    const parsed = parseOptions(AddThinkingPromptOptionsSchema, options, "AddThinkingPrompt options");
    if (parsed.editLastTurn && parsed.role !== "assistant") {
      throw new InvalidArgumentError('AddThinkingPrompt options.editLastTurn: only with role "assistant" (pass editLastTurn: false for a user prompt)');
    }
    this.config = Object.freeze({
      ...parsed,
      zeroReward: parsed.zeroReward ?? parsed.editLastTurn,
      egocentric: parsed.egocentric ?? parsed.role === "assistant",
    });
  }

  /** The prompt for the next prompted row. */
  #prompt(): string {
    const { prompt, randomPrompt, seed, egocentric } = this.config;
    const list = egocentric ? THINKING_PROMPTS_SELF : THINKING_PROMPTS_OTHER;
    if (!randomPrompt) return prompt ?? list[0]!;
    // A hash of the seed and the number of draws so far: the same seed gives the same prompts.
    const x = Math.imul(seed ^ Math.imul(++this.#draws, 0x9e3779b1), 0x85ebca6b) >>> 0;
    return list[x % list.length]!;
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    throwIfAborted(options.signal, "AddThinkingPrompt.step");
    const base = this.parent?.baseEnv;
    if (!(base instanceof ChatEnv) || base.inputMode !== "history") {
      throw new EnvStateError("AddThinkingPrompt: needs a ChatEnv in history mode underneath");
    }
    const rows = next.numel();
    const flat = next.reshape([rows]);
    const chosen: boolean[] = [];
    for (let r = 0; r < rows; r++) chosen.push(await this.config.cond(flat.index(r), r));
    if (!chosen.some((c) => c)) return next;
    const histories = next.getHistory(HISTORY_PROMPT_KEY);
    const { editLastTurn, role, policyRole } = { ...this.config, policyRole: base.config.policyRole };
    next.set(
      HISTORY_PROMPT_KEY,
      histories.map((history, r) => (chosen[r] === true ? this.#edit(history, editLastTurn, role, policyRole) : history)),
    );
    if (this.config.undoDone) clearDone(next, chosen);
    if (this.config.zeroReward) {
      const reward = readColumn(next, REWARD_KEY);
      if (reward !== undefined) next.set(REWARD_KEY, rewardColumn(next.batchSize, reward.map((v, r) => (chosen[r] === true ? 0 : v))));
    }
    return next;
  }

  #edit(history: History, editLastTurn: boolean, role: string, policyRole: string): History {
    const prompt = this.#prompt();
    const last = history.last;
    if (editLastTurn && last !== undefined && last.role === policyRole) {
      const edited: ChatMessage = { role: last.role, content: replaceLastAnswer(last.content, prompt), isComplete: false };
      return history.slice(0, -1).append(edited);
    }
    return history.append({ role, content: prompt });
  }
}
