// Supervised fine-tuning through `SFTTrainer`: `npx tsx examples/sft.ts`.
//
// The data is a small chat dataset in the project's fixtures (test/fixtures/datasets/sft_reverse.jsonl): rows of
// `{ "messages": [{ "role": "user", "content": "reverse: apple" }, { "role": "assistant", "content": "elppa" }] }`;
// every assistant turn is trained on (the worker's chat template marks them). Held-out rows
// (sft_reverse_eval.jsonl) give the eval loss. The tiny random model memorises the training rows quickly, so the
// training loss falls step after step; the script prints the loss curve and the held-out loss before and after.
// `--quick` (or POSTTRAIN_QUICK=1): a few steps in a temporary directory, for CI.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { SFTTrainer } from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};
const fixture = (name: string): string => fileURLToPath(new URL(`../test/fixtures/datasets/${name}`, import.meta.url));
const runDir = quick ? await mkdtemp(join(tmpdir(), "posttrain-sft-")) : join(process.cwd(), "runs", "sft");
if (!quick) await rm(runDir, { recursive: true, force: true }); // a fresh run each time (runs/ is git-ignored)
const steps = quick ? 6 : 60;

try {
  await using trainer = await SFTTrainer.create({
    model: { path: "tiny", device: "cpu" },
    data: { type: "dataset", files: fixture("sft_reverse.jsonl"), fields: { messages: "messages" } },
    evalData: { type: "dataset", files: fixture("sft_reverse_eval.jsonl"), fields: { messages: "messages" }, shuffle: false },
    batchSize: 16,
    optimizer: { type: "adamw", lr: 3e-3 },
    steps,
    eval: { examples: 16 }, // trainer.evaluate() below: the loss on the 16 held-out rows
    runDir,
  });
  say(`SFT on ${fixture("sft_reverse.jsonl").split("/").at(-1) ?? ""}: tiny model, batch 16, AdamW lr 3e-3, ${steps} steps`);
  const before = await trainer.evaluate();
  const losses: number[] = [];
  for await (const record of trainer.run()) {
    if (record.loss !== null && record.loss !== undefined) losses.push(record.loss);
    if (quick || record.step % 10 === 0 || record.step === 1) {
      say(`step ${record.step}: loss ${record.loss?.toFixed(4) ?? "null"}, lr ${record.lr?.toExponential(1) ?? "null"}, ${record.tokens_per_s?.toFixed(0) ?? "?"} tokens/s`);
    }
  }
  const first = losses[0] ?? Number.NaN;
  const last = losses.at(-1) ?? Number.NaN;
  say(`training loss: ${first.toFixed(4)} → ${last.toFixed(4)} (${last < first ? "down" : "not down"})`);
  const after = await trainer.evaluate();
  say(`held-out loss (${after.count} rows): ${before.loss?.toFixed(4) ?? "null"} → ${after.loss?.toFixed(4) ?? "null"}`);
  say(`run directory: ${trainer.runDir}`);
} finally {
  if (quick) await rm(runDir, { recursive: true, force: true });
}
