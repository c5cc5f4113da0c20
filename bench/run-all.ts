// Every benchmark in one run (issue 18, the regression guard). Prints one JSON object; progress goes to stderr.
//   npm run bench [-- --quick | --full] [--model tiny|small|medium] [--only bridge,generate,...] [--out FILE]
//                    [--timeout-s 900]
// Runs bench/bridge.ts, generate.ts, grpo.ts, async.ts, scale.ts and ppo.ts one after another, each in its own
// process (`tsx bench/<name>.ts`, with `--quick` unless `--full`), parses the JSON object each prints on stdout and
// gathers them under `results`, with each one's exit status and wall time. `--model` goes to every benchmark that
// takes one (all but bridge, which times the transport, and ppo, which times CartPole collection with a small MLP).
// The run fails (exit 1) only when a benchmark crashes: a non-zero exit, a timeout (`--timeout-s` per benchmark)
// or stdout that is not one JSON object. A missed target is never a failure: timings on shared machines are too
// noisy to gate on, so the targets are reported (each benchmark's `targets` / `ratios`) and left to a reader.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { parseOptions } from "../sdk/core/index.js";
import { MODEL_PRESET_NAMES } from "./model-presets.js";
import { round } from "./stats.js";

/** The benchmarks, in the order they run; `model`: whether it takes `--model`. */
const BENCHES = [
  { name: "bridge", model: false },
  { name: "generate", model: true },
  { name: "grpo", model: true },
  { name: "async", model: true },
  { name: "scale", model: true },
  { name: "ppo", model: false },
] as const;
type BenchName = (typeof BENCHES)[number]["name"];
const BENCH_NAMES = BENCHES.map((b) => b.name);

const FlagsSchema = z.strictObject({
  /** Full runs instead of the quick ones (the quick mode is the default). */
  full: z.boolean(),
  /** A preset for every benchmark that takes one; absent: each benchmark's own default. */
  model: z.enum(MODEL_PRESET_NAMES).optional(),
  /** The benchmarks to run, comma-separated (default all). */
  only: z
    .string()
    .transform((s) => s.split(","))
    .pipe(z.array(z.enum(BENCH_NAMES as [BenchName, ...BenchName[]])).min(1)),
  /** Also write the JSON to this file (its directory is created). */
  out: z.string().min(1).optional(),
  /** Wall-clock limit of each benchmark, in seconds. */
  timeoutS: z.coerce.number().positive().max(86_400),
});

const { values: raw } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    full: { type: "boolean", default: false },
    model: { type: "string" },
    only: { type: "string", default: BENCH_NAMES.join(",") },
    out: { type: "string" },
    "timeout-s": { type: "string" },
  },
});
if (raw.quick && raw.full) throw new Error("bench:all flags: --quick and --full exclude each other");
const flags = parseOptions(
  FlagsSchema,
  { full: raw.full, model: raw.model, only: raw.only, out: raw.out, timeoutS: raw["timeout-s"] ?? (raw.full ? "7200" : "900") },
  "bench:all flags",
);
const quick = !flags.full;
const TSX = join(import.meta.dirname, "..", "node_modules", ".bin", "tsx");

function log(message: string): void {
  process.stderr.write(`[bench:all] ${message}\n`);
}

/** The process-group killers of the benchmarks running now: Ctrl-C reaches the detached groups through them. */
const running = new Set<(signal: NodeJS.Signals) => void>();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    for (const kill of running) kill(signal);
    process.exit(130);
  });
}

/** One benchmark's outcome. */
interface Outcome {
  readonly ok: boolean;
  readonly args: readonly string[];
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly seconds: number;
  /** Why it counts as a crash (absent when ok). */
  readonly error?: string;
  /** Its JSON report (absent when it printed none). */
  readonly report?: unknown;
}

