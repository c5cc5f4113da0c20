// WorkerPool.ray on a simulated two-node Ray cluster on this machine (test/python/ray_cluster.py: a head without
// CPUs and two nodes with one CPU and a custom `node_slot` each, all on 127.0.0.1 with Ray's token auth on), ONE
// cluster and ONE pool for the file: placement on distinct nodes, CURVE refusal of foreign clients, a SIGKILLed
// worker failing its pending call and coming back through Ray's actor restart, a fast infeasible placement, a
// close (racing a restart) that leaves no actor and no placement group, a launch aborted while its workers start,
// and option errors raised before anything starts.
import { execFile, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { curveKeyPair, Dealer } from "zeromq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_PLACEMENT_TIMEOUT_MS,
  generatePoolKeys,
  PLACEMENT_STRATEGIES,
  RayAddressSchema,
  RayResourcesSchema,
  resolvePython,
  type RayWorkerEvent,
} from "../../bridge/index.js";
import {
  ConnectionClosedError,
  InvalidArgumentError,
  PlacementError,
  RequestAbortedError,
  WorkerDiedError,
  WorkerPool,
  type RayWorkerPoolOptions,
} from "../../sdk/index.js";
import { startTestRayCluster, type TestRayCluster } from "./ray-cluster.js";

const PYTHON = resolvePython();
const LIVENESS_EXTENSION = resolve("test/python/extensions/liveness.py");
const CLUSTER_SPEC = {
  head: { num_cpus: 0 },
  nodes: [
    { num_cpus: 1, resources: { node_slot: 1 } },
    { num_cpus: 1, resources: { node_slot: 1 } },
  ],
};
const TRAINERS = [
  { role: "trainer", resources: { CPU: 1, node_slot: 1 } },
  { role: "trainer", resources: { CPU: 1, node_slot: 1 } },
];
/** How long a refused client waits for a reply that must not come. */
const REFUSAL_WAIT_MS = 1000;

/** What the cluster's GCS holds, asked by a separate Ray driver: placement group states and actor states. */
async function clusterState(info: TestRayCluster): Promise<{ pgs: string[]; actors: string[] }> {
  const script = [
    "import json, ray, ray._private.state as state",
    `ray.init(address=${JSON.stringify(info.address)}, logging_level="ERROR", log_to_driver=False)`,
    "pgs = [v['state'] for v in ray.util.placement_group_table().values()]",
    "actors = [a['State'] for a in state.actors().values()]",
    "print('STATE ' + json.dumps({'pgs': pgs, 'actors': actors}), flush=True)",
    "ray.shutdown()",
  ].join("\n");
  const { stdout } = await promisify(execFile)(PYTHON, ["-c", script], {
    env: { ...process.env, ...info.env },
    timeout: 60_000,
  });
  const line = stdout.split("\n").find((l) => l.startsWith("STATE "));
  return JSON.parse(line!.slice("STATE ".length)) as { pgs: string[]; actors: string[] };
}

/** Whether `pid` is gone: no such process, or a zombie not reaped yet (it runs nothing any more). */
function processGone(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("Z");
  } catch {
    return true;
  }
}

/** A raw DEALER, as a foreign process would use one; `curve` absent: no CURVE at all; `pair` default a fresh one. */
async function foreignCall(
  endpoint: string,
  curve?: { serverKey: string; pair?: { publicKey: string; secretKey: string } },
): Promise<unknown> {
  const pair = curve?.pair ?? curveKeyPair();
  const socket = new Dealer({
    linger: 0,
    receiveTimeout: REFUSAL_WAIT_MS,
    sendTimeout: REFUSAL_WAIT_MS,
    ...(curve !== undefined ? { curveServerKey: curve.serverKey, curvePublicKey: pair.publicKey, curveSecretKey: pair.secretKey } : {}),
  });
  try {
    socket.connect(endpoint);
    await socket.send(JSON.stringify({ v: 1, type: "request", id: 1, method: "ping", args: {}, payloads: [] }));
    const [head] = await socket.receive();
    return JSON.parse(head!.toString()) as unknown;
  } catch (err) {
    if ((err as { code?: string }).code === "EAGAIN") return undefined; // nothing came back
    throw err;
  } finally {
    socket.close();
  }
}

