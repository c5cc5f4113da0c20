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


def score_batch(
    model: Any, sequences: Sequence[torch.Tensor], *, pad_id: int, device: torch.device
) -> list[torch.Tensor]:
    """Log-probs of one micro-batch of sequences (int64 1-D CPU tensors; empty ones give empty results)."""
    lengths = [int(s.numel()) for s in sequences]
    width = max(lengths, default=0)
    if width == 0:
        return [torch.zeros(0, dtype=torch.float32) for _ in sequences]
    n = len(sequences)
    input_ids = torch.full((n, width), pad_id, dtype=torch.int64)
    attention = torch.zeros((n, width), dtype=torch.int64)
    for i, seq in enumerate(sequences):
        input_ids[i, : seq.numel()] = seq
        attention[i, : seq.numel()] = 1
    input_ids = input_ids.to(device)
    attention = attention.to(device)
    positions = torch.arange(width, device=device).expand(n, width)
    logits = (
        model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=False,
            return_dict=True,
        )
        .logits[:, :-1, :]
        .float()
    )
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    del logits
    full = torch.cat([torch.zeros((n, 1), dtype=torch.float32, device=device), picked], dim=-1).cpu()
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