/** Runs `tsx bench/<name>.ts args`, stderr passed through, stdout collected; kills it after the timeout. */
async function runBench(name: BenchName, args: readonly string[]): Promise<Outcome> {
  const t0 = performance.now();
  // Its own process group, so that a timeout ends the benchmark's workers and baselines too, not only tsx.
  const child = spawn(TSX, [join(import.meta.dirname, `${name}.ts`), ...args], { stdio: ["ignore", "pipe", "inherit"], detached: true });
  const killGroup = (signal: NodeJS.Signals): void => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, signal);
    } catch {
      // already gone
    }
  };
  const chunks: Buffer[] = [];
  child.stdout.on("data", (chunk: Buffer) => chunks.push(chunk));
  running.add(killGroup);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup("SIGTERM");
    setTimeout(() => {
      killGroup("SIGKILL");
    }, 10_000).unref();
  }, flags.timeoutS * 1000);
  const [exitCode, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve_, reject) => {
    child.once("error", reject);
    child.once("close", (code, sig) => {
      resolve_([code, sig]);
    });
  }).finally(() => {
    clearTimeout(timer);
    running.delete(killGroup);
  });
  killGroup("SIGKILL"); // whatever of the group outlived the benchmark (a no-op when the group is gone)
  const seconds = round((performance.now() - t0) / 1000, 1);
  const stdout = Buffer.concat(chunks).toString("utf8").trim();
  let report: unknown;
  let parseError: string | undefined;
  try {
    report = JSON.parse(stdout);
  } catch (err) {
    parseError = `stdout is not one JSON object (${err instanceof Error ? err.message : String(err)}): ${JSON.stringify(stdout.slice(0, 200))}`;
  }
  const base = { args, exitCode, signal, seconds, ...(report === undefined ? {} : { report }) };
  if (timedOut) return { ...base, ok: false, error: `timed out after ${String(flags.timeoutS)} s` };
  if (exitCode !== 0) return { ...base, ok: false, error: `exited with ${signal ?? String(exitCode)}` };
  if (parseError !== undefined) return { ...base, ok: false, error: parseError };
  return { ...base, ok: true };
}

async function main(): Promise<void> {
  const started = performance.now();
  const loadBefore = round(loadavg()[0] ?? 0, 2);
  const results: Partial<Record<BenchName, Outcome>> = {};
  for (const bench of BENCHES) {
    if (!flags.only.includes(bench.name)) continue;
    const args = [...(quick ? ["--quick"] : []), ...(bench.model && flags.model !== undefined ? ["--model", flags.model] : [])];
    log(`${bench.name} ${args.join(" ")}`);
    const outcome = await runBench(bench.name, args);
    log(`${bench.name}: ${outcome.ok ? "ok" : `CRASHED (${outcome.error ?? ""})`} in ${String(outcome.seconds)} s`);
    results[bench.name] = outcome;
  }
  const crashed = Object.entries(results)
    .filter(([, o]) => !o.ok)
    .map(([name]) => name);
  const report = {
    bench: "all",
    quick,
    model: flags.model ?? null,
    machine: {
      platform: process.platform,
      arch: process.arch,
      cpus: cpus().length,
      memoryGB: round(totalmem() / 1e9, 1),
      node: process.version,
      loadAverage: { before: loadBefore, after: round(loadavg()[0] ?? 0, 2) },
    },
    seconds: round((performance.now() - started) / 1000, 1),
    crashed,
    notes: [
      "the run fails only when a benchmark crashes (non-zero exit, timeout, no JSON on stdout); a missed target never fails it",
      "bridge has no model: it times the transport (a no-op RPC, TensorDict round trips against raw ZeroMQ and pythonia), so --model does not apply to it",
      "ppo has no model either: it times CartPole collection (TS envs + a worker-held MLP against TorchRL's collector), so --model does not apply to it",
      "quick mode: few repetitions on small shapes, a smoke test of every benchmark; its timings are not the figures of docs/performance.md",
    ],
    results,
  };
  const text = `${JSON.stringify(report, null, 2)}\n`;
  if (flags.out !== undefined) {
    const out = resolve(flags.out);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, text);
    log(`wrote ${out}`);
  }
  process.stdout.write(text);
  if (crashed.length > 0) {
    log(`crashed: ${crashed.join(", ")}`);
    process.exitCode = 1;
  }
}

await main();
