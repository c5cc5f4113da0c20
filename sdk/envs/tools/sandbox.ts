/**
 * `PythonSandbox`: runs Python code blocks in a sandboxed child process — never in a GPU worker — with a
 * wall-clock timeout, OS resource limits it cannot raise, private namespaces (pid, mount, ipc, network, user)
 * with a minimal filesystem view where the OS allows them, an unprivileged user, an isolated interpreter and
 * captured, truncated output. See docs/tools.md.
 */
import { join } from "node:path";
import { RequestAbortedError } from "../../../bridge/errors.js";
import { InvalidArgumentError } from "../../core/errors.js";
import { packageRoot } from "../../../bridge/worker/python.js";
import { parseOptions } from "../../core/index.js";
import { SandboxClosedError, SandboxUnavailableError } from "./errors.js";
import { PythonSandboxOptionsSchema, type PythonSandboxOptions, type ResolvedSandboxOptions } from "./sandbox-options.js";
import { readCapture } from "./sandbox-output.js";
import { SandboxProcess, type BlockOutcome, type DriverInfo, type SandboxIsolation } from "./sandbox-process.js";
import { sandboxJailPath, sandboxPython, sandboxSupport } from "./sandbox-support.js";

export type { DriverInfo as SandboxInfo, LimitsApplied, SandboxIsolation } from "./sandbox-process.js";

/** How a code block ended. */
export type SandboxStatus =
  /** It ran to the end (or called `sys.exit(0)`). */
  | "ok"
  /** It raised an exception (the traceback is in `stderr`), e.g. `MemoryError` under the memory limit. */
  | "error"
  /** It ran past `timeoutMs`; the process group was killed. */
  | "timeout"
  /** The process died: `os._exit`, a signal (segfault, the CPU limit's SIGXCPU, the OOM killer). */
  | "crashed";

/** The result of {@link PythonSandbox.run}. */
export interface SandboxResult {
  readonly status: SandboxStatus;
  /** What the block wrote to stdout (C extensions and child processes included), truncated to `maxOutputBytes`. */
  readonly stdout: string;
  /** What it wrote to stderr, with the traceback of an exception; truncated likewise. */
  readonly stderr: string;
  /** Whether the middle of stdout / stderr was left out. */
  readonly truncated: { readonly stdout: boolean; readonly stderr: boolean };
  /** The exception's type name for `"error"` (`"ValueError"`, `"MemoryError"`), else `null`. */
  readonly exception: string | null;
  /** The exit code for `"crashed"` when the process exited by itself, else `null`. */
  readonly exitCode: number | null;
  /** The signal for `"crashed"` when a signal killed it (`"SIGSEGV"`, `"SIGXCPU"`), else `null`. */
  readonly signal: string | null;
  /** One line on what went wrong (`"timed out after 2000 ms"`, `"killed by SIGSEGV (segmentation fault)"`); `""` when ok. */
  readonly detail: string;
  /** Persistent mode: the interpreter was lost with this block (crash or timeout); the next block starts afresh. */
  readonly stateLost: boolean;
  /** Wall-clock time of the block, in milliseconds. */
  readonly durationMs: number;
}

/** Options of {@link PythonSandbox.run}. */
export interface SandboxRunOptions {
  /** Aborting kills the block's process; `run` then rejects with `RequestAbortedError` (code `ABORTED`). */
  readonly signal?: AbortSignal;
}

const SIGNAL_NOTES: Readonly<Record<string, string>> = {
  SIGSEGV: "segmentation fault",
  SIGXCPU: "CPU time limit exceeded",
  SIGKILL: "killed: out of memory or past a hard limit",
  SIGABRT: "aborted",
  SIGBUS: "bus error",
  SIGFPE: "floating-point exception",
};

/** The driver script, shipped in the npm package under `python_worker/`. */
export function sandboxDriverPath(): string {
  return join(packageRoot(), "python_worker", "posttrain_worker", "sandbox", "driver.py");
}

/**
 * A Python sandbox. Each code block runs in a child interpreter (`python -I -u`, no `PYTHONPATH`, none of the
 * parent's environment variables) in its own process group, with hard `RLIMIT_AS`, `RLIMIT_CPU`,
 * `RLIMIT_NOFILE`, `RLIMIT_FSIZE` and `RLIMIT_NPROC` set in the child, and a wall-clock timeout that kills the
 * group. On Linux the jail (`jail.py`) puts it in its own user, pid, mount, ipc and (unless the network is
 * allowed) network namespaces, with a minimal root where only the system paths and the Python installation
 * (read-only) and its scratch directory (read-write) exist, as uid 65534 without capabilities: it cannot reach
 * the workers' sockets nor leave a process behind. What the OS refused is in `info().isolation`
 * (see {@link sandboxSupport}; `isolation: "strict"` refuses to run without it).
 *
 * One-shot (default): a fresh process per block; blocks may run concurrently. Persistent: one process keeps its
 * globals between blocks (they run one at a time) and is replaced after a crash or timeout (`stateLost`).
 *
 * It shares the host's kernel: a kernel exploit escapes it. For hostile code, add a VM (see docs/tools.md).
 *
 * ```ts
 * await using sandbox = new PythonSandbox({ timeoutMs: 2000, persistent: true });
 * await sandbox.run("x = 6 * 7");
 * (await sandbox.run("print(x)")).stdout; // "42\n"
 * ```
 */
