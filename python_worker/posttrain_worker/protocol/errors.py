"""Error codes of the wire protocol (docs/protocol.md) and the exceptions that carry them.

A method, the envelope parser or the server raises :class:`WorkerFailure`; the server turns it into an
``ok: false`` response and keeps serving. Any other exception a method raises becomes ``INTERNAL``.
"""

from __future__ import annotations

from typing import Any

BAD_ENVELOPE = "BAD_ENVELOPE"
UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
UNKNOWN_METHOD = "UNKNOWN_METHOD"
BAD_ARGUMENTS = "BAD_ARGUMENTS"
BAD_PAYLOAD = "BAD_PAYLOAD"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
CANCELLED = "CANCELLED"
INTERNAL = "INTERNAL"

ERROR_CODES: frozenset[str] = frozenset(
    {
        BAD_ENVELOPE,
        UNSUPPORTED_VERSION,
        UNKNOWN_METHOD,
        BAD_ARGUMENTS,
        BAD_PAYLOAD,
        PAYLOAD_TOO_LARGE,
        CANCELLED,
        INTERNAL,
    }
)


class WorkerFailure(Exception):
    """A failure the worker reports to the client as ``{code, message, details}``."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details) if details else {}


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
