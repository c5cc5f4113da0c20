/**
 * TorchRL's `PrioritizedSampler` (prioritized experience replay, Schaul et al. 2015) over a sum/min segment tree.
 */
import { z } from "zod";
import type { JSONObject } from "../message.js";
import { parseOptions } from "../../core/index.js";
import { InvalidArgumentError } from "./errors.js";
import type { SeededRNG } from "./rng.js";
import { Sampler, type SampleResult } from "./samplers.js";
import { SumMinTree } from "./sum-tree.js";

/** Options of {@link PrioritizedSampler} (TorchRL's names, camelCased). */
export const PrioritizedSamplerOptionsSchema = z.strictObject({
  /** Positions the priority tree covers; at least the storage's `maxSize`. */
  maxCapacity: z.number().int().min(1),
  /** Priority exponent: 0 samples uniformly, 1 in proportion to the priority. */
  alpha: z.number().min(0),
  /** Importance-sampling exponent: 0 applies no correction, 1 the full correction. */
  beta: z.number().min(0),
  /** Added to every priority before the exponent, so no row has probability 0 (default 1e-8). */
  eps: z.number().min(0).default(1e-8),
  /** How a priority leaf with several elements per row becomes one number (default `"max"`). */
  reduction: z.enum(["max", "min", "median", "mean"]).default("max"),
});

/** Options of {@link PrioritizedSampler}. */
export type PrioritizedSamplerOptions = z.input<typeof PrioritizedSamplerOptionsSchema>;

const PrioritizedStateSchema = z.strictObject({
  values: z.array(z.number().min(0)),
  maxPriority: z.number().min(0).nullable(),
});

/**
 * Samples row `i` with probability `P(i) = (p_i + eps)^alpha / Σ_j (p_j + eps)^alpha` and returns the importance
 * weights `w_i = (P(i) / min_j P(j))^(-beta)` (TorchRL's normalisation by the largest weight), which the replay buffer
 * writes into the sample under `"priority_weight"`.
 *
 * A new row gets the largest priority seen so far (1 before any update), so it is sampled soon; `updatePriority`
 * sets priorities from, e.g., the loss of the sampled rows. Priorities are held in float64 (TorchRL: float32).
 */
export class PrioritizedSampler extends Sampler {
  readonly kind = "prioritized";
  /** Positions the priority tree covers. */
  readonly maxCapacity: number;
  /** Priority exponent. */
  readonly alpha: number;
  /** Added to every priority before the exponent. */
  readonly eps: number;
  /** How a priority leaf with several elements per row becomes one number. */
  readonly reduction: z.output<typeof PrioritizedSamplerOptionsSchema>["reduction"];
  #beta: number;
  #tree: SumMinTree;
  #maxPriority: number | undefined;

  constructor(options: PrioritizedSamplerOptions) {
    super();
    const parsed = parseOptions(PrioritizedSamplerOptionsSchema, options, "PrioritizedSampler options");
    this.maxCapacity = parsed.maxCapacity;
    this.alpha = parsed.alpha;
    this.#beta = parsed.beta;
    this.eps = parsed.eps;
    this.reduction = parsed.reduction;
    this.#tree = new SumMinTree(this.maxCapacity);
  }

  /** Importance-sampling exponent; may be annealed (set it towards 1 during training). */
  get beta(): number {
    return this.#beta;
  }

  /** Sets the importance-sampling exponent (a number ≥ 0). */
  set beta(value: number) {
    this.#beta = parseOptions(PrioritizedSamplerOptionsSchema.shape.beta, value, "PrioritizedSampler beta");
  }

  /** The raw priority a newly written row gets: the largest priority seen so far, 1 before any. */
  get defaultPriority(): number {
    return this.#maxPriority ?? 1;
  }

  /** The sampling weight `(p + eps)^alpha` held for `position` (0 for a position never written). */
  weightOf(position: number): number {
    return this.#tree.get(position);
  }

  override onWrite(positions: Int32Array): void {
    this.updatePriority(positions, this.defaultPriority);
  }

