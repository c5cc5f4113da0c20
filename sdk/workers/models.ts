import { z } from "zod";

/** Weight dtypes a model can be loaded in. */
export const MODEL_DTYPES = ["float32", "bfloat16", "float16"] as const;

/** Options of `WorkerClient.loadModel`. */
export const LoadModelOptionsSchema = z.strictObject({
  /** Name the model is known by in this worker, e.g. `"policy"` or `"ref"`. */
  name: z.string().min(1),
  /** A local directory in Hugging Face format, or a hub id (only where the worker is online). */
  path: z.string().min(1),
  /** Default `"float32"`. */
  dtype: z.enum(MODEL_DTYPES).default("float32"),
  /** A torch device such as `"cpu"` or `"cuda:0"`; default: the worker's device. */
  device: z.string().min(1).optional(),
  /** Replace a model already loaded under `name` (default false: that is an error). */
  replace: z.boolean().default(false),
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
  padTokenId: z.number().int().nullable(),
  hasChatTemplate: z.boolean(),
});

/** What a worker reports about a loaded model: parameter count, memory, vocabulary, context length. */
export type ModelInfo = z.infer<typeof ModelInfoSchema>;

/** The reply of `list_models`. */
export const ModelListSchema = z.object({ models: z.array(ModelInfoSchema) });
