"""Settings of one worker server."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024**3
"""4 GiB: the sum of the payload frame sizes of one request."""


@dataclass(frozen=True)
class ServerConfig:
    endpoint: str
    """``ipc:///path/worker-0.sock`` or ``tcp://127.0.0.1:*`` (``:0`` is the same)."""
    worker_id: int = 0
    device: str = "cpu"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    watch_stdin: bool = True
    """Exit when stdin (a pipe or socket from the parent) reaches EOF: the parent died."""
    announce: bool = True
    """Print the ``POSTTRAIN_READY`` line once bound, then send further stdout to stderr."""
    shutdown_linger_ms: int = 1000
    """After a ``shutdown`` request, how long closing may wait for the last replies to leave."""
    stop_join_timeout_s: float = 5.0
    """How long a stop waits for the running compute method to notice cancellation and return."""
