"""A real ``python -m posttrain_worker`` subprocess and a raw pyzmq DEALER speaking the envelope protocol,
shared by the worker test modules."""

from __future__ import annotations

import itertools
import json
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from posttrain_worker import PROTOCOL_VERSION

READY_RE = re.compile(r'^POSTTRAIN_READY \{"endpoint": "([^"]+)", "pid": (\d+), "protocolVersion": (\d+)\}$')


# ---- harness -------------------------------------------------------------------------------------------


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    endpoint: str
    ready_line: str
    directory: Path
    stderr_path: Path

    @property
    def socket_path(self) -> Path | None:
        return Path(self.endpoint[len("ipc://") :]) if self.endpoint.startswith("ipc://") else None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait(self, timeout: float = 10.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"worker did not exit within {timeout} s; stderr:\n{self.stderr()}"
            ) from None


def start_worker(endpoint: str | None = None, *extra: str) -> Worker:
    directory = Path(tempfile.mkdtemp(prefix="ptw-", dir="/tmp"))
    endpoint = endpoint or f"ipc://{directory}/worker-0.sock"
    stderr_path = directory / "stderr.log"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "posttrain_worker", "--endpoint", endpoint, "--worker-id", "3", *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline().decode() if readable else ""
    if not line:
        proc.kill()
        proc.wait()
        raise AssertionError(f"no READY line; stderr:\n{stderr_path.read_text(errors='replace')}")
    match = READY_RE.match(line.rstrip("\n"))
    assert match, line
    return Worker(proc, match.group(1), line.rstrip("\n"), directory, stderr_path)


def stop_worker(worker: Worker) -> None:
    if worker.proc.poll() is None:
        worker.proc.kill()
        worker.proc.wait()
    shutil.rmtree(worker.directory, ignore_errors=True)


_ids = itertools.count(1)


class Client:
    """A raw DEALER speaking the envelope protocol."""

    def __init__(self, context: zmq.Context, endpoint: str) -> None:
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.sent: list[int] = []

    def send(self, envelope: dict[str, Any] | bytes, *frames: Any) -> None:
        head = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
        self.socket.send_multipart([head, *frames])

    def recv(self, timeout: float = 10.0) -> tuple[dict[str, Any], list[bytes]]:
        if not self.socket.poll(int(timeout * 1000)):
            raise AssertionError(f"no reply within {timeout} s")
        head, *frames = self.socket.recv_multipart()
        return json.loads(head), frames

    def request(
        self,
        method: str,
        args: dict[str, Any] | None = None,
        payloads: list[dict[str, Any]] | None = None,
        frames: tuple[Any, ...] = (),
    ) -> int:
        request_id = next(_ids)
        envelope: dict[str, Any] = {
            "v": PROTOCOL_VERSION,
            "type": "request",
            "id": request_id,
            "method": method,
        }
        if args is not None:
            envelope["args"] = args
        if payloads is not None:
            envelope["payloads"] = payloads
        self.send(envelope, *frames)
        self.sent.append(request_id)
        return request_id

    def call(
        self, method: str, *a: Any, timeout: float = 10.0, **kw: Any
    ) -> tuple[dict[str, Any], list[bytes]]:
        request_id = self.request(method, *a, **kw)
        reply, frames = self.recv(timeout)
        assert reply["id"] == request_id, reply
        return reply, frames

    def heartbeat(self) -> int:
        heartbeat_id = next(_ids)
        self.send({"v": PROTOCOL_VERSION, "type": "heartbeat", "id": heartbeat_id})
        return heartbeat_id

    def wait_busy(self, timeout: float = 5.0) -> dict[str, Any]:
        """Heartbeat until the worker reports a running compute method; its {busy, queued}."""
        deadline = time.monotonic() + timeout
        while True:
            heartbeat_id = self.heartbeat()
            reply, _ = self.recv()
            assert reply["type"] == "heartbeat" and reply["id"] == heartbeat_id, reply
            if reply["busy"] or time.monotonic() > deadline:
                return {"busy": reply["busy"], "queued": reply["queued"]}
            time.sleep(0.01)

    def close(self) -> None:
        """Cancel whatever this client left in flight (so a failed test does not block the next ones)."""
        for request_id in self.sent:
            self.send({"v": PROTOCOL_VERSION, "type": "cancel", "id": request_id})
        self.socket.close(linger=100)


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["type"] == "response" and reply["ok"] is True, reply
    return reply["result"]


def error(reply: dict[str, Any], code: str) -> str:
    assert reply["type"] == "response" and reply["ok"] is False, reply
    assert reply["error"]["code"] == code, reply
    return reply["error"]["message"]


@contextmanager
def policy_client(model_dir: Path) -> Iterator[Client]:
    """A worker with the model at ``model_dir`` loaded as ``"policy"``, and a client to it."""
    context = zmq.Context()
    worker = start_worker()
    client = Client(context, worker.endpoint)
    try:
        ok(client.call("load_model", {"name": "policy", "path": str(model_dir)}, timeout=60)[0])
        yield client
    finally:
        client.close()
        stop_worker(worker)
        context.destroy(linger=0)
