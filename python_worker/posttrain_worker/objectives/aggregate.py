"""Reductions of per-token terms with the full batch's denominators (:class:`~.batch.LossNorm`).

Every reduction is a sum over the micro-batch divided by a number that depends only on the full batch, so
it is additive over micro-batches:

- ``token_mean``: sum over masked tokens / ``norm.num_tokens``
- ``prompt_mean``: sum over rows of (row's masked sum / row's token count) / ``norm.num_sequences``
- ``seq_mean_token_sum``: sum over masked tokens / ``norm.num_sequences`` (verl's: each sequence's token sum,
  averaged over the sequences)
- ``fixed_horizon``: sum over masked tokens / (``norm.num_sequences`` x ``max_completion_length``) (TRL's
dr_grpo)
- ``none``: sum over masked tokens (the per-token values are returned separately)
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain_worker.objectives.batch import LossNorm


def masked(values: Tensor, mask: Tensor) -> Tensor:
    """``values`` broadcast to the mask's ``[B, T]`` shape, with 0 outside the mask (select, not multiply:
    a NaN outside the mask stays out of both the value and the gradient)."""
    values = values.expand(mask.shape)
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))


def aggregate(
    values: Tensor,
    mask: Tensor,
    norm: LossNorm,
    how: str,
    *,
    max_completion_length: int | None = None,
) -> Tensor:
    """Reduces per-token ``values`` (``[B, T]``, or ``[B, 1]`` broadcast over the tokens) to a scalar."""
    kept = masked(values, mask)
    if how == "token_mean":
        return kept.sum() / max(norm.num_tokens, 1)
    if how == "prompt_mean":
        counts = mask.sum(-1).clamp_min(1).to(kept.dtype)
        return (kept.sum(-1) / counts).sum() / max(norm.num_sequences, 1)
    if how == "seq_mean_token_sum":
        return kept.sum() / max(norm.num_sequences, 1)
    if how == "fixed_horizon":
        assert max_completion_length is not None
        return kept.sum() / (max(norm.num_sequences, 1) * max_completion_length)
    if how == "none":
        return kept.sum()
    raise ValueError(f"unknown aggregation {how!r}")


def token_mean(values: Tensor, mask: Tensor, norm: LossNorm) -> Tensor:
    """Sum over masked tokens / ``norm.num_tokens`` (every per-token metric)."""
    return aggregate(values, mask, norm, "token_mean")
