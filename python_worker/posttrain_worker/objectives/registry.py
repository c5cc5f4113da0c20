"""The policy-gradient loss variants, one entry each: the only place a variant's name is spelt.

An entry holds what differs between GRPO (with DAPO's options), CISPO, GSPO and SAPO: the per-token objective
(:mod:`.variants`), the default and the bounds of ``clipEpsilon`` (none for SAPO, which gates instead of
clipping), the default aggregation, and which variant-only fields the config accepts (``dualClip``, the SAPO
temperatures, and the off-policy correction, which only GRPO's per-token objective takes). ``config.py``
parses by it and ``grpo.py`` computes by it; a new variant is one entry here plus its objective.

Usage::

    variant = POLICY_VARIANTS["cispo"]
    variant.clip.default  # (1.0, 4.0)
    surrogate = variant.surrogate(config, log_ratio, log_probs, advantages, mask)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from posttrain_worker.objectives import variants
from posttrain_worker.objectives.clipping import Surrogate

if TYPE_CHECKING:
    from posttrain_worker.objectives.config import PolicyLossConfig

SurrogateFn = Callable[["PolicyLossConfig", Tensor, Tensor, Tensor, Tensor], Surrogate]
"""``(config, log_ratio, log_probs, advantages, mask) -> Surrogate``."""


@dataclass(frozen=True)
class ClipRule:
    """``clipEpsilon`` of a variant: its default ``(low, high)`` and the largest low value it accepts."""

    default: tuple[float, float]
    low_may_be_one: bool = False
    """``low = 1`` drops the lower bound of the ratio (CISPO); elsewhere ``1 - low`` must stay positive."""

    @property
    def low_max(self) -> float:
        return 1.0 if self.low_may_be_one else math.nextafter(1.0, 0.0)

    @property
    def low_bound(self) -> str:
        """The rule on the low value as error messages spell it."""
        return "<= 1" if self.low_may_be_one else "< 1"


@dataclass(frozen=True)
class PolicyVariant:
    """One loss of the GRPO family, as ``loss.type`` names it."""

    name: str
    surrogate: SurrogateFn
    default_aggregation: str
    clip: ClipRule | None
    """``None``: the variant has no clip and ``clipEpsilon`` is not one of its fields."""
    dual_clip: bool = False
    """Accepts ``dualClip`` (DAPO's bound on the loss of tokens with a negative advantage)."""
    temperatures: bool = False
    """Accepts ``temperaturePos`` / ``temperatureNeg`` (SAPO's gate)."""
    off_policy: bool = False
    """Accepts ``offPolicyCorrection`` ``"tis"`` / ``"decoupled"`` and ``isCap`` (the off-policy
    corrections of the GRPO per-token objective, applied in :mod:`.grpo`)."""


POLICY_VARIANTS: dict[str, PolicyVariant] = {
    variant.name: variant
    for variant in (
        PolicyVariant(
            "grpo", variants.grpo, "token_mean", ClipRule((0.2, 0.2)), dual_clip=True, off_policy=True
        ),
        PolicyVariant("cispo", variants.cispo, "token_mean", ClipRule((1.0, 4.0), low_may_be_one=True)),
        PolicyVariant("gspo", variants.gspo, "prompt_mean", ClipRule((3e-4, 4e-4))),
        PolicyVariant("sapo", variants.sapo, "token_mean", None, temperatures=True),
    )
}

POLICY_TYPES: tuple[str, ...] = tuple(POLICY_VARIANTS)
"""The ``loss.type`` values of the policy-gradient losses, in the order messages list them."""
