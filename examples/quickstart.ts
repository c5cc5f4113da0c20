// The README's "Quick start", runnable: `npx tsx examples/quickstart.ts`. The code is the README snippet (which
// imports from "posttrain"; this file imports the same API from the source tree), with a line printed per step.
// Keep the two in step: test/ts/examples.test.ts runs this file.
import { PosttrainError, Tensor, TensorDict, WorkerPool } from "../sdk/index.js";

// Two local Python workers (CPU here; one per GPU where there are GPUs).
await using pool = await WorkerPool.local({ workers: 2, device: "auto" });
console.log("torch in worker 0:", pool.worker(0).info.torch); // handshake: versions, devices, capabilities

const td = new TensorDict(
  {
    tokens: Tensor.from([[1n, 2n, 3n], [4n, 5n, 6n]], { dtype: "int64" }),
    next: { reward: Tensor.from([0.5, 1.0], { dtype: "float32" }) },
  },
  { batchSize: [2] },
);
const sums = await pool.worker(0).rowSums(td); // computed by torch in the worker
console.log("row sums of next.reward:", sums.getTensor(["next", "reward"]).toArray()); // [0.5, 1]
console.log("row sums of tokens:", sums.getTensor("tokens").toArray()); // [6, 15]

// Timeouts and cancellation on every call.
const ac = new AbortController();
setTimeout(() => {
  ac.abort();
}, 100);
await pool
  .worker(1)
  .computeFor(10, { signal: ac.signal })
  .catch((err: unknown) => {
    console.log("computeFor(10) aborted after 100 ms:", err instanceof PosttrainError ? err.code : err); // "ABORTED"
  });
