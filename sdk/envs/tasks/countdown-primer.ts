/**
 * `CountdownPrimer`: a procedural `DataLoadingPrimer` — at each reset it gives the reset rows the next puzzles of a
 * seeded {@link CountdownGenerator}, each one `repeats` times in a row (GRPO groups), as the string fields
 * `"query"` (the user prompt) and `"answer"` (`"target=T, numbers=a,b,c,d"`).
 */
import { z } from "zod";
import { TensorDict } from "../../tensordict/index.js";
import { parseOptions } from "../../workers/options.js";
import { throwIfAborted, type EnvCallOptions } from "../env-base.js";
import { RESET_KEY } from "../keys.js";
import { mergeRows, readFlags } from "../rows.js";
import { Transform } from "../transform.js";
import { CountdownGenerator, CountdownGeneratorOptionsSchema, type CountdownProblem } from "./countdown.js";

/** Options of {@link CountdownPrimer}: the generator's, plus `repeats` and a resume `position`. */
export const CountdownPrimerOptionsSchema = CountdownGeneratorOptionsSchema.extend({
  /** How many times each puzzle is delivered in a row (the GRPO group size; default 1). */
  repeats: z.number().int().min(1).default(1),
  /** Samples already delivered (repeats included): resume the same stream from there. Default 0. */
  position: z.number().int().nonnegative().default(0),
});

/** Options of {@link CountdownPrimer}. */
export type CountdownPrimerOptions = z.input<typeof CountdownPrimerOptionsSchema>;

/** Feeds seeded Countdown puzzles into a chat env at reset (see the module notes). */
export class CountdownPrimer extends Transform {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof CountdownPrimerOptionsSchema>>;
  #generator: CountdownGenerator;
  #current: CountdownProblem | undefined;
  #position = 0;

  constructor(options: CountdownPrimerOptions = {}) {
    super();
    this.config = parseOptions(CountdownPrimerOptionsSchema, options, "CountdownPrimer options");
    this.#generator = this.#freshGenerator();
    this.#take(this.config.position);
  }

  #freshGenerator(): CountdownGenerator {
    const { numCount, maxNumber, maxTarget, seed } = this.config;
    return new CountdownGenerator({ numCount, maxNumber, maxTarget, seed });
  }

  /** Samples delivered so far, repeats included (pass it back as `position` to resume). */
  get position(): number {
    return this.#position;
  }

  /** Starts the stream again from its first puzzle. */
  resetDataloader(): this {
    this.#generator = this.#freshGenerator();
    this.#current = undefined;
    this.#position = 0;
    return this;
  }

  #take(count: number): CountdownProblem[] {
    const out: CountdownProblem[] = [];
    for (let i = 0; i < count; i++) {
      if (this.#position % this.config.repeats === 0 || this.#current === undefined) this.#current = this.#generator.problem();
      out.push(this.#current);
      this.#position++;
    }
    return out;
  }

  /** The next `count` samples, as a TensorDict of batch size `[count]` with `"query"` and `"answer"`. */
  take(count: number): TensorDict {
    const n = parseOptions(z.number().int().nonnegative(), count, "CountdownPrimer.take count");
    const problems = this.#take(n);
    return new TensorDict({ query: problems.map((p) => p.query), answer: problems.map((p) => p.answer) }, { batchSize: [n] });
  }

  /** Puts the next puzzles into the rows being reset (all rows, or those of the `"_reset"` mask). */
  override beforeReset(td: TensorDict, options: EnvCallOptions): TensorDict {
    throwIfAborted(options.signal, "CountdownPrimer.beforeReset");
    const rows = td.numel();
    const mask = td.has(RESET_KEY) ? readFlags(td, RESET_KEY) : new Array<boolean>(rows).fill(true);
    const picked = this.#take(mask.filter(Boolean).length);
    let k = 0;
    const perRow = mask.map((m) => (m ? picked[k++]! : (picked[0] ?? this.#current)));
    const fresh = new TensorDict(
      { query: perRow.map((p) => p?.query ?? ""), answer: perRow.map((p) => p?.answer ?? "") },
      { batchSize: td.batchSize },
    );
    const merged = mask.every(Boolean) ? fresh : mergeRows(td, fresh, mask);
    const out = td.exclude();
    for (const [key, value] of merged.entries({ nested: true, leavesOnly: true })) out.set(key, value);
    return out;
  }
}
