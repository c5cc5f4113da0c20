import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { isIPv4 } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InvalidArgumentError } from "../errors.js";
import { WorkerConnection, type ConnectionOptions } from "./connection.js";
import { clientAuth, generatePoolKeys, workerAuthLine, type PoolKeys } from "./keys.js";
import { connectionOptions, parsePoolKeys, workerArgs } from "./options.js";
import { WorkerProcess, type WorkerLogMode } from "./process.js";
import { resolvePython } from "./python.js";

/** Where local workers compute: `"cpu"`, `"cuda"` (one GPU per worker), or `"auto"` (CUDA when present). */
export type LocalDevice = "cpu" | "cuda" | "auto";

/** Options of {@link launchLocalWorkers}. */
export interface LocalWorkersOptions extends ConnectionOptions {
  /** Number of worker processes (default 1). */
  readonly workers?: number;
  /** Default `"auto"`. */
  readonly device?: LocalDevice;
  /**
   * `"ipc"` (default: a socket file in a private directory) or `"tcp"` (an ephemeral port on `host`). Either way
   * the pool gets a fresh secret that every handshake must carry; tcp is always ZeroMQ CURVE with the pool's keys.
   */
  readonly transport?: "ipc" | "tcp";
  /**
   * Interface the tcp workers bind, an IPv4 address or `"*"` (all). Default `"127.0.0.1"`. Only with
   * `transport: "tcp"`; a non-loopback address is safe to bind only because tcp is always CURVE (docs/workers.md).
   */
  readonly host?: string;
  /** Python interpreter; see `resolvePython` for the default. */
  readonly python?: string;
  /** Largest message (sum of payload frames) a worker accepts, in bytes (default 4 GiB). */
  readonly maxPayloadBytes?: number;
  /**
   * Compute requests a worker holds at once, running and queued, over all its clients (`--max-in-flight`, default
   * 64): beyond it a request is answered at once with `WorkerOverloadedError` (code `OVERLOADED`).
   */
  readonly maxInFlight?: number;
  /** Extra environment variables for every worker. */
  readonly env?: Readonly<Record<string, string>>;
  /** Milliseconds to wait for each worker's READY line (default 120 000). */
  readonly startTimeoutMs?: number;
  /** Aborts the start: workers already started are stopped. */
  readonly signal?: AbortSignal;
  /** `"tail"` (default) keeps stderr for error messages; `"inherit"` also forwards it, prefixed. */
  readonly log?: WorkerLogMode;
  /**
   * Worker extensions: paths of Python files whose `register(registry)` adds methods to every worker
   * (`--extension`, docs/protocol.md); call those methods with `WorkerClient.call`. Default none.
   */
  readonly extensions?: readonly string[];
  /**
   * The pool's secret and CURVE keys (see `generatePoolKeys`). Default: fresh ones for this pool, which is what a
   * run wants; pass your own only when another component must also speak to these workers (a test's raw client).
   */
  readonly keys?: PoolKeys;
}

/** Local workers started by {@link launchLocalWorkers}; `close()` stops them and removes their socket directory. */
export interface LocalWorkers {
  readonly connections: readonly WorkerConnection[];
  /** The private directory holding the ipc sockets. */
  readonly socketDir: string;
  /** Closes the connections, stops the workers and removes the socket directory. */
  close(): Promise<void>;
}

/** Counts NVIDIA GPUs with `nvidia-smi -L`; 0 when there is none or no driver. */
export function countCudaDevices(): Promise<number> {
  return new Promise((resolve) => {
    execFile("nvidia-smi", ["-L"], { timeout: 10_000 }, (err, stdout) => {
      resolve(err === null ? stdout.split("\n").filter((l) => l.startsWith("GPU ")).length : 0);
    });
  });
}

/**
 * Spawns `workers` local `python -m posttrain_worker` processes, waits for each to be READY, connects a
 * DEALER to each and performs the handshake. On any failure, whatever was started is stopped again.
 */
