// Authenticated endpoints through `WorkerPool.local` (docs/workers.md, "Security"): real workers given a pool secret
// and CURVE keys on their stdin, and foreign zeromq.js clients that reach their sockets without them. ipc: every
// request of a client that has not handshaken with the secret (shutdown included) is answered UNAUTHENTICATED and
// the worker keeps serving. tcp: a client without the pool's CURVE key gets no reply at all; weights still move
// between the pool's workers over CURVE.
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Dealer } from "zeromq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generatePoolKeys, WorkerConnection } from "../../bridge/index.js";
import { InvalidArgumentError, WorkerPool, ZMQWeightSyncScheme, makeTinyModel } from "../../sdk/index.js";

/** How long a refused client waits for a reply that must not come. */
const REFUSAL_WAIT_MS = 1000;

interface Reply {
  type: string;
  id: number | null;
  ok?: boolean;
  error?: { code: string; message: string };
}

/** A raw DEALER speaking the envelope protocol, as a foreign process would. */
class Foreign {
  readonly socket = new Dealer({ linger: 0, receiveTimeout: REFUSAL_WAIT_MS, sendTimeout: REFUSAL_WAIT_MS });
  private id = 0;

  constructor(endpoint: string) {
    this.socket.connect(endpoint);
  }

  async call(method: string, args: Record<string, unknown> = {}): Promise<Reply | undefined> {
    const id = ++this.id;
    try {
      await this.socket.send(JSON.stringify({ v: 1, type: "request", id, method, args, payloads: [] }));
    } catch (err) {
      // A refused connection may be gone already: no pipe to queue the message on, so nothing can come back.
      if ((err as { code?: string }).code === "EAGAIN") return undefined;
      throw err;
    }
    return this.receive();
  }

  async receive(): Promise<Reply | undefined> {
    try {
      const [head] = await this.socket.receive();
      return JSON.parse(head!.toString()) as Reply;
    } catch (err) {
      if ((err as { code?: string }).code === "EAGAIN") return undefined; // nothing within REFUSAL_WAIT_MS
      throw err;
    }
  }

  close(): void {
    this.socket.close();
  }
}

describe("ipc workers: the pool secret", () => {
  let pool: WorkerPool;

  beforeAll(async () => {
    pool = await WorkerPool.local({ workers: 1, device: "cpu", heartbeatIntervalMs: 0 });
  });

  afterAll(async () => {
    await pool.close();
  });

  it("keeps the secret out of the worker's argv and environment", () => {
    const pid = pool.worker(0).info.pid;
    const exposed = readFileSync(`/proc/${pid}/cmdline`, "latin1") + readFileSync(`/proc/${pid}/environ`, "latin1");
    expect(exposed).toContain("--auth-stdin");
    expect(exposed).not.toMatch(/[0-9a-f]{64}/);
  });

  it("answers a client that reaches the socket file without the secret UNAUTHENTICATED, and keeps serving", async () => {
    const foreign = new Foreign(`ipc://${join(pool.socketDir, "worker-0.sock")}`);
    try {
      for (const [method, args] of [
        ["shutdown", {}],
        ["save_checkpoint", { model: "policy", path: "/tmp/stolen" }],
        ["load_model", { name: "evil", path: "/tmp/evil" }],
        ["info", {}],
      ] as const) {
        const reply = await foreign.call(method, args);
        expect(reply?.ok, method).toBe(false);
        expect(reply?.error?.code, method).toBe("UNAUTHENTICATED");
      }
      await foreign.socket.send(JSON.stringify({ v: 1, type: "heartbeat", id: 99 }));
      const heartbeat = await foreign.receive();
      expect(heartbeat).toMatchObject({ type: "response", id: 99, ok: false, error: { code: "UNAUTHENTICATED" } });
      // A wrong secret is refused the same way, and admits nothing afterwards.
      const wrong = await foreign.call("handshake", { protocolVersion: 1, secret: "00".repeat(32) });
      expect(wrong?.error?.code).toBe("UNAUTHENTICATED");
      expect((await foreign.call("shutdown"))?.error?.code).toBe("UNAUTHENTICATED");
    } finally {
      foreign.close();
    }
    expect(await pool.worker(0).ping()).toBeGreaterThanOrEqual(0);
    expect(pool.worker(0).connection.alive).toBe(true);
  });

  it("refuses malformed auth options and a host without tcp before starting anything", async () => {
    const bad = WorkerConnection.open({ name: "w", endpoint: "ipc:///nonexistent/w.sock", auth: { secret: "abc" } });
    await expect(bad).rejects.toThrow(InvalidArgumentError);
    await expect(bad).rejects.toThrow(/auth\.secret/);
    const ipcHost = await WorkerPool.local({ device: "cpu", host: "0.0.0.0" }).catch((e: unknown) => e);
    expect(ipcHost).toBeInstanceOf(InvalidArgumentError);
    expect((ipcHost as Error).message).toMatch(/^host: only with transport "tcp"/);
    const badHost = await WorkerPool.local({ device: "cpu", transport: "tcp", host: "not a host" }).catch((e: unknown) => e);
    expect(badHost).toBeInstanceOf(InvalidArgumentError);
    expect((badHost as Error).message).toMatch(/^host: expected an IPv4 address/);
    const badKeys = await WorkerPool.local({ device: "cpu", keys: { ...generatePoolKeys(), secret: "abc" } }).catch((e: unknown) => e);
    expect(badKeys).toBeInstanceOf(InvalidArgumentError);
    expect((badKeys as Error).message).toMatch(/^keys\.secret: expected at least 32 bytes/);
    expect((badKeys as Error).message).not.toContain("abc");
  });
});

describe("tcp workers: CURVE", () => {
  let dir: string;
  let pool: WorkerPool;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-auth-"));
    // The generator starts from other weights (same architecture, another seed): the sync must move them.
    const [policy, other, started] = await Promise.all([
      makeTinyModel(join(dir, "policy"), { seed: 4 }),
      makeTinyModel(join(dir, "other"), { seed: 5 }),
      WorkerPool.local({ workers: 2, device: "cpu", transport: "tcp", heartbeatIntervalMs: 0 }),
    ]);
    pool = started;
    await Promise.all([
      pool.worker(0).loadModel({ name: "policy", path: policy.path }),
      pool.worker(1).loadModel({ name: "generator", path: other.path }),
    ]);
  });

  afterAll(async () => {
    await pool.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("gives a client without the pool's CURVE key no reply at all, and keeps serving", async () => {
    const endpoint = pool.worker(0).connection.process!.ready.endpoint;
    expect(endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const foreign = new Foreign(endpoint);
    try {
      expect(await foreign.call("shutdown")).toBeUndefined();
    } finally {
      foreign.close();
    }
    expect(await pool.worker(0).ping()).toBeGreaterThanOrEqual(0);
    expect(pool.worker(0).connection.alive).toBe(true);
  });

  it("moves weights between the pool's workers over tcp with CURVE", async () => {
    const source = pool.worker(0);
    const target = pool.worker(1);
    const scheme = new ZMQWeightSyncScheme({ worker: source, model: "policy" }, [{ worker: target, model: "generator" }], {
      transport: "tcp",
      timeoutMs: 20_000,
    });
    const before = (await target.weightsDigest("generator")).digest;
    expect(before).not.toBe((await source.weightsDigest("policy")).digest);
    const result = await scheme.updateWeights();
    expect(result.bytes).toBeGreaterThan(0);
    expect((await target.weightsDigest("generator")).digest).toBe((await source.weightsDigest("policy")).digest);
    expect((await target.weightsDigest("generator")).policyVersion).toBe(result.policyVersion);
  });
});
