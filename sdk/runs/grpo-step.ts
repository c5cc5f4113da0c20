/**
 * One GRPO step, as `GRPOTrainer` runs it: prompts from the task env, completions from the policy's worker, rewards
 * from the env, group advantages, the trainer's optimizer step and the weight sync; the step's metrics record and
 * logged samples.
 */
import { groupAdvantages, zeroStdFraction } from "../data/replay-buffer/group-stats.js";
import { NEXT_KEY, REWARD_KEY } from "../envs/keys.js";
import { readColumn } from "../envs/rows.js";
import type { TransformersWrapper } from "../modules/transformers.js";
import type { SampleRecord } from "../reports/index.js";
import { Tensor } from "../tensordict/index.js";
import type { Trainer } from "../trainers/trainer.js";
import type { WeightSyncScheme } from "../trainers/weight-sync.js";
import { promptTexts } from "./evaluation.js";
import type { StepRecord } from "./records.js";
import type { StepOutcome } from "./run-loop.js";
import { completionLengths, rewardMeans, rewardStats } from "./step-metrics.js";
import type { TaskEnv } from "./task-env.js";

/** What a GRPO step runs on. */
export interface GRPOStepContext {
  /** The training env: `promptsPerStep × groupSize` rows per reset, each prompt `groupSize` times in a row. */
  readonly env: TaskEnv;
  /** Samples `groupSize` completions per prompt, with log-probs. */
  readonly policy: TransformersWrapper;
  readonly trainer: Trainer;
  readonly sync: WeightSyncScheme;
  readonly groupSize: number;
  readonly promptsPerStep: number;
  /** The run's seed: step `s` samples with a seed derived from it and `s`, so a run (and a resume) is reproducible. */
  readonly seed: number;
}

/** The sampling seed of step `step` of a run seeded with `seed`. */
export function stepSeed(seed: number, step: number): number {
  return (seed * 1_000_003 + step) % Number.MAX_SAFE_INTEGER;
}

/**
 * Step `step`: one reset, each distinct prompt rendered and sampled `groupSize` times in one `generate` (which also
 * returns the log-probs), the env's rewards, advantages `(r − mean) / max(std, 1e-6)` per group, one optimizer step
 * on `("tokens","full")`, `("tokens","prompt")`, `("log_probs","full")` and `"advantage"`, then the weight sync.
 */
export async function grpoStep(ctx: GRPOStepContext, step: number, samplesPerStep: number): Promise<StepOutcome & { policyVersion: number }> {
  const G = ctx.groupSize;
  const P = ctx.promptsPerStep;
  const start = performance.now();
  const reset = await ctx.env.env.reset();
  const prompts = reset.reshape([P * G]).index(Int32Array.from({ length: P }, (_, i) => i * G));
  const generated = (await ctx.policy.forward(prompts, { seed: stepSeed(ctx.seed, step) })).reshape([P * G]);
  const generatedAt = performance.now();
  const next = (await ctx.env.env.step(generated)).getTensorDict(NEXT_KEY);
  const rewards = readColumn(next, REWARD_KEY) ?? new Array<number>(P * G).fill(0);
  const batch = generated.select(["tokens", "full"], ["tokens", "prompt"], ["log_probs", "full"]);
  batch.set("advantage", new Tensor("float32", [P * G], groupAdvantages(rewards, G)));
  const result = await ctx.trainer.step(batch);
  const synced = await ctx.sync.updateWeights();
  const end = performance.now();
  const seconds = (end - start) / 1000;
  const lengths = completionLengths(generated);
  const { mean, std } = rewardStats(rewards);
  const record: Record<string, number | null> = {
    step,
    policy_version: synced.policyVersion,
    reward_mean: mean,
    reward_std: std,
    frac_reward_zero_std: zeroStdFraction(rewards, G),
  };
  for (const [name, value] of Object.entries(rewardMeans(next))) record[`reward/${name}`] = value;
  for (const [name, value] of Object.entries(result.metrics)) record[name] = value;
  Object.assign(record, {
    lr: result.lr,
    completion_length_mean: lengths.mean,
    completion_length_max: lengths.max,
    tokens_per_s: lengths.total / seconds,
    step_time_s: seconds,
    generate_time_s: (generatedAt - start) / 1000,
    train_time_s: (end - generatedAt) / 1000,
  });
  const texts = promptTexts(generated);
  const responses = generated.getStrings(["text", "response"]);
  const samples: SampleRecord[] = [];
  for (let g = 0; g < Math.min(samplesPerStep, P); g++) {
    const row = g * G;
    samples.push({ step, prompt: texts[row] ?? "", completion: responses[row] ?? "", reward: rewards[row] ?? 0 });
  }
  return { record: record as StepRecord, samples, policyVersion: synced.policyVersion };
}
