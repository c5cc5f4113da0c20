"""A per-token column of a decoded :class:`TensorBatch` (tokens, log-probs, masks) as one 1-D tensor per row,
shared by the models' inputs and the training batch.

Usage::

    rows = column_rows("train_step", ("log_probs", "full"), column, batch)  # [L_0], [L_1], ...
"""

from __future__ import annotations

import torch

from posttrain_worker.codec.keys import key_name
from posttrain_worker.codec.types import Column, Ragged, TensorBatch
from posttrain_worker.errors import BAD_PAYLOAD, WorkerFailure


def column_rows(
    method: str, key: tuple[str, ...], column: Column, batch: TensorBatch, dtype: torch.dtype | None = None
) -> list[torch.Tensor]:
    """The rows of a ragged column with one value per token, or of a dense ``[*batch, L]`` one, as CPU
    tensors (of ``dtype`` when given, converted once for the whole column); ``BAD_PAYLOAD`` otherwise."""
    if isinstance(column, Ragged):
        if column.values.dim() != 1:
            raise WorkerFailure(
                BAD_PAYLOAD,
                f"{method}: {key_name(key)} must hold one value per token, got rows of shape "
                f"[-1, {', '.join(str(d) for d in column.values.shape[1:])}]",
            )
        bounds = column.offsets.to(torch.int64).tolist()
        values = column.values.to("cpu", dtype)
        return [values[bounds[i] : bounds[i + 1]] for i in range(batch.rows)]
    if isinstance(column, torch.Tensor) and column.dim() == len(batch.batch_size) + 1:
        return list(column.reshape(batch.rows, column.shape[-1]).to("cpu", dtype).unbind(0))
    raise WorkerFailure(
        BAD_PAYLOAD, f"{method}: {key_name(key)} must be ragged with one value per token (or [batch, length])"
    )
