// Bridge benchmark (issue: foundation). Prints one JSON object; see docs/protocol.md for what is measured.
//   npm run bench:bridge [-- --transport ipc|tcp] [-- --quick]
// Throughput = bytes carried in both directions / round-trip time (an echo), in MB/s (1 MB = 2^20 bytes).
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { Dealer } from "zeromq";
import { resolvePython } from "../bridge/index.js";
import { Tensor, TensorDict, WorkerPool } from "../sdk/index.js";
import { median, quantile, round, timeInterleaved, timeIt } from "./stats.js";

const MB = 1024 * 1024;
const { values: flags } = parseArgs({
  options: { transport: { type: "string", default: "ipc" }, quick: { type: "boolean", default: false } },
});
const transport = flags.transport === "tcp" ? "tcp" : "ipc";
const sizesMb = flags.quick ? [1, 16] : [1, 16, 256];
const reps = (mb: number): number => (mb >= 256 ? 5 : mb >= 16 ? 15 : 40);
const python = resolvePython();

function log(message: string): void {
  process.stderr.write(`[bench:bridge] ${message}\n`);
}

/** Starts the raw pyzmq echo server and returns a connected DEALER. */
async function rawEcho(dir: string): Promise<{ send: (frame: Uint8Array) => Promise<void>; stop: () => Promise<void> }> {
  const endpoint = transport === "tcp" ? "tcp://127.0.0.1:*" : `ipc://${join(dir, "raw.sock")}`;
  const child = spawn(python, [join(import.meta.dirname, "zmq_echo_server.py"), endpoint], { stdio: ["ignore", "pipe", "inherit"] });
  const bound = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    child.once("exit", (code) => {
      reject(new Error(`echo server exited with ${String(code)}`));
    });
  });
  const dealer = new Dealer({ linger: 0 });
  dealer.connect(bound);
  return {
    send: async (frame) => {
      await dealer.send(frame);
      await dealer.receive();
    },
    stop: async () => {
      await dealer.send("STOP");
      dealer.close();
      await new Promise((r) => child.once("exit", r));
    },
  };
}

function denseTd(bytes: number): TensorDict {
  const cols = 1024;
  const rows = Math.max(1, Math.floor(bytes / 4 / cols));
  const data = new Float32Array(rows * cols);
  for (let i = 0; i < data.length; i += 4099) data[i] = i;
  return new TensorDict({ x: Tensor.from(data, { dtype: "float32", shape: [rows, cols] }) }, { batchSize: [rows] });
}

async function pythoniaFigures(): Promise<{ perCallMs: number; oneMbRoundTripMs: number } | { error: string }> {
  process.env.PYTHON_BIN = python;
  try {
    const { python: py } = (await import("pythonia")) as unknown as {
      python: ((file: string) => Promise<PythoniaModule>) & { exit: () => void };
    };
    const mod = await py(join(import.meta.dirname, "pythonia_echo.py"));
    const calls = await timeIt(() => mod.noop(), 200, 20);
    const buf = Buffer.alloc(MB, 7);
    const transfers = await timeIt(async () => {
      const back = await mod.echo(buf);
      await back.valueOf();
    }, 3, 1);
    py.exit();
    return { perCallMs: median(calls), oneMbRoundTripMs: median(transfers) };
  } catch (err) {
    return { error: String(err) };
  }
}

interface PythoniaModule {
  noop: () => Promise<number>;
  echo: (data: Buffer) => Promise<{ valueOf: () => Promise<unknown> }>;
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "posttrain-bench-"));
  const raw = await rawEcho(dir);
  const pool = await WorkerPool.local({ workers: 1, device: "cpu", transport, heartbeatIntervalMs: 0 });
  const worker = pool.worker(0);
  try {
    log("no-op round trips");
    const tiny = new Uint8Array([1]);
    const [rawSmall, rpc] = await timeInterleaved(() => raw.send(tiny), () => worker.ping(), 3000, 300);

    const transfer: Record<string, unknown> = {};
    for (const mb of sizesMb) {
      log(`${mb} MB transfers`);
      const td = denseTd(mb * MB);
      const payloadBytes = td.toArrow().byteLength;
      const frame = new Uint8Array(mb * MB).fill(3);
      const [rawTimes, tdTimes] = await timeInterleaved(() => raw.send(frame), () => worker.echo(td), reps(mb), 2);
      const rawMs = median(rawTimes);
      const tdMs = median(tdTimes);
      const rawMBs = (2 * mb) / (rawMs / 1000);
      const tdMBs = (2 * (payloadBytes / MB)) / (tdMs / 1000);
      transfer[`${mb}MB`] = {
        rawZmqMs: round(rawMs),
        tensordictMs: round(tdMs),
        rawZmqMBps: round(rawMBs, 1),
        tensordictMBps: round(tdMBs, 1),
        ratioToRaw: round(tdMBs / rawMBs),
      };
    }
    log("pythonia baseline");
    const pythonia = await pythoniaFigures();

    const rawMedian = median(rawSmall);
    const rpcMedian = median(rpc);
    const t1 = transfer["1MB"] as { tensordictMs: number };
    const targets: Record<string, boolean | null> = {
      "noop_rpc <= 1.3x raw zmq": rpcMedian <= 1.3 * rawMedian,
      "noop_rpc < pythonia call": "perCallMs" in pythonia ? rpcMedian < pythonia.perCallMs : null,
      "1MB >= 100x pythonia": "oneMbRoundTripMs" in pythonia ? pythonia.oneMbRoundTripMs / t1.tensordictMs >= 100 : null,
    };
    for (const mb of sizesMb.filter((m) => m >= 16)) {
      targets[`${mb}MB >= 0.7x raw zmq`] = (transfer[`${mb}MB`] as { ratioToRaw: number }).ratioToRaw >= 0.7;
    }
    const report = {
      bench: "bridge",
      transport,
      machine: { platform: process.platform, arch: process.arch, node: process.version, torch: worker.info.torch },
      noopRoundTripMs: {
        rawZmq: { median: round(rawMedian), p99: round(quantile(rawSmall, 0.99)) },
        rpcPing: { median: round(rpcMedian), p99: round(quantile(rpc, 0.99)) },
        ratioToRaw: round(rpcMedian / rawMedian),
      },
      pythonia:
        "perCallMs" in pythonia
          ? {
              perCallMs: round(pythonia.perCallMs),
              oneMbRoundTripMs: round(pythonia.oneMbRoundTripMs),
              tensordictSpeedupAt1MB: round(pythonia.oneMbRoundTripMs / t1.tensordictMs, 1),
            }
          : pythonia,
      transfer,
      targets,
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } finally {
    await pool.close();
    await raw.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