export class PythonSandbox implements AsyncDisposable {
  private readonly options: ResolvedSandboxOptions;
  private readonly python: string;
  private readonly driver: string;
  private readonly live = new Set<SandboxProcess>();
  private persistentProcess: Promise<SandboxProcess> | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private nextId = 1;
  private closed = false;
  private lastInfo: DriverInfo | undefined;
  private warned = false;

  constructor(options: PythonSandboxOptions = {}) {
    this.options = parseOptions(PythonSandboxOptionsSchema, options, "PythonSandbox options");
    this.python = sandboxPython(this.options.python);
    this.driver = sandboxDriverPath();
  }

  /** The resolved options (defaults filled in). */
  get config(): Readonly<ResolvedSandboxOptions> {
    return this.options;
  }

  /**
   * Runs one code block and resolves with its {@link SandboxResult}; failures of the code (exception, crash,
   * timeout) are results, not rejections. Rejects with `SandboxStartError` when the interpreter cannot start,
   * `SandboxUnavailableError` for `network: "blocked"` where isolation is impossible, `SandboxClosedError` after
   * {@link close}, and `RequestAbortedError` when `signal` aborts.
   */
  run(code: string, options: SandboxRunOptions = {}): Promise<SandboxResult> {
    if (typeof code !== "string") return Promise.reject(new InvalidArgumentError(`PythonSandbox.run: code must be a string, got ${typeof code}`));
    if (this.closed) return Promise.reject(new SandboxClosedError("PythonSandbox.run: the sandbox is closed"));
    if (!this.options.persistent) return this.runOnce(code, options.signal);
    const next = this.queue.then(() => this.runPersistent(code, options.signal));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Persistent mode: stops the interpreter so that the next block starts with fresh globals. */
  async reset(): Promise<void> {
    const next = this.queue.then(async () => {
      const current = this.persistentProcess;
      this.persistentProcess = undefined;
      if (current !== undefined) await this.retire(await current.catch(() => undefined));
    });
    this.queue = next.catch(() => undefined);
    await next;
  }

  /**
   * Information on the persistent interpreter, or in one-shot mode on the last process started (pid, Python
   * version, limits applied, network isolation, the `isolation` report); `undefined` before any started.
   */
  async info(): Promise<DriverInfo | undefined> {
    const current = this.persistentProcess;
    if (current === undefined) return this.lastInfo;
    return (await current.catch(() => undefined))?.info ?? this.lastInfo;
  }

  /** Kills every process of this sandbox and removes their directories; later `run` calls reject. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    this.persistentProcess = undefined;
    await Promise.all([...this.live].map((p) => this.retire(p)));
  }

  /** `close()`, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async runOnce(code: string, signal: AbortSignal | undefined): Promise<SandboxResult> {
    throwIfAborted(signal);
    const proc = await this.spawn();
    try {
      return await this.execute(proc, code, signal, false);
    } finally {
      await this.retire(proc);
    }
  }

  private async runPersistent(code: string, signal: AbortSignal | undefined): Promise<SandboxResult> {
    throwIfAborted(signal);
    if (this.closed) throw new SandboxClosedError("PythonSandbox.run: the sandbox is closed");
    this.persistentProcess ??= this.spawn();
    const current = this.persistentProcess;
    let proc: SandboxProcess;
    try {
      proc = await current;
    } catch (err) {
      if (this.persistentProcess === current) this.persistentProcess = undefined;
      throw err;
    }
    try {
      return await this.execute(proc, code, signal, true);
    } finally {
      // A crash, a timeout or an abort killed it: the next block starts a new interpreter.
      if (!proc.alive) {
        if (this.persistentProcess === current) this.persistentProcess = undefined;
        await this.retire(proc);
      }
    }
  }

  private async spawn(): Promise<SandboxProcess> {
    const isolateNetwork = await this.resolveNetwork();
    if (this.closed) throw new SandboxClosedError("PythonSandbox.run: the sandbox is closed");
    const { memoryBytes, maxOpenFiles, maxFileBytes, maxProcesses, timeoutMs } = this.options;
    const cpuSeconds = this.options.cpuSeconds === undefined ? Math.ceil(timeoutMs / 1000) : this.options.cpuSeconds;
    const jailed = process.platform === "linux";
    const proc = await SandboxProcess.start({
      python: this.python,
      driver: this.driver,
      jail: jailed ? sandboxJailPath() : null,
      isolateNetwork,
      readOnlyPaths: this.options.readOnlyPaths,
      persistent: this.options.persistent,
      // Outside a user namespace of its own RLIMIT_NPROC would count every process of the user: the jail
      // drops it then, and without a jail it is not set at all.
      limits: { memoryBytes, cpuSeconds, maxOpenFiles, maxFileBytes, maxProcesses: jailed ? maxProcesses : null },
      env: this.options.env,
      startTimeoutMs: this.options.startTimeoutMs,
    });
    this.lastInfo = proc.info;
    const missing = proc.info.isolation.missing.filter((m) => isolateNetwork || m.mechanism !== "networkNamespace");
    if (this.closed || (missing.length > 0 && this.options.isolation === "strict")) {
      await proc.dispose();
      if (this.closed) throw new SandboxClosedError("PythonSandbox.run: the sandbox is closed");
      throw new SandboxUnavailableError(`PythonSandbox: isolation "strict" but ${describeMissing(missing)}`);
    }
    if (missing.length > 0 && !this.warned) {
      this.warned = true;
      process.emitWarning(`PythonSandbox: the sandbox runs with incomplete isolation: ${describeMissing(missing)}`, "PosttrainSandboxWarning");
    }
    this.live.add(proc);
    return proc;
  }

  private async resolveNetwork(): Promise<boolean> {
    if (this.options.network === "allowed") return false;
    const support = await sandboxSupport(this.python);
    if (support.networkIsolation) return true;
    if (this.options.network === "blocked") {
      throw new SandboxUnavailableError(`PythonSandbox: network "blocked" needs a network namespace, which is not available here (${support.reason ?? "unknown reason"})`);
    }
    return false;
  }

  private async execute(proc: SandboxProcess, code: string, signal: AbortSignal | undefined, persistent: boolean): Promise<SandboxResult> {
    const started = performance.now();
    const outcome = await proc.run(this.nextId++, code, this.options.timeoutMs, signal);
    if (outcome.kind === "aborted") {
      await proc.exited;
      throw new RequestAbortedError("PythonSandbox.run", outcome.reason);
    }
    if (outcome.kind !== "done") await proc.exited; // the capture files are final once the process is gone
    if (outcome.kind === "exit" && this.closed) throw new SandboxClosedError("PythonSandbox.run: the sandbox was closed while the block ran");
    const durationMs = performance.now() - started;
    const limit = this.options.maxOutputBytes;
    const [stdout, stderr] = await Promise.all([readCapture(proc.stdoutPath, limit), readCapture(proc.stderrPath, limit)]);
    return {
      ...describeOutcome(outcome, this.options.timeoutMs),
      stdout: stdout.text,
      stderr: stderr.text,
      truncated: { stdout: stdout.truncated, stderr: stderr.truncated },
      stateLost: persistent && outcome.kind !== "done",
      durationMs,
    };
  }

  private async retire(proc: SandboxProcess | undefined): Promise<void> {
    if (proc === undefined) return;
    this.live.delete(proc);
    await proc.dispose();
  }
}

type OutcomeFields = Pick<SandboxResult, "status" | "exception" | "exitCode" | "signal" | "detail">;

function describeOutcome(outcome: Exclude<BlockOutcome, { kind: "aborted" }>, timeoutMs: number): OutcomeFields {
  switch (outcome.kind) {
    case "done":
      return {
        status: outcome.status,
        exception: outcome.exception,
        exitCode: null,
        signal: null,
        detail: outcome.status === "ok" ? "" : `raised ${outcome.exception ?? "an exception"}`,
      };
    case "timeout":
      return { status: "timeout", exception: null, exitCode: null, signal: null, detail: `timed out after ${timeoutMs} ms` };
    case "exit": {
      const { exitCode, signal } = outcome;
      const note = signal !== null ? SIGNAL_NOTES[signal] : undefined;
      const detail = signal !== null ? `killed by ${signal}${note !== undefined ? ` (${note})` : ""}` : `exited with code ${String(exitCode)}`;
      return { status: "crashed", exception: null, exitCode: signal !== null ? null : exitCode, signal, detail };
    }
  }
}

function describeMissing(missing: SandboxIsolation["missing"]): string {
  return `these mechanisms are missing: ${missing.map((m) => `${m.mechanism} (${m.reason})`).join("; ")}`;
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted === true) throw new RequestAbortedError("PythonSandbox.run", signal.reason);
}
