"""The policy's training forward for GRPO groups: rows that start with the same prompt run it once.

A GRPO batch holds each prompt ``groupSize`` times in a row, with a different completion each time. With
causal attention the prompt's keys and values do not depend on what follows, so the forward of a group runs
in two parts: the shared prefix once per group (keeping its KV cache, with gradient), then every row's own
tokens on that cache (copied to the group's rows). The gradient reaching the prefix is the sum over the
group's rows, as with one forward per row, so the loss and the update are those of the plain forward up to
float rounding; the prompt's share of the compute is divided by the group size.

The prefix of a row is its tokens before ``c - 1``, ``c`` being the first column its loss reads (the position
``c - 1`` is the one that predicts it, so it is computed with the row's own tokens). Consecutive rows with the
same ``c`` and the same prefix form a group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.models.generation import cache_rows_copyable, forward_with_cache, left_padded
from posttrain_worker.models.scoring import pad_right


@dataclass(frozen=True)
class PrefixGroups:
    first_columns: list[int]
    """Per row, the first column the loss reads (at least 2: the prefix holds one token or more)."""
    starts: list[int]
    """The first row of each group."""
    row_group: torch.Tensor
    """``[B]`` int64: the group of each row."""


def find_groups(rows: Sequence[torch.Tensor], mask: torch.Tensor) -> PrefixGroups | None:
    """The groups of consecutive rows sharing a prefix, or ``None`` when sharing would save nothing (no group
    of two rows or more) or cannot apply (a row whose loss starts before its third token)."""
    lengths = [int(r.numel()) for r in rows]
    selected = mask.any(dim=1).tolist()
    first = mask.to(torch.int8).argmax(dim=1).tolist()
    columns = [int(f) if s else length for f, s, length in zip(first, selected, lengths, strict=True)]
    if min(columns) < 2:
        return None
    starts: list[int] = []
    row_group: list[int] = []
    for i, (row, c) in enumerate(zip(rows, columns, strict=True)):
        if starts:
            head = rows[starts[-1]]
            if columns[starts[-1]] == c and torch.equal(head[: c - 1], row[: c - 1]):
                row_group.append(len(starts) - 1)
                continue
        starts.append(i)
        row_group.append(len(starts) - 1)
    if len(starts) == len(rows):
        return None
    return PrefixGroups(columns, starts, torch.tensor(row_group, dtype=torch.int64))


def shared_prefix_logits(
    model: Any, rows: Sequence[torch.Tensor], groups: PrefixGroups, *, pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(logits [B, S, V], suffix ids [B, S])``: row ``r``'s suffix is its tokens from ``c_r - 1`` on (right
    padded to ``S``), and ``logits[r, j]`` predicts suffix token ``j + 1``. ``None`` when the model's cache
    cannot be copied row-wise (the caller then runs the plain forward)."""
    prefixes = [rows[s][: groups.first_columns[s] - 1] for s in groups.starts]
    ids_p, att_p, pos_p, len_p = left_padded(prefixes, pad_id, device)
    _, cache = forward_with_cache(
        model, input_ids=ids_p, attention_mask=att_p, position_ids=pos_p, logits_to_keep=1
    )
    if not cache_rows_copyable(cache):
        return None
    index = groups.row_group.to(device)
    cache.batch_select_indices(index)  # each row gets its group's prefix keys and values (with gradient)
    suffixes = [row[c - 1 :] for row, c in zip(rows, groups.first_columns, strict=True)]
    ids_s, att_s = pad_right(suffixes, pad_id)
    ids_s, att_s = ids_s.to(device), att_s.to(device)
    attention = torch.cat([att_p[index], att_s], dim=1)
    offsets = torch.arange(ids_s.shape[1], device=device).unsqueeze(0)
    positions = len_p.to(device)[index].unsqueeze(1) + offsets
    logits = model(
        input_ids=ids_s,
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        return_dict=True,
    ).logits
    return logits, ids_s


def place(values: torch.Tensor, first_columns: Sequence[int], width: int) -> torch.Tensor:
    """``[B, width]``: ``values[r, j]`` (about suffix token ``j + 1``) at column ``first_columns[r] + j``, 0
    elsewhere; differentiable in ``values``."""
    rows, count = values.shape
    starts = torch.tensor(list(first_columns), dtype=torch.int64, device=values.device).unsqueeze(1)
    index = starts + torch.arange(count, device=values.device).unsqueeze(0)
    out = values.new_zeros((rows, width + count))
    return out.scatter(1, index, values)[:, :width]
