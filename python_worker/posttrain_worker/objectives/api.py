"""The losses' contract with the trainer: batches in, a scalar loss and additive metrics out.

Pure torch, no sockets. The trainer parses the wire config once (:func:`parse_loss_config`), computes a
:class:`LossNorm` from the mask of the WHOLE batch (:func:`batch_norm`), then calls :func:`compute_loss` on
each micro-batch and backpropagates each ``loss``: because every denominator comes from the norm, the sum of
the micro-batch losses (and of their gradients) equals the full-batch loss. Metrics are additive the same way;
sum them over micro-batches, then call :func:`finalize_metrics` once (it turns the ESS moments into ``ESS``).

Typical use::

    config = parse_loss_config(raw)
    norm = batch_norm(config, full_mask)
    sums: dict[str, Tensor] = {}
    for batch in micro_batches:
        out = compute_loss(config, batch, norm)
        out.loss.backward()
        for k, v in out.metrics.items():
            sums[k] = sums.get(k, 0) + v
    metrics = finalize_metrics(sums, norm)
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from posttrain_worker.objectives.batch import ESS_MOMENTS, LossBatch, LossNorm, LossOutput
from posttrain_worker.objectives.config import (
    LossConfig,
    PolicyLossConfig,
    SFTLossConfig,
    parse_loss_config,
)
from posttrain_worker.objectives.grpo import policy_loss
from posttrain_worker.objectives.sft import sft_loss


def batch_norm(config: LossConfig, mask: Tensor) -> LossNorm:
    """The :class:`LossNorm` of a full batch from its loss mask ``[B, T]`` (bool)."""
    del config  # every loss uses the same two denominators today
    if mask.ndim != 2:
        raise ValueError(f"mask must be [B, T], got shape {tuple(mask.shape)}")
    return LossNorm(num_tokens=int(mask.sum().item()), num_sequences=int(mask.shape[0]))


def compute_loss(config: LossConfig, batch: LossBatch, norm: LossNorm) -> LossOutput:
    """The loss of one micro-batch. Raises ``WorkerFailure(BAD_PAYLOAD)`` when a tensor it needs is missing,
    misshapen or not finite under the mask."""
    if isinstance(config, SFTLossConfig):
        return sft_loss(config, batch, norm)
    return policy_loss(config, batch, norm)


def finalize_metrics(summed: dict[str, Tensor], norm: LossNorm) -> dict[str, float]:
    """Metrics summed over the micro-batches of one batch, as floats, with ``ESS`` (TorchRL's
    ``exp(2·LSE(lw) - LSE(2·lw)) / |mask|``) in place of its moments."""
    out = {key: float(value) for key, value in summed.items() if key not in ESS_MOMENTS}
    if all(key in summed for key in ESS_MOMENTS):
        sum_w, sum_w2 = float(summed["ess_sum_w"]), float(summed["ess_sum_w2"])
        out["ESS"] = (sum_w * sum_w / sum_w2) / max(norm.num_tokens, 1) if sum_w2 > 0 else 0.0
    return out


def needs_old_log_probs(config: LossConfig) -> bool:
    """Whether :attr:`LossBatch.old_log_probs` is required (every policy-gradient loss)."""
    return isinstance(config, PolicyLossConfig)


def needs_ref_log_probs(config: LossConfig) -> bool:
    """Whether :attr:`LossBatch.ref_log_probs` is required (a KL to the reference, or ``minor_sft``)."""
    if isinstance(config, SFTLossConfig):
        return config.loss_function == "minor_sft" or config.uses_kl_to_ref
    return config.uses_kl_to_ref


def needs_entropy(config: LossConfig) -> bool:
    """Whether :attr:`LossBatch.entropy` is required (``entropyBonus``)."""
    return isinstance(config, PolicyLossConfig) and config.entropy_bonus


def needs_advantages(config: LossConfig) -> bool:
    """Whether :attr:`LossBatch.advantages` is required (every policy-gradient loss)."""
    return isinstance(config, PolicyLossConfig)


def describe(config: LossConfig) -> dict[str, Any]:
    """The parsed config as a plain dict (for logs and checkpoints)."""
    return dict(config.__dict__)


__all__ = [
    "ESS_MOMENTS",
    "LossBatch",
    "LossConfig",
    "LossNorm",
    "LossOutput",
    "PolicyLossConfig",
    "SFTLossConfig",
    "batch_norm",
    "compute_loss",
    "describe",
    "finalize_metrics",
    "needs_advantages",
    "needs_entropy",
    "needs_old_log_probs",
    "needs_ref_log_probs",
    "parse_loss_config",
]
