/**
 * The registry of policy-gradient loss variants: each name (`"grpo"`, `"dapo"`, `"cispo"`, `"gspo"`, `"sapo"`) with
 * its loss class's options schema, the defaults that class applies first, and its constructor. A run config's
 * `loss.variant` is checked and built through it (docs/losses.md, docs/trainers.md).
 */
import { z } from "zod";
import { parseOptions } from "../core/index.js";
import {
  CISPOLoss,
  CISPOLossOptionsSchema,
  DAPO_DEFAULTS,
  DAPOLoss,
  GRPOLoss,
  GRPOLossOptionsSchema,
  GSPOLoss,
  GSPOLossOptionsSchema,
  SAPOLoss,
  SAPOLossOptionsSchema,
  type LossConfigLike,
} from "./losses.js";

/** The names of the policy-gradient loss variants, in {@link LOSS_REGISTRY}'s order. */
export const LOSS_VARIANTS = ["grpo", "dapo", "cispo", "gspo", "sapo"] as const;

/** One of {@link LOSS_VARIANTS}. */
export type LossVariant = (typeof LOSS_VARIANTS)[number];

/** What {@link LOSS_REGISTRY} knows of one variant. */
export interface LossVariantSpec {
  /** The loss class's options schema. */
  readonly schema: z.ZodType;
  /** Defaults the class applies under the given options before checking them (DAPO's clip-higher and dual clip). */
  readonly defaults: Readonly<Record<string, unknown>>;
  /** Builds the loss; `where` prefixes error messages (default: the class's own, e.g. `"CISPOLoss options"`). */
  create(options: Readonly<Record<string, unknown>>, where?: string): LossConfigLike;
}

/**
 * Variant name → options schema, defaults, constructor.
 *
 * ```ts
 * const { schema, defaults } = LOSS_REGISTRY.dapo; // GRPOLoss's schema, { clipEpsilon: [0.2, 0.28], dualClip: 3 }
 * ```
 */
export const LOSS_REGISTRY: { readonly [V in LossVariant]: LossVariantSpec } = {
  grpo: { schema: GRPOLossOptionsSchema, defaults: {}, create: (options, where) => new GRPOLoss(options, where) },
  dapo: { schema: GRPOLossOptionsSchema, defaults: DAPO_DEFAULTS, create: (options, where) => new DAPOLoss(options, where) },
  cispo: { schema: CISPOLossOptionsSchema, defaults: {}, create: (options, where) => new CISPOLoss(options, where) },
  gspo: { schema: GSPOLossOptionsSchema, defaults: {}, create: (options, where) => new GSPOLoss(options, where) },
  sapo: { schema: SAPOLossOptionsSchema, defaults: {}, create: (options, where) => new SAPOLoss(options, where) },
};

/**
 * The loss of `variant` with `options` (that class's fields; an `InvalidArgumentError` names a field that does not
 * fit).
 *
 * ```ts
 * const loss = createLoss("dapo", { entropyCoeff: 0 }); // a DAPOLoss
 * ```
 */
export function createLoss(variant: LossVariant, options: Readonly<Record<string, unknown>> = {}, where?: string): LossConfigLike {
  return LOSS_REGISTRY[parseOptions(z.enum(LOSS_VARIANTS), variant, "createLoss variant")].create(options, where);
}
