"""A real ``python -m posttrain_worker`` subprocess, a raw pyzmq DEALER speaking the envelope protocol, and
calls that carry a tensordict, shared by the worker test modules."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import zmq
from posttrain_worker import PROTOCOL_VERSION
from posttrain_worker.codec import Ragged, TensorBatch, decode_batch, encode_batch

DIAGNOSTICS = Path(__file__).parent / "extensions" / "diagnostics.py"
LIVENESS = Path(__file__).parent / "extensions" / "liveness.py"
"""The test-only worker extension serving ``row_sums`` and ``compute_for``."""

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


def start_worker(
    endpoint: str | None = None,
    *extra: str,
    extensions: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
) -> Worker:
    """A worker (worker id 3) started with the CLI flags ``extra``, an ``--extension`` per path in
    ``extensions`` (e.g. ``[DIAGNOSTICS]``) and ``env`` added to its environment, once it printed its READY
    line."""
    directory = Path(tempfile.mkdtemp(prefix="ptw-", dir="/tmp"))
    endpoint = endpoint or f"ipc://{directory}/worker-0.sock"
    stderr_path = directory / "stderr.log"
    # --insecure: these tests speak to the worker raw, without a pool secret (test_auth.py covers it)
    flags = ["--insecure", *extra, *(arg for path in extensions for arg in ("--extension", str(path)))]
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "posttrain_worker", "--endpoint", endpoint, "--worker-id", "3", *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, **env} if env else None,
            start_new_session=True,  # its own process group: stop_worker kills what it spawned too (vLLM)
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
    """SIGKILLs the worker's process group (a vLLM engine process would outlive a killed worker)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.proc.pid, signal.SIGKILL)
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


def load(client: Client, name: str, path: object, **extra: object) -> dict[str, Any]:
    """The reply envelope of ``load_model``: the model at ``path`` as ``name``."""
    return client.call("load_model", {"name": name, "path": str(path), **extra}, timeout=60)[0]


@contextmanager
def worker_client(
    models: Mapping[str, Path] | None = None, *, env: Mapping[str, str] | None = None
) -> Iterator[tuple[Client, Worker]]:
    """A worker started with ``env`` added to its environment, the ``models`` (name -> directory) loaded,
    and a client to it; everything is stopped on exit."""
    context = zmq.Context()
    worker = start_worker(env=env)
    client = Client(context, worker.endpoint)
    try:
        for name, path in (models or {}).items():
            ok(load(client, name, path))
        yield client, worker
    finally:
        client.close()
        stop_worker(worker)
        context.destroy(linger=0)


@contextmanager
def policy_client(model_dir: Path) -> Iterator[Client]:
    """A worker with the model at ``model_dir`` loaded as ``"policy"``, and a client to it."""
    with worker_client({"policy": model_dir}) as (client, _):
        yield client


# ---- tensordict payloads -------------------------------------------------------------------------------


def ragged(
    rows: Sequence[Sequence[int]] | Sequence[torch.Tensor], dtype: torch.dtype = torch.int64
) -> Ragged:
    """Rows (lists or 1-D tensors) as a ragged column of ``dtype``."""
    tensors = [torch.as_tensor(r).to(dtype) for r in rows]
    offsets = torch.tensor(
        [0, *torch.tensor([t.numel() for t in tensors], dtype=torch.int64).cumsum(0).tolist()]
    )
    return Ragged(torch.cat(tensors) if tensors else torch.zeros(0, dtype=dtype), offsets)


def rows_of(column: Any) -> list[torch.Tensor]:
    """The rows of a ragged column, as tensors of their own."""
    assert isinstance(column, Ragged)
    return [column.row(i).clone() for i in range(column.rows)]


def call(client: Client, method: str, args: dict[str, Any], batch: TensorBatch, timeout: float = 60) -> Any:
    """The reply of a method taking one tensordict, with the decoded reply batch (when any) under
    ``"batch"``."""
    reply, frames = client.call(
        method, args, payloads=[{"kind": "tensordict"}], frames=(encode_batch(batch),), timeout=timeout
    )
    if reply.get("ok") and frames:
        reply["batch"] = decode_batch(frames[0])
    return reply
