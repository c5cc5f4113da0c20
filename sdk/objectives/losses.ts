/**
 * Loss configs of the GRPO family and SFT (TorchRL's `GRPOLoss`, `DAPO`, `CISPOLoss`, `SFTLoss`, plus GSPO and
 * SAPO), validated with zod and sent to the worker as JSON (`toWire()`), where the loss is computed
 * (`posttrain_worker.objectives`). Formulas, defaults and parity with TorchRL and TRL: docs/losses.md.
 */
import { z } from "zod";
import { parseOptions } from "../core/index.js";

/** How per-token loss terms are reduced (TorchRL's `aggregation`). */
export const AGGREGATIONS = ["token_mean", "prompt_mean", "seq_mean_token_sum", "none"] as const;
/**
 * TorchRL's aggregations: `token_mean` (Σ over masked tokens / their count), `prompt_mean` (each sequence's token
 * mean, averaged over sequences), `none`; and verl's `seq_mean_token_sum` (each sequence's token sum, averaged over
 * sequences).
 */
export type Aggregation = (typeof AGGREGATIONS)[number];

/** TRL's `loss_type` normalisations, so that TRL users reproduce their runs. */
export const TRL_LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"] as const;
/** TRL's normalisations: `grpo` (per-sequence mean), `bnpo` and `dapo` (token mean), `dr_grpo` (Σ / (B × L)). */
export type TRLLossType = (typeof TRL_LOSS_TYPES)[number];

/** Which tokens the loss trains on (TorchRL's `masking_strategy`). */
export const MASKING_STRATEGIES = ["sft", "rlhf", "generic"] as const;
/** `sft`: the response after the prompt; `rlhf`: assistant tokens; `generic`: every attended token. */
export type MaskingStrategy = (typeof MASKING_STRATEGIES)[number];

/**
 * Off-policy corrections of the GRPO per-token objective (`GRPOLoss`, `DAPOLoss`), for batches whose `logp_old` comes
 * from an older policy than the trainer's (asynchronous collection, `maxPolicyAge ≥ 1`). See docs/losses.md,
 * "Off-policy correction".
 */
export const OFF_POLICY_CORRECTIONS = ["none", "tis", "decoupled"] as const;
/**
 * `none`: the plain objective on `r = exp(logp − logp_old)`; `tis`: truncated importance sampling (verl, TRL),
 * `−min(w, C)·ℓ(r_prox)`; `decoupled`: AReaL's decoupled PPO, `−w·ℓ(r_prox)` with `w` uncapped unless `isCap` is set.
 * `r_prox = exp(logp − logp_prox)` and `w = sg(exp(logp_prox − logp_old))`.
 */
export type OffPolicyCorrection = (typeof OFF_POLICY_CORRECTIONS)[number];

/** The `isCap` of `offPolicyCorrection: "tis"` when none is given (verl's threshold). */
const TIS_DEFAULT_CAP = 2;

/** SFT objectives (TorchRL's `loss_function`). */
export const SFT_LOSS_FUNCTIONS = ["sft", "minor_sft"] as const;
/** `sft`: negative log-likelihood; `minor_sft`: `−logσ(β(s − s_ref))` against a reference model. */
export type SFTLossFunction = (typeof SFT_LOSS_FUNCTIONS)[number];

const ClipEpsilonSchema = z.union([z.number().min(0), z.tuple([z.number().min(0), z.number().min(0)])]);
const CoeffSchema = z.number().min(0).nullable();

