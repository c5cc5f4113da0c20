/**
 * Seeded permutations for dataset shuffling: the order of epoch `e` depends only on `(seed, e)`, so a saved
 * position resumes the same sequence.
 */

/** A 32-bit hash of a seed and an epoch (splitmix-style mixing). */
function mix(seed: number, epoch: number): number {
  let h = (Math.imul(seed | 0, 0x9e3779b1) ^ Math.imul(epoch + 0x7f4a7c15, 0x85ebca6b)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x21f0aaad) >>> 0;
  h = Math.imul(h ^ (h >>> 15), 0x735a2d97) >>> 0;
  return (h ^ (h >>> 15)) >>> 0;
}

/** A mulberry32 generator of floats in [0, 1). */
function mulberry32(state: number): () => number {
  let a = state >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The order of `n` rows in epoch `epoch`: a Fisher–Yates shuffle seeded by `(seed, epoch)`. */
export function seededPermutation(n: number, seed: number, epoch: number): Int32Array {
  const order = Int32Array.from({ length: n }, (_, i) => i);
  const random = mulberry32(mix(seed, epoch));
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    const tmp = order[i]!;
    order[i] = order[j]!;
    order[j] = tmp;
  }
  return order;
}
