export { WorkerClient } from "./client.js";
export { WorkerPool, type WorkerPoolOptions } from "./pool.js";
