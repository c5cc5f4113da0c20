"""Who may command a worker: the pool's secret in the handshake, and CURVE keys on tcp (docs/workers.md,
"Security").

The SDK generates, per pool, a random secret and two CURVE key pairs (the workers' server pair and its own
client pair) and writes them to each worker's stdin as one JSON line (``--auth-stdin``), never in the command
line or the environment, which other processes of the same user can read in ``/proc``::

    {"secret": "<64 hex digits>", "curve": {"serverSecretKey": "<z85>", "clientPublicKey": "<z85>"}}

- :class:`SecretGate`: until a ROUTER identity has handshaken with the right secret, every other message from
  it is answered ``UNAUTHENTICATED`` and does nothing. Secrets are compared in constant time.
- CURVE on tcp: the socket is a CURVE server whose :class:`~posttrain_worker.curve.ZapHandler` admits only the
  pool's client public key (``posttrain_worker/curve.py``, shared with worker-to-worker transfers).
"""

from __future__ import annotations

import hmac
import json
import os
import select
import time
from dataclasses import dataclass
from typing import Any

import zmq

from posttrain_worker.curve import CurveKeys, z85_key
from posttrain_worker.server.endpoint import Endpoint

UNAUTHENTICATED = "UNAUTHENTICATED"
"""A message from a client that has not handshaken with the pool's secret, or a handshake with a wrong one."""

SECRET_MIN_BYTES = 32
AUTH_LINE_MAX_BYTES = 4096
AUTH_LINE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WorkerAuth:
    """What a worker got on stdin: the pool secret and (always from the SDK) the CURVE keys."""

    secret: bytes
    curve: CurveKeys | None

    def __repr__(self) -> str:  # never print a secret into a log
        return f"WorkerAuth(secret=<{len(self.secret)} bytes>, curve={'yes' if self.curve else 'no'})"


def parse_secret(value: Any, field: str = "secret") -> bytes:
    """The secret's bytes from its hex text; ``ValueError`` naming ``field`` unless >= 32 bytes of hex."""
    if not isinstance(value, str):
        raise ValueError(f'"{field}" must be a string of hex digits, got {type(value).__name__}')
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise ValueError(f'"{field}" must be hex digits') from None
    if len(raw) < SECRET_MIN_BYTES:
        raise ValueError(f'"{field}" must hold at least {SECRET_MIN_BYTES} bytes, got {len(raw)}')
    return raw


def parse_auth(obj: Any) -> WorkerAuth:
    """Validate the JSON object of the auth line; ``ValueError`` naming the field and what was expected."""
    if not isinstance(obj, dict):
        raise ValueError(f"the auth line must be a JSON object, got a JSON {type(obj).__name__}")
    unknown = sorted(set(obj) - {"secret", "curve"})
    if unknown:
        raise ValueError(f'the auth line has unknown field(s) {unknown}; expected "secret" and "curve"')
    if "secret" not in obj:
        raise ValueError('the auth line lacks "secret" (at least 32 random bytes as hex)')
    secret = parse_secret(obj["secret"])
    curve_obj = obj.get("curve")
    if curve_obj is None:
        return WorkerAuth(secret, None)
    if not isinstance(curve_obj, dict):
        raise ValueError('"curve" must be an object {serverSecretKey, clientPublicKey}')
    server_secret = z85_key(curve_obj.get("serverSecretKey"), "curve.serverSecretKey")
    client_public = z85_key(curve_obj.get("clientPublicKey"), "curve.clientPublicKey")
    server_public = zmq.curve_public(server_secret)
    return WorkerAuth(secret, CurveKeys(server_secret, server_public, client_public))


def read_auth_line(fd: int = 0, timeout_s: float = AUTH_LINE_TIMEOUT_S) -> WorkerAuth:
    """Read and parse the one auth line the parent writes to ``fd`` (stdin) first.

    Reads byte by byte up to the newline, so nothing after it is consumed: the server then watches the same fd
    for EOF (the parent died). ``ValueError`` on EOF, timeout, an overlong line or bad JSON.
    """
    line = bytearray()
    deadline = time.monotonic() + timeout_s
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ValueError(f"--auth-stdin: no auth line on stdin within {timeout_s:g} s")
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        byte = os.read(fd, 1)
        if not byte:
            raise ValueError("--auth-stdin: stdin closed before a complete auth line")
        line += byte
        if len(line) > AUTH_LINE_MAX_BYTES:
            raise ValueError(f"--auth-stdin: the auth line is longer than {AUTH_LINE_MAX_BYTES} bytes")
    try:
        obj = json.loads(bytes(line))
    except ValueError:
        raise ValueError("--auth-stdin: the auth line is not valid JSON") from None
    return parse_auth(obj)


def check_protection(endpoint: Endpoint, auth: WorkerAuth | None, insecure: bool) -> None:
    """Refuse, before anything is bound, an endpoint the keys cannot protect (``ValueError`` saying why).

    tcp always needs the CURVE keys, except on loopback with ``insecure``; a non-loopback address without keys
    is refused even then. ipc needs the secret unless ``insecure``.
    """
    where = endpoint.requested
    if endpoint.is_tcp and (auth is None or auth.curve is None):
        if not endpoint.is_loopback:
            raise ValueError(
                f"endpoint {where!r}: a non-loopback tcp address needs CURVE keys (--auth-stdin with "
                '"curve"); anyone who can reach it could command the worker. The SDK always passes keys.'
            )
        if not insecure:
            raise ValueError(
                f'endpoint {where!r}: tcp endpoints need CURVE keys (--auth-stdin with "curve"); '
                "pass --insecure to serve loopback tcp unauthenticated for development"
            )
    if auth is None and not insecure:
        raise ValueError(
            f"endpoint {where!r}: no pool secret; pass --auth-stdin and write the auth line to stdin "
            "(the SDK does), or --insecure to serve without authentication for development"
        )


class SecretGate:
    """Tracks which ROUTER identities have handshaken with the pool secret.

    A peer chooses its identity with ``ZMQ_ROUTING_ID`` (libzmq assigns one only to a peer that does not),
    and an admitted identity stays admitted when its peer reconnects with it. The SDK's DEALERs use 128 random
    bits (32 hex characters), so no other process can guess one; a peer claiming an identity that is connected
    is ignored by the ROUTER (no ``ROUTER_HANDOVER``), so it cannot be taken over from a connected client
    either.
    """

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._admitted: set[bytes] = set()

    def admitted(self, identity: bytes) -> bool:
        return identity in self._admitted

    def check_handshake(self, identity: bytes, args: Any) -> str | None:
        """Admit ``identity`` when ``args["secret"]`` is the pool secret; otherwise say why it is refused."""
        value = args.get("secret") if isinstance(args, dict) else None
        if value is None:
            return 'the handshake lacks "secret": this worker only serves clients given its pool secret'
        try:
            offered = parse_secret(value, "secret")
        except ValueError as exc:
            return str(exc)
        if not hmac.compare_digest(offered, self._secret):
            return "the handshake's \"secret\" is not this worker's pool secret"
        self._admitted.add(identity)
        return None