describe("WorkerPool.ray on a two-node cluster", () => {
  let info: TestRayCluster | undefined;
  let pool: WorkerPool | undefined;
  const keys = generatePoolKeys();
  const events: RayWorkerEvent[] = [];

  beforeAll(async () => {
    info = await startTestRayCluster(CLUSTER_SPEC);
    pool = await WorkerPool.ray({
      address: info.address,
      env: info.env,
      workers: TRAINERS,
      strategy: "STRICT_SPREAD",
      extensions: [LIVENESS_EXTENSION],
      keys,
      heartbeatIntervalMs: 0,
      onEvent: (event) => events.push(event),
    });
  }, 180_000);

  afterAll(async () => {
    await pool?.close();
    await info?.stop();
  }, 120_000);

  it("places each worker on its own node and reaches each over tcp on loopback", async () => {
    const [a, b] = [pool!.worker(0), pool!.worker(1)];
    expect(await a.ping()).toBeGreaterThanOrEqual(0);
    expect(await b.ping()).toBeGreaterThanOrEqual(0);
    expect(a.nodeId).toBeDefined();
    expect(a.nodeId).not.toBe(b.nodeId);
    expect(info!.nodes.map((n) => n.nodeId)).toEqual(expect.arrayContaining([a.nodeId, b.nodeId]));
    for (const worker of [a, b]) {
      expect(worker.nodeAddress).toBe("127.0.0.1");
      expect(worker.connection.process!.ready.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
      const { port } = (await worker.invoke("free_port", { host: worker.nodeAddress })).result;
      expect(port).toBeGreaterThan(0);
    }
    const placement = pool!.placement!;
    expect(placement.cluster).toEqual({ address: info!.address, started: false });
    expect(placement.workers.map((w) => [w.index, w.role, w.incarnation])).toEqual([
      [0, "trainer", 0],
      [1, "trainer", 0],
    ]);
  });

  it("gives foreign clients (another CURVE key, or no CURVE) no answer, and keeps serving the pool", async () => {
    const endpoint = pool!.placement!.workers[0]!.endpoint;
    expect(await foreignCall(endpoint, { serverKey: keys.server.publicKey })).toBeUndefined();
    expect(await foreignCall(endpoint)).toBeUndefined();
    // The control: the same raw client with the pool's own client key is answered (refused by the secret check).
    expect(await foreignCall(endpoint, { serverKey: keys.server.publicKey, pair: keys.client })).toMatchObject({ ok: false });
    expect(await pool!.worker(0).ping()).toBeGreaterThanOrEqual(0);
    expect(pool!.worker(0).connection.alive).toBe(true);
  });

  it("fails a pending call with WORKER_DIED when the worker is SIGKILLed, and restart() brings every worker back", async () => {
    const before = pool!.placement!.workers;
    const victim = pool!.worker(1);
    const pending = victim.call("hang");
    pending.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 200)); // the request is in the worker
    const killedAt = performance.now();
    process.kill(before[1]!.pid, "SIGKILL");
    await expect(pending).rejects.toMatchObject({ code: "WORKER_DIED" });
    const detectMs = performance.now() - killedAt;
    expect(detectMs).toBeLessThan(5000);

    await pool!.restart();
    const after = pool!.placement!.workers;
    for (const i of [0, 1]) {
      expect(after[i]!.pid).not.toBe(before[i]!.pid);
      expect(after[i]!.incarnation).toBeGreaterThan(before[i]!.incarnation);
      expect(after[i]!.nodeId).toBe(before[i]!.nodeId); // same bundle, same node
      expect(await pool!.worker(i).ping()).toBeGreaterThanOrEqual(0);
    }
    expect(pool!.worker(1)).not.toBe(victim);
    expect(events).toContainEqual(expect.objectContaining({ event: "worker_exit", index: 1, incarnation: 0 }));
    console.log(`ray-pool: WORKER_DIED ${detectMs.toFixed(0)} ms after SIGKILL`);
  });

  it("detach() closes the connections, restart() reconnects to the workers Ray brought back", async () => {
    const before = pool!.placement!.workers;
    const clients = pool!.workers;
    await pool!.detach();
    expect(clients.every((c) => !c.connection.alive)).toBe(true);
    await pool!.restart();
    const after = pool!.placement!.workers;
    for (const i of [0, 1]) {
      expect(after[i]!.incarnation).toBeGreaterThan(before[i]!.incarnation);
      expect(await pool!.worker(i).ping()).toBeGreaterThanOrEqual(0);
    }
  });

  it("fails fast on an infeasible placement, naming asked and available, and leaves nothing behind", async () => {
    const start = performance.now();
    const err = await WorkerPool.ray({ address: info!.address, env: info!.env, workers: [{ role: "trainer", resources: { GPU: 1 } }] }).catch(
      (e: unknown) => e,
    );
    const ms = performance.now() - start;
    expect(err).toBeInstanceOf(PlacementError);
    const placementError = err as PlacementError;
    expect(placementError.code).toBe("PLACEMENT_INFEASIBLE");
    expect(placementError.message).toMatch(/GPU/);
    expect(placementError.asked.length).toBeGreaterThan(0);
    expect(placementError.available).toBeDefined();
    expect(ms).toBeLessThan(30_000);
    const state = await clusterState(info!);
    // Only the pool's own placement group and two actors remain.
    expect(state.pgs.filter((s) => s !== "REMOVED")).toHaveLength(1);
    expect(state.actors.filter((s) => s !== "DEAD")).toHaveLength(2);
    console.log(`ray-pool: PLACEMENT_INFEASIBLE after ${ms.toFixed(0)} ms`);
  });

  it("close() during a restart() wins: the restart rejects as closed, no actor or placement group is left, close is idempotent", async () => {
    // Detached first, so restart() sends its `restart` op at once: close() must interrupt it, not queue behind it.
    await pool!.detach();
    const restarting = pool!.restart();
    restarting.catch(() => undefined);
    const closeStart = performance.now();
    await pool!.close();
    const closeMs = performance.now() - closeStart;
    await expect(restarting).rejects.toBeInstanceOf(ConnectionClosedError);
    expect(closeMs).toBeLessThan(15_000);
    console.log(`ray-pool: close() during restart() took ${closeMs.toFixed(0)} ms`);
    await pool!.close();
    const state = await clusterState(info!);
    expect(state.pgs.every((s) => s === "REMOVED")).toBe(true);
    expect(state.actors.filter((s) => s !== "DEAD")).toEqual([]);
  });

  it("aborting a launch while its worker starts stops the driver's create_workers and leaves nothing behind", async () => {
    // A worker that never gets READY: its extension blocks at import (after writing its pid) until its actor is gone.
    const dir = mkdtempSync(join(tmpdir(), "ray-abort-"));
    const marker = join(dir, "started");
    const extension = join(dir, "block_start.py");
    writeFileSync(
      extension,
      [
        "import os, time",
        `open(${JSON.stringify(marker)}, "w").write(str(os.getpid()))`,
        "parent = os.getppid()",
        "while os.getppid() == parent:",
        "    time.sleep(0.1)",
        "os._exit(0)",
      ].join("\n"),
    );
    try {
      const controller = new AbortController();
      const launching = WorkerPool.ray({
        address: info!.address,
        env: info!.env,
        workers: [TRAINERS[0]!],
        extensions: [extension],
        startTimeoutMs: 600_000,
        signal: controller.signal,
      });
      let settled = false;
      launching.then(
        () => (settled = true),
        () => (settled = true),
      );
      while (!existsSync(marker) && !settled) await new Promise((r) => setTimeout(r, 100));
      expect(settled).toBe(false); // create_workers is running: its worker is importing the extension
      const abortedAt = performance.now();
      controller.abort();
      await expect(launching).rejects.toBeInstanceOf(RequestAbortedError);
      const ms = performance.now() - abortedAt;
      expect(ms).toBeLessThan(15_000);
      const state = await clusterState(info!);
      expect(state.pgs.every((s) => s === "REMOVED")).toBe(true);
      expect(state.actors.filter((s) => s !== "DEAD")).toEqual([]);
      const workerPid = Number(readFileSync(marker, "utf8"));
      expect(processGone(workerPid)).toBe(true); // the blocked worker went with its actor
      console.log(`ray-pool: launch aborted during create_workers, cleaned up in ${ms.toFixed(0)} ms`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe("WorkerPool.ray options", () => {
  // A Python that does not exist: a check that let a bad option through would fail on starting it instead.
  const base: RayWorkerPoolOptions = { python: "/nonexistent/python", workers: TRAINERS };
  it.each([
    ["maxRestarts", { maxRestarts: -2 }],
    ["strategy", { strategy: "SCATTER" }],
    ["workers[0].resources.CPU", { workers: [{ role: "trainer", resources: { CPU: "one" } }] }],
    ["workers", { workers: [] }],
    ["address", { address: "not an address" }],
    ["address", { address: "127.0.0.1:70000" }],
    ["address", { address: "ray://127.0.0.1:10001" }],
    ["workers[0].resources", { workers: [{ role: "trainer", resources: { CPU: 0, GPU: 0 } }] }],
    ["placementTimeout", { placementTimeout: 1000 }],
    ["workers[0].gpus", { workers: [{ role: "trainer", resources: { CPU: 1 }, gpus: 1 }] }],
    ["maxInFlight", { maxInFlight: 0 }],
  ])("rejects a bad %s before anything starts", async (field, bad) => {
    const err = await WorkerPool.ray({ ...base, ...(bad as object) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message.startsWith(`${field}:`)).toBe(true);
  });

  it("shares its schemas and defaults: addresses (IPv6 in brackets), resource bundles, strategies", () => {
    for (const ok of ["auto", "127.0.0.1:6379", "head-0.cluster:6379", "[::1]:6379"]) {
      expect(RayAddressSchema.safeParse(ok).success, ok).toBe(true);
    }
    for (const bad of ["", "::1:6379", "[::1]", "127.0.0.1", "http://127.0.0.1:6379", "127.0.0.1:0", "127.0.0.1:65536"]) {
      expect(RayAddressSchema.safeParse(bad).success, bad).toBe(false);
    }
    // Ray Client is refused (the driver reads GCS tables it does not serve), with what to do instead.
    const client = RayAddressSchema.safeParse("ray://[::1]:10001");
    expect(client.success).toBe(false);
    expect(client.error?.issues[0]?.message).toMatch(/Ray Client.*"auto".*host:port/);
    expect(RayResourcesSchema.safeParse({ CPU: 1, GPU: 0 }).success).toBe(true);
    expect(RayResourcesSchema.safeParse({ CPU: 0 }).success).toBe(false);
    expect(RayResourcesSchema.safeParse({}).success).toBe(false);
    expect(RayResourcesSchema.safeParse({ CPU: -1, GPU: 1 }).success).toBe(false);
    expect(PLACEMENT_STRATEGIES).toEqual(["PACK", "SPREAD", "STRICT_SPREAD"]);
    expect(DEFAULT_PLACEMENT_TIMEOUT_MS).toBe(120_000);
  });

  const systemHasRay = spawnSync("/usr/bin/python3", ["-c", "import ray"]).status === 0;
  it.skipIf(systemHasRay)("fails with RAY_UNAVAILABLE and the setup command on a Python without ray", async () => {
    const err = await WorkerPool.ray({
      python: "/usr/bin/python3",
      env: { PYTHONPATH: resolve("python_worker") },
      workers: [{ role: "trainer", resources: { CPU: 1 } }],
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "RAY_UNAVAILABLE" });
    expect((err as Error).message).toContain("npx posttrain setup --extras ray");
  });

  it("names the node of a worker lost with it, keeping the code WORKER_DIED", () => {
    const err = new WorkerDiedError("worker 1 (trainer)", null, null, "", { lostNode: { id: "a1b2", address: "10.0.0.7" } });
    expect(err.code).toBe("WORKER_DIED");
    expect(err.message).toContain("node a1b2 (10.0.0.7)");
    expect(err.lostNode).toEqual({ id: "a1b2", address: "10.0.0.7" });
  });

  it("is refused on a local pool: restart, detach", async () => {
    const pool = await WorkerPool.local({ workers: 1, device: "cpu", heartbeatIntervalMs: 0 });
    try {
      expect(pool.placement).toBeUndefined();
      expect(pool.worker(0).nodeAddress).toBe("127.0.0.1");
      expect(pool.worker(0).nodeId).toBeUndefined();
      await expect(pool.restart()).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(pool.detach()).rejects.toBeInstanceOf(InvalidArgumentError);
    } finally {
      await pool.close();
    }
  });
});
