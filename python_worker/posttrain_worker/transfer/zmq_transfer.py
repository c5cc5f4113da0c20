"""Raw tensor frames from one worker straight to another over a ZeroMQ DEALER pair (docs/training.md).

The receiver binds (``Listener``, on an ipc path in a private directory or on a tcp port) and the sender
connects. Messages, each a multipart message whose first frame is a JSON header:

1. sender -> ``{"kind": "manifest", "version", "tensors": [{name, dtype, shape}], "bytes"}``
2. receiver -> ``{"kind": "ready"}``, or ``{"kind": "reject", "message"}`` (names or shapes do not fit)
3. sender -> ``{"kind": "bucket", "index", "names"}`` + one raw frame per tensor (docs/protocol.md, "Raw
   tensor frames"), buckets of at most ``bucket_bytes`` (a bigger tensor travels alone); high-water marks of
   two messages on both sockets bound what is queued
4. sender -> ``{"kind": "end", "buckets"}``; receiver -> ``{"kind": "done", "bytes"}`` once all is written, or
   ``{"kind": "reject", "message"}`` at any point after ``ready`` when something does not fit

Both sides run on their worker's compute thread, so the I/O thread keeps answering heartbeats; both poll in
short slices, checking cancellation and their deadline. This module knows tensors and frames, nothing of RL.

Over tcp both ends use ZeroMQ CURVE with the pool's keys (:func:`configure_keys`, given by the SDK on stdin):
the receiver is the CURVE server with the pool's server key pair and admits only that same public key, which
the sender uses as its client key pair; a peer without the pool's keys is refused in the ZeroMQ handshake.
Without keys (a worker started ``--insecure``) tcp is allowed on loopback only. ipc relies on the private
directory of the socket file (CURVE costs about 6x in throughput: docs/workers.md, "Security").
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import zmq

from posttrain_worker.codec import CodecError, tensor_from_bytes, tensor_to_bytes
from posttrain_worker.curve import LOOPBACK_HOSTS, CurveKeys, ZapHandler
from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.training.errors import WEIGHT_SYNC_FAILED
from posttrain_worker.training.weight_sync import TensorSpec, spec_of
from posttrain_worker.transfer.buckets import buckets_of

POLL_MS = 100
HIGH_WATER_MARK = 2
ZAP_DOMAIN_PREFIX = "posttrain-weights-"
_context: zmq.Context | None = None
_keys: CurveKeys | None = None
_zap: ZapHandler | None = None
_lock = threading.Lock()


def context() -> zmq.Context:
    global _context
    if _context is None:
        _context = zmq.Context()
    return _context


def configure_keys(keys: CurveKeys | None) -> None:
    """The pool's CURVE keys, used by every tcp transfer of this process (set once, at start-up)."""
    global _keys
    _keys = keys


def _zap_handler() -> ZapHandler:
    global _zap
    with _lock:
        if _zap is None:
            _zap = ZapHandler(context())
        return _zap


def _tcp_host_allowed(host: str) -> None:
    if _keys is None and host not in LOOPBACK_HOSTS:
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'"host" {host!r}: a non-loopback address needs the pool\'s CURVE keys, and this worker has none '
            "(it was started --insecure)",
        )


def _curve_client(socket: zmq.Socket) -> None:
    if _keys is not None:
        socket.setsockopt(zmq.CURVE_SERVERKEY, _keys.server_public_key)
        socket.setsockopt(zmq.CURVE_PUBLICKEY, _keys.server_public_key)
        socket.setsockopt(zmq.CURVE_SECRETKEY, _keys.server_secret_key)


@dataclass
class TransferStats:
    bytes: int
    tensors: int
    buckets: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "tensors": self.tensors,
            "buckets": self.buckets,
            "seconds": self.seconds,
        }


