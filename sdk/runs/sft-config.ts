/**
 * The run config of {@link SFTTrainer} (YAML or JSON with these camelCase keys), checked with zod: an error names
 * the field, the value and what is allowed. Defaults and meanings: docs/trainers.md.
 */
import { z } from "zod";
import { FieldsSchema } from "../envs/data/fields.js";
import { DigitSortOptionsSchema } from "../envs/tasks/digit-sort.js";
import { SFTLossOptionsSchema } from "../objectives/index.js";
import { CheckpointConfigSchema, checkLength, ModelConfigSchema, RunOptimizerSchema, RunScheduleSchema, SupervisionConfigSchema } from "./config-blocks.js";
import { checkClusterConfig, ClusterConfigSchema } from "./cluster-config.js";
import { LoggersSchema, TrackingConfigSchema } from "./trackers/config.js";

const Files = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);

const SftFieldsSchema = FieldsSchema.refine(
  (f) => Object.hasOwn(f, "messages") !== (Object.hasOwn(f, "prompt") && Object.hasOwn(f, "completion")),
  { message: 'must map either "messages" (a conversation column) or both "prompt" and "completion"' },
);

/**
 * SFT examples from files: `fields` maps `messages` (a column of `{ role, content }` lists: every assistant turn is
 * trained on) or `prompt` + `completion` (strings: the prompt becomes a user message, the completion the assistant's
 * answer).
 */
export const SFTDatasetDataSchema = z.strictObject({
  type: z.literal("dataset"),
  files: Files,
  fields: SftFieldsSchema,
  /** A system message put before every example (default none). */
  systemPrompt: z.string().optional(),
  /** Shuffle the examples of each epoch (default true). */
  shuffle: z.boolean().default(true),
  /** Shuffle seed (default: the run's `seed`). */
  seed: z.number().int().optional(),
});

/** SFT examples of the built-in digit-sort task: `examples` seeded problems of its training split with their answers. */
export const SFTDigitSortDataSchema = z.strictObject({
  type: z.literal("digit-sort"),
  /** How many distinct training examples (default 2000). */
  examples: z.number().int().min(1).default(2000),
  ...DigitSortOptionsSchema.pick({ numDigits: true, heldOutFraction: true }).shape,
  /** Seed of the examples (default: the run's `seed`). */
  seed: z.number().int().optional(),
  /** A system prompt (default none). */
  systemPrompt: z.string().optional(),
});

/** The `data` (and `evalData`) block of an SFT run config, by `type`. */
export const SFTDataConfigSchema = z.discriminatedUnion("type", [SFTDatasetDataSchema, SFTDigitSortDataSchema]);

/** The data block (input form). */
export type SFTDataConfigInput = z.input<typeof SFTDataConfigSchema>;

/**
 * Held-out evaluation every `every` steps (0 = off, default): the loss on `examples` held-out examples (default 64)
 * and, when the data is a task (digit-sort), the greedy task reward on `prompts` held-out prompts (default 64).
 */
export const SFTEvalConfigSchema = z.strictObject({
  every: z.number().int().min(0).default(0),
  examples: z.number().int().min(1).default(64),
  prompts: z.number().int().min(1).default(64),
  /** Tokens generated per held-out prompt for the task reward (default 16). */
  maxNewTokens: z.number().int().min(1).default(16),
});

/** The run config of `SFTTrainer`. */
export const SFTTrainerConfigSchema = z
  .strictObject({
    model: ModelConfigSchema,
    /** The training examples. */
    data: SFTDataConfigSchema,
    /** Held-out examples (default: the digit-sort held-out split; for files, none unless given). */
    evalData: SFTDataConfigSchema.optional(),
    /** SFTLoss fields (`lossFunction`, `normalizeBySeqLength`, ...); default plain NLL per token. */
    loss: SFTLossOptionsSchema.prefault({}),
    /** Examples per step (default 16). */
    batchSize: z.number().int().min(1).default(16),
    steps: z.number().int().min(1).optional(),
    epochs: z.number().int().min(1).optional(),
    /** Default `{ type: "adamw", lr: 1e-5 }`. */
    optimizer: RunOptimizerSchema.prefault({}),
    schedule: RunScheduleSchema.prefault({}),
    gradClip: z.number().gt(0).nullable().default(1),
    microBatchTokens: z.number().int().min(1).nullable().default(null),
    eval: SFTEvalConfigSchema.prefault({}),
    checkpoint: CheckpointConfigSchema.prefault({}),
    /** Restarts after a worker failure (default `{ maxRestarts: 3, backoffMs: 1000 }`). */
    supervision: SupervisionConfigSchema.prefault({}),
    /** Where the metrics go besides `metrics.jsonl` (always written): default `["jsonl"]` (docs/trackers.md). */
    loggers: LoggersSchema,
    /** The tracker runs' project, name and folder (docs/trackers.md). */
    tracking: TrackingConfigSchema.prefault({}),
    /** Where the workers run: `{ type: "local" }` (default) or `{ type: "ray", ... }` (docs/scaling.md, "Placement on Ray"). */
    cluster: ClusterConfigSchema.prefault({ type: "local" }),
    /** Seeds the data order and the tiny model (default 0). */
    seed: z.number().int().nonnegative().default(0),
    runDir: z.string().min(1),
  })
  .superRefine(checkLength)
  .superRefine((c, ctx) => {
    checkClusterConfig(c.cluster, c.supervision.maxRestarts, { trainer: c.model.device }, ctx);
  });

/** The run config of `SFTTrainer` (input form). */
export type SFTTrainerConfigInput = z.input<typeof SFTTrainerConfigSchema>;

/** The run config of `SFTTrainer` with every default filled in. */
export type SFTTrainerConfig = z.output<typeof SFTTrainerConfigSchema>;
