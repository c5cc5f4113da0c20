/**
 * `CountdownPrimer`: a procedural `DataLoadingPrimer` — at each reset it gives the reset rows the next puzzles of a
 * seeded {@link CountdownGenerator}, each one `repeats` times in a row (GRPO groups), as the string fields
 * `"query"` (the user prompt) and `"answer"` (`"target=T, numbers=a,b,c,d"`).
 */
import type { z } from "zod";
import { parseOptions } from "../../core/validation.js";
import { GeneratorPrimer, GeneratorPrimerOptionsSchema } from "../data/primer-base.js";
import { CountdownGenerator, CountdownGeneratorOptionsSchema, type CountdownProblem } from "./countdown.js";

/** Options of {@link CountdownPrimer}: the generator's, plus `repeats` and a resume `position`. */
export const CountdownPrimerOptionsSchema = CountdownGeneratorOptionsSchema.extend(GeneratorPrimerOptionsSchema.shape);

/** Options of {@link CountdownPrimer}. */
export type CountdownPrimerOptions = z.input<typeof CountdownPrimerOptionsSchema>;

/** Feeds seeded Countdown puzzles into a chat env at reset (see the module notes). */
export class CountdownPrimer extends GeneratorPrimer<CountdownProblem> {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof CountdownPrimerOptionsSchema>>;

  constructor(options: CountdownPrimerOptions = {}) {
    const config = parseOptions(CountdownPrimerOptionsSchema, options, "CountdownPrimer options");
    const { numCount, maxNumber, maxTarget, seed } = config;
    super(() => new CountdownGenerator({ numCount, maxNumber, maxTarget, seed }), config);
    this.config = config;
  }
}
