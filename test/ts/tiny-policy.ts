// Shared test setup: a tiny model built offline beside a local CPU pool (a test file's fixture), and one CPU worker
// with the model loaded there as "policy".
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WorkerPool, makeTinyModel, type TinyModel, type WorkerClient, type WorkerPoolOptions } from "../../sdk/index.js";

/** What {@link startTinyModelPool} starts: a temporary directory, the tiny model in it, and a local pool. */
export interface TinyModelPool {
  readonly dir: string;
  readonly tiny: TinyModel;
  readonly modelPath: string;
  readonly pool: WorkerPool;
}

/**
 * Builds the tiny model (weights seeded with `seed`) in a fresh temporary directory named after `prefix`, while a
 * local CPU pool starts with `options`; stop both with {@link stopTinyModelPool}.
 */
export async function startTinyModelPool(prefix: string, options: WorkerPoolOptions = {}, seed = 0): Promise<TinyModelPool> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const [tiny, pool] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed }), WorkerPool.local({ device: "cpu", ...options })]);
  return { dir, tiny, modelPath: tiny.path, pool };
}

/** Stops the pool of {@link startTinyModelPool} and removes its directory. */
export async function stopTinyModelPool(dir: string, pool: WorkerPool): Promise<void> {
  await pool.close();
  await rm(dir, { recursive: true, force: true });
}

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
  const { dir, tiny, pool } = await startTinyModelPool("posttrain-policy-", env === undefined ? {} : { env }, seed);
  const worker = pool.worker(0);
  await worker.loadModel({ name: "policy", path: tiny.path });
  return { tiny, pool, worker, close: () => stopTinyModelPool(dir, pool) };
}
