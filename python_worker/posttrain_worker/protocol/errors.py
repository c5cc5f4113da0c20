"""Error codes of the wire protocol (docs/protocol.md) and the exceptions that carry them.

A method, the envelope parser or the server raises :class:`WorkerFailure` (defined at the bottom of the
package, ``posttrain_worker.errors``, so that RL code can raise it without importing the protocol); the
server turns it into an ``ok: false`` response and keeps serving. Any other exception a method raises becomes
``INTERNAL``.
"""

from __future__ import annotations

from typing import Any

from posttrain_worker.errors import BAD_ARGUMENTS, BAD_PAYLOAD, INTERNAL, WorkerFailure

__all__ = [
    "BAD_ARGUMENTS",
    "BAD_ENVELOPE",
    "BAD_PAYLOAD",
    "CANCELLED",
    "INTERNAL",
    "OVERLOADED",
    "PAYLOAD_TOO_LARGE",
    "UNKNOWN_METHOD",
    "UNSUPPORTED_VERSION",
    "ProtocolViolation",
    "WorkerFailure",
    "cancelled",
]

BAD_ENVELOPE = "BAD_ENVELOPE"
UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
UNKNOWN_METHOD = "UNKNOWN_METHOD"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
CANCELLED = "CANCELLED"
OVERLOADED = "OVERLOADED"
"""The worker already holds ``--max-in-flight`` compute requests; the request was not queued (retry later)."""


class ProtocolViolation(WorkerFailure):
    """An envelope that breaks the protocol; ``request_id`` is its id when it could be read, else ``None``."""

    def __init__(
        self,
        code: str,
        message: str,
        request_id: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(code, message, details)
        self.request_id = request_id


def cancelled(message: str) -> WorkerFailure:
    """The failure a cancelled request answers with."""
    return WorkerFailure(CANCELLED, message)
