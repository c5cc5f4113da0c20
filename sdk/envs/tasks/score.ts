/**
 * The three-level reward of TorchRL's GSM8K / MATH / Countdown parsers (the GRPO convention): `correctReward` for a
 * correct answer, `formatReward` for a non-empty `<answer>` tag holding a wrong answer, 0 otherwise.
 */
import { z } from "zod";

/** Reward levels of a task reward (TorchRL's `correct_reward` / `format_reward`). */
export const TieredRewardOptionsSchema = z.strictObject({
  /** Reward of a correct answer. Default 1.0. */
  correctReward: z.number().default(1.0),
  /** Reward of a well-formed but wrong answer (non-empty `<answer>` tag). Default 0.1. */
  formatReward: z.number().default(0.1),
});

/** Reward levels of a task reward. */
export type TieredRewardOptions = z.input<typeof TieredRewardOptionsSchema>;
/** Reward levels with the defaults filled in. */
export type ResolvedTieredRewardOptions = z.output<typeof TieredRewardOptionsSchema>;

/**
 * The score of one response, with TorchRL's reward-parser outputs (written to the env's `next` TensorDict as
 * `reward_answer`, `reward_think`, `reward_right`, `reward`, `success`).
 */
export interface TaskScore {
  /** The reward: `correctReward`, `formatReward` or 0. */
  readonly reward: number;
  /** 1 when the response has a non-empty `<answer>` block, else 0. */
  readonly rewardAnswer: number;
  /** 1 when the response has a non-empty `<think>` block, else 0. */
  readonly rewardThink: number;
  /** The correctness part of the reward (equal to `reward` for these tasks). */
  readonly rewardRight: number;
  /** Whether the answer is correct. */
  readonly success: boolean;
  /** The extracted answer (content of `<answer>`), `""` when absent. */
  readonly answer: string;
}

/** The {@link TaskScore} of a response given its extracted parts and whether the answer is correct. */
export function tieredScore(
  parts: { readonly think: string; readonly answer: string },
  correct: boolean,
  levels: ResolvedTieredRewardOptions,
): TaskScore {
  const hasAnswer = parts.answer !== "";
  const success = hasAnswer && correct;
  const reward = success ? levels.correctReward : hasAnswer ? levels.formatReward : 0;
  return {
    reward,
    rewardAnswer: hasAnswer ? 1 : 0,
    rewardThink: parts.think !== "" ? 1 : 0,
    rewardRight: reward,
    success,
    answer: parts.answer,
  };
}
