/**
 * Sum and min segment trees over a fixed capacity (internal to `PrioritizedSampler`): O(log n) updates, range sums and
 * minimums, and the prefix-sum search that turns a uniform draw into a prioritized index.
 */

/** A complete binary tree over `capacity` leaves holding both the sums and the minimums of its ranges. */
export class SumMinTree {
  /** Number of leaves. */
  readonly capacity: number;
  readonly #size: number;
  readonly #sum: Float64Array;
  readonly #min: Float64Array;

  /** A tree whose `capacity` leaves are all 0 (sum) and +Infinity (min): never written. */
  constructor(capacity: number) {
    this.capacity = capacity;
    let size = 1;
    while (size < capacity) size *= 2;
    this.#size = size;
    this.#sum = new Float64Array(2 * size);
    this.#min = new Float64Array(2 * size).fill(Infinity);
  }

  /** The value of leaf `i` (0 when never written). */
  get(i: number): number {
    return this.#sum[this.#size + i]!;
  }

  /** Sets leaf `i` to `value`. */
  set(i: number, value: number): void {
    let node = this.#size + i;
    this.#sum[node] = value;
    this.#min[node] = value;
    node >>= 1;
    while (node >= 1) {
      this.#sum[node] = this.#sum[2 * node]! + this.#sum[2 * node + 1]!;
      this.#min[node] = Math.min(this.#min[2 * node]!, this.#min[2 * node + 1]!);
      node >>= 1;
    }
  }

  /** Sum and minimum of leaves `[0, end)`. */
  query(end: number): { sum: number; min: number } {
    let sum = 0;
    let min = Infinity;
    let lo = this.#size;
    let hi = this.#size + end;
    while (lo < hi) {
      if (lo & 1) {
        sum += this.#sum[lo]!;
        min = Math.min(min, this.#min[lo]!);
        lo++;
      }
      if (hi & 1) {
        hi--;
        sum += this.#sum[hi]!;
        min = Math.min(min, this.#min[hi]!);
      }
      lo >>= 1;
      hi >>= 1;
    }
    return { sum, min };
  }

  /** The first leaf `i` whose prefix sum `value[0] + ... + value[i]` exceeds `mass`. */
  scanLowerBound(mass: number): number {
    let node = 1;
    let rest = mass;
    while (node < this.#size) {
      const left = 2 * node;
      if (this.#sum[left]! > rest) {
        node = left;
      } else {
        rest -= this.#sum[left]!;
        node = left + 1;
      }
    }
    return node - this.#size;
  }
}
