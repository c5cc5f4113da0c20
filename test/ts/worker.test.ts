// Real worker processes over real ZeroMQ: the bridge's lifecycle, concurrency, timeouts, cancellation,
// liveness and death handling, through the typed client of `WorkerPool.local`.
import { existsSync } from "node:fs";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ConnectionClosedError,
  RequestAbortedError,
  RequestTimeoutError,
  Tensor,
  TensorDict,
  WorkerDiedError,
  WorkerError,
  WorkerPool,
  WorkerStartError,
} from "../../sdk/index.js";
import { computeFor, DIAGNOSTICS_EXTENSION, isAlive, rowSums } from "./diagnostics.js";

function sampleTd(seed: number, rows = 4): TensorDict {
  const x = Float32Array.from({ length: rows * 3 }, (_, i) => (i + seed) * 0.5);
  const tokens = BigInt64Array.from({ length: rows }, (_, i) => BigInt(seed * 100 + i));
  return new TensorDict(
    {
      x: Tensor.from(x, { dtype: "float32", shape: [rows, 3] }),
      next: { reward: Tensor.from(Float64Array.from({ length: rows }, (_, i) => seed - i), { dtype: "float64", shape: [rows] }) },
      tokens: Tensor.from(tokens, { dtype: "int64", shape: [rows] }),
    },
    { batchSize: [rows] },
  );
}

describe("WorkerPool.local (ipc)", () => {
  let pool: WorkerPool;

  beforeAll(async () => {
    pool = await WorkerPool.local({ workers: 2, device: "cpu", extensions: [DIAGNOSTICS_EXTENSION] });
  });

  afterAll(async () => {
    await pool.close();
  });

  it("handshakes with every worker and reports versions, devices and capabilities", () => {
    expect(pool.size).toBe(2);
    for (const [i, worker] of pool.workers.entries()) {
      expect(worker.info.protocolVersion).toBe(1);
      expect(worker.info.workerId).toBe(i);
      expect(worker.info.torch).toMatch(/^\d+\.\d+/);
      expect(worker.info.devices.some((d) => d.type === "cpu")).toBe(true);
      expect(worker.info.capabilities.methods).toEqual(expect.arrayContaining(["ping", "echo", "row_sums"]));
    }
  });

  it("round-trips a TensorDict through torch and back", async () => {
    const td = sampleTd(3);
    const back = await pool.worker(0).echo(td);
    expect(back.batchSize).toEqual([4]);
    expect(back.getTensor("x").data).toEqual(td.getTensor("x").data);
    expect(back.getTensor(["next", "reward"]).data).toEqual(td.getTensor(["next", "reward"]).data);
    expect(back.getTensor("tokens").data).toEqual(td.getTensor("tokens").data);
  });

  it("lets a reply's frames go once the caller drops them (the transport keeps no message alive until the next)", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const big = new TensorDict({ x: Tensor.from(new Float32Array(1 << 18).fill(1), { dtype: "float32", shape: [512, 512] }) }, { batchSize: [512] });
    // the reply lives only inside this function: what keeps its frames alive after it returns is not the caller's
    const echoOnce = async (): Promise<WeakRef<Uint8Array>[]> => {
      const reply = await pool.worker(0).connection.request("echo", {}, [{ kind: "tensordict", data: big.toArrowParts() }]);
      const parts: Uint8Array[] = [];
      for (const p of reply.payloads) {
        if (Array.isArray(p.data)) parts.push(...(p.data as Uint8Array[]));
        else if (p.data instanceof Uint8Array) parts.push(p.data);
      }
      return parts.map((f) => new WeakRef(f));
    };
    const frames = await echoOnce();
    expect(frames.length).toBeGreaterThan(0);
    for (let i = 0; i < 3; i++) {
      gc();
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(frames.filter((f) => f.deref() !== undefined).length).toBe(0);
  });

  it("computes per-row sums with torch that match the values sent", async () => {
    const td = sampleTd(7);
    const sums = await rowSums(pool.worker(1), td);
    const x = td.getTensor("x").data as Float32Array;
    const xs = sums.getTensor("x");
    expect(xs.dtype).toBe("float64");
    for (let r = 0; r < 4; r++) {
      expect((xs.data as Float64Array)[r]).toBeCloseTo(x[r * 3]! + x[r * 3 + 1]! + x[r * 3 + 2]!, 6);
    }
    expect(Array.from(sums.getTensor(["next", "reward"]).data as Float64Array)).toEqual([7, 6, 5, 4]);
  });

  it("keeps many requests in flight on one socket and routes every reply to its request", async () => {
    const worker = pool.worker(0);
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) => worker.echo(sampleTd(i, 2))));
    results.forEach((td, i) => {
      expect(Array.from(td.getTensor("tokens").data as BigInt64Array)).toEqual([BigInt(i * 100), BigInt(i * 100 + 1)]);
    });
  });

  it("answers heartbeats and pings while the compute thread is busy", async () => {
    const worker = pool.worker(1);
    const busy = computeFor(worker, 1.5);
    await new Promise((r) => setTimeout(r, 200));
    const start = performance.now();
    const hb = await worker.connection.heartbeat(1000);
    const pingMs = await worker.ping();
    expect(hb.busy).toBe(true);
    expect(performance.now() - start).toBeLessThan(1000);
    expect(pingMs).toBeLessThan(1000);
    expect(await busy).toBeGreaterThan(0);
  });

  it("rejects a request that outlives its timeout, and the worker keeps serving", async () => {
    const worker = pool.worker(0);
    await expect(computeFor(worker, 1.0, { timeoutMs: 100 })).rejects.toBeInstanceOf(RequestTimeoutError);
    expect(await worker.ping()).toBeGreaterThan(0);
  });

  it("cancels through AbortSignal: before sending, while running, and while queued", async () => {
    const worker = pool.worker(1);
    const pre = new AbortController();
    pre.abort();
    await expect(worker.ping({ signal: pre.signal })).rejects.toBeInstanceOf(RequestAbortedError);

    const running = new AbortController();
    const first = computeFor(worker, 0.8, { signal: running.signal });
    const queued = new AbortController();
    const second = computeFor(worker, 5, { signal: queued.signal });
    await new Promise((r) => setTimeout(r, 150));
    expect((await worker.connection.heartbeat()).queued).toBeGreaterThanOrEqual(1);
    queued.abort();
    running.abort();
    await expect(first).rejects.toBeInstanceOf(RequestAbortedError);
    await expect(second).rejects.toBeInstanceOf(RequestAbortedError);
    // The queued 5 s request was dropped by the worker: the compute thread is free again within ~1 s.
    const start = performance.now();
    await worker.echo(sampleTd(1));
    expect(performance.now() - start).toBeLessThan(3000);
  });

  it("turns a worker error reply into a typed WorkerError and keeps serving", async () => {
    const worker = pool.worker(0);
    const err = await worker.call("no_such_method").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerError);
    expect((err as WorkerError).code).toBe("UNKNOWN_METHOD");
    expect((err as WorkerError).message).toContain("no_such_method");
    const bad = await worker.call("compute_for", { seconds: "soon" }).catch((e: unknown) => e);
    expect((bad as WorkerError).code).toBe("BAD_ARGUMENTS");
    expect(await worker.ping()).toBeGreaterThan(0);
  });
});

