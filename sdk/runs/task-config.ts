/**
 * The `task` block of a GRPO run config: which environment the prompts and rewards come from, by `type`
 * (`"digit-sort"`, `"countdown"`, `"gsm8k"`, `"math"`, `"ifeval"`, `"dataset"`). Built into an env by
 * `createTaskEnv` (task-env.ts). Dataset-backed tasks read local `files`, a Hub dataset (`hub`, with `config`,
 * `split`, `revision`, `streaming`, `limit`) or a `save_to_disk` copy (`disk`).
 */
import { z } from "zod";
import { FieldsSchema } from "../envs/data/fields.js";
import { DatasetSourceFields, datasetSourceProblem } from "../envs/data/source.js";
import { DigitSortOptionsSchema } from "../envs/tasks/digit-sort.js";

const Files = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);

/** Fields every dataset-backed task has: one source (`files`, `hub` or `disk`), the field mapping and the order. */
const fileTask = {
  /** Dataset files (`.jsonl`, `.parquet`, `.arrow`), read in order as one dataset. One of `files`, `hub`, `disk`. */
  files: Files.optional(),
  ...DatasetSourceFields,
  /** TensorDict key → column (default: the task's own columns). */
  fields: FieldsSchema.optional(),
  /** Shuffle the rows of each epoch (default true). */
  shuffle: z.boolean().default(true),
  /** Shuffle seed (default: the run's `seed`). */
  seed: z.number().int().optional(),
  /** The system prompt (default: the task's). */
  systemPrompt: z.string().optional(),
};

/** The built-in procedural sorting task (see `DigitSortEnv`). */
export const DigitSortTaskSchema = z.strictObject({
  type: z.literal("digit-sort"),
  ...DigitSortOptionsSchema.pick({ numDigits: true, heldOutFraction: true }).shape,
  /** Seed of the prompt stream (default: the run's `seed`). */
  seed: z.number().int().optional(),
  /** A system prompt (default none: the prompt is the single user message). */
  systemPrompt: z.string().optional(),
});

/** Countdown puzzles (see `CountdownEnv`). */
export const CountdownTaskSchema = z.strictObject({
  type: z.literal("countdown"),
  numCount: z.number().int().min(2).max(8).default(4),
  maxNumber: z.number().int().min(1).max(10_000).default(100),
  maxTarget: z.number().int().min(1).max(1_000_000).default(1000),
  /** Seed of the puzzle stream (default: the run's `seed`). */
  seed: z.number().int().optional(),
  systemPrompt: z.string().optional(),
});

/** GSM8K-format files (see `GSM8KEnv`). */
export const GSM8KTaskSchema = z.strictObject({ type: z.literal("gsm8k"), ...fileTask });

/** MATH-format files (see `MATHEnv`). */
export const MathTaskSchema = z.strictObject({
  type: z.literal("math"),
  ...fileTask,
  /** Answer equivalence: `"auto"` (default), `"math-verify"` or `"string"`. */
  equivalence: z.enum(["auto", "math-verify", "string"]).default("auto"),
});

/** IFEval-format files (see `IFEvalEnv`). */
export const IFEvalTaskSchema = z.strictObject({ type: z.literal("ifeval"), ...fileTask });

/**
 * Any dataset of prompts: `fields` must map `query` (the user message); the rewards come from the TS API's
 * `rewards` option, or the built-in `reward: "exact-match"` (1 when the response, trimmed, equals the `answer`
 * field, else 0).
 */
export const DatasetTaskSchema = z.strictObject({
  type: z.literal("dataset"),
  ...fileTask,
  fields: FieldsSchema.refine((f) => Object.hasOwn(f, "query"), { message: 'must map "query" (the user message), e.g. { query: "question" }' }),
  /** A built-in reward (`"exact-match"` on the `answer` field); without it, pass `rewards` to `GRPOTrainer.create`. */
  reward: z.enum(["exact-match"]).optional(),
});

/**
 * The `task` (and `evalTask`) block of a GRPO run config, by `type`. A dataset-backed task names exactly one of
 * `files`, `hub` and `disk`, with only the options that source takes (an issue on the field otherwise).
 */
export const TaskConfigSchema = z
  .discriminatedUnion("type", [DigitSortTaskSchema, CountdownTaskSchema, GSM8KTaskSchema, MathTaskSchema, IFEvalTaskSchema, DatasetTaskSchema])
  .superRefine((task, ctx) => {
    if (task.type === "digit-sort" || task.type === "countdown") return;
    const problem = datasetSourceProblem(task);
    if (problem !== undefined) ctx.addIssue({ code: "custom", path: [problem.field], message: problem.message });
  });

/** The task block (input form). */
export type TaskConfigInput = z.input<typeof TaskConfigSchema>;

/** The task block with defaults filled in. */
export type TaskConfig = z.output<typeof TaskConfigSchema>;

/** The task types. */
export const TASK_TYPES = ["digit-sort", "countdown", "gsm8k", "math", "ifeval", "dataset"] as const;

/** One of {@link TASK_TYPES}. */
export type TaskType = (typeof TASK_TYPES)[number];
