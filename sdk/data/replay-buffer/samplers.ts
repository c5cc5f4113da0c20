/**
 * Samplers of the replay buffer: which stored rows a `sample()` returns (TorchRL's `RandomSampler`,
 * `SamplerWithoutReplacement`; `PrioritizedSampler` lives in prioritized.ts).
 */
import { z } from "zod";
import type { JSONObject } from "../message.js";
import { parseOptions } from "../../core/index.js";
import { InvalidArgumentError } from "./errors.js";
import type { SeededRNG } from "./rng.js";

/** The sampler kinds `ReplayBuffer.save` knows how to write and load. */
export type SamplerKind = "random" | "without-replacement" | "prioritized";

/** The storage positions a sampler picked, and the importance weights of a prioritized sampler. */
export interface SampleResult {
  /** Storage positions, one per sampled row. */
  readonly index: Int32Array;
  /** Importance-sampling weights (`PrioritizedSampler` only), one per sampled row. */
  readonly priorityWeight?: Float32Array;
}

/** Picks storage positions for `sample()`; the buffer calls it with a non-empty storage. */
export abstract class Sampler {
  /** The kind written in save files. */
  abstract readonly kind: SamplerKind;
  protected exhausted = false;

  /** `batchSize` positions in `[0, storageLength)`, drawn with `rng`. */
  abstract sample(storageLength: number, batchSize: number, rng: SeededRNG): SampleResult;

  /** Told the positions a write filled (`-1` entries are rows that were not written), when the sampler needs them. */
  onWrite?(positions: Int32Array): void;

  /** True once a sampler without replacement has handed out every row of the current pass (never for the others). */
  get ranOut(): boolean {
    return this.exhausted;
  }

  /** Clears {@link ranOut} (at the start of an iteration over the buffer). */
  resetRanOut(): void {
    this.exhausted = false;
  }

  /** Forgets its state (with the storage emptied). */
  empty(): void {
    this.exhausted = false;
  }

  /** The options needed to rebuild this sampler (saved with the buffer). */
  config(): JSONObject {
    return {};
  }

  /** The state saved with the buffer. */
  state(): JSONObject {
    return {};
  }

  /** Restores a state from `state()`; throws INVALID_ARGUMENT naming the bad field. */
  loadState(state: unknown): void {
    parseOptions(z.strictObject({}), state, `${this.constructor.name} state`);
  }
}

/** TorchRL's `RandomSampler`: uniform draws with replacement; it never runs out. */
export class RandomSampler extends Sampler {
  readonly kind = "random";

  sample(storageLength: number, batchSize: number, rng: SeededRNG): SampleResult {
    const index = new Int32Array(batchSize);
    for (let i = 0; i < batchSize; i++) index[i] = rng.int(storageLength);
    return { index };
  }
}

/** Options of {@link SamplerWithoutReplacement}. */
export const SamplerWithoutReplacementOptionsSchema = z.strictObject({
  /** Drop the last, shorter batch of a pass (default false: it is returned short). */
  dropLast: z.boolean().default(false),
  /** Visit rows in a random order (default true); false visits them in storage order. */
  shuffle: z.boolean().default(true),
});

/** Options of {@link SamplerWithoutReplacement}. */
export type SamplerWithoutReplacementOptions = z.input<typeof SamplerWithoutReplacementOptionsSchema>;

const WithoutReplacementStateSchema = z.strictObject({
  storageLength: z.number().int().min(0),
  remaining: z.array(z.number().int().min(0)).nullable(),
  ranOut: z.boolean(),
});

/**
 * TorchRL's `SamplerWithoutReplacement`: a pass visits every stored row once, `batchSize` rows at a time (the last
 * batch is shorter unless `dropLast`); once a pass is used up {@link ranOut} turns true and the next pass starts with
 * a fresh permutation. A change of the storage length starts a new pass.
 */
export class SamplerWithoutReplacement extends Sampler {
  readonly kind = "without-replacement";
  /** Drop the last, shorter batch of a pass. */
  readonly dropLast: boolean;
  /** Visit rows in a random order. */
  readonly shuffle: boolean;
  #remaining: Int32Array | undefined;
  #storageLength = 0;

  constructor(options: SamplerWithoutReplacementOptions = {}) {
    super();
    const parsed = parseOptions(SamplerWithoutReplacementOptionsSchema, options, "SamplerWithoutReplacement options");
    this.dropLast = parsed.dropLast;
    this.shuffle = parsed.shuffle;
  }

  #newPass(storageLength: number, rng: SeededRNG): Int32Array {
    return this.shuffle ? rng.permutation(storageLength) : Int32Array.from({ length: storageLength }, (_, i) => i);
  }

  sample(storageLength: number, batchSize: number, rng: SeededRNG): SampleResult {
    if (this.dropLast && storageLength < batchSize) {
      throw new InvalidArgumentError(
        `SamplerWithoutReplacement: batch size ${batchSize} is larger than the ${storageLength} stored rows; with dropLast no batch can be returned without repeating rows`,
      );
    }
    if (this.#remaining === undefined || this.#storageLength !== storageLength) this.#remaining = this.#newPass(storageLength, rng);
    this.#storageLength = storageLength;
    const index = this.#remaining.slice(0, batchSize);
    this.#remaining = this.#remaining.subarray(batchSize);
    if (this.#remaining.length === 0 || (this.dropLast && this.#remaining.length < batchSize)) {
      this.exhausted = true;
      this.#remaining = this.#newPass(storageLength, rng);
    } else {
      this.exhausted = false;
    }
    return { index };
  }

  override empty(): void {
    super.empty();
    this.#remaining = undefined;
    this.#storageLength = 0;
  }

  override config(): JSONObject {
    return { dropLast: this.dropLast, shuffle: this.shuffle };
  }

  override state(): JSONObject {
    return {
      storageLength: this.#storageLength,
      remaining: this.#remaining === undefined ? null : Array.from(this.#remaining),
      ranOut: this.exhausted,
    };
  }

  override loadState(state: unknown): void {
    const parsed = parseOptions(WithoutReplacementStateSchema, state, "SamplerWithoutReplacement state");
    this.#storageLength = parsed.storageLength;
    this.#remaining = parsed.remaining === null ? undefined : Int32Array.from(parsed.remaining);
    this.exhausted = parsed.ranOut;
  }
}
