// Calls of the test worker extension test/python/extensions/diagnostics.py (`row_sums`, `compute_for`): methods that
// exist only for tests of the codec, liveness, timeouts and cancellation, so they are not in the SDK's method table.
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
