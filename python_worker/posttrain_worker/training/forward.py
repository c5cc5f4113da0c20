"""The policy's forward for training: per-token log-probs with gradient, and the per-token entropy.

It goes through the same code as scoring (``models/scoring.py``: right padding, positions from 0, raw logits
to float32, ``gather - logsumexp``), so on the same rows, weights and device the log-probs a trainer sees
equal ``score``'s bit for bit; rows of a GRPO group share their prompt's forward (``shared_prefix.py``), which
equals it up to float rounding. Entry ``t`` is about ``tok_t`` given ``tok_<t``; column 0 and the padding
are 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.models.scoring import forward_logits, pad_right, token_log_probs
from posttrain_worker.training.shared_prefix import find_groups, place, shared_prefix_logits


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


def first_masked_column(mask: torch.Tensor) -> int:
    """The first column of ``[n, T]`` the loss mask selects in any row (``T`` when none)."""
    columns = torch.nonzero(mask.any(dim=0))
    return int(columns[0]) if columns.numel() > 0 else int(mask.shape[1])


def policy_forward(
    model: Any,
    rows: Sequence[torch.Tensor],
    *,
    pad_id: int,
    device: torch.device,
    want_entropy: bool,
    loss_mask: torch.Tensor,
    autocast: str | None = None,
    share_prefix: bool = True,
) -> PolicyOutput:
    """One forward over ``rows`` (int64 1-D CPU tensors, each at least one token) for a loss that reads
    ``loss_mask`` (``[n, T]`` bool, right padding). Rows of one GRPO group share the forward of their prompt
    (:mod:`.shared_prefix`); otherwise the rows run right-padded, with logits only from the first column the
    loss reads. Columns the loss does not read may be 0. ``share_prefix=False`` always runs the one padded
    forward (a trainer group: DDP and FSDP need one forward of the wrapped module per micro-batch)."""
    input_ids, attention = pad_right(rows, pad_id)
    input_ids = input_ids.to(device)
    attention = attention.to(device)
    mask = attention.bool()
    width = int(input_ids.shape[1])
    groups = find_groups(rows, loss_mask.cpu()) if share_prefix else None
    with autocast_context(device, autocast):
        shared = shared_prefix_logits(model, rows, groups, pad_id=pad_id, device=device) if groups else None
        if shared is None:
            logits = forward_logits(model, input_ids, attention, first_column=first_masked_column(loss_mask))
    if shared is not None and groups is not None:
        logits, suffix_ids = shared
        # Suffix column j (j >= 1) is the row's column c - 1 + j: drop column 0, place the rest from c on.
        log_probs = place(token_log_probs(logits, suffix_ids)[:, 1:], groups.first_columns, width) * mask
        entropy = (
            place(token_entropy(logits, int(suffix_ids.shape[1]))[:, 1:], groups.first_columns, width) * mask
            if want_entropy
            else None
        )
        return PolicyOutput(log_probs, entropy, mask)
    log_probs = token_log_probs(logits, input_ids) * mask
    entropy = token_entropy(logits, width) * mask if want_entropy else None
    return PolicyOutput(log_probs, entropy, mask)
