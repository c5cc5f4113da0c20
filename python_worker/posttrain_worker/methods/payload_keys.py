"""A method's one tensordict payload, and token rows as a ragged column to send back, shared by the
methods."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain_worker.codec.types import Ragged, TensorBatch
from posttrain_worker.server.registry import CallContext


def single_batch(ctx: CallContext) -> TensorBatch:
    (batch,) = ctx.payloads
    assert isinstance(batch, TensorBatch)
    return batch


def ragged(rows: Sequence[torch.Tensor], dtype: torch.dtype) -> Ragged:
    lengths = torch.tensor([int(r.numel()) for r in rows], dtype=torch.int64)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    values = torch.cat([r.to(dtype) for r in rows]) if rows else torch.zeros(0, dtype=dtype)
    return Ragged(values=values, offsets=offsets)