/** Fields every policy-gradient loss shares (GRPO, DAPO, CISPO, GSPO, SAPO). */
const policyFields = {
  /** k3 KL to the reference model, `exp(d) − d − 1` with `d = logp_ref − logp`; `null` or 0 = off (default). */
  klToRefCoeff: CoeffSchema.default(null),
  /** k3 KL to the behaviour (inference) policy, `d = logp_old − logp`; `null` or 0 = off (default). */
  klToInferenceCoeff: CoeffSchema.default(null),
  /** Multiply the per-token KL by the importance ratio (TRL's `use_bias_correction_kl`; default false). */
  klBiasCorrection: z.boolean().default(false),
  /** Add `−entropyCoeff × H` to the loss (default true, TorchRL's). */
  entropyBonus: z.boolean().default(true),
  /** Entropy coefficient (default 0.01, TorchRL's). */
  entropyCoeff: z.number().min(0).default(0.01),
  /** TorchRL's reduction of every loss term; cannot be combined with `lossType`. */
  aggregation: z.enum(AGGREGATIONS).optional(),
  /** TRL's normalisation instead of `aggregation` (the entropy bonus is then a token mean, as in TRL). */
  lossType: z.enum(TRL_LOSS_TYPES).optional(),
  /** TRL's `max_completion_length`: the constant of `lossType: "dr_grpo"` (required there, only there). */
  maxCompletionLength: z.number().int().min(1).optional(),
  /** Which tokens are trained on (default `"sft"`, TorchRL's). */
  maskingStrategy: z.enum(MASKING_STRATEGIES).default("sft"),
};

interface PolicyShape {
  aggregation?: Aggregation | undefined;
  lossType?: TRLLossType | undefined;
  maxCompletionLength?: number | undefined;
}

function checkNormalisation(o: PolicyShape, ctx: z.RefinementCtx): void {
  if (o.lossType !== undefined && o.aggregation !== undefined) {
    ctx.addIssue({ code: "custom", path: ["aggregation"], message: "cannot be combined with lossType (the lossType sets the normalisation)" });
  }
  if (o.lossType === "dr_grpo" && o.maxCompletionLength === undefined) {
    ctx.addIssue({ code: "custom", path: ["maxCompletionLength"], message: 'is required with lossType "dr_grpo"' });
  }
  if (o.lossType !== "dr_grpo" && o.maxCompletionLength !== undefined) {
    ctx.addIssue({ code: "custom", path: ["maxCompletionLength"], message: 'is only used with lossType "dr_grpo"' });
  }
}

interface OffPolicyShape {
  offPolicyCorrection: OffPolicyCorrection;
  isCap?: number | null | undefined;
}

function checkOffPolicy(o: OffPolicyShape, ctx: z.RefinementCtx): void {
  if (o.offPolicyCorrection === "none" && o.isCap !== undefined) {
    ctx.addIssue({ code: "custom", path: ["isCap"], message: 'is only used with offPolicyCorrection "tis" or "decoupled" (it is "none")' });
  }
  if (o.offPolicyCorrection === "tis" && o.isCap === null) {
    ctx.addIssue({ code: "custom", path: ["isCap"], message: 'must be a number > 0 with offPolicyCorrection "tis" (the truncation cap; "decoupled" takes null for an uncapped weight)' });
  }
}

const NOT_OFF_POLICY = 'is only supported by GRPOLoss and DAPOLoss (the GRPO per-token objective; docs/losses.md, "Off-policy correction")';

/**
 * `offPolicyCorrection` and `isCap` in the schemas of the variants without an off-policy correction (CISPO, GSPO,
 * SAPO): only `"none"` and no cap, so that a correction is refused with a message that says why.
 */
const noOffPolicyFields = {
  /** Only `"none"`: the off-policy corrections are GRPO's and DAPO's (docs/losses.md). */
  offPolicyCorrection: z.literal("none", { error: NOT_OFF_POLICY }).optional(),
  /** Not a field of this variant (the cap of GRPO's and DAPO's off-policy corrections). */
  isCap: z.undefined({ error: NOT_OFF_POLICY }).optional(),
};

function clipPair(clip: number | readonly [number, number]): [number, number] {
  return typeof clip === "number" ? [clip, clip] : [clip[0], clip[1]];
}

function checkClip(clip: number | readonly [number, number], allowLowOne: boolean, ctx: z.RefinementCtx): void {
  const [low] = clipPair(clip);
  if (allowLowOne ? low > 1 : low >= 1) {
    ctx.addIssue({ code: "custom", path: ["clipEpsilon"], message: `low value must be ${allowLowOne ? "<= 1" : "< 1"} (the lower bound 1 − low stays >= 0), got ${low}` });
  }
}

