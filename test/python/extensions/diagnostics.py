"""A worker extension with the methods only tests use: ``row_sums`` (the tensordict codec, both ways) and
``compute_for`` (a compute method that runs for a while: heartbeats, timeouts, cancellation).

Load it into a worker with ``python -m posttrain_worker --endpoint ... --extension
test/python/extensions/diagnostics.py`` (``worker_harness.start_worker(..., extensions=[DIAGNOSTICS])``).

- ``row_sums`` (compute; tensordict → tensordict): per row of every tensor leaf, the sum of its elements as
  float64 (ragged: over the row's values); string leaves give the row's length in Unicode code points and
  history leaves its number of messages, as int64.
- ``compute_for`` (compute; ``{seconds}`` in ``[0, 3600]``): ``{iterations}``; multiplies matrices for
  ``seconds``, stopping early (``CANCELLED``) when cancelled.
"""

from __future__ import annotations

import math
import time
from operator import itemgetter
from typing import Any

import torch
from posttrain_worker.codec.types import Column, HistoryColumn, Ragged, TensorBatch
from posttrain_worker.protocol.args import Arg, ArgsSchema
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry

# ---- row_sums ------------------------------------------------------------------------------------------


def _row_sums_column(column: Column, batch_size: tuple[int, ...], device: torch.device) -> Column:
    rows = math.prod(batch_size)
    if isinstance(column, torch.Tensor):
        row_numel = math.prod(column.shape[len(batch_size) :])
        flat = column.to(device).reshape(rows, row_numel).to(torch.float64)
        return flat.sum(dim=1).reshape(batch_size).cpu()
    if isinstance(column, Ragged):
        offsets = column.offsets.to(device=device, dtype=torch.int64)
        start, end = int(offsets[0]), int(offsets[-1])
        values = column.values[start:end].to(device)
        per_element = (
            values.reshape(values.shape[0], math.prod(values.shape[1:])).to(torch.float64).sum(dim=1)
        )
        lengths = offsets[1:] - offsets[:-1]
        owner = torch.repeat_interleave(torch.arange(rows, device=device), lengths)
        sums = torch.zeros(rows, dtype=torch.float64, device=device).index_add_(0, owner, per_element)
        return sums.reshape(batch_size).cpu()
    if isinstance(column, dict):
        return {key: _row_sums_column(child, batch_size, device) for key, child in column.items()}
    if isinstance(column, HistoryColumn):  # conversations: the number of messages
        return torch.tensor([len(row) for row in column.rows], dtype=torch.int64).reshape(batch_size)
    # strings: length in Unicode code points
    return torch.tensor([len(s) for s in column], dtype=torch.int64).reshape(batch_size)


def row_sums(ctx: CallContext, _args: None) -> MethodOutcome:
    (batch,) = ctx.payloads
    assert isinstance(batch, TensorBatch)
    with torch.no_grad():
        columns = {
            key: _row_sums_column(column, batch.batch_size, ctx.worker.device)
            for key, column in batch.columns.items()
        }
    return MethodOutcome({}, [TensorBatch(batch.batch_size, columns)])


# ---- compute_for ---------------------------------------------------------------------------------------

COMPUTE_FOR_MAX_SECONDS = 3600.0
MATMUL_SIZE = 128

COMPUTE_FOR_ARGS = ArgsSchema(
    (Arg("seconds", "number", minimum=0, maximum=COMPUTE_FOR_MAX_SECONDS),),
    build=itemgetter("seconds"),
)


def compute_for(ctx: CallContext, seconds: float) -> dict[str, Any]:
    """Multiply matrices until ``seconds`` have passed; stops early (``CANCELLED``) when cancelled."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.rand(MATMUL_SIZE, MATMUL_SIZE, generator=generator).to(ctx.worker.device)
    b = torch.rand(MATMUL_SIZE, MATMUL_SIZE, generator=generator).to(ctx.worker.device)
    deadline = time.monotonic() + seconds
    iterations = 0
    with torch.no_grad():
        while time.monotonic() < deadline:
            ctx.check_cancelled()
            a = torch.tanh(a @ b)
            if a.device.type == "cuda":
                torch.cuda.synchronize(a.device)
            iterations += 1
    return {"iterations": iterations}


# ---- registration --------------------------------------------------------------------------------------


def register(registry: MethodRegistry) -> None:
    """The worker's ``--extension`` entry point."""
    registry.add("row_sums", row_sums, thread="compute", payloads=("tensordict",))
    registry.add("compute_for", compute_for, thread="compute", args=COMPUTE_FOR_ARGS)
