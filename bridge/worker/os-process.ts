/**
 * Small helpers on child processes shared by the worker supervisor (process.ts), the connection's shutdown
 * (connection.ts) and the Ray driver client (ray-driver.ts): spawn a Python module supervised, signal a process
 * group, wait with a bound.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { LineTail } from "./stderr-tail.js";

/**
 * How long after a process's exit its stderr may still be read into the tail (the last lines a dying process
 * wrote are usually already in the pipe). Not longer: a grandchild that inherited the pipe keeps it open for as
 * long as it lives, and waiting for the pipe to close delayed the detection of a worker's death by 19 s.
 */
const STDERR_DRAIN_MS = 100;

/** A Python child spawned by {@link spawnPythonModule}. */
export interface SpawnedPython {
  readonly child: ChildProcess;
  /** Its last stderr lines. */
  readonly tail: LineTail;
  /**
   * Resolves soon after the process has exited: at once when its pipes close with it, else after
   * `STDERR_DRAIN_MS` of reading what is left of its stderr (a grandchild may hold the pipes open).
   */
  readonly exited: Promise<{ readonly exitCode: number | null; readonly signal: NodeJS.Signals | null }>;
}

/**
 * Spawns `python -m module ...args` with piped stdio, unbuffered, in a process group of its own (a terminal's Ctrl-C
 * reaches only this Node process, which decides how to stop it; a group kill takes what it started), keeping its
 * stderr tail, and forwarding its stderr lines prefixed with `[forwardAs]` when that is given.
 *
 * ```ts
 * const { child, exited } = spawnPythonModule(python, "posttrain_worker", ["--endpoint", endpoint], {});
 * ```
 */
export function spawnPythonModule(
  python: string,
  module: string,
  args: readonly string[],
  options: { readonly env?: Readonly<Record<string, string>>; readonly forwardAs?: string },
): SpawnedPython {
  const tail = new LineTail();
  const child = spawn(python, ["-m", module, ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, PYTHONUNBUFFERED: "1", ...options.env },
    detached: process.platform !== "win32",
  });
  const exited = new Promise<SpawnedPython["exited"] extends Promise<infer E> ? E : never>((resolve) => {
    // "exit", not "close": "close" also waits for stdout and stderr to close, which a grandchild holding them
    // delays for as long as it lives. "close" still ends the short drain early when the pipes close with the process.
    child.once("exit", (exitCode, signal) => {
      const drained = setTimeout(() => {
        // Stop reading pipes that only a grandchild holds: they would keep this process alive.
        child.stdout?.destroy();
        child.stderr?.destroy();
        resolve({ exitCode, signal });
      }, STDERR_DRAIN_MS);
      child.once("close", () => {
        clearTimeout(drained);
        resolve({ exitCode, signal });
      });
    });
    child.once("error", () => {
      resolve({ exitCode: child.exitCode, signal: child.signalCode });
    });
  });
  child.stdin?.on("error", () => undefined); // EPIPE once the process has exited is expected
  child.stderr?.setEncoding("utf8");
  const prefix = options.forwardAs;
  child.stderr?.on("data", (chunk: string) => {
    tail.push(chunk, prefix !== undefined ? (line) => process.stderr.write(`[${prefix}] ${line}\n`) : undefined);
  });
  return { child, tail, exited };
}

/**
 * Signals `child`'s process group (it leads one: spawned `detached`), else `child` alone (no groups on Windows).
 * Also useful after the child's own exit: processes it started and left behind are still in its group.
 *
 * ```ts
 * signalGroup(child, "SIGKILL");
 * ```
 */
export function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid !== undefined && process.platform !== "win32") {
    try {
      process.kill(-child.pid, signal);
      return;
    } catch {
      // ESRCH (the group is gone already) or EPERM: the child alone, which ignores a finished process.
    }
  }
  child.kill(signal);
}

/**
 * Resolves `true` once `promise` settles, or `false` after `timeoutMs` (the timer is cleared either way).
 *
 * ```ts
 * if (!(await waitFor(worker.exited, 5000))) worker.kill("SIGKILL");
 * ```
 */
export async function waitFor(promise: Promise<unknown>, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => {
      resolve(false);
    }, timeoutMs);
  });
  const settled = promise.then(
    () => true as const,
    () => true as const,
  );
  const done = await Promise.race([settled, timeout]);
  clearTimeout(timer);
  return done;
}
