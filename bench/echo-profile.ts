// Where a TensorDict echo's time goes (issue 18): a small driver to profile, not a benchmark of record.
//   npx tsx bench/echo-profile.ts [--mb 1] [--calls 400]
//   npx tsx bench/echo-profile.ts --baseline-worker /tmp/head/python_worker   (A/B of two workers' Python)
//   node --cpu-prof --cpu-prof-dir=/tmp/prof --import tsx bench/echo-profile.ts --only td   (client CPU profile)
// Prints medians (ms) of the raw ZeroMQ echo and `worker.echo(td)` interleaved, and of the client's codec stages
// timed in a loop (encode = `toArrowParts`, decode = `fromArrow` of the reply's frames). With --baseline-worker DIR
// a second worker runs the `posttrain_worker` package found in DIR (another checkout's python_worker, first on its
// PYTHONPATH), and the raw echo, this tree's echo and the baseline's echo are timed one of each per round in every
// order (stats.ts, timeBalanced): the same client and the same moments for both workers, the fairest before/after on
// a shared, loaded machine. The worker's side is profiled from outside (a `sitecustomize` on PYTHONPATH, see
// docs/performance.md "Bridge"): nothing here changes what the worker runs.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Tensor, TensorDict, WorkerPool } from "../sdk/index.js";
import { rawEcho } from "./raw-echo.js";
import { median, round, timeBalanced, timeIt } from "./stats.js";

const MB = 1024 * 1024;
const { values: flags } = parseArgs({
  options: {
    mb: { type: "string", default: "1" },
    calls: { type: "string", default: "400" },
    only: { type: "string" }, // "raw" or "td": time one side alone (a cleaner profile of it)
    "baseline-worker": { type: "string" }, // a python_worker directory to compare this tree's worker with
  },
});
const mb = Number(flags.mb);
const calls = Number(flags.calls);
const baselineDir = flags["baseline-worker"];

const dir = await mkdtemp(join(tmpdir(), "posttrain-echo-profile-"));
const raw = await rawEcho(`ipc://${join(dir, "raw.sock")}`);
const pool = await WorkerPool.local({ workers: 1, device: "cpu", transport: "ipc", heartbeatIntervalMs: 0 });
const baseline =
  baselineDir === undefined
    ? undefined
    : await WorkerPool.local({ workers: 1, device: "cpu", transport: "ipc", heartbeatIntervalMs: 0, env: { PYTHONPATH: baselineDir } });
try {
  const worker = pool.worker(0);
  const cols = 1024;
  const rows = Math.max(1, Math.floor((mb * MB) / 4 / cols));
  const data = new Float32Array(rows * cols);
  for (let i = 0; i < data.length; i++) data[i] = i % 4099; // every page written, as in bench/bridge.ts
  const td = new TensorDict({ x: Tensor.from(data, { dtype: "float32", shape: [rows, cols] }) }, { batchSize: [rows] });
  const frame = new Uint8Array(mb * MB).fill(3);
  let out: Record<string, unknown>;
  if (baseline !== undefined) {
    const other = baseline.worker(0);
    const [rawTimes = [], tdTimes = [], baseTimes = []] = await timeBalanced(
      [() => raw.send(frame), () => worker.echo(td), () => other.echo(td)],
      calls,
      20,
    );
    const rawMs = median(rawTimes);
    out = {
      mb,
      calls,
      baselineWorker: baselineDir,
      rawEchoMs: round(rawMs),
      tensordictEchoMs: round(median(tdTimes)),
      baselineEchoMs: round(median(baseTimes)),
      ratioToRaw: round(rawMs / median(tdTimes)),
      baselineRatioToRaw: round(rawMs / median(baseTimes)),
    };
  } else {
    const rawTimes: number[] = [];
    const tdTimes: number[] = [];
    for (let i = 0; i < calls + 20; i++) {
      let t0 = performance.now();
      if (flags.only !== "td") await raw.send(frame);
      const rawMs = performance.now() - t0;
      t0 = performance.now();
      if (flags.only !== "raw") await worker.echo(td);
      const tdMs = performance.now() - t0;
      if (i >= 20) {
        rawTimes.push(rawMs);
        tdTimes.push(tdMs);
      }
    }
    out = {
      mb,
      calls,
      rawEchoMs: flags.only === "td" ? null : round(median(rawTimes)),
      tensordictEchoMs: flags.only === "raw" ? null : round(median(tdTimes)),
    };
  }
  const parts = td.toArrowParts();
  const encodeMs = await timeIt(() => Promise.resolve(td.toArrowParts()), 200, 20);
  const decodeMs = await timeIt(() => Promise.resolve(TensorDict.fromArrow(parts)), 200, 20);
  out.clientLoopMs = { encode: round(median(encodeMs), 4), decode: round(median(decodeMs), 4) };
  process.stdout.write(`${JSON.stringify(out)}\n`);
} finally {
  await pool.close();
  await baseline?.close();
  await raw.stop();
  await rm(dir, { recursive: true, force: true });
}
