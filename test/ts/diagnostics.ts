// Calls of the test worker extension test/python/extensions/diagnostics.py (`row_sums`, `compute_for`): methods that
// exist only for tests of the codec, liveness, timeouts and cancellation, so they are not in the SDK's method table.
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { z } from "zod";
import type { RequestOptions } from "../../sdk/index.js";
import { TensorDict, type WorkerClient } from "../../sdk/index.js";

/** Pass to `WorkerPool.local({ extensions: [DIAGNOSTICS_EXTENSION] })`. */
export const DIAGNOSTICS_EXTENSION = resolve(import.meta.dirname, "../python/extensions/diagnostics.py");

/**
 * Per row of every tensor leaf, the sum of its elements (float64), computed by torch in the worker; for string leaves
 * the row's length in characters, for history leaves its number of messages (int64). Same keys and batch size as `td`.
 */
export async function rowSums(worker: WorkerClient, td: TensorDict, options: RequestOptions = {}): Promise<TensorDict> {
  const reply = await worker.call("row_sums", {}, [{ kind: "tensordict", data: td.toArrow() }], options);
  const payload = reply.payloads[0];
  if (payload?.kind !== "tensordict") throw new Error(`row_sums: expected a tensordict payload, got ${payload?.kind ?? "none"}`);
  return TensorDict.fromArrow(payload.data);
}

/** Keeps the worker's compute thread busy for `seconds`; resolves to the loop's iteration count. */
export async function computeFor(worker: WorkerClient, seconds: number, options: RequestOptions = {}): Promise<number> {
  const reply = await worker.call("compute_for", { seconds }, [], options);
  return z.object({ iterations: z.number().int().nonnegative() }).parse(reply.result).iterations;
}

/** Whether a process with this pid exists (a zombie counts: it has not been reaped yet). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** State letter and parent pid of `pid` from `/proc/<pid>/stat`, or `undefined` once it is gone. */
function procStat(pid: number): { state: string; ppid: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${String(pid)}/stat`, "utf8");
    const [state, ppid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state: state!, ppid: Number(ppid) };
  } catch {
    return undefined;
  }
}

/** True while `pid` runs: false once it is gone or a zombie (orphans may wait for a reaper that never comes). */
export function isRunning(pid: number): boolean {
  const stat = procStat(pid);
  return stat !== undefined && stat.state !== "Z";
}

/** Polls until `pid` no longer runs, for at most `timeoutMs`; whether it stopped. */
export async function stopsRunning(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (isRunning(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

/** The parent of `pid` (`undefined` once it is gone). */
export function parentOf(pid: number): number | undefined {
  return procStat(pid)?.ppid;
}

/** Pids of the running (not zombie) processes other than this one whose command line contains `marker`. */
export function processesWith(marker: string): number[] {
  return runningPids().filter((pid) => {
    try {
      return readFileSync(`/proc/${String(pid)}/cmdline`, "utf8").includes(marker);
    } catch {
      return false; // it ended while we looked
    }
  });
}

/** Every running process below `root` now (its children, their children, ...). */
export function descendantsOf(root: number): number[] {
  const parents = new Map(runningPids().map((pid) => [pid, parentOf(pid)]));
  const found: number[] = [];
  for (let frontier = [root]; frontier.length > 0; ) {
    frontier = [...parents].filter(([, ppid]) => ppid !== undefined && frontier.includes(ppid)).map(([pid]) => pid);
    found.push(...frontier);
  }
  return found;
}

function runningPids(): number[] {
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => pid !== process.pid && isRunning(pid));
}
