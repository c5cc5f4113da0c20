/**
 * Small helpers on child processes shared by the worker supervisor (process.ts), the connection's shutdown
 * (connection.ts) and the Ray driver client (ray-driver.ts): signal a process group, wait with a bound.
 */
import type { ChildProcess } from "node:child_process";

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