/** Options of {@link GRPOLoss} (TorchRL's names, camelCased; TorchRL's defaults). */
export const GRPOLossOptionsSchema = z
  .strictObject({
    /** ε (symmetric) or `[ε_low, ε_high]` (DAPO's clip-higher): the ratio is clipped to `[1 − ε_low, 1 + ε_high]` (default 0.2). */
    clipEpsilon: ClipEpsilonSchema.default(0.2),
    /** DAPO's dual clip `c`: for `A < 0` the per-token loss is capped at `−c·A` (TRL's `delta`); must be > 1 + ε_high. */
    dualClip: z.number().nullable().default(null),
    /**
     * Off-policy correction (default `"none"`: the loss as it is without one). `"tis"` and `"decoupled"` anchor the
     * clip at the proximal policy `logp_prox` (the trainer's weights before this step's update) and weight each token
     * by `w = sg(exp(logp_prox − logp_old))`; `"tis"` truncates `w` at `isCap`. See docs/losses.md.
     */
    offPolicyCorrection: z.enum(OFF_POLICY_CORRECTIONS).default("none"),
    /**
     * The cap `C` of the behaviour weight, `min(w, C)`, a finite number > 0 (1 is allowed). `"tis"`: default 2;
     * `"decoupled"`: default `null` (uncapped); not allowed with `"none"`.
     */
    isCap: z.number().positive().nullable().optional(),
    ...policyFields,
  })
  .superRefine((o, ctx) => {
    checkClip(o.clipEpsilon, false, ctx);
    const high = clipPair(o.clipEpsilon)[1];
    if (o.dualClip !== null && !(o.dualClip > 1 + high)) {
      ctx.addIssue({ code: "custom", path: ["dualClip"], message: `must be > 1 + clipEpsilon high (${1 + high}), got ${o.dualClip}` });
    }
    checkNormalisation(o, ctx);
    checkOffPolicy(o, ctx);
  });
/** Options of {@link GRPOLoss} (input form: every field may be left out). */
export type GRPOLossOptions = z.input<typeof GRPOLossOptionsSchema>;

/** Options of {@link CISPOLoss}. */
export const CISPOLossOptionsSchema = z
  .strictObject({
    /** The weight is `clip(r, 1 − ε_low, 1 + ε_high)`, held constant (default `[1, 4]`: r ∈ [0, 5], torchforge's). */
    clipEpsilon: ClipEpsilonSchema.default([1, 4]),
    ...policyFields,
    ...noOffPolicyFields,
  })
  .superRefine((o, ctx) => {
    checkClip(o.clipEpsilon, true, ctx);
    checkNormalisation(o, ctx);
  });
/** Options of {@link CISPOLoss}. */
export type CISPOLossOptions = z.input<typeof CISPOLossOptionsSchema>;

/** Options of {@link GSPOLoss}. */
export const GSPOLossOptionsSchema = z
  .strictObject({
    /** Clip of the sequence ratio (default `[3e-4, 4e-4]`, the GSPO paper's). */
    clipEpsilon: ClipEpsilonSchema.default([3e-4, 4e-4]),
    ...policyFields,
    ...noOffPolicyFields,
  })
  .superRefine((o, ctx) => {
    checkClip(o.clipEpsilon, false, ctx);
    checkNormalisation(o, ctx);
  });
/** Options of {@link GSPOLoss}. */
export type GSPOLossOptions = z.input<typeof GSPOLossOptionsSchema>;

/** Options of {@link SAPOLoss}. */
export const SAPOLossOptionsSchema = z
  .strictObject({
    /** Gate temperature where `A > 0` (default 1.0, TRL's `sapo_temperature_pos`). */
    temperaturePos: z.number().positive().default(1.0),
    /** Gate temperature where `A ≤ 0` (default 1.05, TRL's `sapo_temperature_neg`). */
    temperatureNeg: z.number().positive().default(1.05),
    ...policyFields,
    ...noOffPolicyFields,
  })
  .superRefine((o, ctx) => {
    checkNormalisation(o, ctx);
  });
/** Options of {@link SAPOLoss}. */
export type SAPOLossOptions = z.input<typeof SAPOLossOptionsSchema>;

