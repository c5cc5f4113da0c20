"""The worker's failure type, the codes every layer uses, and how a value appears in a message.

The bottom of the package: it imports nothing of ``posttrain_worker``, so models, losses and training raise
typed failures without knowing the wire protocol. The server turns a :class:`WorkerFailure` into an
``ok: false`` response carrying ``{code, message, details}`` (docs/protocol.md); codes that only the protocol
raises (``BAD_ENVELOPE``, ``CANCELLED``...) live in ``protocol/errors.py``, and each layer keeps its own
codes beside its code (``models/errors.py``, ``training/errors.py``).

Usage::

    raise WorkerFailure(BAD_ARGUMENTS, f'"lr" must be positive, got {render(value)}', {"field": "lr"})
"""

from __future__ import annotations

import json
from typing import Any

BAD_ARGUMENTS = "BAD_ARGUMENTS"
"""An argument or config field is missing, of the wrong type, or out of range; the message names it."""
BAD_PAYLOAD = "BAD_PAYLOAD"
"""A payload (tensordict or tensor) lacks a key or holds the wrong dtype, shape or row count."""
INTERNAL = "INTERNAL"
"""A bug or an unexpected exception; the message says what failed."""


class WorkerFailure(Exception):
    """A failure the worker reports to the client as ``{code, message, details}``."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details) if details else {}


def render(value: Any, limit: int = 80) -> str:
    """A value as it appeared in the JSON, shortened for error messages."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
