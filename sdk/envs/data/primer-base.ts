/**
 * The base of every primer (a transform that feeds the next samples of a stream into an env at reset, TorchRL's
 * `DataLoadingPrimer` role), and of the primers whose stream is a seeded problem generator (`CountdownPrimer`,
 * `DigitSortPrimer`): one home for the `"_reset"`-mask logic and for the repeat-and-resume bookkeeping.
 */
import { z } from "zod";
import { parseOptions } from "../../core/validation.js";
import { TensorDict } from "../../tensordict/index.js";
import { throwIfAborted, type EnvCallOptions } from "../env-base.js";
import { RESET_KEY } from "../keys.js";
import { mergeRows, readFlags } from "../rows.js";
import { Transform } from "../transform.js";

/**
 * A transform that puts the next samples of its stream into the rows being reset: all rows, or those of the
 * `"_reset"` mask (the other rows keep what they hold). Subclasses say what the stream is ({@link take}).
 *
 * ```ts
 * class ConstantPrimer extends PrimerBase {
 *   take(count: number) { return new TensorDict({ query: new Array(count).fill("hi") }, { batchSize: [count] }); }
 *   resetDataloader() { return this; }
 * }
 * ```
 */
export abstract class PrimerBase extends Transform {
  /** The next `count` samples of the stream, as a TensorDict of batch size `[count]`; advances the stream. */
  abstract take(count: number): TensorDict | Promise<TensorDict>;

  /** Starts the stream again from its beginning (TorchRL's `reset_dataloader`). */
  abstract resetDataloader(): this;

  /** Puts the next samples into the rows being reset (all rows, or those of the `"_reset"` mask). */
  override async beforeReset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    throwIfAborted(options.signal, `${this.constructor.name}.beforeReset`);
    const rows = td.numel();
    const mask = td.has(RESET_KEY) ? readFlags(td, RESET_KEY) : new Array<boolean>(rows).fill(true);
    const count = mask.filter(Boolean).length;
    if (count === 0) return td.exclude();
    const samples = await this.take(count);
    // Every row gets a sample so the leaves are whole: the reset rows theirs in order, the kept rows the first one
    // (which mergeRows then discards for them).
    let k = 0;
    const perRow = Int32Array.from(mask, (m) => (m ? k++ : 0));
    const fresh = samples.index(perRow).reshape(td.batchSize);
    const merged = mergeRows(td, fresh, mask);
    const out = td.exclude();
    for (const [key, value] of merged.entries({ nested: true, leavesOnly: true })) out.set(key, value);
    return out;
  }
}

/** A problem of a procedural task: the user prompt and the reference answer the reward reads. */
export interface PrimedProblem {
  readonly query: string;
  readonly answer: string;
}

/** A seeded source of problems: the same seed gives the same sequence. */
export interface ProblemGenerator<P extends PrimedProblem> {
  /** The next problem of the sequence. */
  problem(): P;
}

/** The stream options every generator-backed primer takes. */
export const GeneratorPrimerOptionsSchema = z.strictObject({
  /** How many times each problem is delivered in a row (the GRPO group size; default 1). */
  repeats: z.number().int().min(1).default(1),
  /** Samples already delivered (repeats included): resume the same stream from there. Default 0. */
  position: z.number().int().nonnegative().default(0),
});

/**
 * A primer whose stream is a seeded problem generator: each problem is delivered `repeats` times in a row (GRPO
 * groups) as the string fields `"query"` and `"answer"`, and `position` (samples delivered, repeats included)
 * resumes the stream.
 */
export abstract class GeneratorPrimer<P extends PrimedProblem> extends PrimerBase {
  readonly #newGenerator: () => ProblemGenerator<P>;
  readonly #repeats: number;
  #generator: ProblemGenerator<P>;
  #current: P | undefined;
  #position = 0;

  /** `newGenerator` makes a fresh generator (at construction and on {@link resetDataloader}). */
  protected constructor(newGenerator: () => ProblemGenerator<P>, stream: { readonly repeats: number; readonly position: number }) {
    super();
    this.#newGenerator = newGenerator;
    this.#repeats = stream.repeats;
    this.#generator = newGenerator();
    this.problems(stream.position);
  }

  /** Samples delivered so far, repeats included (pass it back as `position` to resume). */
  get position(): number {
    return this.#position;
  }

  /** Starts the stream again from its first problem. */
  resetDataloader(): this {
    this.#generator = this.#newGenerator();
    this.#current = undefined;
    this.#position = 0;
    return this;
  }

  /** The next `count` samples as problems (advances the stream). */
  problems(count: number): P[] {
    const n = parseOptions(z.number().int().nonnegative(), count, `${this.constructor.name}.problems count`);
    const out: P[] = [];
    for (let i = 0; i < n; i++) {
      if (this.#position % this.#repeats === 0 || this.#current === undefined) this.#current = this.#generator.problem();
      out.push(this.#current);
      this.#position++;
    }
    return out;
  }

  /** The next `count` samples, as a TensorDict of batch size `[count]` with `"query"` and `"answer"`. */
  take(count: number): TensorDict {
    const problems = this.problems(count);
    const n = problems.length;
    return new TensorDict({ query: problems.map((p) => p.query), answer: problems.map((p) => p.answer) }, { batchSize: [n] });
  }
}
