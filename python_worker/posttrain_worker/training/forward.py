"""The policy's forward for training: per-token log-probs with gradient, and the per-token entropy.

It goes through the same code as scoring (``models/scoring.py``: right padding, positions from 0, raw logits
to float32, ``gather - logsumexp``), so on the same rows, weights and device the log-probs a trainer sees
equal ``score``'s bit for bit. Entry ``t`` is about ``tok_t`` given ``tok_<t``; column 0 and the padding
are 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.models.scoring import forward_logits, pad_right, token_log_probs


@dataclass(frozen=True)
class PolicyOutput:
    log_probs: torch.Tensor
    """``[B, T]`` float32, with gradient when the forward ran with it; 0 at column 0 and on the padding."""
    entropy: torch.Tensor | None
    """``[B, T]`` float32 entropy of the distribution that predicted each token (column 0 is 0)."""
    attention: torch.Tensor
    """``[B, T]`` bool: real tokens."""


def token_entropy(logits: torch.Tensor, width: int) -> torch.Tensor:
    """``[n, width]`` float32: entry ``t`` is the entropy of the distribution at position ``t - 1``;
    ``logits`` covers the last ``K`` of the ``width`` positions, and the columns no kept position predicts
    (column 0 at least) are 0."""
    shifted = logits[:, :-1, :].float()
    log_p = torch.log_softmax(shifted, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(dim=-1)
    missing = width - shifted.shape[1]
    zeros = torch.zeros((logits.shape[0], missing), dtype=torch.float32, device=logits.device)
    return torch.cat([zeros, entropy], dim=-1)


def autocast_context(device: torch.device, autocast: str | None) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast around the model's forward on CUDA; on other devices nothing (the model's own dtype)."""
    if autocast == "bfloat16" and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def policy_forward(
    model: Any,
    rows: Sequence[torch.Tensor],
    *,
    pad_id: int,
    device: torch.device,
    want_entropy: bool,
    autocast: str | None = None,
    first_column: int = 1,
) -> PolicyOutput:
    """One forward over ``rows`` (int64 1-D CPU tensors, each at least one token), right-padded. Only
    columns from ``first_column`` on are computed (the loss reads no earlier one): the rest are 0."""
    input_ids, attention = pad_right(rows, pad_id)
    input_ids = input_ids.to(device)
    attention = attention.to(device)
    with autocast_context(device, autocast):
        logits = forward_logits(model, input_ids, attention, first_column=first_column)
    mask = attention.bool()
    log_probs = token_log_probs(logits, input_ids) * mask
    entropy = token_entropy(logits, input_ids.shape[1]) * mask if want_entropy else None
    return PolicyOutput(log_probs, entropy, mask)
