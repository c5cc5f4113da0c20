/**
 * Options shared by the dataset-backed task environments (GSM8KEnv, MATHEnv, IFEvalEnv): everything of
 * `DatasetChatEnv` except its generic rewards, with task defaults (system prompt, dataset fields), plus the
 * episode length and TorchRL's reward-parser switches. Also the load-time check of a dataset column.
 */
import { z } from "zod";
import { DataLoadingPrimerOptionsSchema } from "../data/primer.js";
import { FieldsSchema, type DatasetColumns, type Fields } from "../data/fields.js";
import { DatasetChatEnvOptionsSchema } from "../dataset-chat-env.js";
import { DatasetFieldError } from "../errors.js";
import { StepCounter } from "../transforms/step-counter.js";
import type { Transform } from "../transform.js";

/** Switches every task environment has. */
export const TaskSwitchesSchema = z.strictObject({
  /** Steps per episode (a `StepCounter` truncates there); `null` adds no step counter. Default 1 (single turn). */
  maxSteps: z.number().int().min(1).nullable().default(1),
  /** End a row once its response holds an `<answer>` block (TorchRL's `set_done_if_answer`). Default true. */
  setDoneIfAnswer: z.boolean().default(true),
  /** End-of-sequence markers stripped from responses before parsing. Default `<|im_end|>`, `<|endoftext|>`. */
  eosTokens: z.array(z.string()).optional(),
});

/** The reward levels of GSM8K, MATH and Countdown. */
export const TieredLevelsSchema = z.strictObject({
  /** Reward of a correct answer. Default 1.0. */
  correctReward: z.number().default(1.0),
  /** Reward of a well-formed wrong answer. Default 0.1. */
  formatReward: z.number().default(0.1),
});

/**
 * The options schema of a dataset-backed task env: `DatasetChatEnv`'s (without `rewards` / `rewardOptions`), with
 * `systemPrompt` and `dataset.fields` defaulting to the task's, plus `extra` keys.
 */
export function taskEnvOptionsSchema<E extends z.ZodRawShape>(systemPrompt: string, fields: Fields, extra: E) {
  return DatasetChatEnvOptionsSchema.omit({ rewards: true, rewardOptions: true }).extend({
    /** The system prompt (default: the task's, asking for `<think>…</think> <answer>…</answer>`). */
    systemPrompt: z.string().default(systemPrompt),
    /** The dataset: `files` (required), `fields` (default: the task's columns), `repeats`, `shuffle`, `seed`, ... */
    dataset: DataLoadingPrimerOptionsSchema.extend({ fields: FieldsSchema.prefault(fields) }),
    ...TaskSwitchesSchema.shape,
    ...extra,
  });
}

/** A `StepCounter` for `maxSteps`, or nothing for `null`. */
export function stepCounterFor(maxSteps: number | null): Transform[] {
  return maxSteps === null ? [] : [new StepCounter({ maxSteps })];
}

/**
 * Runs `check` on every dataset row index; a throw becomes a {@link DatasetFieldError} naming the file, the row and
 * the column `column(err)` returns.
 */
export function checkRows(columns: DatasetColumns, column: (err: unknown) => string, check: (row: number) => void): void {
  for (let i = 0; i < columns.size; i++) {
    try {
      check(i);
    } catch (err) {
      const source = columns.sources[i]!;
      throw new DatasetFieldError(source.file, source.row, column(err), err instanceof Error ? err.message : String(err));
    }
  }
}

/** {@link checkRows} over the string values of one key, naming its dataset column. */
export function checkColumn(columns: DatasetColumns, key: string, column: string, check: (value: string) => void): void {
  const values = columns.values.get(key);
  if (values === undefined) return;
  checkRows(columns, () => column, (i) => {
    check(String(values[i]));
  });
}

/** The dataset column a TensorDict key comes from, given the resolved fields. */
export function columnOf(fields: Fields | undefined, key: string): string {
  const spec = fields?.[key];
  if (spec === undefined) return key;
  return typeof spec === "string" ? spec : (spec.column ?? key);
}
