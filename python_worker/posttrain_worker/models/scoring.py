"""Teacher-forced log-probabilities of whole sequences (``score``), TorchRL's convention.

For a sequence ``tok_0 .. tok_{L-1}`` the result has ``L`` float32 entries: entry ``t`` is
``log p(tok_t | tok_<t)`` (``log_softmax`` of the raw logits at position ``t - 1``), and entry 0 is 0 (the
first token has no context). Each micro-batch is right-padded; the attention mask hides the padding and
positions count from 0 in every row, so a row's values do not depend on the rows beside it (up to float
rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def pad_right(sequences: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, both int64 ``[n, max length]`` on the CPU, rows right-padded."""
    width = max((int(s.numel()) for s in sequences), default=0)
    n = len(sequences)
    input_ids = torch.full((n, width), pad_id, dtype=torch.int64)
    attention = torch.zeros((n, width), dtype=torch.int64)
    for i, seq in enumerate(sequences):
        input_ids[i, : seq.numel()] = seq
        attention[i, : seq.numel()] = 1
    return input_ids, attention


def forward_logits(model: Any, input_ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """The raw logits ``[n, T, V]`` of right-padded rows, positions counting from 0 in every row."""
    n, width = input_ids.shape
    positions = torch.arange(width, device=input_ids.device).expand(n, width)
    return model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=False,
        return_dict=True,
    ).logits


def token_log_probs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """``[n, T]`` float32: entry ``t`` is ``log p(tok_t | tok_<t)`` from ``logits[:, t - 1]``; column 0 is 0.

    Scoring and training both go through here, so they agree bit for bit on the same logits."""
    shifted = logits[:, :-1, :].float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = shifted.gather(-1, targets).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    zeros = torch.zeros((input_ids.shape[0], 1), dtype=torch.float32, device=input_ids.device)
    return torch.cat([zeros, picked], dim=-1)


def score_batch(
    model: Any, sequences: Sequence[torch.Tensor], *, pad_id: int, device: torch.device
) -> list[torch.Tensor]:
    """Log-probs of one micro-batch of sequences (int64 1-D CPU tensors; empty ones give empty results)."""
    lengths = [int(s.numel()) for s in sequences]
    if max(lengths, default=0) == 0:
        return [torch.zeros(0, dtype=torch.float32) for _ in sequences]
    input_ids, attention = pad_right(sequences, pad_id)
    input_ids = input_ids.to(device)
    attention = attention.to(device)
    logits = forward_logits(model, input_ids, attention)
    full = token_log_probs(logits, input_ids).cpu()
    del logits
    return [full[i, :length].clone() for i, length in enumerate(lengths)]


def score(
    model: Any,
    sequences: Sequence[torch.Tensor],
    *,
    pad_id: int,
    micro_batch_size: int | None = None,
    device: torch.device | None = None,
    check_cancelled: Callable[[], None] = lambda: None,
) -> list[torch.Tensor]:
    """:func:`score_batch` over ``micro_batch_size`` rows at a time (all of them when ``None``)."""
    if device is None:
        device = next(model.parameters()).device
    size = micro_batch_size or max(len(sequences), 1)
    results: list[torch.Tensor] = []
    with torch.inference_mode():
        for start in range(0, len(sequences), size):
            check_cancelled()
            results.extend(score_batch(model, sequences[start : start + size], pad_id=pad_id, device=device))
    return results
