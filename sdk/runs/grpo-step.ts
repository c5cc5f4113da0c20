/**
 * One GRPO step on the pipeline, as `GRPOTrainer` runs it: the oldest `promptsPerStep` groups from the collector's
 * replay buffer (their advantages computed by `MCAdvantage` on the way in, stale ones dropped), one optimizer step,
 * the weights to the generators through the collector; the step's metrics record and logged samples.
 */
import type { LLMCollector } from "../collectors/llm-collector.js";
import { groupStats, zeroStdFraction } from "../data/replay-buffer/group-stats.js";
import { NEXT_KEY, POLICY_VERSION_KEY, REWARD_KEY } from "../envs/keys.js";
import { readColumn } from "../envs/rows.js";
import type { SampleRecord } from "../reports/index.js";
import type { TensorDict } from "../tensordict/index.js";
import type { Trainer } from "../trainers/trainer.js";
import { promptTexts } from "./evaluation.js";
import type { StepRecord } from "./records.js";
import type { StepOutcome } from "./run-loop.js";
import { completionLengths, rewardMeans, rewardStats } from "./step-metrics.js";

/**
 * The keys of a collected batch the trainer reads. `("log_probs","full")` are the generator's log-probs of the tokens
 * it sampled (a vLLM engine's with `generator.backend: "vllm"`): the behaviour policy of the loss's importance ratio.
 */
export const TRAIN_KEYS = [["tokens", "full"], ["tokens", "prompt"], ["log_probs", "full"], "advantage"] as const;

/** What a GRPO step runs on. */
export interface GRPOStepContext {
  /** Collects into its replay buffer (started); its `updatePolicyWeights` moves the weights to the generators. */
  readonly collector: LLMCollector;
  readonly trainer: Trainer;
  readonly groupSize: number;
  readonly promptsPerStep: number;
  /** The most policy versions a trained row may lag behind. */
  readonly maxPolicyAge: number;

  /** Wall-clock start of this step's window (the previous step's end), in `performance.now()` ms. */
  readonly windowStart: number;
  /** The collector's busy time at the window's start (ms). */
  readonly busyAtStart: number;
}

/** A step's outcome and what the run keeps from it. */
export interface GRPOStepOutcome extends StepOutcome {
  /** The policy version after the step's weight sync. */
  readonly policyVersion: number;
  /** The trained batch (to find its data position). */
  readonly batch: TensorDict;
}

/** Policy age (trainer version − sample version) statistics of a batch. */
function ageStats(batch: TensorDict, trainerVersion: number): { min: number; mean: number; max: number } {
  const versions = batch.getTensor(POLICY_VERSION_KEY).toNumbers().map(Number);
  const ages = versions.map((v) => trainerVersion - v);
  return { min: Math.min(...ages), mean: groupStats(ages).mean, max: Math.max(...ages) };
}

/**
 * Step `step`: waits for `promptsPerStep × groupSize` fresh rows (dropping those more than `maxPolicyAge` versions
 * behind), trains on `TRAIN_KEYS`, then `collector.updatePolicyWeights()` (the weight sync, and the version the
 * collector gates on).
 */
export async function grpoStep(ctx: GRPOStepContext, step: number, samplesPerStep: number): Promise<GRPOStepOutcome> {
  const G = ctx.groupSize;
  const P = ctx.promptsPerStep;
  const { collector } = ctx;
  const rb = collector.replayBuffer!;
  const trainerVersion = collector.policyVersion ?? 0;
  const { batch, dropped } = await collector.takeBatch(P * G, { maxPolicyAge: ctx.maxPolicyAge });
  const queued = rb.length;
  const trainStart = performance.now();
  const result = await ctx.trainer.step(batch.select(...TRAIN_KEYS));
  // with collection ahead the sync returns once the trainer's worker has copied the weights; the generators
  // receive them after their generation in flight
  await collector.updatePolicyWeights();
  const end = performance.now();
  const seconds = (end - ctx.windowStart) / 1000;
  const busyMs = collector.stats.busyMs - ctx.busyAtStart;
  const next = batch.getTensorDict(NEXT_KEY);
  const rewards = readColumn(next, REWARD_KEY) ?? new Array<number>(P * G).fill(0);
  const lengths = completionLengths(batch);
  const { mean, std } = rewardStats(rewards);
  const age = ageStats(batch, trainerVersion);
  const policyVersion = collector.policyVersion ?? 0;
  const record: Record<string, number | null> = {
    step,
    policy_version: policyVersion,
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
    generate_time_s: busyMs / 1000,
    train_time_s: (end - trainStart) / 1000,
    policy_age_min: age.min,
    policy_age_mean: age.mean,
    policy_age_max: age.max,
    stale_samples_dropped: dropped,
    generator_busy_frac: Math.min(1, busyMs / (end - ctx.windowStart)),
    trainer_busy_frac: Math.min(1, (end - trainStart) / (end - ctx.windowStart)),
    queue_depth: queued / G,
  });
  const texts = promptTexts(batch);
  const responses = batch.getStrings(["text", "response"]);
  const samples: SampleRecord[] = [];
  for (let g = 0; g < Math.min(samplesPerStep, P); g++) {
    const row = g * G;
    samples.push({ step, prompt: texts[row] ?? "", completion: responses[row] ?? "", reward: rewards[row] ?? 0 });
  }
  return { record: record as StepRecord, samples, policyVersion, batch };
}
