"""Loss configs as they arrive from TypeScript (``sdk/objectives/losses.ts``, ``toWire()``), parsed and
checked.

The wire object is ``{"type": "grpo" | "cispo" | "gspo" | "sapo" | "sft", ...camelCase fields}``; a missing
field takes the same default as the TypeScript schema (TorchRL's defaults). Every mistake raises
``WorkerFailure(BAD_ARGUMENTS)`` whose message starts with the field's name, e.g. ``loss.clipEpsilon must
be ...``. Formulas: docs/losses.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posttrain_worker.errors import render
from posttrain_worker.objectives.registry import POLICY_TYPES, POLICY_VARIANTS
from posttrain_worker.validation import ConfigFields

LOSS_TYPES = (*POLICY_TYPES, "sft")
AGGREGATIONS = ("token_mean", "prompt_mean", "seq_mean_token_sum", "none")
TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
MASKING_STRATEGIES = ("sft", "rlhf", "generic")
SFT_FUNCTIONS = ("sft", "minor_sft")
OFF_POLICY_CORRECTIONS = ("none", "tis", "decoupled")
TIS_DEFAULT_CAP = 2.0
"""``isCap`` of ``offPolicyCorrection: "tis"`` when none is given (verl's and ms-swift's threshold)."""

# Normalisation implied by each TRL ``lossType`` (``fixed_horizon``: sum / (sequences x maxCompletionLength)).
_TRL_NORMALIZATION = {
    "grpo": "prompt_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "dr_grpo": "fixed_horizon",
}


@dataclass(frozen=True)
class PolicyLossConfig:
    """GRPO and its variants (DAPO is ``grpo`` with an asymmetric clip and ``dual_clip``)."""

    type: str
    clip_epsilon_low: float
    clip_epsilon_high: float
    dual_clip: float | None
    kl_to_ref_coeff: float | None
    kl_to_inference_coeff: float | None
    kl_bias_correction: bool
    entropy_bonus: bool
    entropy_coeff: float
    aggregation: str
    loss_type: str | None
    max_completion_length: int | None
    masking_strategy: str
    temperature_pos: float
    temperature_neg: float
    off_policy_correction: str = "none"
    """``none`` (today's loss), ``tis`` (truncated importance sampling) or ``decoupled`` (AReaL's decoupled
    PPO): docs/losses.md, "Off-policy correction"."""
    is_cap: float | None = None
    """The cap ``C`` of the behaviour importance weight, ``w = min(exp(logp_prox - logp_old), C)``; ``None``:
    uncapped (``decoupled`` only) or no correction."""

    @property
    def normalization(self) -> str:
        """How per-token terms are reduced: an aggregation, or ``fixed_horizon`` (``lossType: "dr_grpo"``)."""
        return _TRL_NORMALIZATION[self.loss_type] if self.loss_type is not None else self.aggregation

    @property
    def entropy_normalization(self) -> str:
        """TorchRL reduces the entropy term like the objective; TRL (any ``lossType``) takes its token
        mean."""
        return "token_mean" if self.loss_type is not None else self.aggregation

    @property
    def uses_kl_to_ref(self) -> bool:
        return self.kl_to_ref_coeff is not None and self.kl_to_ref_coeff > 0

    @property
    def uses_kl_to_inference(self) -> bool:
        return self.kl_to_inference_coeff is not None and self.kl_to_inference_coeff > 0


@dataclass(frozen=True)
class SFTLossConfig:
    """TorchRL's ``SFTLoss`` (``sft`` and ``minor_sft``)."""

    loss_function: str
    normalize_by_seq_length: bool
    kl_to_ref_coeff: float | None
    beta: float
    type: str = "sft"

    @property
    def uses_kl_to_ref(self) -> bool:
        return self.loss_function == "sft" and self.kl_to_ref_coeff is not None and self.kl_to_ref_coeff > 0


LossConfig = PolicyLossConfig | SFTLossConfig


def parse_loss_config(raw: dict[str, Any]) -> LossConfig:
    """Parses the wire config; raises ``WorkerFailure(BAD_ARGUMENTS)`` naming the field on any mistake."""
    fields = ConfigFields(raw, "loss")
    kind = fields.choice("type", LOSS_TYPES, default=None, nullable=True)
    if kind is None:
        allowed = ", ".join(f'"{t}"' for t in LOSS_TYPES)
        raise fields.fail("type", f"is required (one of {allowed})")
    config = _parse_sft(fields) if kind == "sft" else _parse_policy(fields, kind)
    fields.finish(kind)
    return config


