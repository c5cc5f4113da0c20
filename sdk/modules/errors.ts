import { PosttrainError } from "../core/errors.js";

/**
 * A model backend the worker does not offer, e.g. `vLLMWrapper` on a worker without the `vllm` package (code
 * `"BACKEND_UNAVAILABLE"`, the code the worker itself answers `loadModel` with in that case).
 */
export class BackendUnavailableError extends PosttrainError {
  constructor(message: string) {
    super("BACKEND_UNAVAILABLE", message);
  }
}
