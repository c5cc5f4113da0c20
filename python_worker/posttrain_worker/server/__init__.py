"""The ZeroMQ server: I/O loop, compute executor, method registry. Knows nothing about RL."""

from posttrain_worker.server.config import DEFAULT_MAX_PAYLOAD_BYTES, ServerConfig
from posttrain_worker.server.loop import READY_PREFIX, WorkerServer
from posttrain_worker.server.registry import (
    CallContext,
    MethodOutcome,
    MethodRegistry,
    MethodSpec,
    RawTensor,
    WorkerFacts,
)

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "READY_PREFIX",
    "CallContext",
    "MethodOutcome",
    "MethodRegistry",
    "MethodSpec",
    "RawTensor",
    "ServerConfig",
    "WorkerFacts",
    "WorkerServer",
]
