/**
 * `CountdownEnv`: the Countdown numbers game (TorchRL's `CountdownEnv`), a `ChatEnv` fed by a seeded procedural
 * {@link CountdownPrimer} instead of a dataset file, with the Countdown reward (1.0 / 0.1 / 0).
 */
import { z } from "zod";
import { parseOptions } from "../../core/index.js";
import { ChatEnv, ChatEnvOptionsSchema } from "../chat-env.js";
import { TransformedEnv } from "../transform.js";
import { countdownScore } from "./countdown.js";
import { CountdownPrimer, CountdownPrimerOptionsSchema } from "./countdown-primer.js";
import { TaskRewardTransform, TIERED_EXTRA_KEYS, tieredResult } from "./task-reward.js";
import { stepCounterFor, TaskSwitchesSchema, TieredLevelsSchema } from "./task-env-options.js";

/** The default system prompt of {@link CountdownEnv}. */
export const COUNTDOWN_SYSTEM_PROMPT =
  "The user gives you some numbers and a target. Find an arithmetic expression that equals the target, using " +
  "+, -, *, / and parentheses, with each given number used at most once. First reason inside <think></think> " +
  "tags, then write only the expression inside <answer></answer> tags, for example: <answer>(25 + 3) * 4</answer>";

/** Options of {@link CountdownEnv}: `ChatEnv`'s, the puzzle generator's, and the task's. */
export const CountdownEnvOptionsSchema = ChatEnvOptionsSchema.extend({
  /** The system prompt (default {@link COUNTDOWN_SYSTEM_PROMPT}). */
  systemPrompt: z.string().default(COUNTDOWN_SYSTEM_PROMPT),
  ...CountdownPrimerOptionsSchema.shape,
  ...TaskSwitchesSchema.shape,
  ...TieredLevelsSchema.shape,
});

/** Options of {@link CountdownEnv}. */
export type CountdownEnvOptions = z.input<typeof CountdownEnvOptionsSchema>;

/**
 * Countdown as a chat environment: reset asks each row for the next seeded puzzle (`"query"`, with the ground
 * truth in `"answer"`); step validates the expression in the policy's `<answer>` block with
 * {@link countdownScore} and writes `("next", "reward")`, `reward_answer`, `reward_think`, `reward_right` and
 * `success`; rows that gave an answer end. The same `seed` gives the same puzzles.
 *
 * ```ts
 * const env = new CountdownEnv({ seed: 0, numCount: 4, repeats: 4, batchSize: [8] });
 * ```
 */
export class CountdownEnv extends TransformedEnv {
  /** The puzzle source (its `position` resumes the stream). */
  readonly primer: CountdownPrimer;
  /** The chat env underneath. */
  readonly chatEnv: ChatEnv;

  constructor(options: CountdownEnvOptions = {}) {
    const o = parseOptions(CountdownEnvOptionsSchema, options, "CountdownEnv options");
    const { numCount, maxNumber, maxTarget, seed, repeats, position, maxSteps, setDoneIfAnswer, eosTokens, correctReward, formatReward, ...chat } = o;
    const primer = new CountdownPrimer({ numCount, maxNumber, maxTarget, seed, repeats, position });
    const reward = new TaskRewardTransform({
      name: "countdown",
      fieldKeys: ["answer"],
      extraKeys: TIERED_EXTRA_KEYS,
      setDoneIfAnswer,
      score: ({ response, fields }) => tieredResult(countdownScore(response, fields.answer!, { correctReward, formatReward, ...(eosTokens ? { eosTokens } : {}) })),
    });
    const chatEnv = new ChatEnv(chat);
    super(chatEnv, [primer, ...stepCounterFor(maxSteps), reward]);
    this.primer = primer;
    this.chatEnv = chatEnv;
  }
}