export async function launchLocalWorkers(options: LocalWorkersOptions = {}): Promise<LocalWorkers> {
  const count = options.workers ?? 1;
  if (!Number.isInteger(count) || count < 1) {
    throw new InvalidArgumentError(`workers: expected a positive integer, got ${JSON.stringify(count)}`);
  }
  const limitArgs = workerArgs(options);
  const deviceOption = options.device ?? "auto";
  if (!["cpu", "cuda", "auto"].includes(deviceOption)) {
    throw new InvalidArgumentError(`device: expected "cpu", "cuda" or "auto", got ${JSON.stringify(deviceOption)}`);
  }
  const gpus = deviceOption === "cpu" ? 0 : await countCudaDevices();
  if (deviceOption === "cuda" && gpus === 0) {
    throw new InvalidArgumentError('device: "cuda" was asked for but nvidia-smi finds no GPU');
  }
  const host = tcpHost(options);
  const python = resolvePython(options.python);
  // Per pool: they travel to each worker on its stdin pipe, never in its argv or environment.
  const keys = options.keys === undefined ? generatePoolKeys() : parsePoolKeys(options.keys);
  const socketDir = await mkdtemp(join(tmpdir(), "posttrain-"));
  // Indexed by worker number; slots stay empty for workers that did not get that far.
  const processes: WorkerProcess[] = [];
  const connections: WorkerConnection[] = [];

  const closeAll = async (): Promise<void> => {
    await Promise.all(connections.map((c) => c.close()));
    for (const [i, p] of processes.entries()) {
      if (p !== undefined && connections[i] === undefined) {
        p.kill("SIGKILL");
        await p.exited;
      }
    }
    await rm(socketDir, { recursive: true, force: true });
  };

  try {
    const started = await Promise.allSettled(
      Array.from({ length: count }, async (_, i) => {
        const useGpu = gpus > 0;
        const endpoint = host !== undefined ? `tcp://${host}:*` : `ipc://${join(socketDir, `worker-${i}.sock`)}`;
        const proc = await WorkerProcess.start({
          name: `worker ${i}`,
          python,
          args: [
            "--endpoint",
            endpoint,
            "--auth-stdin",
            "--worker-id",
            String(i),
            "--device",
            useGpu ? "cuda" : "cpu",
            ...limitArgs,
          ],
          stdinLine: workerAuthLine(keys),
          env: { ...(useGpu ? { CUDA_VISIBLE_DEVICES: String(i % gpus) } : {}), ...options.env },
          ...(options.startTimeoutMs !== undefined ? { startTimeoutMs: options.startTimeoutMs } : {}),
          ...(options.signal !== undefined ? { signal: options.signal } : {}),
          ...(options.log !== undefined ? { log: options.log } : {}),
        });
        processes[i] = proc;
        return proc;
      }),
    );
    const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    const opened = await Promise.allSettled(
      processes.map(async (proc, i) => {
        const connection = await WorkerConnection.open({
          ...connectionOptions(options),
          name: proc.name,
          endpoint: connectEndpoint(proc.ready.endpoint),
          auth: clientAuth(keys, proc.ready.endpoint),
          process: proc,
        });
        connections[i] = connection;
        return connection;
      }),
    );
    const failedOpen = opened.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failedOpen !== undefined) throw failedOpen.reason;
  } catch (err) {
    await closeAll();
    throw err;
  }
  let closing: Promise<void> | undefined;
  return {
    connections,
    socketDir,
    close: () => (closing ??= closeAll()),
  };
}

/** The tcp host to bind (`undefined` for ipc); `InvalidArgumentError` naming the option when it does not fit. */
function tcpHost(options: LocalWorkersOptions): string | undefined {
  const transport: unknown = options.transport ?? "ipc";
  if (transport !== "ipc" && transport !== "tcp") {
    throw new InvalidArgumentError(`transport: expected "ipc" or "tcp", got ${JSON.stringify(transport)}`);
  }
  const host: unknown = options.host;
  if (transport === "ipc") {
    if (host !== undefined) throw new InvalidArgumentError('host: only with transport "tcp" (ipc binds a socket file)');
    return undefined;
  }
  if (host === undefined) return "127.0.0.1";
  if (typeof host !== "string" || !(isIPv4(host) || host === "*")) {
    throw new InvalidArgumentError(`host: expected an IPv4 address or "*", got ${JSON.stringify(host)}`);
  }
  return host;
}

/** Where to connect to a worker bound on all interfaces (`tcp://0.0.0.0:port`): its loopback address. */
function connectEndpoint(bound: string): string {
  return bound.replace(/^tcp:\/\/0\.0\.0\.0:/, "tcp://127.0.0.1:");
}
