// Placement on Ray, end to end: one simulated cluster for the file (Ray's own `ray.cluster_utils.Cluster`: a head and
// two nodes, loopback only, Ray's token authentication on). The same GRPO config (two trainer ranks, one generator)
// runs locally and on Ray by changing only `cluster:`, to the same metrics with the same seed; on Ray the three
// workers are actors spread over the three nodes (STRICT_SPREAD), and a SIGKILLed actor comes back through Ray's
// own actor restart while the run reloads its last checkpoint and finishes as the uninterrupted run.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GRPOTrainer, makeTinyModel, type GRPOTrainerConfigInput } from "../../sdk/index.js";
import { readConfigFile } from "../../sdk/cli/config-file.js";
import { readRunEvents } from "../../sdk/reports/report.js";
import { POOL_OPTIONS } from "../../sdk/runs/setup.js";
import { descendantsOf, isRunning, parentOf, processesWith } from "./diagnostics.js";
import { startTestRayCluster, type TestRayCluster } from "./ray-cluster.js";

let dir: string;
let modelPath: string;
let cluster: TestRayCluster;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "posttrain-ray-"));
  // the generator lands on the head; each trainer rank needs a node with a trainer slot
  const nodes = [{ num_cpus: 1, resources: { trainer_slot: 1 } }, { num_cpus: 1, resources: { trainer_slot: 1 } }];
  [cluster, { path: modelPath }] = await Promise.all([startTestRayCluster({ head: { num_cpus: 1 }, nodes }), makeTinyModel(join(dir, "tiny"), { seed: 0 })]);
}, 180_000);

afterAll(async () => {
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

const config = (runDir: string, extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput => ({
  model: { path: modelPath, device: "cpu" },
  task: { type: "digit-sort" },
  groupSize: 4,
  promptsPerStep: 4,
  maxNewTokens: 6,
  optimizer: { lr: 1e-3 },
  steps: 4,
  checkpoint: { every: 2, keepLast: 2 },
  supervision: { backoffMs: 10 },
  workers: { trainer: { count: 2, strategy: "ddp" }, generator: { count: 1 } },
  seed: 5,
  runDir,
  ...extra,
});

const onRay = (): GRPOTrainerConfigInput["cluster"] => ({
  type: "ray",
  address: cluster.address,
  strategy: "STRICT_SPREAD",
  resources: { trainer: { CPU: 1, trainer_slot: 1 }, generator: { CPU: 1 } },
});

/** The run's options on the test cluster: its token travels to the Ray driver in the environment (test-only hook). */
const rayOptions = () => ({ resume: false as const, [POOL_OPTIONS]: { env: cluster.env } });

async function jsonLines(path: string): Promise<Record<string, unknown>[]> {
  return (await readFile(path, "utf8"))
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** What must match between layouts and across a restart, step by step (times differ). */
const EXACT = ["step", "reward_mean", "reward_std", "loss", "kl_approx", "entropy", "grad_norm", "lr", "completion_length_mean"];
const pick = (records: Record<string, unknown>[]): unknown[][] => records.map((r) => EXACT.map((k) => r[k]));

describe("GRPO on a Ray cluster", { timeout: 300_000 }, () => {
  it("runs the local config with only cluster: changed, to the same metrics, and survives a SIGKILLed actor through Ray's restart", async () => {
    const localDir = join(dir, "local");
    await using local = await GRPOTrainer.create(config(localDir));
    await local.train();
    const expected = pick(await jsonLines(join(localDir, "metrics.jsonl")));
    expect(expected).toHaveLength(4);

    const rayDir = join(dir, "ray");
    const lines: string[] = [];
    const run = await GRPOTrainer.create(config(rayDir, { cluster: onRay() }), { ...rayOptions(), log: (l) => lines.push(l) });
    let workerPids: number[];
    try {
      const ranks = run.trainer.workers;
      const nodes = ranks.map((w) => w.nodeId);
      expect(nodes.every((n) => typeof n === "string" && n !== "")).toBe(true);
      expect(new Set(nodes).size).toBe(2); // STRICT_SPREAD: one worker per node (the generator on the head)
      expect(ranks.every((w) => w.nodeAddress === "127.0.0.1")).toBe(true);

      const killedRank = ranks[1]!;
      const oldWorkerPid = killedRank.info.pid;
      const actorPid = parentOf(oldWorkerPid)!;
      for await (const record of run.run()) {
        // after step 3 (checkpoint at 2): the actor of rank 1 dies, and with it its worker (its stdin pipe ends)
        if (record.step === 3 && run.restarts === 0) process.kill(actorPid, "SIGKILL");
      }
      expect(run.restarts).toBe(1);
      expect(isRunning(oldWorkerPid)).toBe(false);
      const newRank = run.trainer.workers[1]!;
      expect(newRank.info.pid).not.toBe(oldWorkerPid);
      expect(newRank.nodeId).toBe(killedRank.nodeId); // Ray restarted it in its bundle, on the same node
      workerPids = run.trainer.workers.map((w) => w.info.pid);
    } finally {
      await run.close();
    }
    // closing the run killed the actors, and their workers with them (each exits when its actor's pipe ends)
    const deadline = Date.now() + 15_000;
    while (workerPids.some(isRunning) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(workerPids.filter(isRunning)).toEqual([]);

    const metrics = await jsonLines(join(rayDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.step)).toEqual([1, 2, 3, 4]);
    expect(pick(metrics)).toEqual(expected);
    const events = await readRunEvents(rayDir);
    expect(events.map((e) => [e.kind, e.role, e.cause, e.resumeStep])).toEqual([["restart", "trainer", "WORKER_DIED", 2]]);
    expect(lines.some((l) => /restarting/.test(l))).toBe(true);
  });

  it("runs examples/configs/grpo-ray.yaml on a local Ray cluster the run starts on 127.0.0.1 and stops", async () => {
    const driversBefore = new Set(rayDrivers());
    const example = await readConfigFile("examples/configs/grpo-ray.yaml");
    const runDir = join(dir, "example");
    await using run = await GRPOTrainer.create({ ...example, steps: 2, eval: { every: 0 }, runDir } as GRPOTrainerConfigInput);
    // the run's Ray driver, and below it the cluster it started: the GCS, the raylet, its agents, the actors
    const drivers = rayDrivers().filter((pid) => !driversBefore.has(pid));
    expect(drivers).toHaveLength(1);
    const cluster = descendantsOf(drivers[0]!);
    expect(cluster.length).toBeGreaterThan(3);
    expect(run.trainer.workers.every((w) => w.nodeAddress === "127.0.0.1")).toBe(true);
    const summary = await run.train();
    expect(summary.steps).toBe(2);
    await run.close();
    // no Ray process outlives the run (the raylet's children end within moments of it)
    const started = [drivers[0]!, ...cluster];
    const deadline = Date.now() + 15_000;
    while (started.some(isRunning) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(started.filter(isRunning)).toEqual([]);
  });
});

/** The pids of the posttrain Ray driver processes running now. */
function rayDrivers(): number[] {
  return processesWith("posttrain_worker.placement.ray_driver");
}
