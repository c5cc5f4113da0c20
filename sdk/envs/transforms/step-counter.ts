/**
 * `StepCounter`: counts the steps since the last reset and truncates episodes at `maxSteps` (TorchRL's
 * `StepCounter`).
 */
import { z } from "zod";
import { Tensor, TensorDict } from "../../tensordict/index.js";
import { parseOptions } from "../../core/index.js";
import { throwIfAborted, type EnvCallOptions } from "../env-base.js";
import { STEP_COUNT_KEY } from "../keys.js";
import { markDone } from "../rows.js";
import { Transform } from "../transform.js";

/** Options of {@link StepCounter}. */
export const StepCounterOptionsSchema = z.strictObject({
  /** Truncate (set `truncated` and `done`) when the count reaches this; default none. */
  maxSteps: z.number().int().min(1).optional(),
  /** Where the count is written, `[...batch, 1]` int64 (default `"step_count"`). */
  stepCountKey: z.string().min(1).default(STEP_COUNT_KEY),
  /** Set `truncated` and `done` at `maxSteps` (default true). */
  updateDone: z.boolean().default(true),
});

/** Options of {@link StepCounter}. */
export type StepCounterOptions = z.input<typeof StepCounterOptionsSchema>;

/**
 * Writes `step_count` (`[...batch, 1]` int64): 0 at reset, the previous count + 1 at each step. With `maxSteps`,
 * a row whose count reaches it is marked `truncated` (and `done`).
 */
export class StepCounter extends Transform {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof StepCounterOptionsSchema>>;

  constructor(options: StepCounterOptions = {}) {
    super();
    this.config = parseOptions(StepCounterOptionsSchema, options, "StepCounter options");
  }

  override reset(td: TensorDict, tdReset: TensorDict, options: EnvCallOptions = {}): TensorDict {
    throwIfAborted(options.signal, "StepCounter.reset");
    return tdReset.set(this.config.stepCountKey, Tensor.zeros("int64", [...tdReset.batchSize, 1]));
  }

  override step(td: TensorDict, next: TensorDict, options: EnvCallOptions = {}): TensorDict {
    throwIfAborted(options.signal, "StepCounter.step");
    const key = this.config.stepCountKey;
    const count = Tensor.zeros("int64", [...next.batchSize, 1]);
    if (td.has(key)) {
      const previous = td.getTensor(key).to("int64").data;
      for (let i = 0; i < count.data.length; i++) count.data[i] = (previous[i] ?? 0n) + 1n;
    } else {
      count.data.fill(1n);
    }
    next.set(key, count);
    const { maxSteps } = this.config;
    if (maxSteps !== undefined && this.config.updateDone) {
      const reached = Array.from(count.data, (c) => c >= BigInt(maxSteps));
      if (reached.some((r) => r)) markDone(next, reached, "truncated");
    }
    return next;
  }
}

