import { z } from "zod";

/** Weight dtypes a model can be loaded in. */
export const MODEL_DTYPES = ["float32", "bfloat16", "float16"] as const;

/**
 * Model backends: `"transformers"` (default; the worker's own decoding loop over the HF model) or `"vllm"` (a vLLM
 * engine in the worker, where the `vllm` package is installed; see docs/models.md, "vLLM backend").
 */
export const MODEL_BACKENDS = ["transformers", "vllm"] as const;

/** A model backend (see {@link MODEL_BACKENDS}). */
export type ModelBackend = (typeof MODEL_BACKENDS)[number];

/** `loadModel` options that only the `"vllm"` backend takes. */
const VLLM_ONLY_OPTIONS = ["gpuMemoryUtilization", "maxModelLen", "enablePrefixCaching", "enforceEager"] as const;

/** Options of `WorkerClient.loadModel`. */
export const LoadModelOptionsSchema = z
  .strictObject({
  /** Name the model is known by in this worker, e.g. `"policy"` or `"ref"`. */
  name: z.string().min(1),
  /** A local directory in Hugging Face format, or a hub id (`name` or `namespace/name`; offline, from the HF cache). */
  path: z.string().min(1),
  /** Default `"float32"`. */
  dtype: z.enum(MODEL_DTYPES).default("float32"),
  /** A torch device such as `"cpu"` or `"cuda:0"`; default: the worker's device. */
  device: z.string().min(1).optional(),
  /** Replace a model already loaded under `name` (default false: that is an error). */
  replace: z.boolean().default(false),
  /** `"transformers"` (default) or `"vllm"` (needs the `vllm` package in the worker: `BACKEND_UNAVAILABLE` otherwise). */
  backend: z.enum(MODEL_BACKENDS).default("transformers"),
  /** vLLM only: the fraction of GPU memory the engine may take, in (0, 1]. Default 0.9. */
  gpuMemoryUtilization: z.number().gt(0).max(1).optional(),
  /** vLLM only: the context length (prompt + response); default the model's `max_position_embeddings`. */
  maxModelLen: z.number().int().min(1).optional(),
  /** vLLM only: reuse the KV cache of shared prompt prefixes (GRPO groups). Default true. */
  enablePrefixCaching: z.boolean().optional(),
  /** vLLM only: no CUDA graphs (faster start, slower decoding). Default: true on vLLM's CPU engine, false on a GPU. */
  enforceEager: z.boolean().optional(),
  /**
   * Jinja text replacing the directory's chat template (saved with the model's checkpoints), for instance one whose
   * assistant turns sit in `{% generation %}` blocks; checked by rendering a one-message chat (docs/history.md,
   * "Assistant masks").
   */
  chatTemplate: z.string().min(1).optional(),
})
  .superRefine((options, ctx) => {
    if (options.backend === "vllm") {
      if (options.device !== undefined) {
        ctx.addIssue({ code: "custom", path: ["device"], message: 'not an option of backend "vllm" (vLLM runs on the worker\'s GPU)' });
      }
      return;
    }
    for (const key of VLLM_ONLY_OPTIONS) {
      if (options[key] !== undefined) {
        ctx.addIssue({ code: "custom", path: [key], message: `an option of backend "vllm", not of "${options.backend}"` });
      }
    }
  });

/** Options of `WorkerClient.loadModel` (input form: defaults may be left out). */
export type LoadModelOptions = z.input<typeof LoadModelOptionsSchema>;

/** What a worker reports about a loaded model. */
export const ModelInfoSchema = z.object({
  name: z.string(),
  path: z.string(),
  modelType: z.string(),
  dtype: z.enum(MODEL_DTYPES),
  device: z.string(),
  parameters: z.number().int().nonnegative(),
  memoryBytes: z.number().int().nonnegative(),
  vocabSize: z.number().int().positive(),
  maxPositionEmbeddings: z.number().int().positive().nullable(),
  eosTokenId: z.number().int().nullable(),
  /** The text of each token that ends generation (`generation_config.eos_token_id` and the tokenizer's eos). */
  eosTokens: z.array(z.string()).default([]),
  padTokenId: z.number().int().nullable(),
  hasChatTemplate: z.boolean(),
  /** Bumped by every weight sync into or out of this model (docs/training.md, "Weight sync"). */
  policyVersion: z.number().int().nonnegative(),
  /** The backend the model was loaded with. */
  backend: z.enum(MODEL_BACKENDS).default("transformers"),
  /** What runs it, e.g. `"transformers 5.2.0"` or `"vllm 0.15.1"` (a test double says `"FAKE vllm ..."`). */
  engine: z.string().optional(),
});

/** What a worker reports about a loaded model: parameter count, memory, vocabulary, context length. */
export type ModelInfo = z.infer<typeof ModelInfoSchema>;

/** The reply of `list_models`. */
export const ModelListSchema = z.object({ models: z.array(ModelInfoSchema) });
