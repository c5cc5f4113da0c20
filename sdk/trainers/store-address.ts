/** Where a torch.distributed group's store listens: a free port on the node of its rank 0. */
import type { RequestOptions } from "../../bridge/index.js";
import type { WorkerClient } from "../workers/client.js";

/**
 * `tcp://<address>:<port>` for a group whose rank 0 is `worker`: the worker's node address (loopback for a local
 * worker, its node's address on Ray, where the other ranks may run on other machines) and a port free there now, picked
 * by the worker itself (this process may be on another machine).
 *
 * ```ts
 * const initMethod = await storeAddress(pool.worker(0)); // "tcp://127.0.0.1:41235"
 * ```
 */
export async function storeAddress(worker: WorkerClient, requestOptions: RequestOptions = {}): Promise<string> {
  const host = worker.nodeAddress;
  const { port } = (await worker.invoke("free_port", { host }, [], requestOptions)).result;
  return `tcp://${host.includes(":") ? `[${host}]` : host}:${String(port)}`;
}
