/**
 * The seeded generator of the classic-control envs' reset noise: the project's `SeededRandom` (mulberry32, the same
 * stream on every platform), plus a uniform draw over a range as Gymnasium's resets use.
 */
import type { SeededRandom } from "../tasks/random.js";

/** A float drawn uniformly in [`low`, `high`) from `rng`. */
export function uniform(rng: SeededRandom, low: number, high: number): number {
  return low + (high - low) * rng.next();
}

/** A seed for an env nobody seeded: 32 random bits, so unseeded copies differ (as Gymnasium's unseeded resets do). */
export function entropySeed(): number {
  return Math.floor(Math.random() * 2 ** 32);
}
