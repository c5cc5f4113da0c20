/**
 * `TaskRewardTransform`: the reward step of the task environments (TorchRL's `GSM8KRewardParser`,
 * `MATHRewardParser`, `CountdownRewardParser`, `IfEvalScorer`). After each step it scores the policy's last
 * message of every row with a task scorer, adds the score to `("next", "reward")`, writes the scorer's extra
 * outputs (`reward_answer`, `success`, ...) as `[...batch, 1]` columns under `next`, and — like TorchRL — ends the
 * rows whose response holds an answer (`setDoneIfAnswer`).
 */
import { Tensor, type NestedKey, type TensorDict } from "../../tensordict/index.js";
import { ChatEnv } from "../chat-env.js";
import { throwIfAborted, type EnvCallOptions, type MaybePromise } from "../env-base.js";
import { EnvStateError, RewardError } from "../errors.js";
import { HISTORY_FULL_KEY, HISTORY_PROMPT_KEY, HISTORY_RESPONSE_KEY, REWARD_KEY, TEXT_RESPONSE_KEY } from "../keys.js";
import { markDone, readColumn, rewardColumn } from "../rows.js";
import { Transform } from "../transform.js";
import type { TaskScore } from "./score.js";

/** What a task scorer sees of one row. */
export interface TaskSample {
  /** The row in the batch (row-major). */
  readonly index: number;
  /** The text of the policy's last message. */
  readonly response: string;
  /** The dataset fields the transform was told to read (`fieldKeys`), as strings. */
  readonly fields: Readonly<Record<string, string>>;
}

/** A task scorer's verdict on one row. */
export interface TaskRewardResult {
  /** The reward of the step. */
  readonly reward: number;
  /** Whether the response holds an answer (ends the row when `setDoneIfAnswer`). */
  readonly hasAnswer: boolean;
  /** Extra outputs, written to `next` under their names (numbers as float32, booleans as bool). */
  readonly extras: Readonly<Record<string, number | boolean>>;
}

/** Scores one row. */
export type TaskScorer = (sample: TaskSample) => MaybePromise<TaskRewardResult>;

/** Options of {@link TaskRewardTransform}. */
export interface TaskRewardTransformOptions {
  /** The task's name (in errors). */
  readonly name: string;
  /** The scorer. */
  readonly score: TaskScorer;
  /** The dataset fields the scorer reads (string leaves of the TensorDict, e.g. `["answer"]`). */
  readonly fieldKeys: readonly string[];
  /** The names of the extras the scorer returns, in order (each must be in every result). */
  readonly extraKeys: readonly string[];
  /** Writes the extras under `(group, name)` instead of `name` (IFEval's `"ifeval_score"`). */
  readonly group?: string;
  /** End the rows whose response holds an answer (TorchRL's `set_done_if_answer`; default true). */
  readonly setDoneIfAnswer?: boolean;
  /** Releases what the scorer holds (called by `close`). */
  readonly close?: () => MaybePromise<void>;
}

/** The text of the policy's last message in each row of a step. */
export function responsesOf(td: TensorDict, next: TensorDict, policyRole: string): string[] {
  const lastOf = (key: NestedKey, source: TensorDict): string[] =>
    source.getHistory(key).rows.map((h) => [...h.messages].reverse().find((m) => m.role === policyRole)?.content ?? "");
  if (td.has(HISTORY_FULL_KEY)) return lastOf(HISTORY_FULL_KEY, td);
  if (td.has(HISTORY_RESPONSE_KEY)) return lastOf(HISTORY_RESPONSE_KEY, td);
  if (td.has(TEXT_RESPONSE_KEY)) return [...td.getStrings(TEXT_RESPONSE_KEY)];
  if (next.has(HISTORY_PROMPT_KEY)) return lastOf(HISTORY_PROMPT_KEY, next);
  throw new EnvStateError('task reward: nothing to score: the data has neither ("history", "full") nor ("text", "response"); run the policy before step');
}

/** Scores each step of a task environment (see the module notes). */
export class TaskRewardTransform extends Transform {
  readonly #options: TaskRewardTransformOptions;

  constructor(options: TaskRewardTransformOptions) {
    super();
    this.#options = options;
  }

  override get rewardKeys(): readonly NestedKey[] {
    const { group, extraKeys } = this.#options;
    return group === undefined ? extraKeys : [group];
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    throwIfAborted(options.signal, `${this.#options.name} reward`);
    const { name, score, fieldKeys, extraKeys, group, setDoneIfAnswer = true } = this.#options;
    const base = this.parent?.baseEnv;
    const responses = responsesOf(td, next, base instanceof ChatEnv ? base.config.policyRole : "assistant");
    const columns = fieldKeys.map((key) => {
      if (!td.has(key)) throw new EnvStateError(`${name} reward: the TensorDict has no ${JSON.stringify(key)} field (the dataset row of each sample)`);
      return td.getStrings(key);
    });
    const results: TaskRewardResult[] = [];
    for (const [index, response] of responses.entries()) {
      throwIfAborted(options.signal, `${name} reward`);
      const fields = Object.fromEntries(fieldKeys.map((key, k) => [key, columns[k]![index]!]));
      try {
        results.push(await score({ index, response, fields }));
      } catch (err) {
        throw new RewardError(name, index, undefined, err instanceof Error ? err.message : String(err), { cause: err });
      }
    }
    const batch = next.batchSize;
    const total = readColumn(next, REWARD_KEY) ?? new Array<number>(results.length).fill(0);
    next.set(REWARD_KEY, rewardColumn(batch, results.map((r, i) => total[i]! + r.reward)));
    for (const key of extraKeys) {
      const values = results.map((r) => r.extras[key] ?? 0);
      const column =
        typeof values[0] === "boolean"
          ? new Tensor("bool", [...batch, 1], Uint8Array.from(values, (v) => (v === true ? 1 : 0)))
          : rewardColumn(batch, values.map(Number));
      next.set(group === undefined ? key : [group, key], column);
    }
    if (setDoneIfAnswer) markDone(next, results.map((r) => r.hasAnswer));
    return next;
  }

  override async close(): Promise<void> {
    await this.#options.close?.();
  }

  override toString(): string {
    return `TaskRewardTransform(${this.#options.name})`;
  }
}

/** The extras the GSM8K, MATH and Countdown envs write under `next` (TorchRL's reward-parser keys). */
export const TIERED_EXTRA_KEYS: readonly string[] = ["reward_answer", "reward_think", "reward_right", "success"];

/** A {@link TaskScore} as a {@link TaskRewardResult} with the {@link TIERED_EXTRA_KEYS}. */
export function tieredResult(score: TaskScore): TaskRewardResult {
  return {
    reward: score.reward,
    hasAnswer: score.rewardAnswer > 0,
    extras: { reward_answer: score.rewardAnswer, reward_think: score.rewardThink, reward_right: score.rewardRight, success: score.success },
  };
}
