// A custom reward written in TypeScript that awaits an async function: `npx tsx examples/custom-reward.ts`.
//
// The reward asks a "judge" over HTTP — here a tiny `node:http` server this script starts on a free local port,
// standing in for a remote grader (an LLM judge, a test runner, a service of your backend). Each completion is
// one POST; the reward function awaits the answer. GRPOTrainer runs the task "dataset" (the arithmetic questions
// of test/fixtures/datasets/arith.jsonl, `question` → the user message, `answer` kept as a field) with
// `rewards: [{ name, fn, weight }]`: any number of sync or async functions, weighted, run concurrently (here the
// async judge and a sync brevity bonus); each is reported as `reward/<name>` in metrics.jsonl.
// The judge gives 1 for the exact answer, else partial credit for a short, all-digit reply, so even the tiny
// random model gets a graded signal.
// `--quick` (or POSTTRAIN_QUICK=1): 2 steps in a temporary directory, for CI.
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { GRPOTrainer, type RewardSample } from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

/** The judge's rule: 1 for the exact answer; else up to 0.5 for a reply of digits as long as the answer. */
function judge(response: string, answer: string): number {
  const text = response.replace(/<\|im_end\|>$/, "").trim();
  if (text === answer) return 1;
  if (text.length === 0) return 0;
  const digits = (text.match(/\d/g) ?? []).length / text.length;
  const length = Math.min(text.length, answer.length) / Math.max(text.length, answer.length);
  return 0.5 * digits * length;
}

/** Starts the judge on a free port: POST { response, answer } → { score }, after a small delay like a remote call. */
async function startJudge(): Promise<{ server: Server; url: string; calls: () => number }> {
  let calls = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      calls++;
      const { response, answer } = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { response: string; answer: string };
      setTimeout(() => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ score: judge(response, answer) })), 5);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return { server, url: `http://127.0.0.1:${port}/score`, calls: () => calls };
}

const { server, url, calls } = await startJudge();
const runDir = quick ? await mkdtemp(join(tmpdir(), "posttrain-custom-reward-")) : join(process.cwd(), "runs", "custom-reward");
if (!quick) await rm(runDir, { recursive: true, force: true }); // a fresh run each time (runs/ is git-ignored)

/** The custom reward: awaits the judge's HTTP answer for this sample. */
async function askJudge(sample: RewardSample): Promise<number> {
  const reply = await fetch(url, { method: "POST", body: JSON.stringify({ response: sample.response, answer: String(sample.fields.answer) }) });
  if (!reply.ok) throw new Error(`judge answered HTTP ${reply.status}`);
  const { score } = (await reply.json()) as { score: number };
  return score;
}

try {
  await using trainer = await GRPOTrainer.create(
    {
      model: { path: "tiny", device: "cpu" },
      task: {
        type: "dataset",
        files: fileURLToPath(new URL("../test/fixtures/datasets/arith.jsonl", import.meta.url)),
        fields: { query: "question", answer: "answer" },
      },
      groupSize: 4,
      promptsPerStep: 2,
      maxNewTokens: 4,
      optimizer: { lr: 3e-4 },
      steps: quick ? 2 : 30,
      runDir,
    },
    {
      rewards: [
        { name: "judge", fn: askJudge, weight: 1 },
        { name: "brevity", fn: (s) => (s.response.trim().length <= 3 ? 0.1 : 0), weight: 1 },
      ],
    },
  );
  say(`GRPO with an async TS reward: a judge at ${url}`);
  for await (const record of trainer.run()) {
    say(`step ${record.step}: reward_mean ${record.reward_mean?.toFixed(3) ?? "null"}, reward/judge ${record["reward/judge"]?.toFixed(3) ?? "null"}, reward/brevity ${record["reward/brevity"]?.toFixed(3) ?? "null"}`);
  }
  say(`judge calls: ${calls()}`);
} finally {
  await new Promise((r) => server.close(r));
  if (quick) await rm(runDir, { recursive: true, force: true });
}
