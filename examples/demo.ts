// `npm run demo`: post-training end to end on a laptop CPU, in a few minutes, with nothing downloaded.
//
// The task is the built-in "digit-sort": the user says "sort 4 digits: 3817" and the right answer is "1378". The
// reward is the fraction of positions that are right when the answer has the right length, else 0, so it needs
// content (repeating one character scores little). Held-out prompts come from a split of digit strings the
// training never sees.
//
// 1. build the project's tiny random model (hidden 64, 2 layers, ~90k parameters, a character tokenizer);
// 2. measure the held-out reward (greedy) before any training;
// 3. a short SFT warm-up (SFTTrainer on correct examples) so the model writes answers of the right shape;
// 4. GRPO (GRPOTrainer: groups of sampled answers, group-relative advantages, clipped policy-gradient loss), from
//    the SFT checkpoint, on the same local CPU worker;
// 5. print the held-out reward before / after SFT / after GRPO and where the reports are.
//
// `--quick` (or POSTTRAIN_QUICK=1): a few steps of each, in a temporary directory, for CI (no learning claim).
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { GRPOTrainer, SFTTrainer, WorkerPool, type EvalRecord } from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};
const fmt = (e: EvalRecord | null): string => (e?.rewardMean ?? Number.NaN).toFixed(3);

/** The demo's settings; the full run's were tuned on a 2-core CPU (see "The demo" in the README). */
const SETTINGS = quick
  ? { sftSteps: 4, grpoSteps: 3, promptsPerStep: 4, evalPrompts: 16 }
  : { sftSteps: 100, grpoSteps: 300, promptsPerStep: 16, evalPrompts: 128 };
const MAX_NEW_TOKENS = 6; // 4 digits and the end-of-turn token, with one to spare
const SEED = 0;
/**
 * `npm run demo` stays under 5 minutes, setup included, even on a busy machine: GRPO gets what is left of this
 * budget, and is stopped (the step in flight finishes, a checkpoint is written) if it runs out before its last step.
 */
const BUDGET_S = 280;

/** Seconds the setup (`npm run demo`'s bootstrap) took just before this script, which count in the budget. */
async function setupSeconds(): Promise<number> {
  try {
    const text = await readFile(join(process.cwd(), "node_modules", ".posttrain-setup.json"), "utf8");
    const { finishedAt, seconds } = JSON.parse(text) as { finishedAt?: unknown; seconds?: unknown };
    const recent = typeof finishedAt === "number" && Date.now() - finishedAt < 60_000;
    return recent && typeof seconds === "number" && seconds > 1 ? seconds : 0;
  } catch {
    return 0; // no record: run directly, not through `npm run demo`
  }
}

/** Every `every`-th step's line of the trainer's log (every line in quick mode), indented. */
function progress(every: number): (line: string) => void {
  return (line) => {
    const step = /^step (\d+)\//.exec(line)?.[1];
    if (step !== undefined && (quick || Number(step) % every === 0)) say(`    ${line}`);
  };
}

const setup = quick ? 0 : await setupSeconds();
const started = performance.now() - setup * 1000;
const elapsed = (): number => (performance.now() - started) / 1000;
const seconds = (): string => elapsed().toFixed(0);
const root = quick ? await mkdtemp(join(tmpdir(), "posttrain-demo-")) : join(process.cwd(), "runs", "demo");
await rm(root, { recursive: true, force: true });

