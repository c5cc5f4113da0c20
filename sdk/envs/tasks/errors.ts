/**
 * Typed errors of the task environments. Each one is a {@link PosttrainError} with a stable `code`.
 */
import { PosttrainError } from "../../core/errors.js";

/**
 * `math-verify` was required (`backend: "math-verify"`) but cannot be used: pythonia is not installed, the Python
 * interpreter does not start, or the `math_verify` package is not importable there. Code `MATH_VERIFY_UNAVAILABLE`.
 */
export class MathVerifyUnavailableError extends PosttrainError {
  /** The Python interpreter that was tried. */
  readonly python: string;

  constructor(python: string, reason: string, options?: { cause?: unknown }) {
    super("MATH_VERIFY_UNAVAILABLE", `math-verify is not available with ${python}: ${reason}`, options);
    this.python = python;
  }
}
