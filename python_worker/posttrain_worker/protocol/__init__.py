"""The wire protocol: envelope schema, error codes, argument validation (docs/protocol.md)."""

from posttrain_worker.protocol.envelope import (
    BytesPayload,
    Cancel,
    ClientEnvelope,
    Heartbeat,
    PayloadDescriptor,
    Request,
    TensorDictPayload,
    TensorPayload,
    heartbeat_reply,
    parse_envelope,
    response_error,
    response_ok,
)
from posttrain_worker.protocol.errors import ProtocolViolation, WorkerFailure

__all__ = [
    "BytesPayload",
    "Cancel",
    "ClientEnvelope",
    "Heartbeat",
    "PayloadDescriptor",
    "ProtocolViolation",
    "Request",
    "TensorDictPayload",
    "TensorPayload",
    "WorkerFailure",
    "heartbeat_reply",
    "parse_envelope",
    "response_error",
    "response_ok",
]
