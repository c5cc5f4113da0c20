/**
 * Builds the environment of a run config's `task` block (task-config.ts): the env itself, where its prompt stream is
 * (to save with a checkpoint and resume) and how many prompts an epoch holds.
 */
import { InvalidArgumentError } from "../core/errors.js";
import type { JSONValue } from "../data/index.js";
import { DataPositionSchema, type DataLoadingPrimerOptions, type DataPosition } from "../envs/data/primer.js";
import { DatasetChatEnv } from "../envs/dataset-chat-env.js";
import type { EnvBase } from "../envs/env-base.js";
import type { RewardSpec } from "../envs/rewards.js";
import { CountdownEnv } from "../envs/tasks/countdown-env.js";
import { DigitSortEnv, digitSortSplitSize, type DigitSortSplit } from "../envs/tasks/digit-sort.js";
import { GSM8KEnv } from "../envs/tasks/gsm8k-env.js";
import { IFEvalEnv } from "../envs/tasks/ifeval-env.js";
import { MATHEnv } from "../envs/tasks/math-env.js";
import { stripEos } from "../envs/tasks/tags.js";
import type { TaskConfig } from "./task-config.js";

/** A task's env with what a trainer needs to drive it. */
export interface TaskEnv {
  /** The environment (batch size `[batchSize]`, each prompt `repeats` times in a row). */
  readonly env: EnvBase;
  /** Where the prompt stream is (JSON: a count for procedural tasks, `{ epoch, index }` for datasets). */
  position(): JSONValue;
  /** Distinct training prompts per epoch (`null` for an endless procedural stream). */
  epochSize(): Promise<number | null>;
  /** Starts the stream again from its first prompt (evaluation on the same held-out prompts each time). */
  restart(): void;
}

/** Options of {@link createTaskEnv}. */
export interface TaskEnvOptions {
  /** Rows per reset. */
  readonly batchSize: number;
  /** Times each prompt is delivered in a row (the group size). */
  readonly repeats: number;
  /** The run's seed: the default seed of the task's stream. */
  readonly seed: number;
  /** `"train"` or `"eval"`: digit-sort picks its split, files are not shuffled for eval. */
  readonly split: DigitSortSplit;
  /** Reward functions (the `"dataset"` task; added to a built-in reward). */
  readonly rewards?: readonly RewardSpec[];
  /** Resume the stream here (a value {@link TaskEnv.position} gave). */
  readonly position?: JSONValue;
  /** Where errors point (`"GRPOTrainer config.task"`). */
  readonly where: string;
}

/** Where a dataset-backed task's rows come from (see `DataLoadingPrimer`). */
const SOURCE_KEYS = ["files", "hub", "disk", "config", "split", "revision", "streaming", "limit"] as const;

/** An offset added to the run's seed for held-out streams of procedural tasks that have no held-out split. */
const EVAL_SEED_OFFSET = 1_000_003;

function countPosition(position: JSONValue | undefined, where: string): number {
  if (position === undefined || position === null) return 0;
  if (typeof position !== "number" || !Number.isInteger(position) || position < 0) {
    throw new InvalidArgumentError(`${where} position: expected a non-negative integer, got ${JSON.stringify(position)}`);
  }
  return position;
}

function datasetPosition(position: JSONValue | undefined, where: string): DataPosition | undefined {
  if (position === undefined || position === null) return undefined;
  const parsed = DataPositionSchema.safeParse(position);
  if (!parsed.success) throw new InvalidArgumentError(`${where} position: expected { epoch, index }, got ${JSON.stringify(position)}`);
  return parsed.data;
}

/** A procedural task whose prompts come from a generator-backed primer (a count resumes it). */
function primedTask(env: DigitSortEnv | CountdownEnv, epochSize: number | null): TaskEnv {
  return {
    env,
    position: () => env.primer.position,
    epochSize: () => Promise.resolve(epochSize),
    restart: () => void env.primer.resetDataloader(),
  };
}

function datasetTaskEnv(env: DatasetChatEnv): TaskEnv {
  return {
    env,
    position: () => ({ ...env.position }),
    epochSize: async () => (await env.load()).size,
    restart: () => void env.resetDataloader(),
  };
}

/** The source options of a dataset-backed task that are set (the primer's strict options take no `undefined`). */
function datasetSource(task: Extract<TaskConfig, { files?: unknown }>): Pick<DataLoadingPrimerOptions, (typeof SOURCE_KEYS)[number]> {
  const source: Partial<Record<(typeof SOURCE_KEYS)[number], unknown>> = {};
  for (const key of SOURCE_KEYS) if (task[key] !== undefined) source[key] = task[key];
  return source as Pick<DataLoadingPrimerOptions, (typeof SOURCE_KEYS)[number]>;
}

/** The exact-match reward of the `"dataset"` task: 1 when the response (trimmed, eos stripped) equals `answer`. */
export const EXACT_MATCH_REWARD: RewardSpec = {
  name: "exact_match",
  fn: (s) => (stripEos(s.response).trim() === String(s.fields.answer ?? "").trim() ? 1 : 0),
};

/** Builds the env of a task block (see the module notes). Throws `InvalidArgumentError` naming the field. */
export function createTaskEnv(task: TaskConfig, options: TaskEnvOptions): TaskEnv {
  const { batchSize, repeats, seed, split, where } = options;
  const eval_ = split === "eval";
  const system = task.systemPrompt !== undefined ? { systemPrompt: task.systemPrompt } : {};
  switch (task.type) {
    case "digit-sort": {
      const env = new DigitSortEnv({
        numDigits: task.numDigits,
        heldOutFraction: task.heldOutFraction,
        split,
        seed: task.seed ?? seed,
        repeats,
        position: countPosition(options.position, where),
        batchSize: [batchSize],
        ...system,
      });
      return primedTask(env, digitSortSplitSize(task.numDigits, task.heldOutFraction, split));
    }
    case "countdown": {
      const env = new CountdownEnv({
        numCount: task.numCount,
        maxNumber: task.maxNumber,
        maxTarget: task.maxTarget,
        seed: (task.seed ?? seed) + (eval_ ? EVAL_SEED_OFFSET : 0),
        repeats,
        position: countPosition(options.position, where),
        batchSize: [batchSize],
        ...system,
      });
      return primedTask(env, null);
    }
    case "gsm8k":
    case "math":
    case "ifeval":
    case "dataset": {
      const position = datasetPosition(options.position, where);
      const dataset = {
        ...datasetSource(task),
        ...(task.fields !== undefined ? { fields: task.fields } : {}),
        repeats,
        shuffle: eval_ ? false : task.shuffle,
        seed: task.seed ?? seed,
        ...(position !== undefined ? { position } : {}),
      };
      const common = { dataset, batchSize: [batchSize], ...system };
      if (task.type === "gsm8k") return datasetTaskEnv(new GSM8KEnv(common));
      if (task.type === "math") return datasetTaskEnv(new MATHEnv({ ...common, equivalence: task.equivalence }));
      if (task.type === "ifeval") return datasetTaskEnv(new IFEvalEnv(common));
      const rewards = [...(task.reward === "exact-match" ? [EXACT_MATCH_REWARD] : []), ...(options.rewards ?? [])];
      if (rewards.length === 0) {
        throw new InvalidArgumentError(
          `${where}.reward: a "dataset" task needs a reward: set reward: "exact-match" (compares with the "answer" field) or pass rewards to the trainer`,
        );
      }
      const env = new DatasetChatEnv({ ...common, rewards, rewardOptions: { done: true } });
      return datasetTaskEnv(env);
    }
  }
}