/** Options of {@link SFTLoss} (TorchRL's names, camelCased; TorchRL's defaults). */
export const SFTLossOptionsSchema = z
  .strictObject({
    /** `"sft"` (default) or `"minor_sft"`. */
    lossFunction: z.enum(SFT_LOSS_FUNCTIONS).default("sft"),
    /** Divide each sequence's summed log-prob by its assistant-token count (default true). */
    normalizeBySeqLength: z.boolean().default(true),
    /** k3 KL to the reference added to `sft` (`null` or 0 = off, default); must be off with `minor_sft`. */
    klToRefCoeff: CoeffSchema.default(null),
    /** MinorSFT's β (default 0.1). */
    beta: z.number().positive().default(0.1),
  })
  .superRefine((o, ctx) => {
    if (o.lossFunction === "minor_sft" && o.klToRefCoeff !== null && o.klToRefCoeff > 0) {
      ctx.addIssue({ code: "custom", path: ["klToRefCoeff"], message: 'must be null or 0 with lossFunction "minor_sft" (its KL is implicit)' });
    }
  });
/** Options of {@link SFTLoss}. */
export type SFTLossOptions = z.input<typeof SFTLossOptionsSchema>;

/** Wire fields every policy-gradient loss sends. */
export interface PolicyLossWireFields {
  readonly klToRefCoeff: number | null;
  readonly klToInferenceCoeff: number | null;
  readonly klBiasCorrection: boolean;
  readonly entropyBonus: boolean;
  readonly entropyCoeff: number;
  readonly maskingStrategy: MaskingStrategy;
  /** Present unless `lossType` is. */
  readonly aggregation?: Aggregation;
  readonly lossType?: TRLLossType;
  readonly maxCompletionLength?: number;
}
/** The JSON {@link GRPOLoss} (and {@link DAPOLoss}) sends to the worker. */
export interface GRPOLossWire extends PolicyLossWireFields {
  readonly type: "grpo";
  readonly clipEpsilon: readonly [number, number];
  readonly dualClip: number | null;
  /** Present only with a correction (absent: `"none"`, the loss without one). */
  readonly offPolicyCorrection?: Exclude<OffPolicyCorrection, "none">;
  /** The cap in effect, present with `offPolicyCorrection` (`null`: uncapped, `"decoupled"` only). */
  readonly isCap?: number | null;
}
/** The JSON {@link CISPOLoss} sends to the worker. */
export interface CISPOLossWire extends PolicyLossWireFields {
  readonly type: "cispo";
  readonly clipEpsilon: readonly [number, number];
}
/** The JSON {@link GSPOLoss} sends to the worker. */
export interface GSPOLossWire extends PolicyLossWireFields {
  readonly type: "gspo";
  readonly clipEpsilon: readonly [number, number];
}
/** The JSON {@link SAPOLoss} sends to the worker. */
export interface SAPOLossWire extends PolicyLossWireFields {
  readonly type: "sapo";
  readonly temperaturePos: number;
  readonly temperatureNeg: number;
}
/** The JSON {@link SFTLoss} sends to the worker. */
export interface SFTLossWire {
  readonly type: "sft";
  readonly lossFunction: SFTLossFunction;
  readonly normalizeBySeqLength: boolean;
  readonly klToRefCoeff: number | null;
  readonly beta: number;
}
/** Any loss config as it travels to the worker (`{ type, ...camelCase fields }`). */
export type LossWire = GRPOLossWire | CISPOLossWire | GSPOLossWire | SAPOLossWire | SFTLossWire;

/** Anything a trainer accepts as its loss: an object that can say what to compute in the worker. */
export interface LossConfigLike {
  /** The JSON config the worker's `parse_loss_config` reads. */
  toWire(): LossWire;
}

type PolicyResolved = z.output<typeof GRPOLossOptionsSchema>;

