// Profiling aid of bench/grpo.ts: times every request a worker client sends, by method name, as seen from
// TypeScript (encode + transfer + the worker's compute + decode of the reply). The rest of a step's wall time is
// TypeScript-side work (envs, rewards, advantages, TensorDict assembly, metrics and run-directory writes).
import type { WorkerClient } from "../sdk/index.js";

/** Sums the round-trip time of each worker method since the last {@link RpcTimer.reset}. */
export class RpcTimer {
  #totals = new Map<string, number>();

  /** Wraps `worker.connection.request` (the one path every typed worker call takes) with a timer. */
  constructor(worker: WorkerClient) {
    const connection = worker.connection;
    const request = connection.request.bind(connection);
    const timed: typeof connection.request = async (method, ...rest) => {
      const t0 = performance.now();
      try {
        return await request(method, ...rest);
      } finally {
        this.#totals.set(method, (this.#totals.get(method) ?? 0) + performance.now() - t0);
      }
    };
    Object.defineProperty(connection, "request", { value: timed, configurable: true, writable: true });
  }

  /** Forgets the sums. */
  reset(): void {
    this.#totals.clear();
  }

  /** Milliseconds per method since the last reset. */
  totals(): Record<string, number> {
    return Object.fromEntries(this.#totals);
  }
}
