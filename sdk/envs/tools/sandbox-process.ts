/**
 * One sandbox child process: `python -I -u driver.py CONFIG` (under `unshare -rn` when isolating the network) in
 * its own process group and private temporary directory. It runs one code block at a time; the caller decides
 * whether it lives for one block or many. Internal to `PythonSandbox`.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface, type Interface } from "node:readline";
import { z } from "zod";
import { LineTail } from "../../../bridge/worker/stderr-tail.js";
import { SandboxStartError } from "./errors.js";

const LimitsAppliedSchema = z.object({
  memoryBytes: z.boolean(),
  cpuSeconds: z.boolean(),
  maxOpenFiles: z.boolean(),
  maxFileBytes: z.boolean(),
});

const DriverMessageSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("ready"), pid: z.number().int(), python: z.string(), limits: LimitsAppliedSchema }),
  z.object({ type: z.literal("done"), id: z.number().int(), status: z.enum(["ok", "error"]), exception: z.string().nullable() }),
  z.object({ type: z.literal("fail"), id: z.number().int().nullable(), message: z.string() }),
]);

/** Which OS limits the driver could set (`false` where the OS refused or has no such limit). */
export type LimitsApplied = z.infer<typeof LimitsAppliedSchema>;

/** What the driver reported when it became ready. */
export interface DriverInfo {
  readonly pid: number;
  /** The Python version, e.g. `"3.11.7"`. */
  readonly python: string;
  readonly limits: LimitsApplied;
  /** Whether the process runs without network (in its own network namespace). */
  readonly networkIsolated: boolean;
}

/** How one code block ended, as seen from the process. */
export type BlockOutcome =
  | { readonly kind: "done"; readonly status: "ok" | "error"; readonly exception: string | null }
  | { readonly kind: "exit"; readonly exitCode: number | null; readonly signal: string | null }
  | { readonly kind: "timeout" }
  | { readonly kind: "aborted"; readonly reason: unknown };

/** What {@link SandboxProcess.start} needs. */
export interface SandboxProcessOptions {
  readonly python: string;
  readonly driver: string;
  readonly isolateNetwork: boolean;
  readonly limits: {
    readonly memoryBytes: number | null;
    readonly cpuSeconds: number | null;
    readonly maxOpenFiles: number | null;
    readonly maxFileBytes: number | null;
  };
  readonly env: Readonly<Record<string, string>>;
  readonly startTimeoutMs: number;
}

interface Pending {
  readonly id: number;
  readonly settle: (outcome: BlockOutcome) => void;
}

/** Environment variables every sandbox gets; the parent's environment is not passed on (it may hold secrets). */
function baseEnv(workDir: string): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
    HOME: workDir,
    TMPDIR: workDir,
    LANG: "C.UTF-8",
    LC_ALL: "C.UTF-8",
    // One thread for BLAS/OpenMP: less address space under RLIMIT_AS and no oversubscription of shared cores.
    OMP_NUM_THREADS: "1",
    OPENBLAS_NUM_THREADS: "1",
    MKL_NUM_THREADS: "1",
  };
}

/** A live sandbox child process. */
export class SandboxProcess {
  /** Resolves when the process has exited and its pipes are closed. */
  readonly exited: Promise<{ exitCode: number | null; signal: string | null }>;
  private pending: Pending | undefined;
  private hasExited = false;

  private constructor(
    private readonly child: ChildProcess,
    /** The temporary directory: `work/` is the code's cwd, `io/` holds the capture files. */
    readonly rootDir: string,
    readonly info: DriverInfo,
    exited: Promise<{ exitCode: number | null; signal: string | null }>,
    lines: Interface,
  ) {
    this.exited = exited.then((info) => {
      this.hasExited = true;
      this.pending?.settle({ kind: "exit", ...info });
      return info;
    });
    lines.on("line", (line) => {
      this.onLine(line);
    });
  }

  /** The file the running block's stdout goes to. */
  get stdoutPath(): string {
    return join(this.rootDir, "io", "stdout");
  }

  /** The file the running block's stderr goes to. */
  get stderrPath(): string {
    return join(this.rootDir, "io", "stderr");
  }

  /** Whether the process is still running. */
  get alive(): boolean {
    return !this.hasExited;
  }