function policyWire(o: Omit<PolicyResolved, "clipEpsilon" | "dualClip" | "offPolicyCorrection" | "isCap">, defaultAggregation: Aggregation): PolicyLossWireFields {
  const normalisation =
    o.lossType !== undefined
      ? { lossType: o.lossType, ...(o.maxCompletionLength !== undefined ? { maxCompletionLength: o.maxCompletionLength } : {}) }
      : { aggregation: o.aggregation ?? defaultAggregation };
  return {
    klToRefCoeff: o.klToRefCoeff,
    klToInferenceCoeff: o.klToInferenceCoeff,
    klBiasCorrection: o.klBiasCorrection,
    entropyBonus: o.entropyBonus,
    entropyCoeff: o.entropyCoeff,
    maskingStrategy: o.maskingStrategy,
    ...normalisation,
  };
}

/**
 * TorchRL's `GRPOLoss`: per token `−min(r·A, clip(r, 1 − ε_low, 1 + ε_high)·A)` with `r = exp(logp − logp_old)`,
 * plus `−entropyCoeff·H` and the k3 KL terms, reduced by `aggregation` (or TRL's `lossType`). For stale batches,
 * `offPolicyCorrection` (`"tis"`, `"decoupled"`) anchors the clip at the proximal policy and importance-weights each
 * token (docs/losses.md, "Off-policy correction").
 *
 * @example
 * ```ts
 * const loss = new GRPOLoss({ clipEpsilon: [0.2, 0.28], klToRefCoeff: 0.04 });
 * loss.toWire(); // { type: "grpo", clipEpsilon: [0.2, 0.28], ... }
 * ```
 */
export class GRPOLoss implements LossConfigLike {
  /** The zod schema of the options. */
  static readonly schema = GRPOLossOptionsSchema;
  /** The resolved options (defaults filled in). */
  readonly config: Readonly<z.output<typeof GRPOLossOptionsSchema>>;

  /**
   * Throws `InvalidArgumentError` naming the field when an option does not fit.
   * @param where - the prefix of error messages (subclasses pass their own name).
   */
  constructor(options: GRPOLossOptions = {}, where = "GRPOLoss options") {
    this.config = parseOptions(GRPOLossOptionsSchema, options, where);
  }

  /** The JSON config sent to the worker (`offPolicyCorrection` and `isCap` only with a correction). */
  toWire(): GRPOLossWire {
    const { clipEpsilon, dualClip, offPolicyCorrection, isCap, ...rest } = this.config;
    const offPolicy =
      offPolicyCorrection === "none" ? {} : { offPolicyCorrection, isCap: isCap ?? (offPolicyCorrection === "tis" ? TIS_DEFAULT_CAP : null) };
    return { type: "grpo", clipEpsilon: clipPair(clipEpsilon), dualClip, ...policyWire(rest, "token_mean"), ...offPolicy };
  }
}

/** DAPO's defaults: clip-higher `[0.2, 0.28]` and a dual clip at 3 (torchforge's and verl's). */
export const DAPO_DEFAULTS = { clipEpsilon: [0.2, 0.28], dualClip: 3 } as const satisfies GRPOLossOptions;

/**
 * DAPO: {@link GRPOLoss} with an asymmetric clip `[0.2, 0.28]` and a dual clip `c = 3` on negative advantages by
 * default (TorchRL's `DAPO`, torchforge's dual clip). Any GRPO option may be given; it travels as `type: "grpo"`.
 */
export class DAPOLoss extends GRPOLoss {
  /**
   * Throws `InvalidArgumentError` naming the field when an option does not fit.
   * @param where - the prefix of error messages.
   */
  constructor(options: GRPOLossOptions = {}, where = "DAPOLoss options") {
    super({ ...DAPO_DEFAULTS, ...options }, where);
  }
}

/**
 * CISPO (MiniMax-M1; TRL's `cispo`): per token `−sg(clip(r, 1 − ε_low, 1 + ε_high))·A·logp`. The clipped ratio is a
 * constant weight, so clipped tokens keep their gradient (TorchRL's `CISPOLoss` lets it vanish; see docs/losses.md).
 */
export class CISPOLoss implements LossConfigLike {
  /** The zod schema of the options. */
  static readonly schema = CISPOLossOptionsSchema;
  /** The resolved options (defaults filled in). */
  readonly config: Readonly<z.output<typeof CISPOLossOptionsSchema>>;

