// Generation benchmark (issue 3). Prints one JSON object; progress goes to stderr.
//   npm run bench:generate [-- --quick]
// Tokens/s of `worker.generate` / `worker.score` through the SDK (TS -> bridge -> worker) against Hugging Face
// `model.generate` and a one-forward scoring called in-process by bench/generate_inprocess.py, on the same
// tiny model, prompts, lengths and greedy decoding. The two sides are timed alternately (one SDK run, one
// in-process run, ...) so both see the same machine state; the in-process side reports the time measured
// inside Python. The SDK counts the tokens it actually generated (a row may end early on eos); the in-process
// side forces exactly maxNewTokens per row.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { resolvePython } from "../bridge/index.js";
import { RaggedTensor, Tensor, TensorDict, WorkerPool, makeTinyModel } from "../sdk/index.js";
import { median, round } from "./stats.js";

const { values: flags } = parseArgs({ options: { quick: { type: "boolean", default: false } } });
const config = {
  model: { seed: 0, hiddenSize: 256, numLayers: 4, numHeads: 8, numKvHeads: 4, intermediateSize: 512 },
  batch: 16,
  promptTokens: 32,
  maxNewTokens: 64,
  decoding: "greedy",
  reps: flags.quick ? 3 : 9,
  scoreRepsFactor: 3,
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
  run: (command: "generate" | "score") => Promise<{ ms: number; tokens: number }>;
  threads: number;
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

/** Alternates `sdk` and `inproc` (warm-up untimed), returning each side's samples. */
async function interleave(
  sdk: () => Promise<Sample>,
  inproc: () => Promise<Sample>,
  reps = config.reps,
): Promise<[Sample[], Sample[]]> {
  for (let i = 0; i < config.warmup; i++) {
    await sdk();
    await inproc();
  }
  const a: Sample[] = [];
  const b: Sample[] = [];
  for (let i = 0; i < reps; i++) {
    a.push(await sdk());
    b.push(await inproc());
  }
  return [a, b];
}

function summarize(samples: Sample[]): { medianMs: number; tokens: number; tokensPerS: number } {
  const ms = median(samples.map((s) => s.ms));
  const tokens = median(samples.map((s) => s.tokens));
  return { medianMs: round(ms, 1), tokens, tokensPerS: round(tokens / (ms / 1000), 1) };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "posttrain-bench-generate-"));
  try {
    log("building the tiny model");
    const tiny = await makeTinyModel(join(dir, "model"), config.model);
    const prompts = makePrompts();
    const pool = await WorkerPool.local({ workers: 1, device: "cpu", heartbeatIntervalMs: 0 });
    const worker = pool.worker(0);
    let inproc: InProcess | undefined;
    try {
      await worker.loadModel({ name: "policy", path: tiny.path });
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
      inproc = await startInProcess(tiny.path, { prompts, full, maxNewTokens: config.maxNewTokens, doSample: false, seed: 0 });
      const py = inproc;

      log(`generate: ${config.warmup} warm-up + ${config.reps} interleaved reps`);
      const [sdkGen, pyGen] = await interleave(
        async () => {
          const t0 = performance.now();
          const out = await generate();
          const ms = performance.now() - t0;
          const lengths = out.getRagged(["tokens", "response"]).lengths();
          return { ms, tokens: lengths.reduce((s, n) => s + n, 0) };
        },
        () => py.run("generate"),
      );
      const scoreReps = config.scoreRepsFactor * config.reps; // a score call is short: more reps for a stable median
      log(`score: ${config.warmup} warm-up + ${scoreReps} interleaved reps`);
      const scoredTokens = full.reduce((s, r) => s + r.length, 0);
      const [sdkScore, pyScore] = await interleave(
        async () => {
          const t0 = performance.now();
          await worker.score("policy", fullTd);
          return { ms: performance.now() - t0, tokens: scoredTokens };
        },
        () => py.run("score"),
        scoreReps,
      );

      const generate_ = { sdk: summarize(sdkGen), inProcess: summarize(pyGen) };
      const score = { sdk: summarize(sdkScore), inProcess: summarize(pyScore) };
      const generateRatio = generate_.sdk.tokensPerS / generate_.inProcess.tokensPerS;
      const scoreRatio = score.sdk.tokensPerS / score.inProcess.tokensPerS;
      const report = {
        bench: "generate",
        config: { ...config, parameters: tiny.parameters, vocabSize: tiny.vocabSize },
        machine: {
          platform: process.platform,
          arch: process.arch,
          node: process.version,
          torch: worker.info.torch,
          inProcessThreads: py.threads,
        },
        sdkFinishReasons: Object.fromEntries(
          [...new Set(finishReasons)].map((r) => [r, finishReasons.filter((x) => x === r).length]),
        ),
        generate: { ...generate_, ratio: round(generateRatio) },
        score: { ...score, ratio: round(scoreRatio) },
        targets: { "generate >= 0.95x": generateRatio >= 0.95 },
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
