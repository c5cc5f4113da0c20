/**
 * `DatasetChatEnv`: a `ChatEnv` fed by a `DataLoadingPrimer` over dataset files, with optional reward functions
 * (TorchRL's `DatasetChatEnv`). Task environments (GSM8K, MATH, ...) build on it.
 */
import { z } from "zod";
import type { TensorDict } from "../tensordict/index.js";
import { parseOptions } from "../core/index.js";
import { ChatEnv, ChatEnvOptionsSchema, type ChatEnvOptions } from "./chat-env.js";
import {
  DataLoadingPrimer,
  DataLoadingPrimerOptionsSchema,
  type DataLoadingPrimerOptions,
  type DataPosition,
  type PrepareColumns,
} from "./data/primer.js";
import type { DatasetColumns } from "./data/fields.js";
import type { EnvCallOptions } from "./env-base.js";
import { DatasetFieldError, InvalidArgumentError } from "./errors.js";
import { RewardSpecSchema, RewardTransform, RewardTransformOptionsSchema, type RewardSpec, type RewardTransformOptions } from "./rewards.js";
import { TransformedEnv, type Transform } from "./transform.js";

/** Options of {@link DatasetChatEnv}: those of `ChatEnv`, plus the dataset and the rewards. */
export const DatasetChatEnvOptionsSchema = ChatEnvOptionsSchema.extend({
  /** The dataset: files, fields, `repeats` (group size), `shuffle`, `seed`, `epochs`, `position`. */
  dataset: DataLoadingPrimerOptionsSchema,
  /** Reward functions `{ name, fn, weight }` run after each step (a `RewardTransform`); default none. */
  rewards: z.array(RewardSpecSchema).min(1).optional(),
  /** The other `RewardTransform` options: `concurrency`, `onError`, `done`, `idKey`, `fieldKeys`. */
  rewardOptions: RewardTransformOptionsSchema.omit({ rewards: true }).optional(),
});

/** Options of {@link DatasetChatEnv}. */
export type DatasetChatEnvOptions = ChatEnvOptions & {
  readonly dataset: DataLoadingPrimerOptions;
  readonly rewards?: readonly RewardSpec[];
  readonly rewardOptions?: Omit<RewardTransformOptions, "rewards">;
};

/**
 * A chat env over a dataset: each reset takes the next rows of the dataset (`repeats` times each, in a row) as
 * the queries, and each step is scored by the reward functions.
 *
 * ```ts
 * const env = new DatasetChatEnv({
 *   dataset: { files: "train.jsonl", fields: { query: "question", answer: "answer" }, repeats: 4, seed: 0 },
 *   batchSize: [8],
 *   systemPrompt: "Answer inside <answer></answer>.",
 *   rewards: [{ name: "correct", fn: (s) => (s.response.includes(String(s.fields.answer)) ? 1 : 0) }],
 *   rewardOptions: { done: true },
 * });
 * ```
 */
export class DatasetChatEnv extends TransformedEnv {
  /** The data loader (its `position` resumes the stream). */
  readonly primer: DataLoadingPrimer;
  /** The reward transform, when `rewards` were given. */
  readonly rewardTransform: RewardTransform | undefined;
  /** The chat env underneath (the base env). */
  readonly chatEnv: ChatEnv;

  /** `prepare` (for task envs) picks the dataset rows to use once they are loaded (see `DataLoadingPrimer`). */
  constructor(options: DatasetChatEnvOptions, extraTransforms: readonly Transform[] = [], prepare?: PrepareColumns) {
    const parsed = parseOptions(DatasetChatEnvOptionsSchema, options, "DatasetChatEnv options");
    const { dataset, rewards, rewardOptions, ...chat } = parsed;
    const fields = dataset.fields;
    if (fields !== undefined && !Object.hasOwn(fields, chat.dataKey)) {
      throw new InvalidArgumentError(
        `DatasetChatEnv options.dataset.fields: must have the key ${JSON.stringify(chat.dataKey)} (the query; e.g. { ${chat.dataKey}: "question" })`,
      );
    }
    if (rewards === undefined && rewardOptions !== undefined) {
      throw new InvalidArgumentError("DatasetChatEnv options.rewardOptions: given without rewards");
    }
    const primer = new DataLoadingPrimer(dataset, prepare);
    const transforms: Transform[] = [primer];
    const rewardTransform = rewards === undefined ? undefined : new RewardTransform({ ...rewardOptions, rewards });
    if (rewardTransform !== undefined) transforms.push(rewardTransform);
    const chatEnv = new ChatEnv(chat);
    super(chatEnv, [...transforms, ...extraTransforms]);
    this.chatEnv = chatEnv;
    this.primer = primer;
    this.rewardTransform = rewardTransform;
  }

  /** Where the dataset stream is (save it to resume). */
  get position(): DataPosition {
    return this.primer.position;
  }

  /**
   * Reads and checks the dataset now (otherwise the first reset does). Throws DATASET_FIELD naming the file, row 0
   * and the field when the rows have no query field.
   */
  async load(): Promise<DatasetColumns> {
    const columns = await this.primer.load();
    const key = this.chatEnv.config.dataKey;
    if (!columns.keys.includes(key)) {
      const source = columns.sources[0]!;
      throw new DatasetFieldError(source.file, source.row, key, `is missing: the env reads the query from it (map a column to it with dataset.fields, e.g. { ${key}: "question" })`);
    }
    return columns;
  }

  /** Starts the dataset again from the first epoch (TorchRL's `reset_dataloader`). */
  resetDataloader(): this {
    this.primer.resetDataloader();
    return this;
  }

  protected override async _reset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    await this.load();
    return super._reset(td, options);
  }
}