  /**
   * Throws `InvalidArgumentError` naming the field when an option does not fit.
   * @param where - the prefix of error messages.
   */
  constructor(options: CISPOLossOptions = {}, where = "CISPOLoss options") {
    this.config = parseOptions(CISPOLossOptionsSchema, options, where);
  }

  /** The JSON config sent to the worker. */
  toWire(): CISPOLossWire {
    const { clipEpsilon, ...rest } = this.config;
    return { type: "cispo", clipEpsilon: clipPair(clipEpsilon), ...policyWire(rest, "token_mean") };
  }
}

/**
 * GSPO: the clipped surrogate on the sequence ratio `s = exp(mean over the sequence's tokens of (logp − logp_old))`
 * (TRL's `importance_sampling_level: "sequence"`). Its default aggregation is `prompt_mean` (GSPO's objective is a
 * mean over sequences); the others default to `token_mean`.
 */
export class GSPOLoss implements LossConfigLike {
  /** The zod schema of the options. */
  static readonly schema = GSPOLossOptionsSchema;
  /** The resolved options (defaults filled in). */
  readonly config: Readonly<z.output<typeof GSPOLossOptionsSchema>>;

  /**
   * Throws `InvalidArgumentError` naming the field when an option does not fit.
   * @param where - the prefix of error messages.
   */
  constructor(options: GSPOLossOptions = {}, where = "GSPOLoss options") {
    this.config = parseOptions(GSPOLossOptionsSchema, options, where);
  }

  /** The JSON config sent to the worker. */
  toWire(): GSPOLossWire {
    const { clipEpsilon, ...rest } = this.config;
    return { type: "gspo", clipEpsilon: clipPair(clipEpsilon), ...policyWire(rest, "prompt_mean") };
  }
}

/**
 * SAPO (TRL's `sapo`): a smooth gate instead of a clip, per token `−(4/τ)·σ(τ(r − 1))·A` with `τ = temperaturePos`
 * where `A > 0`, else `temperatureNeg`.
 */
export class SAPOLoss implements LossConfigLike {
  /** The zod schema of the options. */
  static readonly schema = SAPOLossOptionsSchema;
  /** The resolved options (defaults filled in). */
  readonly config: Readonly<z.output<typeof SAPOLossOptionsSchema>>;

  /**
   * Throws `InvalidArgumentError` naming the field when an option does not fit.
   * @param where - the prefix of error messages.
   */
  constructor(options: SAPOLossOptions = {}, where = "SAPOLoss options") {
    this.config = parseOptions(SAPOLossOptionsSchema, options, where);
  }

  /** The JSON config sent to the worker. */
  toWire(): SAPOLossWire {
    const { temperaturePos, temperatureNeg, ...rest } = this.config;
    return { type: "sapo", temperaturePos, temperatureNeg, ...policyWire(rest, "token_mean") };
  }
}

/**
 * TorchRL's `SFTLoss` on the assistant tokens: `s_i` = Σ of sequence i's masked log-probs (÷ its token count with
 * `normalizeBySeqLength`); `sft` = `−mean_i s_i` (+ `klToRefCoeff`·k3 KL), `minor_sft` = `−mean_i logσ(β(s_i − s_ref_i))`.
 */
export class SFTLoss implements LossConfigLike {
  /** The zod schema of the options. */
  static readonly schema = SFTLossOptionsSchema;
  /** The resolved options (defaults filled in). */
  readonly config: Readonly<z.output<typeof SFTLossOptionsSchema>>;

  /** Throws `InvalidArgumentError` naming the field when an option does not fit. */
  constructor(options: SFTLossOptions = {}) {
    this.config = parseOptions(SFTLossOptionsSchema, options, "SFTLoss options");
  }

  /** The JSON config sent to the worker. */
  toWire(): SFTLossWire {
    const { lossFunction, normalizeBySeqLength, klToRefCoeff, beta } = this.config;
    return { type: "sft", lossFunction, normalizeBySeqLength, klToRefCoeff, beta };
  }
}
