// Shared test setup: a tiny model built offline, one CPU worker, the model loaded there as "policy".
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WorkerPool, makeTinyModel, type TinyModel, type WorkerClient } from "../../sdk/index.js";

/** A worker with the tiny model loaded as `"policy"`; `close()` stops the worker and removes the model. */
export interface TinyPolicy {
  readonly tiny: TinyModel;
  readonly pool: WorkerPool;
  readonly worker: WorkerClient;
  close(): Promise<void>;
}

/**
 * Builds the tiny model with `seed` and loads it in a fresh single-worker pool; `env` is added to the worker's
 * environment (e.g. `OMP_NUM_THREADS`).
 */
export async function startTinyPolicy(seed: number, env?: Readonly<Record<string, string>>): Promise<TinyPolicy> {
  const dir = await mkdtemp(join(tmpdir(), "posttrain-policy-"));
  const [tiny, pool] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed }), WorkerPool.local({ device: "cpu", ...(env === undefined ? {} : { env }) })]);
  const worker = pool.worker(0);
  await worker.loadModel({ name: "policy", path: tiny.path });
  return {
    tiny,
    pool,
    worker,
    close: async () => {
      await pool.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
