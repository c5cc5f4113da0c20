"""TorchRL-style nested keys (``("tokens", "full")``) of a decoded :class:`TensorBatch`: lookup, naming and
the failure of a missing key, shared by the worker methods, models and training."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posttrain_worker.codec.types import Column, TensorBatch
from posttrain_worker.errors import BAD_PAYLOAD, WorkerFailure


def key_name(key: Sequence[str]) -> str:
    """``("tokens", "full")`` as it reads in error messages: ``("tokens", "full")``."""
    return "(" + ", ".join(f'"{k}"' for k in key) + ")"


def leaf_keys(columns: dict[str, Column], prefix: tuple[str, ...] = ()) -> list[str]:
    """The names of every leaf under ``columns``, nested keys spelt with :func:`key_name`."""
    keys: list[str] = []
    for name, column in columns.items():
        if isinstance(column, dict):
            keys.extend(leaf_keys(column, (*prefix, name)))
        else:
            keys.append(key_name((*prefix, name)))
    return keys


def lookup(batch: TensorBatch, key: tuple[str, ...]) -> Column | None:
    """The leaf at ``key``, or ``None`` when it is missing (or names a nested tensordict, not a leaf)."""
    node: Any = batch.columns
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return None if isinstance(node, dict) else node


def missing_key(method: str, batch: TensorBatch, expected: Sequence[tuple[str, ...]]) -> WorkerFailure:
    """``BAD_PAYLOAD``: the tensordict has none of the ``expected`` keys (the message lists those present)."""
    wanted = " or ".join(key_name(k) for k in expected)
    present = leaf_keys(batch.columns)
    return WorkerFailure(
        BAD_PAYLOAD,
        f"{method}: the tensordict has no {wanted} key; present keys: {', '.join(present) or 'none'}",
        {"expected": [list(k) for k in expected], "present": present},
    )