def _parse_policy(fields: ConfigFields, kind: str) -> PolicyLossConfig:
    variant = POLICY_VARIANTS[kind]
    low, high = 0.0, 0.0
    if variant.clip is not None:
        low, high = fields.pair("clipEpsilon", default=variant.clip.default, scalar=True)
        if not (0 <= low <= variant.clip.low_max) or high < 0:
            raise fields.fail(
                "clipEpsilon",
                f"must be >= 0 with its low value {variant.clip.low_bound}, got {render([low, high])}",
            )
    dual_clip = None
    if variant.dual_clip:
        dual_clip = fields.number("dualClip", default=None, nullable=True)
        if dual_clip is not None and dual_clip <= 1 + high:
            raise fields.fail(
                "dualClip", f"must be > 1 + clipEpsilon high ({1 + high:g}), got {render(dual_clip)}"
            )
    temperature_pos, temperature_neg = 1.0, 1.05
    if variant.temperatures:
        temperature_pos = fields.number("temperaturePos", default=1.0, greater_than=0)
        temperature_neg = fields.number("temperatureNeg", default=1.05, greater_than=0)
    loss_type = fields.choice("lossType", TRL_LOSS_TYPES, default=None, nullable=True)
    if loss_type is not None and fields.has("aggregation"):
        raise fields.fail(
            "aggregation", "cannot be combined with loss.lossType (the lossType sets the normalisation)"
        )
    aggregation = fields.choice("aggregation", AGGREGATIONS, default=variant.default_aggregation)
    assert aggregation is not None
    max_completion_length = fields.integer("maxCompletionLength", default=None, minimum=1, nullable=True)
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise fields.fail("maxCompletionLength", 'is required with loss.lossType "dr_grpo"')
    if loss_type != "dr_grpo" and max_completion_length is not None:
        raise fields.fail("maxCompletionLength", 'is only used with loss.lossType "dr_grpo"')
    masking = fields.choice("maskingStrategy", MASKING_STRATEGIES, default="sft")
    assert masking is not None
    correction, is_cap = _parse_off_policy(fields, kind, variant.off_policy)
    return PolicyLossConfig(
        type=kind,
        clip_epsilon_low=low,
        clip_epsilon_high=high,
        dual_clip=dual_clip,
        kl_to_ref_coeff=fields.number("klToRefCoeff", default=None, minimum=0, nullable=True),
        kl_to_inference_coeff=fields.number("klToInferenceCoeff", default=None, minimum=0, nullable=True),
        kl_bias_correction=fields.boolean("klBiasCorrection", default=False),
        entropy_bonus=fields.boolean("entropyBonus", default=True),
        entropy_coeff=fields.number("entropyCoeff", default=0.01, minimum=0),
        aggregation=aggregation,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        masking_strategy=masking,
        temperature_pos=temperature_pos,
        temperature_neg=temperature_neg,
        off_policy_correction=correction,
        is_cap=is_cap,
    )


def _parse_off_policy(fields: ConfigFields, kind: str, supported: bool) -> tuple[str, float | None]:
    """``offPolicyCorrection`` (default ``"none"``) and its ``isCap``: ``tis`` takes a finite cap > 0 (default
    2), ``decoupled`` a finite cap > 0 or ``null`` (default: uncapped), ``none`` no cap at all. Only the
    variants whose registry entry says ``off_policy`` (GRPO, hence DAPO) accept a correction."""
    correction = fields.choice("offPolicyCorrection", OFF_POLICY_CORRECTIONS, default="none")
    assert correction is not None
    if correction != "none" and not supported:
        accepted = ", ".join(f'"{v.name}"' for v in POLICY_VARIANTS.values() if v.off_policy)
        raise fields.fail(
            "offPolicyCorrection",
            f"is only supported by loss.type {accepted} (GRPOLoss and DAPOLoss, whose per-token objective it "
            f'corrects), not by "{kind}"; got {render(correction)}',
        )
    if correction == "none":
        if fields.has("isCap"):
            raise fields.fail(
                "isCap", 'is only used with loss.offPolicyCorrection "tis" or "decoupled" (it is "none")'
            )
        return correction, None
    if correction == "tis":
        if fields.has("isCap") and fields.raw["isCap"] is None:
            raise fields.fail(
                "isCap",
                'must be a finite number > 0 with loss.offPolicyCorrection "tis" (it always truncates; '
                '"decoupled" takes null for an uncapped weight), got null',
            )
        return correction, fields.number("isCap", default=TIS_DEFAULT_CAP, greater_than=0)
    return correction, fields.number("isCap", default=None, greater_than=0, nullable=True)


def _parse_sft(fields: ConfigFields) -> SFTLossConfig:
    function = fields.choice("lossFunction", SFT_FUNCTIONS, default="sft")
    assert function is not None
    coeff = fields.number("klToRefCoeff", default=None, minimum=0, nullable=True)
    if function == "minor_sft" and coeff:
        raise fields.fail(
            "klToRefCoeff", 'must be null or 0 with loss.lossFunction "minor_sft" (its KL is implicit)'
        )
    return SFTLossConfig(
        loss_function=function,
        normalize_by_seq_length=fields.boolean("normalizeBySeqLength", default=True),
        kl_to_ref_coeff=coeff,
        beta=fields.number("beta", default=0.1, greater_than=0),
    )
