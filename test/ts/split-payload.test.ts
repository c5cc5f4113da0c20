// Split tensordict payloads through a real worker (docs/protocol.md, "Split payloads"): large tensors cross as
// frames of their own both ways, the worker decodes them in place, and a cut through a buffer is BAD_PAYLOAD.
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { Tensor, TensorDict, WorkerError, WorkerPool, type WorkerClient } from "../../sdk/index.js";
import { DIAGNOSTICS_EXTENSION } from "./diagnostics.js";

const ROWS = 300;
const COLS = 1024; // 1.2 MB of float32: far over the 64 KiB split threshold

/** A TensorDict whose large leaf is a view at byteOffset 8 inside a bigger buffer, beside small leaves. */
function mixedTd(): TensorDict {
  const backing = new Float32Array(ROWS * COLS + 2);
  const x = backing.subarray(2);
  for (let i = 0; i < x.length; i++) x[i] = (i % 977) * 0.5;
  return new TensorDict(
    {
      x: Tensor.from(x, { dtype: "float32", shape: [ROWS, COLS] }),
      id: Tensor.from(BigInt64Array.from({ length: ROWS }, (_, i) => BigInt(i)), { dtype: "int64", shape: [ROWS] }),
      name: Array.from({ length: ROWS }, (_, i) => `row ${i}`),
    },
    { batchSize: [ROWS] },
  );
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

describe("split tensordict payloads", () => {
  let pool: WorkerPool;
  let worker: WorkerClient;

  beforeAll(async () => {
    pool = await WorkerPool.local({ workers: 1, device: "cpu", extensions: [DIAGNOSTICS_EXTENSION], heartbeatIntervalMs: 0 });
    worker = pool.worker(0);
  });

  afterAll(async () => {
    await pool.close();
  });

  it("echoes a split TensorDict split, the reply's large tensor a view of its received frame", async () => {
    const td = mixedTd();
    const parts = td.toArrowParts();
    expect(parts.length).toBeGreaterThan(1);
    const reply = await worker.call("echo", {}, [{ kind: "tensordict", data: parts }]);
    const payload = reply.payloads[0];
    if (payload?.kind !== "tensordict" || payload.data instanceof Uint8Array) throw new Error("expected a split tensordict reply");
    expect(payload.data.length).toBe(parts.length);
    const back = TensorDict.fromArrow(payload.data);
    expect(sameBytes(back.toArrow(), td.toArrow())).toBe(true);
    const x = back.get("x") as Tensor;
    expect(payload.data.some((frame) => frame.buffer === x.data.buffer)).toBe(true);
    // The typed client sends and reads split payloads too.
    expect(sameBytes((await worker.echo(td)).toArrow(), td.toArrow())).toBe(true);
  });

  it("computes on the worker from a split request exactly what the whole stream holds", async () => {
    const td = mixedTd();
    const reply = await worker.call("row_sums", {}, [{ kind: "tensordict", data: td.toArrowParts() }]);
    const payload = reply.payloads[0];
    if (payload?.kind !== "tensordict") throw new Error("expected a tensordict reply");
    const sums = TensorDict.fromArrow(payload.data).get("x") as Tensor;
    const x = (td.get("x") as Tensor).data as Float32Array;
    for (const row of [0, 1, 150, ROWS - 1]) {
      let expected = 0;
      for (let c = 0; c < COLS; c++) expected += x[row * COLS + c]!;
      expect(sums.data[row]).toBeCloseTo(expected, 3);
    }
  });

  it("answers BAD_PAYLOAD naming the part when a cut goes through a buffer", async () => {
    const whole = mixedTd().toArrow();
    const cut = whole.byteLength - 4096; // inside the large buffer's bytes
    const parts = [whole.slice(0, cut), whole.slice(cut)];
    const error = await worker.call("echo", {}, [{ kind: "tensordict", data: parts }]).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(WorkerError);
    expect((error as WorkerError).code).toBe("BAD_PAYLOAD");
    expect((error as WorkerError).message).toMatch(/payload 0 \(tensordict\).*spans parts 0 and 1/);
  });
});