  /**
   * Sets the priority of the rows at `index` (storage positions; `-1` entries are skipped, as TorchRL does for rows a
   * max-value writer did not write). `priority` is one number for all of them or one per index. Throws INVALID_ARGUMENT
   * naming the entry for a position outside `[0, maxCapacity)` or a priority that is negative or not finite.
   */
  updatePriority(index: number | ArrayLike<number>, priority: number | ArrayLike<number>): void {
    const indices = typeof index === "number" ? [index] : index;
    const priorities = typeof priority === "number" ? [priority] : priority;
    const broadcast = priorities.length === 1;
    if (!broadcast && priorities.length !== indices.length) {
      throw new InvalidArgumentError(`updatePriority: priority has ${priorities.length} values for ${indices.length} indices (pass one, or one per index)`);
    }
    for (let i = 0; i < indices.length; i++) {
      const position = indices[i]!;
      if (position === -1) continue;
      if (!Number.isInteger(position) || position < 0 || position >= this.maxCapacity) {
        throw new InvalidArgumentError(`updatePriority: index[${i}] = ${position} is outside [0, ${this.maxCapacity}) (maxCapacity)`);
      }
      const p = priorities[broadcast ? 0 : i]!;
      if (!Number.isFinite(p) || p < 0) {
        throw new InvalidArgumentError(`updatePriority: priority[${broadcast ? 0 : i}] = ${p} must be a finite number >= 0`);
      }
    }
    for (let i = 0; i < indices.length; i++) {
      const position = indices[i]!;
      if (position === -1) continue;
      const p = priorities[broadcast ? 0 : i]!;
      if (this.#maxPriority === undefined || p > this.#maxPriority) this.#maxPriority = p;
      this.#tree.set(position, (p + this.eps) ** this.alpha);
    }
  }

  sample(storageLength: number, batchSize: number, rng: SeededRNG): SampleResult {
    if (storageLength > this.maxCapacity) {
      throw new InvalidArgumentError(`PrioritizedSampler: the storage holds ${storageLength} rows but maxCapacity is ${this.maxCapacity}`);
    }
    const { sum, min } = this.#tree.query(storageLength);
    if (!(sum > 0) || !(min > 0) || !Number.isFinite(min)) {
      throw new InvalidArgumentError(
        `PrioritizedSampler: the stored rows need positive priorities to be sampled (sum ${sum}, min ${min}); use eps > 0 or update the priorities`,
      );
    }
    const index = new Int32Array(batchSize);
    const priorityWeight = new Float32Array(batchSize);
    for (let i = 0; i < batchSize; i++) {
      let position = Math.min(this.#tree.scanLowerBound(rng.random() * sum), storageLength - 1);
      while (position > 0 && this.#tree.get(position) === 0) position--;
      index[i] = position;
      priorityWeight[i] = (this.#tree.get(position) / min) ** -this.#beta;
    }
    return { index, priorityWeight };
  }

  override empty(): void {
    super.empty();
    this.#tree = new SumMinTree(this.maxCapacity);
    this.#maxPriority = undefined;
  }

  override config(): JSONObject {
    return { maxCapacity: this.maxCapacity, alpha: this.alpha, beta: this.#beta, eps: this.eps, reduction: this.reduction };
  }

  /** The sampling weights of the written positions (up to the last one written) and the largest raw priority. */
  override state(): JSONObject {
    let end = this.maxCapacity;
    while (end > 0 && this.#tree.get(end - 1) === 0) end--;
    return { values: Array.from({ length: end }, (_, i) => this.#tree.get(i)), maxPriority: this.#maxPriority ?? null };
  }

  override loadState(state: unknown): void {
    const parsed = parseOptions(PrioritizedStateSchema, state, "PrioritizedSampler state");
    if (parsed.values.length > this.maxCapacity) {
      throw new InvalidArgumentError(`PrioritizedSampler state.values: ${parsed.values.length} values for maxCapacity ${this.maxCapacity}`);
    }
    this.#tree = new SumMinTree(this.maxCapacity);
    parsed.values.forEach((v, i) => {
      if (v > 0) this.#tree.set(i, v);
    });
    this.#maxPriority = parsed.maxPriority ?? undefined;
  }
}
