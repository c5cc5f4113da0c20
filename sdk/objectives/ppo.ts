/**
 * Classic-RL objectives for control tasks: TorchRL's `ClipPPOLoss` and its `GAE` value estimator, as zod-validated
 * configs with TorchRL's field names (camelCased) and defaults. Both are computed in the worker (the `control_update`
 * method, `posttrain_worker.control`); `toWire()` gives the objects its `control_create` takes. See docs/classic-rl.md.
 */
import { z } from "zod";
import { parseOptions } from "../core/index.js";
import { ControlAdvantageSchema, ControlLossSchema, type ControlAdvantage, type ControlLoss } from "../workers/control.js";

/** `smooth_l1` (Huber, TorchRL's default), `l2` (squared error) or `l1` (absolute error) between value and target. */
export type LossCriticType = ControlLoss["lossCriticType"];

const loss = ControlLossSchema.shape;
const gae = ControlAdvantageSchema.shape;

/** Options of {@link ClipPPOLoss}: the worker's fields and bounds (`ControlLossSchema`) with TorchRL's defaults. */
export const ClipPPOLossOptionsSchema = z.strictObject({
  /** ε: the probability ratio is clipped to `[1 − ε, 1 + ε]`, ε in (0, 1) (default 0.2). */
  clipEpsilon: loss.clipEpsilon.default(0.2),
  /** Add `−entropyCoeff·H` to the loss (default true). */
  entropyBonus: loss.entropyBonus.default(true),
  /** Entropy coefficient (default 0.01). */
  entropyCoeff: loss.entropyCoeff.default(0.01),
  /** Weight of the critic loss (default 1.0). */
  criticCoeff: loss.criticCoeff.default(1.0),
  /** The critic's loss between its value and the GAE value target (default `"smooth_l1"`). */
  lossCriticType: loss.lossCriticType.default("smooth_l1"),
  /** Standardise the advantages of each mini-batch (default false). */
  normalizeAdvantage: loss.normalizeAdvantage.default(false),
  /** Clip the new value to `[v_old − c, v_old + c]` in the critic loss (PPO's value clipping; default `null` = off). */
  clipValue: loss.clipValue.default(null),
});

/** Options of {@link ClipPPOLoss} (input form: every field may be left out). */
export type ClipPPOLossOptions = z.input<typeof ClipPPOLossOptionsSchema>;

/** The JSON {@link ClipPPOLoss} sends to the worker (`control_create`'s `loss`): every field resolved. */
export type ClipPPOLossWire = Readonly<ControlLoss>;

/** Options of {@link GAE}: the worker's fields and bounds (`ControlAdvantageSchema`) with TorchRL's defaults. */
export const GAEOptionsSchema = z.strictObject({
  /** Discount γ (default 0.99). */
  gamma: gae.gamma.default(0.99),
  /** The GAE λ (default 0.95; TorchRL's spelling `lmbda`). */
  lmbda: gae.lmbda.default(0.95),
  /** Standardise the advantages of the whole batch after computing them (default false). */
  averageGae: gae.averageGae.default(false),
});

/** Options of {@link GAE} (input form). */
export type GAEOptions = z.input<typeof GAEOptionsSchema>;

/** The JSON {@link GAE} sends to the worker (`control_create`'s `advantage`). */
export type GAEWire = Readonly<ControlAdvantage>;

/**
 * TorchRL's `ClipPPOLoss`: `−min(r·A, clip(r, 1 − ε, 1 + ε)·A)` with `r = exp(logp − logp_old)`, plus
 * `criticCoeff × critic loss` and `−entropyCoeff·H`, computed in the worker over each mini-batch.
 *
 * @example
 * ```ts
 * const loss = new ClipPPOLoss({ clipEpsilon: 0.2, entropyCoeff: 0 });
 * loss.toWire(); // { clipEpsilon: 0.2, entropyBonus: true, entropyCoeff: 0, criticCoeff: 1, ... }
 * ```
 */
export class ClipPPOLoss {
  /** The zod schema of the options. */
  static readonly schema = ClipPPOLossOptionsSchema;
  /** The resolved options (defaults filled in). */
  readonly config: ClipPPOLossWire;

  /**
   * Throws `InvalidArgumentError` naming the field when an option does not fit.
   * @param where - the prefix of error messages (a run config passes `"PPOTrainer config.loss"`).
   */
  constructor(options: ClipPPOLossOptions = {}, where = "ClipPPOLoss options") {
    this.config = Object.freeze(parseOptions(ClipPPOLossOptionsSchema, options, where));
  }

  /** The JSON config `control_create` takes as `loss`. */
  toWire(): ClipPPOLossWire {
    return { ...this.config };
  }
}

/**
 * TorchRL's `GAE` value estimator: `A_t = Σ_k (γλ)^k δ_{t+k}`, `δ_t = r_t + γ·V(s_{t+1})·(1 − terminated_t) − V(s_t)`,
 * the trace cut at every `done` (so a truncated episode bootstraps from its last observation's value, a terminated
 * one does not); the value target is `A + V`. Computed in the worker on each collected batch.
 *
 * @example
 * ```ts
 * new GAE({ gamma: 0.99, lmbda: 0.95 }).toWire(); // { gamma: 0.99, lmbda: 0.95, averageGae: false }
 * ```
 */
export class GAE {
  /** The zod schema of the options. */
  static readonly schema = GAEOptionsSchema;
  /** The resolved options (defaults filled in). */
  readonly config: GAEWire;

  /**
   * Throws `InvalidArgumentError` naming the field when an option does not fit.
   * @param where - the prefix of error messages.
   */
  constructor(options: GAEOptions = {}, where = "GAE options") {
    this.config = Object.freeze(parseOptions(GAEOptionsSchema, options, where));
  }

  /** The JSON config `control_create` takes as `advantage`. */
  toWire(): GAEWire {
    return { ...this.config };
  }
}
