"""ZeroMQ CURVE for the worker's sockets: the pool's keys, the ZAP handler that admits only allowed public
keys, and which hosts count as loopback. Shared by the server (its ROUTER on tcp) and worker-to-worker weight
transfer, so it sits at the bottom and imports nothing of the package (docs/workers.md, "Security").
"""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass
from typing import Any

import zmq
from zmq.utils import z85

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
"""Where libzmq looks for the ZAP handler of a context (RFC 27)."""
Z85_KEY_CHARS = 40
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
"""tcp hosts only this machine can reach: the only ones a worker without CURVE keys (``--insecure``) binds."""


@dataclass(frozen=True)
class CurveKeys:
    """The pool's CURVE keys as a worker holds them (Z85 text, 40 characters each)."""

    server_secret_key: bytes
    server_public_key: bytes
    client_public_key: bytes
    """The SDK's client key: the only one the worker's own socket admits."""


def z85_key(value: Any, field: str) -> bytes:
    """``value`` as key bytes; ``ValueError`` naming ``field`` unless it is a 40-character Z85 key."""
    if not isinstance(value, str) or len(value) != Z85_KEY_CHARS:
        raise ValueError(f'"{field}" must be a Z85 CURVE key of {Z85_KEY_CHARS} characters')
    try:
        z85.decode(value)
    except (ValueError, KeyError, TypeError):
        raise ValueError(f'"{field}" is not valid Z85 text') from None
    return value.encode("ascii")


class ZapHandler:
    """The ZAP handler thread of ``context``: admits CURVE clients by domain and public key, refuses the rest.

    Usage::

        zap = ZapHandler(context)
        zap.allow("posttrain", [client_public_key_z85])
        socket.zap_domain = b"posttrain"; socket.curve_server = True; ...
        # context.term() ends the thread (its socket gets ETERM)
    """

    def __init__(self, context: zmq.Context) -> None:
        self._allowed: dict[bytes, frozenset[bytes]] = {}
        self._lock = threading.Lock()
        self._bound = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(context,), name="posttrain-zap", daemon=True)
        self._thread.start()
        self._bound.wait()
        # Without a bound handler libzmq admits every CURVE client that knows the server key: never go on.
        if self._error is not None:
            raise RuntimeError(f"cannot start the ZAP handler: {self._error}") from self._error

    def allow(self, domain: str, public_keys: list[bytes]) -> None:
        """Admit the Z85 ``public_keys`` on sockets of ZAP domain ``domain`` (replacing earlier ones)."""
        decoded = frozenset(z85.decode(k) for k in public_keys)
        with self._lock:
            self._allowed[domain.encode()] = decoded

    def forget(self, domain: str) -> None:
        with self._lock:
            self._allowed.pop(domain.encode(), None)

    def _admits(self, domain: bytes, mechanism: bytes, credentials: list[bytes]) -> bool:
        if mechanism != b"CURVE" or len(credentials) != 1:
            return False
        with self._lock:
            allowed = self._allowed.get(domain, frozenset())
        return any(hmac.compare_digest(credentials[0], key) for key in allowed)

    def _run(self, context: zmq.Context) -> None:
        try:
            socket = context.socket(zmq.REP)
            socket.setsockopt(zmq.LINGER, 0)
            socket.bind(ZAP_ENDPOINT)
        except zmq.ZMQError as exc:
            self._error = exc
            self._bound.set()
            return
        self._bound.set()
        try:
            while True:
                frames = socket.recv_multipart()
                socket.send_multipart(self._reply(frames))
        except zmq.ContextTerminated:
            pass
        finally:
            socket.close(linger=0)

    def _reply(self, frames: list[bytes]) -> list[bytes]:
        # version, request id, domain, address, identity, mechanism, credentials...
        if len(frames) < 6 or frames[0] != b"1.0":
            request_id = frames[1] if len(frames) > 1 else b""
            return [b"1.0", request_id, b"500", b"malformed ZAP request", b"", b""]
        _, request_id, domain, _address, _identity, mechanism, *credentials = frames
        if self._admits(domain, mechanism, credentials):
            return [b"1.0", request_id, b"200", b"OK", b"posttrain-client", b""]
        return [b"1.0", request_id, b"400", b"key not admitted", b"", b""]
