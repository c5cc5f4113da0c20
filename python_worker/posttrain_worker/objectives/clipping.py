"""The PPO-style clipped surrogate shared by GRPO, DAPO and GSPO, with DAPO's dual clip.

With ``r = exp(lw)`` and ``r_clip = exp(clamp(lw, log(1 - eps_low), log(1 + eps_high)))`` (TorchRL clamps
the log weight), the per-token loss is ``-min(r * A, r_clip * A)``; with a dual clip ``c`` it becomes
``min(-min(r * A, r_clip * A), -c * A)`` where ``A < 0``, which bounds the loss of a very off-policy token
with a negative advantage (TRL's ``delta`` is the same bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Surrogate:
    """A variant's per-token objective before reduction."""

    per_token: Tensor
    """Loss per token, ``[B, T]`` or ``[B, 1]`` (one value per sequence, broadcast over its tokens)."""
    clipped: Tensor | None
    """Bool, same shape: where the ratio was clipped (``clip_fraction``); ``None`` for variants without a
    clip."""
    ratio: Tensor
    """The importance ratio the variant uses, with grad (``[B, T]`` or ``[B, 1]``), for the KL bias
    correction."""


def log_clip_bounds(eps_low: float, eps_high: float) -> tuple[float, float]:
    """``(log(1 - eps_low), log(1 + eps_high))``; ``eps_low = 1`` gives no lower bound."""
    low = -math.inf if eps_low >= 1.0 else math.log1p(-eps_low)
    return low, math.log1p(eps_high)


def clipped_surrogate(
    log_weight: Tensor,
    advantages: Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
) -> Surrogate:
    """``-min(r * A, r_clip * A)`` (plus the dual clip) for log weights ``lw`` of any shape broadcastable
    with A."""
    low, high = log_clip_bounds(eps_low, eps_high)
    log_weight_clip = log_weight.clamp(low, high)
    ratio = log_weight.exp()
    loss = -torch.minimum(ratio * advantages, log_weight_clip.exp() * advantages)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return Surrogate(per_token=loss, clipped=log_weight_clip != log_weight, ratio=ratio)