  /** Creates the temporary directory, spawns the driver and waits for its ready line. */
  static async start(options: SandboxProcessOptions): Promise<SandboxProcess> {
    const rootDir = await mkdtemp(join(tmpdir(), "posttrain-sandbox-"));
    const workDir = join(rootDir, "work");
    const ioDir = join(rootDir, "io");
    await Promise.all([mkdir(workDir), mkdir(ioDir)]);
    const config = JSON.stringify({ ioDir, limits: options.limits });
    const pythonArgs = ["-I", "-u", options.driver, config];
    const [command, args] = options.isolateNetwork ? ["unshare", ["-rn", options.python, ...pythonArgs]] : [options.python, pythonArgs];
    const child = spawn(command, args, {
      cwd: workDir,
      env: { ...baseEnv(workDir), ...options.env },
      stdio: ["pipe", "pipe", "pipe"],
      detached: true, // its own process group, so a kill reaches whatever the code started
    });
    const tail = new LineTail(20);
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      tail.push(chunk);
    });
    child.stdin?.on("error", () => undefined); // EPIPE once the process is gone
    const exited = new Promise<{ exitCode: number | null; signal: string | null }>((resolve) => {
      child.once("close", (exitCode, signal) => {
        resolve({ exitCode, signal });
      });
      child.once("error", () => {
        resolve({ exitCode: child.exitCode, signal: child.signalCode });
      });
    });
    const lines = createInterface({ input: child.stdout });
    try {
      const ready = await waitReady(child, lines, exited, tail, command, options.startTimeoutMs);
      return new SandboxProcess(child, rootDir, { ...ready, networkIsolated: options.isolateNetwork }, exited, lines);
    } catch (err) {
      killGroup(child);
      await exited;
      await rm(rootDir, { recursive: true, force: true });
      throw err;
    }
  }

  /**
   * Sends one code block and resolves with how it ended: the driver's answer, the process's exit, the timeout
   * (the process group is killed) or the abort (killed too). Never rejects.
   */
  run(id: number, code: string, timeoutMs: number, signal?: AbortSignal): Promise<BlockOutcome> {
    return new Promise<BlockOutcome>((resolve) => {
      let settled = false;
      const settle = (outcome: BlockOutcome): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        this.pending = undefined;
        if (outcome.kind === "timeout" || outcome.kind === "aborted") this.kill();
        resolve(outcome);
      };
      const onAbort = (): void => {
        settle({ kind: "aborted", reason: signal?.reason });
      };
      const timer = setTimeout(() => {
        settle({ kind: "timeout" });
      }, timeoutMs);
      if (this.hasExited) {
        settle({ kind: "exit", exitCode: this.child.exitCode, signal: this.child.signalCode });
        return;
      }
      this.pending = { id, settle };
      signal?.addEventListener("abort", onAbort, { once: true });
      if (signal?.aborted === true) {
        onAbort();
        return;
      }
      this.child.stdin?.write(`${JSON.stringify({ type: "run", id, code })}\n`);
    });
  }

  /** Kills the whole process group with SIGKILL (no-op once it has exited). */
  kill(): void {
    if (!this.hasExited) killGroup(this.child);
  }

  /** Kills the process, waits for it to exit and removes its temporary directory. */
  async dispose(): Promise<void> {
    this.kill();
    await this.exited;
    await rm(this.rootDir, { recursive: true, force: true });
  }

  private onLine(line: string): void {
    const message = parseMessage(line);
    const pending = this.pending;
    if (message === undefined || pending === undefined) return;
    if (message.type === "done" && message.id === pending.id) {
      pending.settle({ kind: "done", status: message.status, exception: message.exception });
    }
  }
}

function parseMessage(line: string): z.infer<typeof DriverMessageSchema> | undefined {
  try {
    const parsed = DriverMessageSchema.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    child.kill("SIGKILL"); // the group is gone already, or the platform has no process groups
  }
}

function waitReady(
  child: ChildProcess,
  lines: Interface,
  exited: Promise<{ exitCode: number | null; signal: string | null }>,
  tail: LineTail,
  command: string,
  timeoutMs: number,
): Promise<Omit<DriverInfo, "networkIsolated">> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (error: Error | undefined, ready?: Omit<DriverInfo, "networkIsolated">): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      lines.off("line", onLine);
      if (ready !== undefined && error === undefined) resolve(ready);
      else reject(error ?? new SandboxStartError("sandbox: no ready line", tail.text()));
    };
    const onLine = (line: string): void => {
      const message = parseMessage(line);
      if (message?.type === "ready") finish(undefined, { pid: message.pid, python: message.python, limits: message.limits });
    };
    const timer = setTimeout(() => {
      finish(new SandboxStartError(`sandbox: not ready after ${timeoutMs} ms`, tail.text()));
    }, timeoutMs);
    lines.on("line", onLine);
    child.once("error", (err) => {
      finish(new SandboxStartError(`sandbox: could not run ${command} (${err.message})`));
    });
    void exited.then(({ exitCode, signal }) => {
      const how = signal !== null ? `was killed by ${signal}` : `exited with code ${String(exitCode)}`;
      finish(new SandboxStartError(`sandbox: the interpreter ${how} before it was ready`, tail.text()));
    });
  });
}
