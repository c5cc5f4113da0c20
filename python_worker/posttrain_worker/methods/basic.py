"""The protocol-version-1 methods every worker serves: handshake, info, ping, echo, row_sums, compute_for,
shutdown (docs/protocol.md, "Methods").
"""

from __future__ import annotations

import importlib.util
import math
import os
import platform
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy
import pyarrow
import torch
import zmq

import posttrain_worker
from posttrain_worker import PROTOCOL_VERSION
from posttrain_worker.codec.types import Column, HistoryColumn, Ragged, TensorBatch
from posttrain_worker.models.vllm_import import vllm_installed
from posttrain_worker.protocol.args import ArgReader
from posttrain_worker.protocol.errors import UNSUPPORTED_VERSION, WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry

# ---- handshake / info ----------------------------------------------------------------------------------


@cache
def _devices() -> tuple[dict[str, Any], ...]:
    """The CPU and every CUDA device (computed once: the first CUDA query initialises the driver)."""
    cpu: dict[str, Any] = {
        "type": "cpu",
        "index": 0,
        "name": platform.processor() or platform.machine() or "cpu",
    }
    try:
        cpu["totalMemoryBytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    devices = [cpu]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(
                {
                    "type": "cuda",
                    "index": index,
                    "name": props.name,
                    "totalMemoryBytes": int(props.total_memory),
                }
            )
    return tuple(devices)


def _backends() -> list[str]:
    """Model backends importable in this environment (checked without importing them; ``vllm`` also when
    the test-only fake is configured, see ``models/vllm_import.py``)."""
    names = ["transformers"] if importlib.util.find_spec("transformers") is not None else []
    return [*names, "vllm"] if vllm_installed() else names


@cache
def _static_info() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
        "zmq": f"pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}",
        "backends": _backends(),
    }


def worker_info(ctx: CallContext) -> dict[str, Any]:
    static = _static_info()
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "workerVersion": posttrain_worker.__version__,
        "workerId": ctx.worker.worker_id,
        "pid": os.getpid(),
        "python": static["python"],
        "torch": static["torch"],
        "numpy": static["numpy"],
        "pyarrow": static["pyarrow"],
        "zmq": static["zmq"],
        "devices": [dict(d) for d in _devices()],
        "capabilities": {"methods": ctx.registry.names, "backends": list(static["backends"])},
        "maxPayloadBytes": ctx.worker.max_payload_bytes,
    }


@dataclass(frozen=True)
class HandshakeArgs:
    protocol_version: int
    client: dict[str, Any] | None


def parse_handshake(method: str, args: dict[str, Any]) -> HandshakeArgs:
    reader = ArgReader(method, args)
    version = reader.integer("protocolVersion", minimum=0)
    client = reader.object("client", required=False)
    reader.finish()
    assert version is not None
    return HandshakeArgs(version, client)


def handshake(ctx: CallContext, args: HandshakeArgs) -> dict[str, Any]:
    if args.protocol_version != PROTOCOL_VERSION:
        raise WorkerFailure(
            UNSUPPORTED_VERSION,
            f"the client speaks protocol version {args.protocol_version}, "
            f"this worker speaks {PROTOCOL_VERSION}",
            {"workerProtocolVersion": PROTOCOL_VERSION},
        )
    return worker_info(ctx)


def info(ctx: CallContext, _args: None) -> dict[str, Any]:
    return worker_info(ctx)


def ping(_ctx: CallContext, _args: None) -> dict[str, Any]:
    return {}


def shutdown(ctx: CallContext, _args: None) -> dict[str, Any]:
    ctx.request_shutdown()
    return {}


# ---- echo / row_sums -----------------------------------------------------------------------------------


def echo(ctx: CallContext, _args: None) -> MethodOutcome:
    """Each payload back: tensordicts decoded and re-encoded, raw tensors rebuilt, bytes as they came."""
    return MethodOutcome({}, list(ctx.payloads))


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


def parse_compute_for(method: str, args: dict[str, Any]) -> float:
    reader = ArgReader(method, args)
    seconds = reader.number("seconds", minimum=0, maximum=COMPUTE_FOR_MAX_SECONDS)
    reader.finish()
    assert seconds is not None
    return seconds


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


def register_basic_methods(registry: MethodRegistry) -> None:
    registry.add("handshake", handshake, thread="io", parse_args=parse_handshake)
    registry.add("info", info, thread="io")
    registry.add("ping", ping, thread="io")
    registry.add("echo", echo, thread="compute", payloads="any")
    registry.add("row_sums", row_sums, thread="compute", payloads=("tensordict",))
    registry.add("compute_for", compute_for, thread="compute", parse_args=parse_compute_for)
    registry.add("shutdown", shutdown, thread="io")
