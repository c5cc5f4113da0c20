"""Endpoint strings: ``ipc:///path/worker-0.sock`` or ``tcp://127.0.0.1:*`` (``:0`` means the same)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from posttrain_worker.curve import LOOPBACK_HOSTS

IPC_PATH_MAX_BYTES = 107
"""``sockaddr_un.sun_path`` holds 108 bytes on Linux, including the terminating NUL."""


@dataclass(frozen=True)
class Endpoint:
    requested: str
    bind_address: str
    """What is passed to ``zmq_bind``."""
    ipc_path: str | None
    """The socket file an ``ipc://`` endpoint creates (None for tcp and abstract ``ipc://@name``)."""

    @property
    def is_tcp(self) -> bool:
        return self.bind_address.startswith("tcp://")

    @property
    def is_loopback(self) -> bool:
        if self.bind_address.startswith("ipc://"):
            return True
        host = self.bind_address[len("tcp://") :].rsplit(":", 1)[0]
        return host in LOOPBACK_HOSTS


def parse_endpoint(text: str) -> Endpoint:
    """Validate an endpoint; raises ``ValueError`` saying what is wrong."""
    if text.startswith("ipc://"):
        path = text[len("ipc://") :]
        if not path:
            raise ValueError(
                f"endpoint {text!r}: an ipc endpoint needs a path, e.g. ipc:///tmp/dir/worker-0.sock"
            )
        if path.startswith("@"):
            return Endpoint(text, text, None)
        if len(os.fsencode(path)) > IPC_PATH_MAX_BYTES:
            raise ValueError(
                f"endpoint {text!r}: the socket path is {len(os.fsencode(path))} bytes long; "
                f"unix sockets allow at most {IPC_PATH_MAX_BYTES} (use a shorter directory)"
            )
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise ValueError(f"endpoint {text!r}: directory {parent!r} does not exist")
        if os.path.isdir(path):
            raise ValueError(f"endpoint {text!r}: {path!r} is a directory")
        return Endpoint(text, text, path)
    if text.startswith("tcp://"):
        rest = text[len("tcp://") :]
        host, sep, port = rest.rpartition(":")
        if not sep or not host:
            raise ValueError(f"endpoint {text!r}: expected tcp://HOST:PORT, e.g. tcp://127.0.0.1:*")
        if port in ("*", "0"):
            port = "*"
        elif not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"endpoint {text!r}: the port must be 1-65535, 0 or *, got {port!r}")
        return Endpoint(text, f"tcp://{host}:{port}", None)
    raise ValueError(f"endpoint {text!r}: expected ipc://PATH or tcp://HOST:PORT")
