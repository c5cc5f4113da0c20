"""Settings of one worker server."""

from __future__ import annotations

from dataclasses import dataclass

from posttrain_worker.protocol.envelope import MAX_ENVELOPE_BYTES
from posttrain_worker.server.auth import WorkerAuth

DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024**3
"""4 GiB: the sum of the payload frame sizes of one request."""

MIN_FRAME_LIMIT_BYTES = MAX_ENVELOPE_BYTES
"""1 MiB: the socket's per-frame limit never goes below this, so an envelope up to its own cap
(``MAX_ENVELOPE_BYTES``) reaches the parser and is answered whatever the payload limit."""

DEFAULT_MAX_IN_FLIGHT = 64
"""Compute requests one worker holds at once (running + queued), over all its clients."""


@dataclass(frozen=True)
class ServerConfig:
    endpoint: str
    """``ipc:///path/worker-0.sock`` or ``tcp://127.0.0.1:*`` (``:0`` is the same)."""
    worker_id: int = 0
    device: str = "cpu"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    """Above this many compute requests in flight, a request is answered ``OVERLOADED`` at once."""
    watch_stdin: bool = True
    """Exit when stdin (a pipe or socket from the parent) reaches EOF: the parent died."""
    announce: bool = True
    """Print the ``POSTTRAIN_READY`` line once bound, then send further stdout to stderr."""
    shutdown_linger_ms: int = 1000
    """After a ``shutdown`` request, how long closing may wait for the last replies to leave."""
    stop_join_timeout_s: float = 5.0
    """How long a stop waits for the running compute method to notice cancellation and return."""
    auth: WorkerAuth | None = None
    """The pool secret (every handshake must carry it) and CURVE keys (required for tcp), from the parent."""
    insecure: bool = False
    """Serve without a secret (development only): allowed on ipc and loopback tcp, never elsewhere."""

    @property
    def max_frame_bytes(self) -> int:
        """The largest single frame the ROUTER accepts (``ZMQ_MAXMSGSIZE``), the envelope included: libzmq
        drops a larger frame while reading its header and disconnects the sender (never buffered whole)."""
        return max(self.max_payload_bytes, MIN_FRAME_LIMIT_BYTES)
