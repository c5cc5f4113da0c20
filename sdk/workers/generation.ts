import { z } from "zod";

/**
 * Sampling options of `WorkerClient.generate` (names as in TorchRL's `generate_kwargs`, camelCased), checked
 * before anything is sent.
 */
export const GenerateOptionsSchema = z.strictObject({
  /** Tokens to sample per response (required). */
  maxNewTokens: z.number().int().min(1),
  /** Softmax temperature; `0` samples greedily. Default 1. */
  temperature: z.number().min(0).default(1),
  /** Nucleus sampling mass in (0, 1]. Default 1 (off). */
  topP: z.number().gt(0).max(1).default(1),
  /** Keep only the `topK` most likely tokens; `0` is off (default). */
  topK: z.number().int().min(0).default(0),
  /** HF repetition penalty (> 0); 1 is off (default). */
  repetitionPenalty: z.number().gt(0).default(1),
  /** Stop strings: the response ends right after the first one (finish reason `"stop"`). */
  stop: z.array(z.string().min(1)).default([]),
  /** Same seed and inputs give the same outputs, whatever the micro-batching. Default: not seeded. */
  seed: z.number().int().nonnegative().nullable().default(null),
  /** Completions per prompt (GRPO groups); the output batch is `[B, numSamples]` when > 1. Default 1. */
  numSamples: z.number().int().min(1).default(1),
  /** Rows per forward pass, to bound memory; default all at once. */
  microBatchSize: z.number().int().min(1).nullable().default(null),
  /** Prompts too long for the context: `"error"` (default) or `"left"` (drop their oldest tokens). */
  truncate: z.enum(["error", "left"]).default("error"),
});

/** Sampling options of `WorkerClient.generate` (input form: defaults may be left out). */
export type GenerateOptions = z.input<typeof GenerateOptionsSchema>;

/** Options of `WorkerClient.score`. */
export const ScoreOptionsSchema = z.strictObject({
  /** Rows per forward pass, to bound memory; default all at once. */
  microBatchSize: z.number().int().min(1).nullable().default(null),
});

/** Options of `WorkerClient.score`. */
export type ScoreOptions = z.input<typeof ScoreOptionsSchema>;

/** Options of `WorkerClient.applyChatTemplate`. */
export const ChatTemplateOptionsSchema = z.strictObject({
  /** Which conversation to render: `("history","prompt")` (default) or `("history","full")`. */
  key: z.enum(["prompt", "full"]).default("prompt"),
  /** Append the assistant header; default true for `"prompt"`, false for `"full"`. */
  addGenerationPrompt: z.boolean().optional(),
  /** Leave the last message open (as for an incomplete message). Default false. */
  continueFinalMessage: z.boolean().default(false),
});

/** Options of `WorkerClient.applyChatTemplate`. */
export type ChatTemplateOptions = z.input<typeof ChatTemplateOptionsSchema>;
