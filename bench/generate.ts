// Generation benchmark (issues 3 and 18). Prints one JSON object; progress goes to stderr.
//   npm run bench:generate [-- --model tiny|small|medium] [--new-tokens 64..256] [--batch N] [--reps N] [--quick]
//                          [--worker-timing]
// Tokens/s of `worker.generate` / `worker.score` through the SDK (TS -> bridge -> worker) against Hugging Face
// `model.generate` and a one-forward scoring called in-process by bench/generate_inprocess.py, on the same
// model (a bench/model-presets.ts preset), prompts, lengths and greedy decoding. The two sides are timed
// alternately (one SDK run, one in-process run, ...) so both see the same machine state; the in-process side
// reports the time measured inside Python. The SDK counts the tokens it actually generated (a row may end early
// on eos); the in-process side forces exactly maxNewTokens per row. Where vLLM is importable by the worker's
// Python, its offline `LLM.generate` is timed the same way (interleaved, same prompts, eos ignored); otherwise
// the JSON says `"vllm": {"skipped": "not installed"}`. A second in-process baseline also returns the generated
// tokens' log-probs (from HF's per-step logits), as the SDK's reply does: `generate.ratioWithLogProbs`.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { resolvePython } from "../bridge/index.js";
import { InvalidArgumentError, RaggedTensor, Tensor, TensorDict, WorkerPool } from "../sdk/index.js";
import { WorkerTimings } from "./grpo-worker-timing.js";
import { MODEL_PRESETS, buildBenchModel, parseModelPreset } from "./model-presets.js";
import { median, round } from "./stats.js";

const { values: flags } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    model: { type: "string" },
    "new-tokens": { type: "string" },
    batch: { type: "string" },
    reps: { type: "string" },
    "worker-timing": { type: "boolean", default: false },
  },
});

/** A positive integer flag in [min, max], or its default; an InvalidArgumentError naming the flag otherwise. */
function intFlag(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(`--${name}: expected an integer in [${String(min)}, ${String(max)}], got ${JSON.stringify(raw)}`);
  }
  return value;
}

const preset = parseModelPreset(flags.model);
const promptTokens = 32;
const config = {
  model: { preset, seed: 0, ...MODEL_PRESETS[preset] },
  batch: intFlag("batch", flags.batch, flags.quick ? 8 : 16, 1, 1024),
  promptTokens,
  maxNewTokens: intFlag("new-tokens", flags["new-tokens"], flags.quick ? 32 : 128, 1, MODEL_PRESETS[preset].maxPositionEmbeddings - promptTokens),
  decoding: "greedy",
  reps: intFlag("reps", flags.reps, flags.quick ? 2 : preset === "medium" ? 5 : 9, 1, 1000),
  // A score call is short on the tiny model (more reps for a stable median) and as long as a generate call on medium.
  scoreRepsFactor: preset === "tiny" ? 3 : 1,
  warmup: 1,
  device: "cpu",
};
const python = resolvePython();

function log(message: string): void {
  process.stderr.write(`[bench:generate] ${message}\n`);
}

/** Deterministic prompts of printable-ASCII token ids (0..94 in the tiny tokenizer). */
function makePrompts(): number[][] {
  let state = 12345;
  const next = (): number => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state;
  };
  return Array.from({ length: config.batch }, () => Array.from({ length: config.promptTokens }, () => next() % 95));
}

function ragged(rows: readonly (readonly number[])[]): RaggedTensor {
  return RaggedTensor.fromRows(rows.map((r) => Tensor.from(BigInt64Array.from(r.map(BigInt)), { dtype: "int64", shape: [r.length] })));
}

interface InProcess {
  run: (command: "generate" | "generate-logprobs" | "score" | "vllm") => Promise<{ ms: number; tokens: number }>;
  threads: number;
  /** vLLM's version where the Python can import it, else null. */
  vllm: string | null;
  stop: () => Promise<void>;
}

