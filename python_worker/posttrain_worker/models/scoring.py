"""Teacher-forced log-probabilities of whole sequences (``score``), TorchRL's convention.

For a sequence ``tok_0 .. tok_{L-1}`` the result has ``L`` float32 entries: entry ``t`` is
``log p(tok_t | tok_<t)`` (``log_softmax`` of the raw logits at position ``t - 1``), and entry 0 is 0 (the
first token has no context). Each micro-batch is right-padded; the attention mask hides the padding and
positions count from 0 in every row, so a row's values do not depend on the rows beside it (up to float
rounding).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch


def pad_right(sequences: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, both int64 ``[n, max length]`` on the CPU, rows right-padded."""
    if not sequences:
        return torch.zeros((0, 0), dtype=torch.int64), torch.zeros((0, 0), dtype=torch.int64)
    input_ids = torch.nn.utils.rnn.pad_sequence(
        [s.to(torch.int64) for s in sequences], batch_first=True, padding_value=pad_id
    )
    lengths = torch.tensor([int(s.numel()) for s in sequences], dtype=torch.int64)
    attention = (torch.arange(input_ids.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    return input_ids, attention


@functools.cache
def _class_accepts_logits_to_keep(cls: type) -> bool:
    try:
        params = inspect.signature(cls.forward).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return "logits_to_keep" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _accepts_logits_to_keep(model: Any) -> bool:
    """Whether ``model.forward`` takes ``logits_to_keep`` (Hugging Face causal LMs; peft passes it on); looked
    up once per model class."""
    return _class_accepts_logits_to_keep(type(model))


def forward_logits(
    model: Any, input_ids: torch.Tensor, attention: torch.Tensor, *, first_column: int = 1
) -> torch.Tensor:
    """The raw logits of right-padded rows, positions counting from 0 in every row: ``[n, T, V]``, or only
    the last ``T - first_column + 1`` positions (those that predict tokens ``first_column..T-1``, plus the
    last one) when the model can skip the others, which saves the vocabulary projection of a long prompt."""
    width = input_ids.shape[1]
    # One row of positions broadcast over the batch (right padding: every row starts at 0), so the rotary
    # tables are computed once rather than once per row.
    positions = torch.arange(width, device=input_ids.device).unsqueeze(0)
    keep = width - max(first_column, 1) + 1
    extra: dict[str, Any] = {}
    if keep < width and _accepts_logits_to_keep(model):
        extra["logits_to_keep"] = keep
    return model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=False,
        return_dict=True,
        **extra,
    ).logits


def token_log_probs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """``[n, T]`` float32: entry ``t`` is ``log p(tok_t | tok_<t)`` from the logits of position ``t - 1``;
    column 0 is 0. ``logits`` covers the last ``K`` positions (``K = T`` for all of them); the columns no
    kept position predicts are 0 too.

    Scoring and training both go through here, so they agree bit for bit on the same logits."""
    n, width = input_ids.shape
    start = width - logits.shape[1] + 1
    shifted = logits[:, :-1, :].float()
    targets = input_ids[:, start:].unsqueeze(-1)
    picked = shifted.gather(-1, targets).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    zeros = torch.zeros((n, start), dtype=torch.float32, device=input_ids.device)
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