say('posttrain demo: teach a tiny model to sort digits ("sort 4 digits: 3817" → "1378")');
say("  reward: the fraction of positions right (0 when the length is wrong), on held-out prompts never trained on");
if (setup > 0) say(`  setup took ${setup.toFixed(0)} s (counted in the demo's 5-minute budget)`);
const pool = await WorkerPool.local({ device: "cpu" });
try {
  say(`  local CPU worker: torch ${pool.worker(0).info.torch}${quick ? " (quick mode: a few steps, no learning claim)" : ""}`);

  // SFT warm-up; its run builds the tiny model into <runDir>/model and measures the held-out reward before and after.
  const sft = await SFTTrainer.create(
    {
      model: { path: "tiny", tiny: { hiddenSize: 64, numLayers: 2 }, device: "cpu" },
      data: { type: "digit-sort", examples: 2000, numDigits: 4 },
      batchSize: 16,
      optimizer: { type: "adamw", lr: 3e-3 },
      steps: SETTINGS.sftSteps,
      eval: { every: SETTINGS.sftSteps, examples: 16, prompts: SETTINGS.evalPrompts, maxNewTokens: MAX_NEW_TOKENS },
      seed: SEED,
      runDir: join(root, "sft"),
    },
    { pool, log: progress(25) },
  );
  say(`  [${seconds()} s] SFT warm-up: ${SETTINGS.sftSteps} steps of 16 correct examples, AdamW lr 3e-3`);
  const sftRun = await sft.train();
  await sft.close();
  say(`  [${seconds()} s] held-out reward before training: ${fmt(sftRun.firstEval)}`);
  say(`  [${seconds()} s] held-out reward after SFT:       ${fmt(sftRun.lastEval)}`);
  if (sftRun.checkpoint === null) throw new Error("the SFT run wrote no checkpoint");

  // GRPO from the SFT checkpoint (a Hugging Face model directory), on the same worker.
  const grpo = await GRPOTrainer.create(
    {
      model: { path: sftRun.checkpoint, device: "cpu" },
      task: { type: "digit-sort", numDigits: 4 },
      groupSize: 8,
      promptsPerStep: SETTINGS.promptsPerStep,
      maxNewTokens: MAX_NEW_TOKENS,
      sampling: { temperature: 1 },
      loss: { variant: "grpo" },
      optimizer: { type: "adamw", lr: 3e-4 },
      steps: SETTINGS.grpoSteps,
      eval: { every: quick ? SETTINGS.grpoSteps : 50, prompts: SETTINGS.evalPrompts },
      seed: SEED,
      runDir: join(root, "grpo"),
    },
    { pool, log: progress(25), signal: AbortSignal.timeout(Math.round(Math.max(30, BUDGET_S - elapsed() - 10) * 1000)) },
  );
  say(`  [${seconds()} s] GRPO: ${SETTINGS.grpoSteps} steps of ${SETTINGS.promptsPerStep} prompts × 8 samples, AdamW lr 3e-4`);
  const grpoRun = await grpo.train();
  if (grpoRun.stopped) say(`    the time budget stopped GRPO after step ${grpoRun.steps}/${SETTINGS.grpoSteps}`);
  // The last evaluation ran at the last step, unless the budget stopped the run between evaluations.
  const afterGrpoEval = grpoRun.lastEval?.step === grpoRun.steps ? grpoRun.lastEval : await grpo.evaluate();
  await grpo.close();
  say(`  [${seconds()} s] held-out reward after GRPO:      ${fmt(afterGrpoEval)}`);

  const before = sftRun.firstEval?.rewardMean ?? Number.NaN;
  const afterSft = grpoRun.firstEval?.rewardMean ?? sftRun.lastEval?.rewardMean ?? Number.NaN;
  const afterGrpo = afterGrpoEval.rewardMean ?? Number.NaN;
  say(
    `held-out reward (${SETTINGS.evalPrompts} prompts, greedy): before ${before.toFixed(3)} → after SFT ${afterSft.toFixed(3)} → ` +
      `after GRPO ${afterGrpo.toFixed(3)} (GRPO ${afterGrpo - afterSft >= 0 ? "+" : ""}${(afterGrpo - afterSft).toFixed(3)})`,
  );
  const shown = (path: string): string => (quick ? path : relative(process.cwd(), path));
  say(`report: ${shown(grpoRun.reportPath)} (SFT: ${shown(sftRun.reportPath)})`);
} finally {
  await pool.close();
  if (quick) await rm(root, { recursive: true, force: true });
}
say(`done in ${seconds()} s`);
