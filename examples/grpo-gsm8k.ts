// GRPO on GSM8K through `GRPOTrainer`: `npx tsx examples/grpo-gsm8k.ts`.
//
// The task is GSM8KEnv over the project's GSM8K fixture (test/fixtures/datasets/gsm8k_mini.jsonl: word problems whose
// answers end in "#### N"), scored 1.0 for the right number in <answer></answer>, 0.1 for a well-formed answer tag,
// else 0. The policy is the project's tiny random model (90k parameters, a character tokenizer): it will NOT learn
// GSM8K — its rewards stay near 0. The point is the wiring: one config gives the env, the rewards, groups of
// completions, the GRPO loss, the optimizer and the run directory (config.yaml, metrics.jsonl, samples.jsonl,
// checkpoints, report.html). Swap `model.path` for a real instruct model (a local directory or a hub id) and a GPU
// to train for real.
// `--quick` (or POSTTRAIN_QUICK=1): 2 steps in a temporary directory, for CI.
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { GRPOTrainer } from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};
const fixture = fileURLToPath(new URL("../test/fixtures/datasets/gsm8k_mini.jsonl", import.meta.url));
const runDir = quick ? await mkdtemp(join(tmpdir(), "posttrain-grpo-gsm8k-")) : join(process.cwd(), "runs", "grpo-gsm8k");
if (!quick) await rm(runDir, { recursive: true, force: true }); // a fresh run each time (runs/ is git-ignored)

try {
  await using trainer = await GRPOTrainer.create({
    model: { path: "tiny", device: "cpu" },
    task: { type: "gsm8k", files: fixture },
    groupSize: 4,
    promptsPerStep: 2,
    maxNewTokens: quick ? 16 : 64,
    sampling: { temperature: 1 },
    loss: { variant: "grpo", clipEpsilon: 0.2 },
    klToRefCoeff: 0.04,
    optimizer: { type: "adamw", lr: 1e-4 },
    steps: quick ? 2 : 10,
    eval: { every: quick ? 2 : 5, prompts: quick ? 4 : 8 }, // held-out reward before step 1 and every N steps
    runDir,
  });
  say(`GRPO on GSM8K (${fixture.split("/").at(-1) ?? fixture}), tiny model: the wiring, not a learning claim`);
  for await (const record of trainer.run()) {
    say(
      `step ${record.step}: reward_mean ${record.reward_mean?.toFixed(3) ?? "null"}, kl_to_ref ${record.kl_to_ref?.toExponential(2) ?? "null"}, ` +
        `loss ${record.loss?.toFixed(4) ?? "null"}, ${record.tokens_per_s?.toFixed(0) ?? "?"} tokens/s` +
        (record.eval_reward_mean !== undefined ? `, held-out reward ${record.eval_reward_mean?.toFixed(3) ?? "null"}` : ""),
    );
  }
  const report = await stat(join(trainer.runDir, "report.html"));
  say(`run directory: ${trainer.runDir} (report.html ${(report.size / 1024).toFixed(0)} KB, metrics.jsonl, samples.jsonl, checkpoints/)`);
} finally {
  if (quick) await rm(runDir, { recursive: true, force: true });
}
