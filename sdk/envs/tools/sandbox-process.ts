/**
 * One sandbox child process: on Linux `python -I -u jail.py CONFIG`, which puts `driver.py` in private namespaces
 * with a minimal filesystem view and runs it as an unprivileged user (elsewhere the driver itself), in its own
 * process group and private temporary directory. It runs one code block at a time; the caller decides whether
 * it lives for one block or many. Internal to `PythonSandbox`.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, readdirSync, readlinkSync } from "node:fs";
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
  maxProcesses: z.boolean(),
});

const IsolationSchema = z.object({
  userNamespace: z.boolean(),
  pidNamespace: z.boolean(),
  mountNamespace: z.boolean(),
  ipcNamespace: z.boolean(),
  networkNamespace: z.boolean(),
  filesystem: z.boolean(),
  proc: z.boolean(),
  unprivilegedUser: z.boolean(),
  missing: z.array(z.object({ mechanism: z.string(), reason: z.string() })),
});

const DriverMessageSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("ready"), pid: z.number().int(), python: z.string(), limits: LimitsAppliedSchema }),
  z.object({ type: z.literal("done"), id: z.number().int(), status: z.enum(["ok", "error"]), exception: z.string().nullable() }),
  z.object({ type: z.literal("fail"), id: z.number().int().nullable(), message: z.string() }),
  IsolationSchema.extend({ type: z.literal("isolation") }),
  z.object({ type: z.literal("exit"), exitCode: z.number().int().nullable(), signal: z.string().nullable() }),
]);

/** Which OS limits the driver could set (`false` where the OS refused or has no such limit). */
export type LimitsApplied = z.infer<typeof LimitsAppliedSchema>;

/**
 * Which isolation mechanisms hold the sandboxed code (see docs/tools.md): each `true` where it is in place, and
 * `missing` naming each one the OS refused, with why. `networkNamespace` is also `false` with `network: "allowed"`.
 */
export interface SandboxIsolation {
  /** A user namespace of its own: the code runs as uid/gid 65534 there, and its process count is its own. */
  readonly userNamespace: boolean;
  /** A pid namespace: killing its pid 1 kills every process the code started, `setsid` daemons included. */
  readonly pidNamespace: boolean;
  /** A mount namespace of its own. */
  readonly mountNamespace: boolean;
  /** An ipc namespace (System V IPC, POSIX message queues). */
  readonly ipcNamespace: boolean;
  /** A network namespace whose only interface is a loopback that is down (no tcp, no abstract unix sockets). */
  readonly networkNamespace: boolean;
  /** A minimal root: read-only system paths and Python installation, the scratch directory read-write, nothing else. */
  readonly filesystem: boolean;
  /** A `/proc` of its own pid namespace (without it the code sees no `/proc`). */
  readonly proc: boolean;
  /** The code runs as uid 65534 without capabilities and with `no_new_privs`. */
  readonly unprivilegedUser: boolean;
  /** The mechanisms the OS refused, with the reason. Empty when the isolation is complete. */
  readonly missing: readonly { readonly mechanism: string; readonly reason: string }[];
}

