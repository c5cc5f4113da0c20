"""Checks of a :class:`~.batch.LossBatch` before any arithmetic: a missing, misshapen or non-finite tensor
is a ``WorkerFailure(BAD_PAYLOAD)`` naming the field."""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain_worker.errors import BAD_PAYLOAD, WorkerFailure
from posttrain_worker.objectives.batch import LossBatch


def _fail(message: str, field: str) -> WorkerFailure:
    return WorkerFailure(BAD_PAYLOAD, f"loss batch: {message}", {"field": field})


def check_base(batch: LossBatch) -> tuple[int, int]:
    """``log_probs`` is ``[B, T]`` and ``mask`` a bool tensor of the same shape; returns ``(B, T)``."""
    if batch.log_probs.ndim != 2:
        raise _fail(f"log_probs must be [B, T], got shape {tuple(batch.log_probs.shape)}", "log_probs")
    if batch.mask.dtype != torch.bool or batch.mask.shape != batch.log_probs.shape:
        raise _fail(
            f"mask must be a bool tensor of shape {tuple(batch.log_probs.shape)}, "
            f"got {batch.mask.dtype} {tuple(batch.mask.shape)}",
            "mask",
        )
    _finite(batch.log_probs, batch.mask, "log_probs")
    rows, width = batch.log_probs.shape
    return int(rows), int(width)


def require_tokens(batch: LossBatch, name: str) -> Tensor:
    """The per-token tensor ``name`` (``old_log_probs``, ``ref_log_probs``, ``entropy``), present, ``[B, T]``
    and finite under the mask."""
    value: Tensor | None = getattr(batch, name)
    if value is None:
        raise _fail(f"{name} is required by this loss config but was not given", name)
    if value.shape != batch.log_probs.shape:
        raise _fail(f"{name} must have shape {tuple(batch.log_probs.shape)}, got {tuple(value.shape)}", name)
    _finite(value, batch.mask, name)
    return value


def require_advantages(batch: LossBatch) -> Tensor:
    """Advantages as ``[B, 1]`` (from ``[B]`` or ``[B, 1]``) or ``[B, T]``, finite where they are used."""
    value = batch.advantages
    if value is None:
        raise _fail("advantages are required by this loss config but were not given", "advantages")
    rows, width = batch.log_probs.shape
    if value.shape == (rows,):
        value = value.unsqueeze(-1)
    if value.shape not in ((rows, 1), (rows, width)):
        raise _fail(
            f"advantages must be [{rows}], [{rows}, 1] or [{rows}, {width}], got {tuple(value.shape)}",
            "advantages",
        )
    _finite(value.expand(rows, width), batch.mask, "advantages")
    return value


def _finite(value: Tensor, mask: Tensor, name: str) -> None:
    if not bool(value.detach().isfinite()[mask].all()):
        raise _fail(f"{name} holds non-finite values on masked-in tokens", name)