/** Starts bench/generate_inprocess.py in serve mode, with the model and the request loaded. */
async function startInProcess(modelDir: string, request: object): Promise<InProcess> {
  const child = spawn(python, [join(import.meta.dirname, "generate_inprocess.py"), modelDir, "--serve"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const exited = new Promise<never>((_, reject) => {
    child.once("exit", (code) => {
      reject(new Error(`generate_inprocess.py exited with ${String(code)}`));
    });
  });
  exited.catch(() => undefined);
  const readJson = async (): Promise<Record<string, unknown>> => {
    const line = await Promise.race([lines.next(), exited]);
    if (line.done === true) throw new Error("generate_inprocess.py closed its stdout");
    const value = JSON.parse(line.value) as Record<string, unknown>;
    if ("error" in value) throw new Error(`generate_inprocess.py: ${String(value.error)}`);
    return value;
  };
  child.stdin.write(`${JSON.stringify(request)}\n`);
  const ready = await readJson();
  return {
    threads: Number(ready.threads),
    vllm: typeof ready.vllm === "string" ? ready.vllm : null,
    run: async (command) => {
      child.stdin.write(`${command}\n`);
      const reply = await readJson();
      return { ms: Number(reply.ms), tokens: Number(reply.tokens) };
    },
    stop: async () => {
      const done = new Promise((r) => child.once("exit", r));
      child.stdin.end("quit\n");
      await done;
    },
  };
}

interface Sample {
  ms: number;
  tokens: number;
}

/** Runs the sides in turn, one rep of each (warm-up untimed), returning each side's samples. */
async function interleave(sides: readonly (() => Promise<Sample>)[], reps = config.reps): Promise<Sample[][]> {
  for (let i = 0; i < config.warmup; i++) {
    for (const side of sides) await side();
  }
  const samples: Sample[][] = sides.map(() => []);
  for (let i = 0; i < reps; i++) {
    for (const [j, side] of sides.entries()) samples[j]?.push(await side());
  }
  return samples;
}

function summarize(samples: Sample[]): { medianMs: number; tokens: number; tokensPerS: number } {
  const ms = median(samples.map((s) => s.ms));
  const tokens = median(samples.map((s) => s.tokens));
  return { medianMs: round(ms, 1), tokens, tokensPerS: round(tokens / (ms / 1000), 1) };
}

/**
 * Median milliseconds per part over the SDK's generate reps (`--worker-timing`, the warm-up's included): `call.generate`
 * (the worker's whole call: payload decode, method, reply encode), `generation` (the decoding loop), `prompts`,
 * `outcome`, and `transportAndTs` (the SDK's time less the worker's call).
 */
function medianSplit(split: readonly Record<string, number>[]): Record<string, number> {
  const keys = [...new Set(split.flatMap((s) => Object.keys(s)))];
  return Object.fromEntries(keys.map((k) => [k, round(median(split.map((s) => s[k] ?? 0)), 2)]));
}

type VllmReport = { skipped: string } | { sdk: ReturnType<typeof summarize>; vllm: ReturnType<typeof summarize>; ratio: number };

/**
 * The SDK against vLLM's offline engine in the baseline process, interleaved, where vLLM is importable; a
 * `skipped` reason otherwise (or when vLLM fails to start on this machine: a benchmark reports, never crashes
 * on an optional baseline).
 */
async function benchVllm(py: InProcess, generate: () => Promise<TensorDict>): Promise<VllmReport> {
  if (py.vllm === null) return { skipped: "not installed" };
  log(`vllm ${py.vllm}: ${config.warmup} warm-up + ${config.reps} interleaved reps`);
  try {
    const [sdk = [], engine = []] = await interleave([
      async () => {
        const t0 = performance.now();
        const out = await generate();
        const ms = performance.now() - t0;
        return { ms, tokens: out.getRagged(["tokens", "response"]).lengths().reduce((s, n) => s + n, 0) };
      },
      () => py.run("vllm"),
    ]);
    const a = summarize(sdk);
    const b = summarize(engine);
    return { sdk: a, vllm: b, ratio: round(a.tokensPerS / b.tokensPerS) };
  } catch (err) {
    return { skipped: `vllm ${py.vllm} failed: ${err instanceof Error ? err.message : String(err)}` };
  }
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "posttrain-bench-generate-"));
  try {
    log(`building the ${preset} model`);
    const built = await buildBenchModel(preset, join(dir, "model"), { seed: config.model.seed });
    log(`${String(built.parameters)} parameters, vocabulary ${String(built.vocabSize)}`);
    const prompts = makePrompts();
    // --worker-timing: the worker runs under bench/grpo_timed_worker.py, so that each SDK call splits into the
    // worker's decoding loop, its glue (prompt rows, reply columns, payload codec) and the transport
    const workerTimings = flags["worker-timing"] ? await WorkerTimings.create(dir, python) : null;
    const pool = await WorkerPool.local({
      workers: 1,
      device: "cpu",
      heartbeatIntervalMs: 0,
      ...(workerTimings !== null ? { python: workerTimings.python } : {}),
    });
    const worker = pool.worker(0);
    let inproc: InProcess | undefined;
    try {
      await worker.loadModel({ name: "policy", path: built.path });
      const promptTd = new TensorDict({ tokens: { prompt: ragged(prompts) } }, { batchSize: [config.batch] });
      const generate = async (): Promise<TensorDict> =>
        worker.generate("policy", promptTd, { maxNewTokens: config.maxNewTokens, temperature: 0, seed: 0 });

      // The full sequences to score: prompts plus one greedy generation (the same for every rep).
      const first = await generate();
      const fullRagged = first.getRagged(["tokens", "full"]);
      const full = Array.from({ length: config.batch }, (_, i) => Array.from(fullRagged.row(i).toArray() as (number | bigint)[], Number));
      const fullTd = new TensorDict({ tokens: { full: ragged(full) } }, { batchSize: [config.batch] });
      const finishReasons = first.getStrings("finish_reason");

      log("starting the in-process baseline");
      inproc = await startInProcess(built.path, { prompts, full, maxNewTokens: config.maxNewTokens, doSample: false, seed: 0 });
      const py = inproc;

      log(`generate: ${config.warmup} warm-up + ${config.reps} interleaved reps`);
      const split: Record<string, number>[] = [];
      await workerTimings?.take(); // drop the lines of the calls so far
      const [sdkGen = [], pyGen = [], pyGenLogProbs = []] = await interleave([
        async () => {
          const t0 = performance.now();
          const out = await generate();
          const ms = performance.now() - t0;
          const lengths = out.getRagged(["tokens", "response"]).lengths();
          if (workerTimings !== null) {
            const parts = await workerTimings.take();
            split.push({ ...parts, transportAndTs: ms - (parts["call.generate"] ?? 0) });
          }
          return { ms, tokens: lengths.reduce((s, n) => s + n, 0) };
        },
        () => py.run("generate"),
        () => py.run("generate-logprobs"),
      ]);
      const scoreReps = config.scoreRepsFactor * config.reps; // a score call is short: more reps for a stable median
      log(`score: ${config.warmup} warm-up + ${scoreReps} interleaved reps`);
      const scoredTokens = full.reduce((s, r) => s + r.length, 0);
      const [sdkScore = [], pyScore = []] = await interleave(
        [
          async () => {
            const t0 = performance.now();
            await worker.score("policy", fullTd);
            return { ms: performance.now() - t0, tokens: scoredTokens };
          },
          () => py.run("score"),
        ],
        scoreReps,
      );

      const generate_ = { sdk: summarize(sdkGen), inProcess: summarize(pyGen), inProcessWithLogProbs: summarize(pyGenLogProbs) };
      const score = { sdk: summarize(sdkScore), inProcess: summarize(pyScore) };
      const generateRatio = generate_.sdk.tokensPerS / generate_.inProcess.tokensPerS;
      const scoreRatio = score.sdk.tokensPerS / score.inProcess.tokensPerS;
      const vllm = await benchVllm(py, generate);
      const report = {
        bench: "generate",
        config: { ...config, parameters: built.parameters, vocabSize: built.vocabSize },
        machine: {
          platform: process.platform,
          arch: process.arch,
          node: process.version,
          torch: worker.info.torch,
          inProcessThreads: py.threads,
          // both sides inherit it; under load, spinning OpenMP threads (the default) slow either side by up to 20x
          ompWaitPolicy: process.env.OMP_WAIT_POLICY ?? null,
        },
        sdkFinishReasons: Object.fromEntries(
          [...new Set(finishReasons)].map((r) => [r, finishReasons.filter((x) => x === r).length]),
        ),
        generate: {
          ...generate_,
          ratio: round(generateRatio),
          // against HF `generate` also returning the generated tokens' log-probs, as the SDK's reply does
          ratioWithLogProbs: round(generate_.sdk.tokensPerS / generate_.inProcessWithLogProbs.tokensPerS),
          ...(workerTimings !== null ? { workerSplitMs: medianSplit(split) } : {}),
        },
        score: { ...score, ratio: round(scoreRatio) },
        vllm,
        targets: { "generate >= 1.0x in-process HF": generateRatio >= 1.0 },
      };
      process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    } finally {
      await inproc?.stop();
      await pool.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
