"""The protocol-version-1 methods every worker serves: handshake, info, ping, echo, shutdown, free_port
(docs/protocol.md, "Methods"). The test-only ``row_sums`` and ``compute_for`` live in a worker extension,
``test/python/extensions/diagnostics.py``.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import platform
import socket
from dataclasses import dataclass, field
from functools import cache
from operator import itemgetter
from typing import Any

import numpy
import pyarrow
import torch
import zmq

import posttrain_worker
from posttrain_worker import PROTOCOL_VERSION
from posttrain_worker.models.vllm_import import vllm_installed
from posttrain_worker.protocol.args import Arg, ArgsSchema
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, UNSUPPORTED_VERSION, WorkerFailure
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
    secret: str | None = field(default=None, repr=False)
    """The pool secret: checked by the server before this method runs (``server/auth.py``), unused here."""


HANDSHAKE_ARGS = ArgsSchema(
    (
        Arg("protocolVersion", "integer", minimum=0),
        Arg("client", "object", default=None),
        Arg("secret", "string", default=None),
    ),
    build=HandshakeArgs,
)


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


# ---- echo ----------------------------------------------------------------------------------------------


def echo(ctx: CallContext, _args: None) -> MethodOutcome:
    """Each payload back: tensordicts decoded and re-encoded, raw tensors rebuilt, bytes as they came."""
    return MethodOutcome({}, list(ctx.payloads))


# ---- free_port -----------------------------------------------------------------------------------------

FREE_PORT_ARGS = ArgsSchema(
    (Arg("host", "string", default="127.0.0.1", non_empty=True),), build=itemgetter("host")
)


def free_port(_ctx: CallContext, host: str) -> dict[str, Any]:
    """A TCP port free now on ``host``, an IP address of THIS worker's machine (bind port 0, read, close).

    The SDK picks the torch.distributed store port this way on rank 0's node, which under Ray is another
    machine. The port is free when answered, not reserved: another process may take it before it is used.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise WorkerFailure(
            BAD_ARGUMENTS, f'"host" must be an IP address such as "127.0.0.1" or "::1", got {host!r}'
        ) from None
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((str(address), 0))
            port = sock.getsockname()[1]
    except OSError as exc:
        raise WorkerFailure(
            BAD_ARGUMENTS, f'"host" {host!r} is not an address of this machine (bind failed: {exc.strerror})'
        ) from None
    return {"port": int(port)}


# ---- registration --------------------------------------------------------------------------------------


def register_basic_methods(registry: MethodRegistry) -> None:
    registry.add("handshake", handshake, thread="io", args=HANDSHAKE_ARGS)
    registry.add("info", info, thread="io")
    registry.add("ping", ping, thread="io")
    # Inline: it only decodes and re-encodes its payloads (no model, no thread-bound torch state).
    registry.add("echo", echo, thread="compute", payloads="any", inline=True)
    registry.add("shutdown", shutdown, thread="io")
    registry.add("free_port", free_port, thread="io", args=FREE_PORT_ARGS)