class Deadline:
    def __init__(self, timeout_s: float, check_cancelled: Callable[[], None], what: str) -> None:
        self.end = time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        self.check_cancelled = check_cancelled
        self.what = what

    def tick(self) -> None:
        """Raises ``CANCELLED`` once the call is cancelled, ``WEIGHT_SYNC_FAILED`` once the time is up."""
        self.check_cancelled()
        if time.monotonic() > self.end:
            raise WorkerFailure(
                WEIGHT_SYNC_FAILED,
                f"{self.what}: the peer did not answer within {self.timeout_s:g} s",
                {"timeoutS": self.timeout_s},
            )

    def wait(self, socket: zmq.Socket, flag: int) -> None:
        """Returns once ``socket`` is ready for ``flag`` (POLLIN/POLLOUT), or raises on timeout/cancel."""
        while not socket.poll(POLL_MS, flag):
            self.tick()


def _header(frames: Sequence[Any]) -> dict[str, Any]:
    try:
        header = json.loads(bytes(frames[0]))
    except (ValueError, IndexError) as exc:
        raise WorkerFailure(WEIGHT_SYNC_FAILED, f"weight transfer: unreadable header ({exc})") from None
    if not isinstance(header, dict):
        raise WorkerFailure(WEIGHT_SYNC_FAILED, "weight transfer: the header is not a JSON object")
    return header


def _expect(header: dict[str, Any], kind: str) -> None:
    if header.get("kind") != kind:
        if header.get("kind") == "reject":
            raise WorkerFailure(
                WEIGHT_SYNC_FAILED, f"the receiver rejected the weights: {header.get('message')}"
            )
        raise WorkerFailure(
            WEIGHT_SYNC_FAILED, f"weight transfer: expected a {kind!r} message, got {header.get('kind')!r}"
        )


def _recv(socket: zmq.Socket, deadline: Deadline) -> list[zmq.Frame]:
    deadline.wait(socket, zmq.POLLIN)
    return socket.recv_multipart(copy=False)


def _send(socket: zmq.Socket, frames: Sequence[Any], deadline: Deadline) -> None:
    deadline.wait(socket, zmq.POLLOUT)
    socket.send_multipart(list(frames), copy=False)


def _send_watching(socket: zmq.Socket, frames: Sequence[Any], deadline: Deadline) -> None:
    """Sends while the peer owes no message: anything it sends meanwhile is a reject, raised at once."""
    while True:
        events = socket.poll(POLL_MS, zmq.POLLOUT | zmq.POLLIN)
        if events & zmq.POLLIN:
            _expect(_header(socket.recv_multipart(copy=False)), "nothing")
        if events & zmq.POLLOUT:
            socket.send_multipart(list(frames), copy=False)
            return
        deadline.tick()


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


# ---- receiver ------------------------------------------------------------------------------------------


