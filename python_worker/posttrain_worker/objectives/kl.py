"""The k3 KL estimator TorchRL and TRL use: ``k3(d) = exp(d) - d - 1`` with ``d = logp_other - logp``.

It is an unbiased, always non-negative estimate of ``KL(pi || pi_other)`` from samples of ``pi``; its gradient
with respect to ``logp`` is ``1 - exp(d)``.
"""

from __future__ import annotations

from torch import Tensor

from posttrain_worker.objectives.aggregate import masked


def k3(log_probs: Tensor, other_log_probs: Tensor, mask: Tensor) -> Tensor:
    """Per-token ``exp(d) - d - 1``, ``d = other - current``, 0 outside the mask (``expm1`` for precision)."""
    diff = masked(other_log_probs, mask) - masked(log_probs, mask)
    return diff.expm1() - diff
