/**
 * The names a step's metrics get in the experiment trackers: TRL's where TRL logs the same quantity (so dashboards
 * built for TRL runs read posttrain runs), the `metrics.jsonl` name otherwise. `metrics.jsonl` keeps its own names.
 */
import type { StepRecord } from "../records.js";

/** `metrics.jsonl` name → TRL's name (`GRPOTrainer`/`SFTTrainer` logs and the `transformers` Trainer's). */
export const TRL_METRIC_NAMES: Readonly<Record<string, string>> = {
  reward_mean: "reward",
  reward_std: "reward_std",
  frac_reward_zero_std: "frac_reward_zero_std",
  kl_to_ref: "kl",
  entropy: "entropy",
  // TorchRL's count of tokens whose ratio left the clip range; TRL's counts only those whose gradient the clip cut
  clip_fraction: "clip_ratio/region_mean",
  completion_length_mean: "completions/mean_length",
  completion_length_max: "completions/max_length",
  lr: "learning_rate",
  grad_norm: "grad_norm",
  loss: "loss",
  epoch: "epoch",
  eval_reward_mean: "eval_reward",
  eval_reward_std: "eval_reward_std",
  eval_loss: "eval_loss",
};

/** The tracker name of a `metrics.jsonl` metric: `reward/<name>` → `rewards/<name>/mean`, else {@link TRL_METRIC_NAMES}. */
export function trackerMetricName(name: string): string {
  if (name.startsWith("reward/")) return `rewards/${name.slice("reward/".length)}/mean`;
  return TRL_METRIC_NAMES[name] ?? name;
}

/** A step record's metrics under their tracker names (without `step`; `null` kept: the logger skips it). */
export function trackerMetrics(record: StepRecord): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const [name, value] of Object.entries(record)) {
    if (name !== "step") out[trackerMetricName(name)] = value;
  }
  return out;
}
