/**
 * posttrain's objectives: loss configs of the GRPO family and SFT, computed in the worker, the registry of the
 * policy-gradient variants, and PPO's `ClipPPOLoss` and `GAE` for control tasks. See docs/losses.md.
 *
 * @module posttrain/objectives
 */
export { createLoss, LOSS_REGISTRY, LOSS_VARIANTS, type LossVariant, type LossVariantSpec } from "./loss-registry.js";
export {
  AGGREGATIONS,
  CISPOLoss,
  CISPOLossOptionsSchema,
  DAPO_DEFAULTS,
  DAPOLoss,
  GRPOLoss,
  GRPOLossOptionsSchema,
  GSPOLoss,
  GSPOLossOptionsSchema,
  MASKING_STRATEGIES,
  OFF_POLICY_CORRECTIONS,
  SAPOLoss,
  SAPOLossOptionsSchema,
  SFT_LOSS_FUNCTIONS,
  SFTLoss,
  SFTLossOptionsSchema,
  TRL_LOSS_TYPES,
  type Aggregation,
  type CISPOLossOptions,
  type CISPOLossWire,
  type GRPOLossOptions,
  type GRPOLossWire,
  type GSPOLossOptions,
  type GSPOLossWire,
  type LossConfigLike,
  type LossWire,
  type MaskingStrategy,
  type OffPolicyCorrection,
  type PolicyLossWireFields,
  type SAPOLossOptions,
  type SAPOLossWire,
  type SFTLossFunction,
  type SFTLossOptions,
  type SFTLossWire,
  type TRLLossType,
} from "./losses.js";
export {
  ClipPPOLoss,
  ClipPPOLossOptionsSchema,
  GAE,
  GAEOptionsSchema,
  type ClipPPOLossOptions,
  type ClipPPOLossWire,
  type GAEOptions,
  type GAEWire,
  type LossCriticType,
} from "./ppo.js";
export * from "./deprecated.js";
