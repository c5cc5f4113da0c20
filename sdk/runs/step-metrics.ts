/**
 * The statistics of a step record: the reward's mean and std, per-reward means, completion lengths. (The group
 * advantages come from the replay buffer's `MCAdvantage` transform.)
 */
import { groupStats, type GroupStats } from "../data/replay-buffer/group-stats.js";
import { REWARD_COMPONENTS_KEY } from "../envs/keys.js";
import { readColumn } from "../envs/rows.js";
import { TensorDict } from "../tensordict/index.js";

/**
 * Mean and unbiased std of a step's (or an evaluation's) rewards, for its record ({@link groupStats}); a lone reward
 * has std 0 here, not torch's NaN.
 */
export function rewardStats(rewards: readonly number[]): GroupStats {
  const stats = groupStats(rewards);
  return rewards.length === 1 ? { mean: stats.mean, std: 0 } : stats;
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