/** What the driver reported when it became ready. */
export interface DriverInfo {
  /** The host pid of the sandbox's process (on Linux the jail, whose process group holds the code). */
  readonly pid: number;
  /** The Python version, e.g. `"3.11.7"`. */
  readonly python: string;
  readonly limits: LimitsApplied;
  /** Whether the process runs without network (in its own network namespace). */
  readonly networkIsolated: boolean;
  /** Which isolation mechanisms are in place. */
  readonly isolation: SandboxIsolation;
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
  /** The jail script; `null` runs the driver directly (not Linux: no namespaces to build). */
  readonly jail: string | null;
  readonly isolateNetwork: boolean;
  /** Extra host paths shown read-only to the code (absolute). */
  readonly readOnlyPaths: readonly string[];
  /** Persistent interpreter: its hard CPU limit is a lifetime budget (see driver.py). */
  readonly persistent: boolean;
  readonly limits: {
    readonly memoryBytes: number | null;
    readonly cpuSeconds: number | null;
    readonly maxOpenFiles: number | null;
    readonly maxFileBytes: number | null;
    readonly maxProcesses: number | null;
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
  /**
   * Resolves when the process has exited, its pipes are closed and, in a jail, every process of its pid namespace is
   * gone (the kernel kills them after the namespace's pid 1, a moment after the jail itself has exited).
   */
  readonly exited: Promise<{ exitCode: number | null; signal: string | null }>;
  private pending: Pending | undefined;
  private hasExited = false;
  /** How the driver ended, as its pid 1 reported it (the jail's own exit says nothing about the driver). */
  private driverExit: { exitCode: number | null; signal: string | null } | undefined;

  private constructor(
    private readonly child: ChildProcess,
    /** The temporary directory: `work/` is the code's cwd, `io/` holds the capture files. */
    readonly rootDir: string,
    readonly info: DriverInfo,
    exited: Promise<{ exitCode: number | null; signal: string | null }>,
    lines: Interface,
  ) {
    const namespace = child.pid === undefined ? undefined : pidNamespaceOfChildren(child.pid);
    this.exited = exited.then(async (processExit) => {
      if (namespace !== undefined) await namespaceEmptied(namespace, NAMESPACE_TEARDOWN_MS);
      this.hasExited = true;
      const info = this.driverExit ?? processExit;
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
    // `root/` is where the jail mounts the code's minimal root (in its own mount namespace; empty here).
    await Promise.all([mkdir(workDir), mkdir(ioDir), mkdir(join(rootDir, "root"))]);
    const driverConfig = JSON.stringify({ ioDir, limits: options.limits, persistent: options.persistent });
    const args =
      options.jail === null
        ? ["-I", "-u", options.driver, driverConfig]
        : [
            "-I",
            "-u",
            options.jail,
            JSON.stringify({
              driver: options.driver,
              driverConfig,
              root: join(rootDir, "root"),
              writable: [workDir, ioDir],
              readOnly: options.readOnlyPaths,
              isolateNetwork: options.isolateNetwork,
            }),
          ];
    const command = options.python;
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
      const ready = await waitReady(child, lines, exited, tail, command, options.startTimeoutMs, options.jail !== null);
      // The host pid of the process started here (the driver's own pid is 2 inside its pid namespace).
      return new SandboxProcess(child, rootDir, { ...ready, pid: child.pid ?? ready.pid }, exited, lines);
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
        settle({ kind: "exit", ...(this.driverExit ?? { exitCode: this.child.exitCode, signal: this.child.signalCode }) });
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
    if (message?.type === "exit") this.driverExit = { exitCode: message.exitCode, signal: message.signal };
    const pending = this.pending;
    if (message === undefined || pending === undefined) return;
    if (message.type === "done" && message.id === pending.id) {
      pending.settle({ kind: "done", status: message.status, exception: message.exception });
    }
  }
}

/** The report of a sandbox without any namespace, every mechanism missing for `reason`. */
function notIsolated(reason: string): SandboxIsolation {
  const mechanisms = ["userNamespace", "pidNamespace", "mountNamespace", "ipcNamespace", "networkNamespace", "filesystem", "proc", "unprivilegedUser"] as const;
  return {
    userNamespace: false,
    pidNamespace: false,
    mountNamespace: false,
    ipcNamespace: false,
    networkNamespace: false,
    filesystem: false,
    proc: false,
    unprivilegedUser: false,
    missing: mechanisms.map((mechanism) => ({ mechanism, reason })),
  };
}

function parseMessage(line: string): z.infer<typeof DriverMessageSchema> | undefined {
  try {
    const parsed = DriverMessageSchema.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** How long a closed sandbox waits for the kernel to empty its pid namespace. */
const NAMESPACE_TEARDOWN_MS = 5_000;

/** The pid namespace `pid`'s children are born in (`"pid:[inode]"`): the jail's own after its `unshare`; undefined without `/proc`. */
function pidNamespaceOfChildren(pid: number): string | undefined {
  try {
    const own = readlinkSync(`/proc/${String(pid)}/ns/pid`);
    const children = readlinkSync(`/proc/${String(pid)}/ns/pid_for_children`);
    return children === own ? undefined : children; // no pid namespace of its own: nothing to wait for
  } catch {
    return undefined;
  }
}

/**
 * Resolves once no live process is left in pid namespace `namespace`, or after `ms` (best effort: processes we may not
 * inspect are skipped). The namespace's pid 1 stays a zombie until the host's init reaps it (a second or more in some
 * containers); it exits only after the kernel has killed the rest, so a zombie counts as gone.
 */
async function namespaceEmptied(namespace: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  const inNamespace = (entry: string): boolean => {
    try {
      if (!/^\d+$/.test(entry) || readlinkSync(`/proc/${entry}/ns/pid`) !== namespace) return false;
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
      return state !== "Z" && state !== "X";
    } catch {
      return false; // gone while we looked, or not ours to inspect
    }
  };
  while (Date.now() < deadline && readdirSync("/proc").some(inNamespace)) {
    await new Promise((resolve) => setTimeout(resolve, 10));
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
  jailed: boolean,
): Promise<DriverInfo> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let isolation: SandboxIsolation = jailed ? notIsolated("the jail sent no isolation report") : notIsolated(`namespaces need Linux (this is ${process.platform})`);
    const finish = (error: Error | undefined, ready?: DriverInfo): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      lines.off("line", onLine);
      if (ready !== undefined && error === undefined) resolve(ready);
      else reject(error ?? new SandboxStartError("sandbox: no ready line", tail.text()));
    };
    const onLine = (line: string): void => {
      const message = parseMessage(line);
      if (message?.type === "isolation") {
        isolation = IsolationSchema.parse(message); // drops `type`
      }
      if (message?.type === "ready") {
        finish(undefined, { pid: message.pid, python: message.python, limits: message.limits, networkIsolated: isolation.networkNamespace, isolation });
      }
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