class Listener:
    """The receiving end: bound at creation (so the sender may connect before ``receive`` runs)."""

    def __init__(self, transport: str, host: str) -> None:
        if transport != "ipc":
            _tcp_host_allowed(host)  # before any socket exists
        self.socket = context().socket(zmq.DEALER)
        self.directory: Path | None = None
        self.zap_domain: str | None = None
        try:
            self.socket.setsockopt(zmq.LINGER, 0)
            self.socket.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
            if transport == "ipc":
                self.directory = Path(tempfile.mkdtemp(prefix="posttrain-weights-"))
                self.socket.bind(f"ipc://{self.directory}/weights.sock")
            else:
                if _keys is not None:
                    # A domain per listener, so that closing one forgets only its own entry.
                    self.zap_domain = ZAP_DOMAIN_PREFIX + secrets.token_hex(8)
                    _zap_handler().allow(self.zap_domain, [_keys.server_public_key])
                    self.socket.setsockopt(zmq.ZAP_DOMAIN, self.zap_domain.encode())
                    self.socket.setsockopt(zmq.CURVE_SERVER, 1)
                    self.socket.setsockopt(zmq.CURVE_SECRETKEY, _keys.server_secret_key)
                self.socket.bind(f"tcp://{host}:*")
            self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        except BaseException:
            # A failed bind (an address not on this host, say) leaks neither the socket nor the ZAP entry.
            self.close()
            raise
        self.created = time.monotonic()

    def close(self) -> None:
        self.socket.close(linger=0)
        if self.zap_domain is not None:
            _zap_handler().forget(self.zap_domain)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def receive(
        self,
        check: Callable[[list[TensorSpec]], None],
        write: Callable[[str, torch.Tensor], None],
        deadline: Deadline,
    ) -> tuple[int, TransferStats]:
        """Runs the receiving side; returns the sender's version and the stats."""
        started = time.monotonic()
        header = _header(_recv(self.socket, deadline))
        _expect(header, "manifest")
        version = int(header["version"])
        specs = [TensorSpec(t["name"], t["dtype"], tuple(t["shape"])) for t in header["tensors"]]
        try:
            check(specs)
        except WorkerFailure as failure:
            _send(self.socket, [_json({"kind": "reject", "message": failure.message})], deadline)
            raise
        _send(self.socket, [_json({"kind": "ready"})], deadline)
        try:
            total, count, buckets = self._buckets(specs, write, deadline)
        except WorkerFailure as failure:
            # Tell the sender (best effort), which would otherwise wait out its timeout.
            with contextlib.suppress(zmq.ZMQError):
                self.socket.send_multipart(
                    [_json({"kind": "reject", "message": failure.message})], zmq.NOBLOCK
                )
            raise
        _send(self.socket, [_json({"kind": "done", "bytes": total})], deadline)
        return version, TransferStats(total, count, buckets, time.monotonic() - started)

    def _buckets(
        self, specs: list[TensorSpec], write: Callable[[str, torch.Tensor], None], deadline: Deadline
    ) -> tuple[int, int, int]:
        """Receives and writes every bucket up to ``end``: ``(bytes, tensors, buckets)``."""
        by_name = {s.name: s for s in specs}
        seen: set[str] = set()
        total = buckets = 0
        while True:
            frames = _recv(self.socket, deadline)
            header = _header(frames)
            if header.get("kind") == "end":
                break
            _expect(header, "bucket")
            names = header["names"]
            if len(names) != len(frames) - 1:
                raise WorkerFailure(
                    WEIGHT_SYNC_FAILED, "weight transfer: a bucket's frames do not match its names"
                )
            for name, frame in zip(names, frames[1:], strict=True):
                spec = by_name.get(name)
                if spec is None or name in seen:
                    raise WorkerFailure(WEIGHT_SYNC_FAILED, f"weight transfer: unexpected tensor {name!r}")
                try:
                    tensor = tensor_from_bytes(frame.buffer, spec.dtype, spec.shape)
                except CodecError as exc:
                    raise WorkerFailure(WEIGHT_SYNC_FAILED, f"weight transfer: {name}: {exc}") from None
                write(name, tensor)
                seen.add(name)
                total += spec.nbytes
            buckets += 1
        if seen != set(by_name):
            raise WorkerFailure(
                WEIGHT_SYNC_FAILED, f"weight transfer: {len(by_name) - len(seen)} tensor(s) never arrived"
            )
        return total, len(seen), buckets


# ---- sender --------------------------------------------------------------------------------------------


def send(
    endpoint: str,
    pairs: Sequence[tuple[str, torch.Tensor]],
    version: int,
    bucket_bytes: int,
    deadline: Deadline,
) -> TransferStats:
    """Runs the sending side until the receiver confirms every tensor is written."""
    started = time.monotonic()
    socket = context().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
    try:
        if endpoint.startswith("tcp://"):
            _curve_client(socket)
        socket.connect(endpoint)
        specs = [spec_of(name, t) for name, t in pairs]
        total = sum(s.nbytes for s in specs)
        manifest = {
            "kind": "manifest",
            "version": version,
            "tensors": [s.to_json() for s in specs],
            "bytes": total,
        }
        _send(socket, [_json(manifest)], deadline)
        _expect(_header(_recv(socket, deadline)), "ready")
        groups = buckets_of([s.nbytes for s in specs], bucket_bytes)
        for index, group in enumerate(groups):
            header = {"kind": "bucket", "index": index, "names": [pairs[i][0] for i in group]}
            _send_watching(socket, [_json(header), *(tensor_to_bytes(pairs[i][1]) for i in group)], deadline)
        _send_watching(socket, [_json({"kind": "end", "buckets": len(groups)})], deadline)
        _expect(_header(_recv(socket, deadline)), "done")
        return TransferStats(total, len(specs), len(groups), time.monotonic() - started)
    finally:
        socket.close(linger=0)
