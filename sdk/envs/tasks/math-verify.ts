/**
 * Symbolic answer checking for MATH through Hugging Face's `math-verify` Python library, called with pythonia
 * (DESIGN.md: pythonia's one bounded role — a few strings to a CPU-side Python library). pythonia is a dependency of
 * posttrain; `math_verify` comes with the worker's `math` extra (`npx posttrain setup --extras math`; a checkout's
 * `.venv` has it through the test extras).
 *
 * {@link openMathVerifier} with `backend: "auto"` (the default) first checks, in a short-lived subprocess, that the
 * interpreter can `import math_verify`; only then does it load pythonia (which starts one Python process for the whole
 * Node process). When any of that fails it returns the string verifier ({@link STRING_MATH_VERIFIER}: equality after
 * `normalizeMathAnswer`) with `fallbackReason` saying why, and emits one process warning
 * (`PosttrainMathVerifyWarning`) per interpreter and reason; it never throws. `backend: "math-verify"` throws
 * {@link MathVerifyUnavailableError} instead, naming the extra to install.
 *
 * With math-verify, an answer pair that normalises to the same string is equivalent without a Python call;
 * otherwise both are parsed as `$…$` LaTeX and compared with `verify(gold, predicted)`; a Python error during
 * that comparison counts as not equivalent.
 */
import { execFile } from "node:child_process";
import { z } from "zod";
import { resolvePython } from "../../../bridge/index.js";
import { parseOptions } from "../../core/index.js";
import { MATH_EXTRA_HINT, MathVerifyUnavailableError } from "./errors.js";
import { mathAnswersEqual, STRING_MATH_VERIFIER, type MathAnswerVerifier } from "./math.js";

/** Options of {@link openMathVerifier}. */
export const MathVerifierOptionsSchema = z.strictObject({
  /** `"auto"` (default): math-verify when importable, else string equality; `"math-verify"`: required; `"string"`. */
  backend: z.enum(["auto", "math-verify", "string"]).default("auto"),
  /** The Python interpreter that has `math_verify` (default: the workers' interpreter, `resolvePython()`). */
  python: z.string().min(1).optional(),
  /** How long the import check may take, in ms (default 60 000). */
  importTimeoutMs: z.number().int().positive().default(60_000),
});

/** Options of {@link openMathVerifier}. */
export type MathVerifierOptions = z.input<typeof MathVerifierOptionsSchema>;

/** A verifier that holds resources: close it (or `await using` it) when done. */
export interface OpenMathVerifier extends MathAnswerVerifier, AsyncDisposable {
  /** Why the string verifier is used although `"auto"` asked for math-verify (absent otherwise). */
  readonly fallbackReason?: string;
  /** Releases the shared pythonia process once no verifier uses it. Idempotent. */
  close(): Promise<void>;
}

interface PyProxy {
  (...args: unknown[]): Promise<unknown>;
}
interface MathVerifyModule {
  readonly parse: PyProxy;
  readonly verify: PyProxy;
}
interface Pythonia {
  python: ((module: string) => Promise<unknown>) & { exit(): void };
}

// pythonia keeps one Python process per Node process: share it and stop it when the last verifier closes.
let shared: { python: string; pythonia: Pythonia; module: MathVerifyModule; refs: number } | undefined;

function canImport(python: string, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(python, ["-c", "import math_verify"], { timeout: timeoutMs }, (err, _stdout, stderr) => {
      if (err === null) resolve(undefined);
      else {
        const lines = stderr.trim().split("\n");
        resolve(lines[lines.length - 1] || err.message);
      }
    });
  });
}

async function acquire(python: string): Promise<MathVerifyModule> {
  if (shared !== undefined) {
    if (shared.python !== python) throw new Error(`pythonia already runs ${shared.python}; one interpreter per process`);
    shared.refs++;
    return shared.module;
  }
  process.env.PYTHON_BIN = python; // read by pythonia when it starts its process
  const pythonia = (await import("pythonia")) as unknown as Pythonia;
  try {
    const module = (await pythonia.python("math_verify")) as MathVerifyModule;
    shared = { python, pythonia, module, refs: 1 };
    return module;
  } catch (err) {
    pythonia.python.exit();
    throw err;
  }
}

function release(): void {
  if (shared === undefined) return;
  if (--shared.refs > 0) return;
  shared.pythonia.python.exit();
  shared = undefined;
}

// Each distinct fallback is reported once per process, not once per environment or per run.
const warned = new Set<string>();

function warnFallback(reason: string): string {
  if (!warned.has(reason)) {
    warned.add(reason);
    process.emitWarning(`${reason}; MATH answers are compared as normalised strings (${MATH_EXTRA_HINT})`, "PosttrainMathVerifyWarning");
  }
  return reason;
}

function stringVerifier(fallbackReason?: string): OpenMathVerifier {
  return {
    backend: "string",
    equivalent: (predicted, reference) => STRING_MATH_VERIFIER.equivalent(predicted, reference),
    ...(fallbackReason !== undefined ? { fallbackReason } : {}),
    close: () => Promise.resolve(),
    [Symbol.asyncDispose]: () => Promise.resolve(),
  };
}

/**
 * A MATH answer verifier: math-verify through pythonia when available (see the module notes), else normalised
 * string equality. Throws {@link MathVerifyUnavailableError} only for `backend: "math-verify"`.
 */
export async function openMathVerifier(options: MathVerifierOptions = {}): Promise<OpenMathVerifier> {
  const { backend, python: explicit, importTimeoutMs } = parseOptions(MathVerifierOptionsSchema, options, "openMathVerifier options");
  if (backend === "string") return stringVerifier();
  let python: string;
  try {
    python = resolvePython(explicit);
  } catch (err) {
    // No worker environment at all (PYTHON_ENV_MISSING): the same answer as a Python without math_verify.
    const reason = err instanceof Error ? err.message : String(err);
    if (backend === "math-verify") throw new MathVerifyUnavailableError("(no interpreter)", reason, { cause: err });
    return stringVerifier(warnFallback(`math-verify is not available: ${reason}`));
  }
  const unavailable = (reason: string, cause?: unknown): OpenMathVerifier => {
    if (backend === "math-verify") throw new MathVerifyUnavailableError(python, reason, { cause });
    return stringVerifier(warnFallback(`math-verify is not available with ${python}: ${reason}`));
  };
  const importProblem = await canImport(python, importTimeoutMs);
  if (importProblem !== undefined) return unavailable(importProblem);
  let module: MathVerifyModule;
  try {
    module = await acquire(python);
  } catch (err) {
    return unavailable(`pythonia could not load math_verify (${err instanceof Error ? err.message : String(err)})`, err);
  }
  let open = true;
  const close = (): Promise<void> => {
    if (open) {
      open = false;
      release();
    }
    return Promise.resolve();
  };
  return {
    backend: "math-verify",
    async equivalent(predicted: string, reference: string): Promise<boolean> {
      if (mathAnswersEqual(predicted, reference)) return true;
      if (!open) throw new MathVerifyUnavailableError(python, "this verifier is closed");
      try {
        const gold = await module.parse(`$${reference}$`);
        const answer = await module.parse(`$${predicted}$`);
        return (await module.verify(gold, answer)) === true;
      } catch {
        return false;
      }
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
