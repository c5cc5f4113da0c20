import type { WorkerClient } from "../workers/client.js";
import { LLMWrapperBase, LLMWrapperOptionsSchema, type LLMWrapperOptions } from "./llm-wrapper.js";

export { GenerateKwargsSchema } from "./llm-wrapper.js";

/** Options of {@link TransformersWrapper} (TorchRL's names, camelCased). */
export const TransformersWrapperOptionsSchema = LLMWrapperOptionsSchema;

/** Options of {@link TransformersWrapper}. */
export type TransformersWrapperOptions = LLMWrapperOptions;

/**
 * TorchRL's `TransformersWrapper` over a model held by a worker: `forward(td)` reads the input key of its
 * `inputMode` and writes TorchRL's output keys into a copy of `td`.
 *
 * - Generating: reads `(mode, "prompt")`; writes `("tokens"|"text", "prompt"|"response"|"full")`,
 *   `("log_probs", "response"|"full")`, `("masks", ...)`, `finish_reason` and, in history mode,
 *   `("history", "response"|"full")` (the response as one assistant message, incomplete when cut by length).
 *   With `numSamples > 1` the batch gains a last dimension of that size; input leaves are repeated.
 * - Scoring (`generate: false`): reads `(mode, "full")`; writes `("tokens", "full")`, `("log_probs", "full")`
 *   and, in history mode, the masks of the worker's chat template (`all_assistant_mask`).
 */
export class TransformersWrapper extends LLMWrapperBase {
  constructor(worker: WorkerClient, options: TransformersWrapperOptions) {
    super(worker, options, "TransformersWrapper options");
  }
}
