/**
 * What the high-level trainers (`GRPOTrainer`, `SFTTrainer`) report: one {@link StepRecord} per step (a line of
 * `metrics.jsonl`), {@link EvalRecord}s of held-out evaluations, and the {@link TrainSummary} of a finished run.
 */
import type { MetricRecord, SampleRecord } from "../reports/index.js";

/**
 * One step's metrics, a line of `metrics.jsonl` (snake_case names, `null` where not computed): `step`,
 * `policy_version`, `reward_mean`, `reward_std`, `reward/<name>`, `loss`, `loss_objective`, `loss_entropy`,
 * `loss_kl_to_ref`, `kl_approx`, `kl_to_ref`, `entropy`, `clip_fraction`, `completion_length_mean`,
 * `completion_length_max`, `tokens_per_s`, `step_time_s`, `grad_norm`, `lr`, and `eval_reward_mean` (GRPO) or
 * `eval_loss` (SFT) on evaluation steps.
 */
export type StepRecord = MetricRecord;

/** A held-out evaluation. */
export interface EvalRecord {
  /** Optimizer steps taken when it ran (0 = before training). */
  readonly step: number;
  /** Held-out prompts (GRPO, SFT on a task) or examples (SFT loss) evaluated. */
  readonly count: number;
  /** Mean task reward of the completions (greedy unless configured); `null` when no reward was computed. */
  readonly rewardMean: number | null;
  /** Standard deviation of that reward over the prompts; `null` with it. */
  readonly rewardStd: number | null;
  /** Per-reward means (`reward_components` names). */
  readonly rewards: Readonly<Record<string, number>>;
  /** Held-out SFT loss (`null` for GRPO). */
  readonly loss: number | null;
  /** A few held-out completions. */
  readonly samples: readonly SampleRecord[];
}

/** What `train()` returns. */
export interface TrainSummary {
  /** Optimizer steps taken in total (a resumed run counts the earlier ones too). */
  readonly steps: number;
  /** Whether the run was stopped (`stop()`, the signal) before its last step. */
  readonly stopped: boolean;
  /** The run directory. */
  readonly runDir: string;
  /** `<runDir>/report.html`. */
  readonly reportPath: string;
  /** The evaluation before the first step of this process (`null` when evaluation is off or resumed). */
  readonly firstEval: EvalRecord | null;
  /** The last evaluation (`null` when evaluation is off). */
  readonly lastEval: EvalRecord | null;
  /** The last checkpoint written (`null` when none). */
  readonly checkpoint: string | null;
}
