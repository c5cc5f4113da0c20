/**
 * `GSM8KEnv`: grade-school math word problems (TorchRL's `GSM8KEnv`), a `DatasetChatEnv` over a GSM8K-format file
 * (`question`, `answer` ending in `#### N`) with the GSM8K reward (1.0 correct / 0.1 well-formed / 0).
 */
import type { z } from "zod";
import { parseOptions } from "../../core/index.js";
import type { DatasetColumns } from "../data/fields.js";
import { DatasetChatEnv } from "../dataset-chat-env.js";
import { extractGSM8KAnswer, gsm8kScore } from "./gsm8k.js";
import { TaskRewardTransform, TIERED_EXTRA_KEYS, tieredResult } from "./task-reward.js";
import { checkColumn, columnOf, stepCounterFor, taskEnvOptionsSchema, TieredLevelsSchema } from "./task-env-options.js";

/** The default system prompt of {@link GSM8KEnv}. */
export const GSM8K_SYSTEM_PROMPT =
  "You solve math word problems for the user. First reason step by step inside <think></think> tags, then give " +
  "only the final number inside <answer></answer> tags, for example: <think>3 boxes of 12 pens are 36 pens.</think> <answer>36</answer>";

/** Options of {@link GSM8KEnv}. */
export const GSM8KEnvOptionsSchema = taskEnvOptionsSchema(GSM8K_SYSTEM_PROMPT, { query: "question", answer: "answer" }, TieredLevelsSchema.shape);

/** Options of {@link GSM8KEnv}: `DatasetChatEnv`'s (`dataset.files` required) and the task's. */
export type GSM8KEnvOptions = z.input<typeof GSM8KEnvOptionsSchema>;

/**
 * GSM8K as a chat environment. Reset puts the system prompt and a question in `("history", "prompt")`; step
 * scores the policy's last message with {@link gsm8kScore} against the row's `answer` field and writes
 * `("next", "reward")` plus `reward_answer`, `reward_think`, `reward_right` (float32) and `success` (bool), all
 * `[...batch, 1]`; rows that gave an answer end (`terminated`), and `maxSteps` (default 1) truncates the rest.
 *
 * ```ts
 * const env = new GSM8KEnv({ dataset: { files: "test/fixtures/datasets/gsm8k_mini.jsonl", repeats: 4 }, batchSize: [8] });
 * const td = await env.reset();
 * ```
 */
export class GSM8KEnv extends DatasetChatEnv {
  constructor(options: GSM8KEnvOptions) {
    const o = parseOptions(GSM8KEnvOptionsSchema, options, "GSM8KEnv options");
    const { maxSteps, setDoneIfAnswer, eosTokens, correctReward, formatReward, ...chat } = o;
    const reward = new TaskRewardTransform({
      name: "gsm8k",
      fieldKeys: ["answer"],
      extraKeys: TIERED_EXTRA_KEYS,
      setDoneIfAnswer,
      score: ({ response, fields }) => tieredResult(gsm8kScore(response, fields.answer!, { correctReward, formatReward, ...(eosTokens ? { eosTokens } : {}) })),
    });
    super(chat, [...stepCounterFor(maxSteps), reward]);
  }

  /** Reads the dataset and checks that every `answer` has a `#### N` final answer (DATASET_FIELD otherwise). */
  override async load(): Promise<DatasetColumns> {
    const columns = await super.load();
    checkColumn(columns, "answer", columnOf(this.primer.config.fields, "answer"), (v) => void extractGSM8KAnswer(v));
    return columns;
  }
}

