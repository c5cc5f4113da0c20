"""Losses of the GRPO family and SFT, computed in the worker from configs sent by TypeScript
(``sdk/objectives/losses.ts``). Pure torch: nothing here touches sockets. The trainer's entry points are in
:mod:`posttrain_worker.objectives.api`; formulas and parity notes are in docs/losses.md.
"""

from posttrain_worker.objectives.api import (
    ESS_MOMENTS,
    LossBatch,
    LossConfig,
    LossNorm,
    LossOutput,
    PolicyLossConfig,
    SFTLossConfig,
    batch_norm,
    compute_loss,
    describe,
    finalize_metrics,
    needs_advantages,
    needs_entropy,
    needs_old_log_probs,
    needs_ref_log_probs,
    parse_loss_config,
)
from posttrain_worker.objectives.masks import loss_mask

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
    "loss_mask",
    "needs_advantages",
    "needs_entropy",
    "needs_old_log_probs",
    "needs_ref_log_probs",
    "parse_loss_config",
]
