/**
 * Typed errors of the task environments. Each one is a {@link PosttrainError} with a stable `code`.
 */
import { PosttrainError } from "../../core/errors.js";

/** How to get `math_verify` into the workers' Python: the worker's `math` extra. */
export const MATH_EXTRA_HINT = "install the worker's `math` extra: `npx posttrain setup --extras math`";

/**
 * `math-verify` was required (`backend: "math-verify"`) but cannot be used: there is no worker Python environment,
 * the interpreter does not start, or the `math_verify` package (the worker's `math` extra) is not importable there.
 * The message says how to install it. Code `MATH_VERIFY_UNAVAILABLE`.
 *
 * ```ts
 * try { await openMathVerifier({ backend: "math-verify" }); } catch (err) { if (err instanceof MathVerifyUnavailableError) console.error(err.message); }
 * ```
 */
export class MathVerifyUnavailableError extends PosttrainError {
  /** The Python interpreter that was tried. */
  readonly python: string;

  constructor(python: string, reason: string, options?: { cause?: unknown }) {
    super("MATH_VERIFY_UNAVAILABLE", `math-verify is not available with ${python}: ${reason}; ${MATH_EXTRA_HINT}`, options);
    this.python = python;
  }
}
