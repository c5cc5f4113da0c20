"""Reading and writing TorchRL-style nested keys of a decoded tensordict payload, shared by the methods."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain_worker.codec.keys import key_name, leaf_keys, lookup
from posttrain_worker.codec.types import Ragged, TensorBatch
from posttrain_worker.protocol.errors import BAD_PAYLOAD, WorkerFailure
from posttrain_worker.server.registry import CallContext


def missing_key(method: str, batch: TensorBatch, expected: Sequence[tuple[str, ...]]) -> WorkerFailure:
    wanted = " or ".join(key_name(k) for k in expected)
    present = leaf_keys(batch.columns)
    return WorkerFailure(
        BAD_PAYLOAD,
        f"{method}: the tensordict has no {wanted} key; present keys: {', '.join(present) or 'none'}",
        {"expected": [list(k) for k in expected], "present": present},
    )


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


__all__ = ["key_name", "leaf_keys", "lookup", "missing_key", "ragged", "single_batch"]
