"""Per-token objectives of GRPO's variants: CISPO, GSPO and SAPO (formulas in docs/losses.md).

Each takes the masked log-ratio ``lw = logp - logp_old`` (0 outside the mask), the masked current log-probs
and the advantages (``[B, 1]`` or ``[B, T]``), and returns a :class:`~.clipping.Surrogate`. Which
``loss.type`` runs which function is :data:`~.registry.POLICY_VARIANTS`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from posttrain_worker.objectives.clipping import Surrogate, clipped_surrogate, log_clip_bounds

if TYPE_CHECKING:  # the config module parses by the registry, which lists these functions
    from posttrain_worker.objectives.config import PolicyLossConfig


def grpo(
    config: PolicyLossConfig, log_ratio: Tensor, log_probs: Tensor, adv: Tensor, mask: Tensor
) -> Surrogate:
    """GRPO / DAPO: the clipped surrogate on per-token ratios, with the optional dual clip."""
    del log_probs, mask
    return clipped_surrogate(
        log_ratio, adv, config.clip_epsilon_low, config.clip_epsilon_high, config.dual_clip
    )


def cispo(
    config: PolicyLossConfig, log_ratio: Tensor, log_probs: Tensor, adv: Tensor, mask: Tensor
) -> Surrogate:
    """CISPO: ``-sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * logp``. The clipped ratio is a constant
    weight, so every token keeps its gradient ``-w * A * grad(logp)``, clipped or not."""
    del mask
    low, high = log_clip_bounds(config.clip_epsilon_low, config.clip_epsilon_high)
    log_weight_clip = log_ratio.clamp(low, high)
    weight = log_weight_clip.exp().detach()
    return Surrogate(
        per_token=-weight * adv * log_probs, clipped=log_weight_clip != log_ratio, ratio=log_ratio.exp()
    )


def gspo(
    config: PolicyLossConfig, log_ratio: Tensor, log_probs: Tensor, adv: Tensor, mask: Tensor
) -> Surrogate:
    """GSPO: the clipped surrogate on the sequence ratio ``s = exp(mean over the row's tokens of lw)``; the
    result is one value per sequence (``[B, 1]``), or per token when the advantages are per token."""
    del log_probs
    counts = mask.sum(-1, keepdim=True).clamp_min(1).to(log_ratio.dtype)
    sequence_log_ratio = log_ratio.sum(-1, keepdim=True) / counts
    return clipped_surrogate(sequence_log_ratio, adv, config.clip_epsilon_low, config.clip_epsilon_high)


def sapo(
    config: PolicyLossConfig, log_ratio: Tensor, log_probs: Tensor, adv: Tensor, mask: Tensor
) -> Surrogate:
    """SAPO: a smooth gate instead of a clip, ``-(4 / tau) * sigmoid(tau * (r - 1)) * A`` with ``tau`` =
    ``temperaturePos`` where ``A > 0`` and ``temperatureNeg`` elsewhere."""
    del log_probs, mask
    ratio = log_ratio.exp()
    tau = torch.where(
        adv > 0,
        torch.tensor(config.temperature_pos, dtype=ratio.dtype, device=ratio.device),
        torch.tensor(config.temperature_neg, dtype=ratio.dtype, device=ratio.device),
    )
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    return Surrogate(per_token=-gate * adv, clipped=None, ratio=ratio)
