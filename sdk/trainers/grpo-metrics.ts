/**
 * The arithmetic of a GRPO step on the TypeScript side: group-normalised advantages (MCAdvantage's formula) and the
 * reward and length statistics of a step record.
 */
import { REWARD_COMPONENTS_KEY } from "../envs/keys.js";
import { readColumn } from "../envs/rows.js";
import { TensorDict } from "../tensordict/index.js";

/** Mean and unbiased (Bessel-corrected) standard deviation; the std of fewer than two values is 0. */
export function meanStd(values: readonly number[]): { mean: number; std: number } {
  const n = values.length;
  if (n === 0) return { mean: Number.NaN, std: Number.NaN };
  const mean = values.reduce((a, b) => a + b, 0) / n;
  if (n < 2) return { mean, std: 0 };
  const sq = values.reduce((a, v) => a + (v - mean) ** 2, 0);
  return { mean, std: Math.sqrt(sq / (n - 1)) };
}

/**
 * GRPO advantages of consecutive groups of `groupSize` rewards: `A = (r − mean) / max(std, eps)` within each group,
 * `std` unbiased (TorchRL's `MCAdvantage`). A group whose rewards are all equal gets 0.
 */
export function groupAdvantages(rewards: readonly number[], groupSize: number, eps = 1e-6): Float32Array {
  const out = new Float32Array(rewards.length);
  for (let start = 0; start < rewards.length; start += groupSize) {
    const group = rewards.slice(start, start + groupSize);
    const { mean, std } = meanStd(group);
    const scale = Math.max(std, eps);
    group.forEach((r, i) => (out[start + i] = (r - mean) / scale));
  }
  return out;
}

/** Fraction of groups whose rewards are all equal (no learning signal; TRL's `frac_reward_zero_std`). */
export function zeroStdFraction(rewards: readonly number[], groupSize: number): number {
  let flat = 0;
  let groups = 0;
  for (let start = 0; start < rewards.length; start += groupSize) {
    const group = rewards.slice(start, start + groupSize);
    groups++;
    if (group.every((r) => r === group[0])) flat++;
  }
  return groups === 0 ? 0 : flat / groups;
}

const TIERED_KEYS: readonly (readonly [string, string])[] = [
  ["answer", "reward_answer"],
  ["think", "reward_think"],
  ["right", "reward_right"],
];

/** Groups of per-row scores some envs write under `next` (IFEval's accuracies). */
const SCORE_GROUPS: readonly string[] = [REWARD_COMPONENTS_KEY, "ifeval_score"];

/**
 * Per-reward means of a step's `next` TensorDict, by name: each `("reward_components", name)` (`RewardTransform`)
 * and `("ifeval_score", name)`, else the tiered task keys (`reward_answer` → `answer`, ...).
 */
export function rewardMeans(next: TensorDict): Record<string, number> {
  const out: Record<string, number> = {};
  const mean = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
  for (const group of SCORE_GROUPS) {
    if (!next.has(group)) continue;
    const scores = next.getTensorDict(group);
    for (const key of scores.keys({ nested: true, leavesOnly: true })) {
      const name = Array.isArray(key) ? key.join("/") : String(key);
      const values = readColumn(scores, key);
      if (values !== undefined) out[name] = mean(values);
    }
  }
  if (Object.keys(out).length > 0) return out;
  for (const [name, key] of TIERED_KEYS) {
    const values = readColumn(next, key);
    if (values !== undefined) out[name] = mean(values);
  }
  return out;
}

/** Mean and max of response lengths in tokens (`("tokens","response")`, ragged). */
export function completionLengths(td: TensorDict): { mean: number; max: number; total: number } {
  const lengths = td.getRagged(["tokens", "response"]).lengths();
  let total = 0;
  let max = 0;
  for (const l of lengths) {
    total += l;
    if (l > max) max = l;
  }
  return { mean: lengths.length === 0 ? 0 : total / lengths.length, max, total };
}
