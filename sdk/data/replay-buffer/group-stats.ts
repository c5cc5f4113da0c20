/**
 * The group statistics of GRPO's group-relative advantage, in one place: `MCAdvantage` (the replay-buffer transform)
 * and `GRPOTrainer` (a step's flat rewards, groups in a row) both use them. `A = (r − mean) / max(std, eps)`, `std`
 * unbiased (as `torch.std`, TorchRL's `MCAdvantage`).
 */

/** A group's mean and unbiased standard deviation. */
export interface GroupStats {
  readonly mean: number;
  readonly std: number;
}

/**
 * Mean and unbiased (Bessel-corrected, as `torch.std`) standard deviation of `values`. As in torch, the std of one
 * value is NaN; of no values, both are NaN.
 *
 * ```ts
 * groupStats([0, 1, 1, 0]); // { mean: 0.5, std: 0.577... }
 * ```
 */
export function groupStats(values: ArrayLike<number>): GroupStats {
  const n = values.length;
  if (n === 0) return { mean: Number.NaN, std: Number.NaN };
  let sum = 0;
  for (let i = 0; i < n; i++) sum += values[i]!;
  const mean = sum / n;
  let sq = 0;
  for (let i = 0; i < n; i++) sq += (values[i]! - mean) ** 2;
  return { mean, std: Math.sqrt(sq / (n - 1)) };
}

/**
 * `(r − mean) / max(std, eps)` for each of `values`, with their {@link groupStats} (computed when not given). A NaN
 * std (a single value) stays NaN, as `torch.clamp_min` keeps it.
 *
 * ```ts
 * normalizeGroup([0, 1], 1e-6); // Float64Array [-0.707..., 0.707...]
 * ```
 */
export function normalizeGroup(values: ArrayLike<number>, eps: number, stats: GroupStats = groupStats(values)): Float64Array {
  // Math.max keeps a NaN, as torch.clamp_min does
  const scale = Math.max(stats.std, eps);
  return Float64Array.from(values, (r) => (r - stats.mean) / scale);
}

/** Fraction of the consecutive groups of `groupSize` rewards whose rewards are all equal (no learning signal; TRL's `frac_reward_zero_std`). */
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
