import { launchLocalWorkers, type LocalWorkers, type LocalWorkersOptions } from "../../bridge/index.js";
import { InvalidArgumentError } from "../core/errors.js";
import { WorkerClient } from "./client.js";

/** Options of {@link WorkerPool.local}. */
export type WorkerPoolOptions = LocalWorkersOptions;

/**
 * A set of Python worker processes and their typed clients.
 *
 * ```ts
 * await using pool = await WorkerPool.local({ workers: 1, device: "cpu" });
 * const info = await pool.worker(0).loadModel({ name: "policy", path: "runs/demo/model" });
 * ```
 */
export class WorkerPool implements AsyncDisposable {
  /** One typed client per worker, in worker order. */
  readonly workers: readonly WorkerClient[];

  private constructor(private readonly local: LocalWorkers) {
    this.workers = local.connections.map((c) => new WorkerClient(c));
  }

  /**
   * Spawns local workers (`python -m posttrain_worker` from the project's `.venv`), waits until each is
   * ready and handshaken. CPU when there is no GPU, one worker per GPU otherwise.
   */
  static async local(options: WorkerPoolOptions = {}): Promise<WorkerPool> {
    return new WorkerPool(await launchLocalWorkers(options));
  }

  /** Number of workers. */
  get size(): number {
    return this.workers.length;
  }

  /** The private directory holding the workers' ipc socket files (removed by `close()`). */
  get socketDir(): string {
    return this.local.socketDir;
  }

  /** The client of worker `index`. */
  worker(index: number): WorkerClient {
    const client = this.workers[index];
    if (client === undefined) {
      throw new InvalidArgumentError(`worker index: expected 0..${this.workers.length - 1}, got ${index}`);
    }
    return client;
  }

  /** Shuts every worker down and removes their sockets; idempotent. */
  close(): Promise<void> {
    return this.local.close();
  }

  /** For `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
