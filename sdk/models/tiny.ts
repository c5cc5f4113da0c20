import { execFile } from "node:child_process";
import { z } from "zod";
import { resolvePython } from "../../bridge/index.js";
import { PosttrainError } from "../core/errors.js";
import { parseOptions } from "../core/index.js";

/**
 * The tiny model's family, sizes and seed; every field is optional (the builder's defaults). A run config's
 * `model.tiny` block is this schema.
 */
export const TinyModelConfigSchema = z.strictObject({
  /**
   * Model family: architecture, special tokens and stop tokens of `"qwen2"` (default, the original tiny model),
   * `"qwen3"`, `"llama3"`, `"mistral"`, `"gemma2"` or `"phi3"` (docs/models.md, "Model families").
   */
  family: z.enum(["qwen2", "qwen3", "llama3", "mistral", "gemma2", "phi3"]).optional(),
  /**
   * A Jinja chat template file to store with the model (a family's real template, say). Default: the tiny ChatML
   * template for `qwen2`, no template for the other families.
   */
  chatTemplateFile: z.string().min(1).optional(),
  hiddenSize: z.number().int().positive().optional(),
  numLayers: z.number().int().positive().optional(),
  /** Attention heads (default: the family's; 4 for qwen2). */
  numHeads: z.number().int().positive().optional(),
  /** Key/value heads (default: the family's; 2 for qwen2). */
  numKvHeads: z.number().int().positive().optional(),
  /** Head size (default: the family's; hiddenSize / numHeads for qwen2 and phi3, 32 for the others). */
  headDim: z.number().int().positive().optional(),
  intermediateSize: z.number().int().positive().optional(),
  maxPositionEmbeddings: z.number().int().positive().optional(),
  /**
   * Tokens in the tokenizer, embedding and LM head (default: the character tokenizer's own 259). A larger size
   * (a real vocabulary's, such as 32000) adds filler tokens before the special tokens, so the embedding and the
   * LM head cost what a real model's do; text never encodes to a filler. Below 259 the builder refuses.
   */
  vocabSize: z.number().int().positive().optional(),
  /** Seed of the random weights (default 0; in a run config: the run's `seed`). */
  seed: z.number().int().nonnegative().optional(),
});

/** The tiny model's family, sizes and seed. */
export type TinyModelConfig = z.input<typeof TinyModelConfigSchema>;

/** Options of {@link makeTinyModel}: the sizes and seed, and the Python interpreter. */
export const TinyModelOptionsSchema = TinyModelConfigSchema.extend({
  /** Python interpreter with `posttrain_worker` (default: as for workers). */
  python: z.string().min(1).optional(),
});

/** Options of {@link makeTinyModel}. */
export type TinyModelOptions = z.input<typeof TinyModelOptionsSchema>;

const TinyModelResultSchema = z.object({
  path: z.string(),
  parameters: z.number().int().positive(),
  vocabSize: z.number().int().positive(),
  bytes: z.number().int().positive(),
  seconds: z.number().nonnegative(),
});

/** What {@link makeTinyModel} wrote. */
export type TinyModel = z.infer<typeof TinyModelResultSchema>;

const FLAGS: ReadonlyArray<readonly [keyof TinyModelOptions, string]> = [
  ["seed", "--seed"],
  ["family", "--family"],
  ["chatTemplateFile", "--chat-template"],
  ["headDim", "--head-dim"],
  ["hiddenSize", "--hidden-size"],
  ["numLayers", "--num-layers"],
  ["numHeads", "--num-heads"],
  ["numKvHeads", "--num-kv-heads"],
  ["intermediateSize", "--intermediate-size"],
  ["maxPositionEmbeddings", "--max-position-embeddings"],
  ["vocabSize", "--vocab-size"],
];

/**
 * Writes a random tiny Qwen2-style causal LM with a character-level tokenizer and a ChatML chat template
 * (assistant turns wrapped in `{% generation %}`) into `dir`: offline, deterministic given `seed`, a few
 * seconds. Tests, examples and the demo use it instead of downloading a model. `family` builds another
 * architecture instead (Llama 3, Gemma 2, ...), with the chat template of `chatTemplateFile`.
 *
 * ```ts
 * const { path } = await makeTinyModel("/tmp/tiny-llama", { family: "llama3", chatTemplateFile: "llama3.jinja" });
 * ```
 */
export async function makeTinyModel(dir: string, options: TinyModelOptions = {}): Promise<TinyModel> {
  const opts = parseOptions(TinyModelOptionsSchema, options, "makeTinyModel options");
  parseOptions(z.string().min(1), dir, "makeTinyModel dir");
  const args = ["-m", "posttrain_worker.models.tiny", dir, "--json"];
  for (const [key, flag] of FLAGS) {
    const value = opts[key];
    if (value !== undefined) args.push(flag, String(value));
  }
  const python = resolvePython(opts.python);
  const stdout = await new Promise<string>((resolve, reject) => {
    execFile(python, args, { timeout: 120_000 }, (err, out, errOut) => {
      if (err !== null) {
        const last = errOut.trim().split("\n").at(-1) ?? err.message;
        reject(new PosttrainError("MODEL_BUILD_FAILED", `makeTinyModel(${JSON.stringify(dir)}): ${last}`, { cause: err }));
      } else {
        resolve(out);
      }
    });
  });
  const parsed = TinyModelResultSchema.safeParse(JSON.parse(stdout.trim().split("\n").at(-1) ?? "null"));
  if (!parsed.success) {
    throw new PosttrainError("MODEL_BUILD_FAILED", `makeTinyModel: unexpected builder output ${JSON.stringify(stdout)}`);
  }
  return parsed.data;
}
