// Shared test fixture: a simulated multi-node Ray cluster on loopback (test/python/ray_cluster.py, Ray's own
// `ray.cluster_utils.Cluster`), one per test file. Stopping it (EOF on the script's stdin) leaves no Ray process.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { resolvePython } from "../../bridge/index.js";

/** What the cluster script prints once every node is up. */
export interface TestRayCluster {
  /** The GCS address to give `ray.init` (`cluster.address`). */
  readonly address: string;
  /** Environment a client process needs to join it (Ray's token authentication). */
  readonly env: Readonly<Record<string, string>>;
  /** Every node: its id and the address it advertises (127.0.0.1). */
  readonly nodes: readonly { readonly nodeId: string; readonly address: string }[];
  /** Shuts the cluster down and waits for the script to exit. */
  stop(): Promise<void>;
}

/** The cluster's nodes: the head's CPUs, and each further node's CPUs and custom resources. */
export interface TestRayClusterSpec {
  readonly head: { readonly num_cpus: number; readonly resources?: Readonly<Record<string, number>> };
  readonly nodes: readonly { readonly num_cpus: number; readonly resources?: Readonly<Record<string, number>> }[];
}

/** Starts the cluster of `spec` (about 5-10 s) and resolves once it is up. */
export async function startTestRayCluster(spec: TestRayClusterSpec, timeoutMs = 120_000): Promise<TestRayCluster> {
  const child = spawn(resolvePython(), ["test/python/ray_cluster.py", JSON.stringify(spec)], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, PYTHONUNBUFFERED: "1" },
    detached: true, // its own process group: stop() can end everything it started
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => { resolve(); }));
  const lines = createInterface({ input: child.stdout });
  try {
    const line = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => { reject(new Error(`the Ray test cluster did not start in ${String(timeoutMs)} ms; stderr:\n${stderr}`)); }, timeoutMs);
      lines.once("line", (l) => {
        clearTimeout(timer);
        resolve(l);
      });
      void exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`the Ray test cluster script exited before it was up; stderr:\n${stderr}`));
      });
    });
    const info = JSON.parse(line) as { address: string; env?: Record<string, string>; nodes?: { nodeId: string; address: string }[] };
    return { address: info.address, env: info.env ?? {}, nodes: info.nodes ?? [], stop: () => stopScript(child, exited) };
  } catch (err) {
    await stopScript(child, exited);
    throw err;
  }
}

/** EOF on stdin asks the script to shut the cluster down; SIGKILL of its process group after 60 s. */
async function stopScript(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.stdin?.end();
  const timer = setTimeout(() => {
    if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
  }, 60_000);
  await exited;
  clearTimeout(timer);
}