describe("worker death and shutdown", () => {
  it("rejects every pending request at once with WorkerDiedError when the worker is killed", async () => {
    const pool = await WorkerPool.local({ workers: 1, device: "cpu", extensions: [DIAGNOSTICS_EXTENSION] });
    const worker = pool.worker(0);
    const pid = worker.info.pid;
    const pending = [computeFor(worker, 30), computeFor(worker, 30), worker.echo(sampleTd(2))];
    await new Promise((r) => setTimeout(r, 200));
    const killedAt = performance.now();
    process.kill(pid, "SIGKILL");
    const outcomes = await Promise.allSettled(pending);
    expect(performance.now() - killedAt).toBeLessThan(2000);
    for (const outcome of outcomes) {
      expect(outcome.status).toBe("rejected");
      const reason = (outcome as PromiseRejectedResult).reason as WorkerDiedError;
      expect(reason).toBeInstanceOf(WorkerDiedError);
      expect(reason.code).toBe("WORKER_DIED");
      expect(reason.signal).toBe("SIGKILL");
      expect(reason.exitCode).toBeNull();
      // The tail of what the worker wrote to stderr (its startup log line among it).
      expect(reason.stderrTail).toContain("serving on");
      expect(reason.message).toContain("killed by SIGKILL");
    }
    // Later calls fail at once too.
    await expect(worker.ping()).rejects.toBeInstanceOf(WorkerDiedError);
    await pool.close();
  });

  it("close() shuts every worker down and leaves no process and no socket file", async () => {
    const pool = await WorkerPool.local({ workers: 2, device: "cpu", extensions: [DIAGNOSTICS_EXTENSION] });
    const pids = pool.workers.map((w) => w.info.pid);
    const dir = pool.socketDir;
    expect(existsSync(dir)).toBe(true);
    const pending = computeFor(pool.worker(0), 20).catch((e: unknown) => e);
    const started = performance.now();
    await pool.close();
    expect(performance.now() - started).toBeLessThan(3000); // the running compute stops early
    expect(await pending).toBeInstanceOf(ConnectionClosedError);
    for (const pid of pids) expect(isAlive(pid)).toBe(false);
    expect(existsSync(dir)).toBe(false);
    await pool.close(); // idempotent
  });

  it("works over tcp on loopback; a worker without the test extension does not serve its methods", async () => {
    const pool = await WorkerPool.local({ workers: 1, device: "cpu", transport: "tcp" });
    try {
      const back = await pool.worker(0).echo(sampleTd(5));
      expect(back.getTensor("x").data).toEqual(sampleTd(5).getTensor("x").data);
      const err = await rowSums(pool.worker(0), sampleTd(2)).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerError);
      expect((err as WorkerError).code).toBe("UNKNOWN_METHOD");
      expect(pool.worker(0).info.capabilities.methods).not.toContain("row_sums");
    } finally {
      await pool.close();
    }
  });

  it("fails to start with a typed error naming an extension file that does not exist", async () => {
    const err = await WorkerPool.local({ device: "cpu", extensions: ["/nonexistent/methods.py"] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerStartError);
    expect((err as WorkerStartError).message).toContain("/nonexistent/methods.py");
  });

  it("fails to start with a typed error naming the interpreter when Python is missing", async () => {
    const err = await WorkerPool.local({ python: "/nonexistent/python3" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerStartError);
    expect((err as WorkerStartError).message).toContain("/nonexistent/python3");
  });
});
