"""The data model of one TensorDict on the wire (docs/protocol.md), on the torch side.

A ``TensorBatch`` mirrors the TypeScript ``WireBatch``: ordered columns that share ``batch_size``.
Dense leaves are ``torch.Tensor`` of shape ``[*batch_size, *row_shape]``; ragged leaves are ``Ragged``;
string leaves are ``list[str]`` with one entry per row; conversation leaves are ``HistoryColumn``; nested
TensorDicts are ``dict[str, Column]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Ragged:
    """A ragged leaf: row ``i`` is ``values[offsets[i]:offsets[i + 1]]`` (shape ``[L_i, *values.shape[1:]]``).

    ``offsets`` is a 1-D integer tensor with ``rows + 1`` entries.
    """

    values: torch.Tensor
    offsets: torch.Tensor

    @property
    def rows(self) -> int:
        return int(self.offsets.numel()) - 1

    def row(self, i: int) -> torch.Tensor:
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])]


@dataclass(frozen=True)
class HistoryColumn:
    """A conversation leaf (TorchRL's ``History``): one list of chat messages per row, rows flattened over the
    batch dimensions (row-major), like string leaves.

    Each message is a dict with ``role`` and ``content`` (str) and, only when present, ``name`` (str),
    ``tool_calls`` (the parsed JSON list), ``tool_responses`` (list[str]) and ``is_complete`` (``False`` only:
    absent means complete). ``decode_batch`` gives exactly these keys. ``encode_batch`` also accepts ``None``
    for an optional key, and ``name=""``, ``tool_responses=[]``, ``is_complete=True``: these travel as the
    absent values and decode as absent (docs/protocol.md, "History leaves").
    """

    rows: list[list[dict[str, Any]]]


Column = torch.Tensor | Ragged | HistoryColumn | list[str] | dict[str, "Column"]


@dataclass
class TensorBatch:
    """Ordered columns sharing a batch size; ``rows == prod(batch_size)`` (1 for ``()``)."""

    batch_size: tuple[int, ...]
    columns: dict[str, Column] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return math.prod(self.batch_size)


DTYPE_TO_TORCH: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}

TORCH_TO_DTYPE: dict[torch.dtype, str] = {v: k for k, v in DTYPE_TO_TORCH.items()}
