"""Reading and writing TorchRL-style nested keys of a decoded tensordict payload, shared by the methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from posttrain_worker.codec.types import Column, Ragged, TensorBatch
from posttrain_worker.protocol.errors import BAD_PAYLOAD, WorkerFailure
from posttrain_worker.server.registry import CallContext


def key_name(key: Sequence[str]) -> str:
    return "(" + ", ".join(f'"{k}"' for k in key) + ")"


def leaf_keys(columns: dict[str, Column], prefix: tuple[str, ...] = ()) -> list[str]:
    keys: list[str] = []
    for name, column in columns.items():
        if isinstance(column, dict):
            keys.extend(leaf_keys(column, (*prefix, name)))
        else:
            keys.append(key_name((*prefix, name)))
    return keys


def lookup(batch: TensorBatch, key: tuple[str, ...]) -> Column | None:
    node: Any = batch.columns
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return None if isinstance(node, dict) else node


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
