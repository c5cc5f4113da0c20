"""The worker server end to end: a real ``python -m posttrain_worker`` subprocess, a raw pyzmq DEALER.

One worker serves most tests (module fixture, with the test extension ``row_sums`` / ``compute_for``);
lifecycle tests (shutdown, stdin EOF, signals) start their own. The CLI's ``--extension`` and
``--describe-methods`` are tested at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import zmq
from posttrain_worker import PROTOCOL_VERSION, cli
from posttrain_worker.codec import (
    HistoryColumn,
    Ragged,
    TensorBatch,
    decode_batch,
    encode_batch,
    tensor_to_bytes,
)
from posttrain_worker.methods import default_registry
from posttrain_worker.protocol.args import Arg, ArgsSchema
from posttrain_worker.server import MethodRegistry, ServerConfig, WorkerServer
from worker_harness import DIAGNOSTICS, READY_RE, Client, Worker, error, ok, start_worker, stop_worker

MAX_PAYLOAD = 256 * 1024


@pytest.fixture(scope="module")
def worker(zctx: zmq.Context) -> Iterator[Worker]:
    w = start_worker(None, "--max-payload-bytes", str(MAX_PAYLOAD), extensions=[DIAGNOSTICS])
    yield w
    client = Client(zctx, w.endpoint)
    try:
        if w.proc.poll() is None:
            ok(client.call("shutdown")[0])
            assert w.wait() == 0, w.stderr()
    finally:
        client.close()
        stop_worker(w)


@pytest.fixture
def client(zctx: zmq.Context, worker: Worker) -> Iterator[Client]:
    c = Client(zctx, worker.endpoint)
    yield c
    c.close()


def sample_batch() -> TensorBatch:
    return TensorBatch(
        (2,),
        {
            "obs": torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5,
            "reward": torch.tensor([1, -7], dtype=torch.int64),
            "mask": torch.tensor([True, False]),
            "bf": torch.tensor([[1.5, 2.0], [-0.25, 8.0]], dtype=torch.bfloat16),
            "tokens": Ragged(torch.tensor([3, 4, 5, 6, 7], dtype=torch.int32), torch.tensor([0, 2, 5])),
            "pairs": Ragged(torch.arange(6, dtype=torch.float16).reshape(3, 2), torch.tensor([0, 0, 3])),
            "text": ["héllo wörld", ""],
            "next": {"reward": torch.tensor([0.5, 1.5], dtype=torch.float64), "done": torch.tensor([0, 1])},
        },
    )


def assert_batches_equal(a: TensorBatch, b: TensorBatch) -> None:
    assert a.batch_size == b.batch_size

    def same(x: Any, y: Any, key: str) -> None:
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), key
        elif isinstance(x, Ragged):
            assert isinstance(y, Ragged), key
            assert x.rows == y.rows
            for i in range(x.rows):
                assert torch.equal(x.row(i), y.row(i)), key
        elif isinstance(x, dict):
            assert isinstance(y, dict) and list(x) == list(y), key
            for k in x:
                same(x[k], y[k], f"{key}/{k}")
        else:
            assert list(x) == list(y), key

    same(a.columns, b.columns, "")


# ---- handshake, info, ping -----------------------------------------------------------------------------


def test_ready_line(worker: Worker) -> None:
    match = READY_RE.match(worker.ready_line)
    assert match is not None
    assert int(match.group(2)) == worker.proc.pid
    assert int(match.group(3)) == PROTOCOL_VERSION
    assert worker.socket_path is not None and worker.socket_path.is_socket()


def test_handshake_and_info(client: Client, worker: Worker) -> None:
    info = ok(
        client.call("handshake", {"protocolVersion": PROTOCOL_VERSION, "client": {"name": "pytest"}})[0]
    )
    assert info["protocolVersion"] == PROTOCOL_VERSION
    assert info["workerId"] == 3
    assert info["pid"] == worker.proc.pid
    assert info["maxPayloadBytes"] == MAX_PAYLOAD
    assert info["torch"] == torch.__version__
    for key in ("workerVersion", "python", "numpy", "pyarrow", "zmq"):
        assert isinstance(info[key], str) and info[key], key
    assert info["devices"][0]["type"] == "cpu"
    # every registered method, the extension's after the defaults
    assert info["capabilities"]["methods"] == [*default_registry().names, "row_sums", "compute_for"]
    assert "transformers" in info["capabilities"]["backends"]
    again = ok(client.call("info")[0])
    assert again == info


def test_handshake_rejects_other_protocol_version(client: Client) -> None:
    message = error(client.call("handshake", {"protocolVersion": 99})[0], "UNSUPPORTED_VERSION")
    assert "99" in message


def test_ping(client: Client) -> None:
    reply, frames = client.call("ping")
    assert ok(reply) == {} and reply["payloads"] == [] and frames == []


def test_a_burst_of_small_calls_is_answered_in_order(client: Client) -> None:
    # More than one wake's worth (MAX_MESSAGES_PER_WAKE = 64) sent before any reply is read, mixing I/O-thread
    # calls (ping), compute calls (echo) and heartbeats: the I/O loop drains several messages per wake,
    # answers each exactly once, and keeps each thread's replies in the order of their requests.
    sent: list[tuple[str, int]] = []
    for i in range(150):
        if i % 10 == 5:
            sent.append(("heartbeat", client.heartbeat()))
        else:
            method = "echo" if i % 3 == 0 else "ping"
            sent.append((method, client.request(method)))
    replies = [client.recv()[0] for _ in sent]
    assert sorted(r["id"] for r in replies) == sorted(i for _, i in sent)
    kind_of = {i: kind for kind, i in sent}
    for kind in ("ping", "echo", "heartbeat"):
        assert [r["id"] for r in replies if kind_of[r["id"]] == kind] == [i for k, i in sent if k == kind]
    assert all(ok(r) == {} for r in replies if r["type"] == "response")


def test_free_port_is_bindable_on_the_asked_interface(client: Client) -> None:
    port = ok(client.call("free_port")[0])["port"]  # host defaults to 127.0.0.1
    assert 1 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))  # free right after the answer
    assert ok(client.call("free_port", {"host": "127.0.0.1"})[0])["port"] >= 1


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("localhost", "must be an IP address"),
        ("", '"host"'),
        ("203.0.113.7", "not an address of this machine"),
    ],
)
def test_free_port_refuses_a_bad_host(client: Client, host: str, expected: str) -> None:
    message = error(client.call("free_port", {"host": host})[0], "BAD_ARGUMENTS")
    assert '"host"' in message and expected in message


# ---- compute methods -----------------------------------------------------------------------------------


def test_echo_tensordict(client: Client) -> None:
    batch = sample_batch()
    sent = bytes(encode_batch(batch))
    reply, frames = client.call("echo", payloads=[{"kind": "tensordict"}], frames=(sent,))
    ok(reply)
    assert reply["payloads"] == [{"kind": "tensordict"}]
    assert frames[0] == sent  # canonical encoding: decode + re-encode gives the same bytes
    assert_batches_equal(decode_batch(frames[0]), batch)


def test_echo_raw_tensors_and_bytes(client: Client) -> None:
    weight = torch.randn(3, 4)
    half = torch.tensor([[1.0, -2.5]], dtype=torch.bfloat16)
    blob = os.urandom(100_000)
    payloads = [
        {"kind": "tensor", "dtype": "float32", "shape": [3, 4], "name": "w"},
        {"kind": "bytes"},
        {"kind": "tensor", "dtype": "bfloat16", "shape": [1, 2]},
        {"kind": "tensordict"},
    ]
    td = bytes(encode_batch(TensorBatch((), {"x": torch.tensor(2.0)})))
    frames = (bytes(tensor_to_bytes(weight)), blob, bytes(tensor_to_bytes(half)), td)
    reply, out = client.call("echo", payloads=payloads, frames=frames)
    ok(reply)
    assert reply["payloads"] == payloads
    assert out == list(frames)
    assert torch.equal(torch.frombuffer(bytearray(out[0]), dtype=torch.float32).view(3, 4), weight)


def test_row_sums(client: Client) -> None:
    batch = sample_batch()
    reply, frames = client.call("row_sums", payloads=[{"kind": "tensordict"}], frames=(encode_batch(batch),))
    ok(reply)
    assert reply["payloads"] == [{"kind": "tensordict"}]
    sums = decode_batch(frames[0])
    assert sums.batch_size == (2,)
    cols = sums.columns
    assert list(cols) == list(batch.columns)
    obs = batch.columns["obs"]
    assert isinstance(obs, torch.Tensor)
    expected = {
        "obs": obs.double().sum(1),
        "reward": torch.tensor([1.0, -7.0], dtype=torch.float64),
        "mask": torch.tensor([1.0, 0.0], dtype=torch.float64),
        "bf": torch.tensor([3.5, 7.75], dtype=torch.float64),
        "tokens": torch.tensor([7.0, 18.0], dtype=torch.float64),
        "pairs": torch.tensor([0.0, 15.0], dtype=torch.float64),
        "text": torch.tensor([11, 0], dtype=torch.int64),
    }
    for key, want in expected.items():
        got = cols[key]
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype, key
        assert torch.allclose(got, want) if want.is_floating_point() else torch.equal(got, want), key
    nested = cols["next"]
    assert isinstance(nested, dict)
    assert torch.equal(nested["reward"], torch.tensor([0.5, 1.5], dtype=torch.float64))
    assert torch.equal(nested["done"], torch.tensor([0.0, 1.0], dtype=torch.float64))


def test_row_sums_multi_dim_batch(client: Client) -> None:
    x = torch.randn(2, 3, 4, 5)
    message = {"role": "user", "content": "hi"}
    h = HistoryColumn(rows=[[], [message], [message] * 3, [], [message] * 2, [message]])
    batch = TensorBatch((2, 3), {"x": x, "s": ["a", "bb", "ccc", "", "é", "xyz"], "h": h})
    reply, frames = client.call("row_sums", payloads=[{"kind": "tensordict"}], frames=(encode_batch(batch),))
    ok(reply)
    sums = decode_batch(frames[0])
    assert sums.batch_size == (2, 3)
    got = sums.columns["x"]
    assert isinstance(got, torch.Tensor)
    assert torch.allclose(got, x.double().sum((2, 3)))
    assert torch.equal(sums.columns["s"], torch.tensor([[1, 2, 3], [0, 1, 3]]))  # type: ignore[arg-type]
    assert torch.equal(sums.columns["h"], torch.tensor([[0, 1, 3], [0, 2, 1]]))  # type: ignore[arg-type]


def test_heartbeats_answered_while_computing(client: Client) -> None:
    compute_id = client.request("compute_for", {"seconds": 1.5})
    assert client.wait_busy() == {"busy": True, "queued": 0}
    latencies = []
    busy_seen = []
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        started = time.monotonic()
        heartbeat_id = client.heartbeat()
        reply, _ = client.recv(timeout=1.0)
        latencies.append(time.monotonic() - started)
        assert reply == {"v": 1, "type": "heartbeat", "id": heartbeat_id, "busy": True, "queued": 0}
        busy_seen.append(reply["busy"])
        time.sleep(0.1)
    assert len(latencies) >= 5
    assert max(latencies) < 0.5, latencies  # the compute runs 1.5 s: a blocked I/O thread would show
    reply, _ = client.recv(timeout=5)
    assert reply["id"] == compute_id and ok(reply)["iterations"] > 0
    heartbeat_id = client.heartbeat()
    assert client.recv()[0] == {"v": 1, "type": "heartbeat", "id": heartbeat_id, "busy": False, "queued": 0}


def test_cancel_queued_request(client: Client) -> None:
    first = client.request("compute_for", {"seconds": 0.6})
    second = client.request("compute_for", {"seconds": 30})
    assert client.wait_busy() == {"busy": True, "queued": 1}
    client.send({"v": 1, "type": "cancel", "id": second})
    reply, _ = client.recv(timeout=0.5)  # answered at once, before the first request finishes
    assert reply["id"] == second
    assert "before it started" in error(reply, "CANCELLED")
    reply, _ = client.recv(timeout=5)
    assert reply["id"] == first and ok(reply)["iterations"] > 0
    client.send({"v": 1, "type": "cancel", "id": 123456789})  # unknown ids are ignored
    assert ok(client.call("ping")[0]) == {}


def test_cancel_running_request_stops_it(client: Client) -> None:
    request_id = client.request("compute_for", {"seconds": 30})
    assert client.wait_busy() == {"busy": True, "queued": 0}
    started = time.monotonic()
    client.send({"v": 1, "type": "cancel", "id": request_id})
    reply, _ = client.recv(timeout=2)
    assert reply["id"] == request_id
    assert "while running" in error(reply, "CANCELLED")
    assert time.monotonic() - started < 1.0


def test_duplicate_id_in_flight(client: Client) -> None:
    request_id = client.request("compute_for", {"seconds": 0.3})
    client.send(
        {"v": 1, "type": "request", "id": request_id, "method": "compute_for", "args": {"seconds": 0}}
    )
    reply, _ = client.recv()
    assert reply["id"] == request_id
    assert "already in flight" in error(reply, "BAD_ENVELOPE")
    reply, _ = client.recv()
    assert reply["id"] == request_id and ok(reply)


# ---- bad inputs: each gets an error naming the problem, and the worker keeps serving ----------------------

_TD = {"kind": "tensordict"}


def _arrow() -> bytes:
    return bytes(encode_batch(sample_batch()))


BAD_INPUTS: dict[str, tuple[list[Any], str, str, bool]] = {
    # name: (frames, code, text in message, whether the reply carries the request id 77)
    "not json": ([b"{not json"], "BAD_ENVELOPE", "not valid JSON", False),
    "empty envelope": ([b""], "BAD_ENVELOPE", "empty", False),
    "not utf-8": ([b'{"v":1,"id":1,"x":"\xff"}'], "BAD_ENVELOPE", "UTF-8", False),
    "not an object": ([b"[1,2]"], "BAD_ENVELOPE", "JSON object", False),
    "NaN": (
        [b'{"v":1,"type":"request","id":77,"method":"ping","args":{"x":NaN}}'],
        "BAD_ENVELOPE",
        "NaN",
        False,
    ),
    "missing v": ([{"type": "request", "id": 77, "method": "ping"}], "BAD_ENVELOPE", '"v"', True),
    "v not int": ([{"v": "1", "type": "request", "id": 77, "method": "ping"}], "BAD_ENVELOPE", '"v"', True),
    "wrong version": (
        [{"v": 2, "type": "request", "id": 77, "method": "ping"}],
        "UNSUPPORTED_VERSION",
        "2",
        True,
    ),
    "missing type": ([{"v": 1, "id": 77, "method": "ping"}], "BAD_ENVELOPE", '"type"', True),
    "bad type": ([{"v": 1, "type": "response", "id": 77}], "BAD_ENVELOPE", '"type" must be one of', True),
    "missing id": ([{"v": 1, "type": "request", "method": "ping"}], "BAD_ENVELOPE", '"id"', False),
    "id string": (
        [{"v": 1, "type": "request", "id": "abc", "method": "ping"}],
        "BAD_ENVELOPE",
        '"id" must be a non-negative integer (at most 2**53 - 1), got "abc"',
        False,
    ),
    "id negative": ([{"v": 1, "type": "heartbeat", "id": -1}], "BAD_ENVELOPE", "got -1", False),
    "id float": ([{"v": 1, "type": "cancel", "id": 1.5}], "BAD_ENVELOPE", "got 1.5", False),
    "missing method": ([{"v": 1, "type": "request", "id": 77}], "BAD_ENVELOPE", '"method"', True),
    "method not string": (
        [{"v": 1, "type": "request", "id": 77, "method": 5}],
        "BAD_ENVELOPE",
        '"method"',
        True,
    ),
    "args not object": (
        [{"v": 1, "type": "request", "id": 77, "method": "ping", "args": [1]}],
        "BAD_ENVELOPE",
        '"args" must be a JSON object, got [1]',
        True,
    ),
    "payloads not array": (
        [{"v": 1, "type": "request", "id": 77, "method": "echo", "payloads": {}}],
        "BAD_ENVELOPE",
        '"payloads"',
        True,
    ),
    "payload kind": (
        [{"v": 1, "type": "request", "id": 77, "method": "echo", "payloads": [{"kind": "pickle"}]}, b"x"],
        "BAD_ENVELOPE",
        '"payloads[0].kind" must be one of',
        True,
    ),
    "tensor dtype": (
        [
            {
                "v": 1,
                "type": "request",
                "id": 77,
                "method": "echo",
                "payloads": [{"kind": "tensor", "dtype": "f4"}],
            },
            b"x",
        ],
        "BAD_ENVELOPE",
        '"payloads[0].dtype"',
        True,
    ),
    "tensor shape": (
        [
            {
                "v": 1,
                "type": "request",
                "id": 77,
                "method": "echo",
                "payloads": [{"kind": "tensor", "dtype": "float32", "shape": [2, -1]}],
            },
            b"x",
        ],
        "BAD_ENVELOPE",
        '"payloads[0].shape"',
        True,
    ),
    "unknown method": (
        [{"v": 1, "type": "request", "id": 77, "method": "fly"}],
        "UNKNOWN_METHOD",
        "ping",
        True,
    ),
    "missing argument": (
        [{"v": 1, "type": "request", "id": 77, "method": "compute_for"}],
        "BAD_ARGUMENTS",
        '"seconds"',
        True,
    ),
    "argument type": (
        [{"v": 1, "type": "request", "id": 77, "method": "compute_for", "args": {"seconds": "x"}}],
        "BAD_ARGUMENTS",
        '"seconds" must be a finite number, got "x"',
        True,
    ),
    "argument range": (
        [{"v": 1, "type": "request", "id": 77, "method": "compute_for", "args": {"seconds": -1}}],
        "BAD_ARGUMENTS",
        '"seconds" must be >= 0',
        True,
    ),
    "unknown argument": (
        [{"v": 1, "type": "request", "id": 77, "method": "ping", "args": {"fast": True}}],
        "BAD_ARGUMENTS",
        '"fast"',
        True,
    ),
    "handshake without version": (
        [{"v": 1, "type": "request", "id": 77, "method": "handshake"}],
        "BAD_ARGUMENTS",
        '"protocolVersion"',
        True,
    ),
    "described payload missing": (
        [{"v": 1, "type": "request", "id": 77, "method": "echo", "payloads": [_TD]}],
        "BAD_PAYLOAD",
        "describes 1 payload(s)",
        True,
    ),
    "undescribed payload frame": (
        [{"v": 1, "type": "request", "id": 77, "method": "echo"}, b"extra"],
        "BAD_PAYLOAD",
        "carries 1 payload frame(s)",
        True,
    ),
    "undescribed payload frame to a method without payloads": (
        [{"v": 1, "type": "request", "id": 77, "method": "ping"}, b"extra"],
        "BAD_PAYLOAD",
        "carries 1 payload frame(s)",
        True,
    ),
    "payload to a method without payloads": (
        [{"v": 1, "type": "request", "id": 77, "method": "ping", "payloads": [{"kind": "bytes"}]}, b"x"],
        "BAD_PAYLOAD",
        "ping takes payloads [none]",
        True,
    ),
    "wrong payload kind": (
        [{"v": 1, "type": "request", "id": 77, "method": "row_sums", "payloads": [{"kind": "bytes"}]}, b"x"],
        "BAD_PAYLOAD",
        "row_sums takes payloads [tensordict], got [bytes]",
        True,
    ),
    "raw tensor length": (
        [
            {
                "v": 1,
                "type": "request",
                "id": 77,
                "method": "echo",
                "payloads": [{"kind": "tensor", "dtype": "float32", "shape": [2, 3]}],
            },
            b"\0" * 20,
        ],
        "BAD_PAYLOAD",
        "payload 0 (tensor float32 [2, 3]): expected 24 bytes",
        True,
    ),
    "truncated arrow": (
        [{"v": 1, "type": "request", "id": 77, "method": "echo", "payloads": [_TD]}, _arrow()[:-100]],
        "BAD_PAYLOAD",
        "payload 0 (tensordict)",
        True,
    ),
    "random bytes as arrow": (
        [
            {"v": 1, "type": "request", "id": 77, "method": "row_sums", "payloads": [_TD]},
            bytes(range(256)) * 4,
        ],
        "BAD_PAYLOAD",
        "payload 0 (tensordict)",
        True,
    ),
    "second payload bad": (
        [
            {"v": 1, "type": "request", "id": 77, "method": "echo", "payloads": [_TD, _TD]},
            _arrow(),
            b"\xff" * 64,
        ],
        "BAD_PAYLOAD",
        "payload 1 (tensordict)",
        True,
    ),
    "too large": (
        [
            {"v": 1, "type": "request", "id": 77, "method": "echo", "payloads": [{"kind": "bytes"}]},
            b"\0" * (MAX_PAYLOAD + 1),
        ],
        "PAYLOAD_TOO_LARGE",
        str(MAX_PAYLOAD),
        True,
    ),
    "heartbeat with payload": (
        [{"v": 1, "type": "heartbeat", "id": 77}, b"x"],
        "BAD_PAYLOAD",
        "heartbeat",
        True,
    ),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_gets_error_then_worker_serves(client: Client, name: str) -> None:
    frames, code, text, has_id = BAD_INPUTS[name]
    client.send(*frames)
    reply, extra = client.recv()
    assert extra == []
    assert reply["v"] == 1 and reply["type"] == "response"
    message = error(reply, code)
    assert text in message, message
    assert reply["id"] == (77 if has_id else None)
    assert isinstance(reply["error"]["details"], dict)
    assert ok(client.call("ping")[0]) == {}


def test_bad_payload_details_name_the_index(client: Client) -> None:
    reply, _ = client.call("echo", payloads=[_TD], frames=(b"garbage!" * 8,))
    error(reply, "BAD_PAYLOAD")
    assert reply["error"]["details"]["payloadIndex"] == 0


# ---- the server in-process: INTERNAL errors from a method that raises ----------------------------------


def test_internal_error_has_type_and_traceback(zctx: zmq.Context) -> None:
    def explode(_ctx: Any, _args: Any) -> dict[str, Any]:
        raise ZeroDivisionError("boom")

    def not_json(_ctx: Any, _args: Any) -> dict[str, Any]:
        return {"x": float("nan")}

    registry = MethodRegistry()
    registry.add("explode", explode, thread="compute")
    registry.add("explode_io", explode, thread="io")
    registry.add("not_json", not_json, thread="compute")
    registry.add("ping", lambda _c, _a: {}, thread="io")
    with served_in_thread(registry) as (endpoint, directory, result):
        c = Client(zctx, endpoint)
        for method in ("explode", "explode_io"):
            reply, _ = c.call(method)
            assert "ZeroDivisionError: boom" in error(reply, "INTERNAL")
            assert reply["error"]["details"]["type"] == "ZeroDivisionError"
            assert "raise ZeroDivisionError" in reply["error"]["details"]["traceback"]
        assert "not JSON" in error(c.call("not_json")[0], "INTERNAL")
        assert ok(c.call("ping")[0]) == {}
        c.close()
    assert result == [0]
    assert not os.path.exists(f"{directory}/inproc.sock")


@contextmanager
def served_in_thread(registry: MethodRegistry) -> Iterator[tuple[str, str, list[int]]]:
    """A ``WorkerServer`` of ``registry`` run in this process on a thread named ``io-loop``: its bound
    endpoint, its directory and the list its exit code lands in; shut down, directory removed, on exit."""
    directory = tempfile.mkdtemp(prefix="ptw-", dir="/tmp")
    server = WorkerServer(
        ServerConfig(
            endpoint=f"ipc://{directory}/inproc.sock", announce=False, watch_stdin=False, insecure=True
        ),
        registry,
    )
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(server.run()), name="io-loop", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while server.bound_endpoint is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.bound_endpoint is not None
        yield server.bound_endpoint, directory, result
    finally:
        server.request_shutdown()
        thread.join(10)
        shutil.rmtree(directory, ignore_errors=True)


def test_an_inline_method_runs_on_the_io_thread_only_when_the_executor_is_idle(zctx: zmq.Context) -> None:
    # ``inline``: the I/O thread runs it itself when nothing is running, queued or unsent (two thread
    # hand-offs fewer); behind a running compute call it queues, and the compute replies keep request order.
    release = threading.Event()
    started = threading.Event()

    def block(_ctx: Any, _args: Any) -> dict[str, Any]:
        started.set()
        release.wait(10)
        return {"thread": threading.current_thread().name}

    def where(_ctx: Any, _args: Any) -> dict[str, Any]:
        return {"thread": threading.current_thread().name}

    registry = MethodRegistry()
    registry.add("block", block, thread="compute")
    registry.add("where", where, thread="compute", inline=True)
    registry.add("where_compute", where, thread="compute")
    with pytest.raises(ValueError, match="inline is for compute methods"):
        registry.add("bad", where, thread="io", inline=True)
    assert registry.describe()["methods"]["where"]["inline"] is True
    assert "inline" not in registry.describe()["methods"]["where_compute"]
    with served_in_thread(registry) as (endpoint, _directory, result):
        try:
            c = Client(zctx, endpoint)
            assert ok(c.call("where")[0]) == {"thread": "io-loop"}  # idle: run by the I/O thread
            assert ok(c.call("where_compute")[0]) == {"thread": "posttrain-compute"}
            blocked = c.request("block")
            assert started.wait(10)
            queued = c.request("where")  # the compute thread is busy: queued behind ``block``
            heartbeat = c.heartbeat()
            beat, _ = c.recv()  # answered while ``block`` runs, so ``where`` did not jump the queue
            assert beat["id"] == heartbeat and beat["busy"] is True and beat["queued"] == 1
            release.set()
            first, second = c.recv()[0], c.recv()[0]
            assert [first["id"], second["id"]] == [blocked, queued]
            assert ok(second) == {"thread": "posttrain-compute"}
            c.close()
        finally:
            release.set()
    assert result == [0]


# ---- lifecycle -----------------------------------------------------------------------------------------


def test_shutdown_exits_zero_and_removes_socket(zctx: zmq.Context) -> None:
    w = start_worker(extensions=[DIAGNOSTICS])
    try:
        c = Client(zctx, w.endpoint)
        queued = c.request("compute_for", {"seconds": 0.5})
        waiting = c.request("compute_for", {"seconds": 5})
        assert ok(c.call("shutdown")[0]) == {}
        replies = {r["id"]: r for r in (c.recv()[0], c.recv()[0])}
        assert "shutting down" in error(replies[waiting], "CANCELLED")
        error(replies[queued], "CANCELLED")  # it was running: told to stop
        c.close()
        assert w.wait() == 0, w.stderr()
        assert w.socket_path is not None and not w.socket_path.exists()
        assert sorted(p.name for p in w.directory.iterdir()) == ["stderr.log"]
    finally:
        stop_worker(w)


def test_stdin_eof_exits(zctx: zmq.Context) -> None:
    w = start_worker()
    try:
        c = Client(zctx, w.endpoint)
        assert ok(c.call("ping")[0]) == {}
        c.close()
        assert w.proc.stdin is not None
        w.proc.stdin.close()
        assert w.wait() == 0, w.stderr()
        assert w.socket_path is not None and not w.socket_path.exists()
        assert "stdin closed" in w.stderr()
    finally:
        stop_worker(w)


def test_sigterm_exits_cleanly_while_computing(zctx: zmq.Context) -> None:
    w = start_worker(extensions=[DIAGNOSTICS])
    try:
        c = Client(zctx, w.endpoint)
        c.request("compute_for", {"seconds": 30})
        time.sleep(0.2)
        w.proc.send_signal(signal.SIGTERM)
        assert w.wait(timeout=5) == 0, w.stderr()
        assert w.socket_path is not None and not w.socket_path.exists()
        assert "SIGTERM" in w.stderr()
        c.close()
    finally:
        stop_worker(w)


def test_tcp_endpoint_and_sigint(zctx: zmq.Context) -> None:
    w = start_worker("tcp://127.0.0.1:0")
    try:
        assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", w.endpoint) and not w.endpoint.endswith(":0")
        c = Client(zctx, w.endpoint)
        assert ok(c.call("ping")[0]) == {}
        c.close()
        w.proc.send_signal(signal.SIGINT)
        assert w.wait() == 0, w.stderr()
        assert "Traceback" not in w.stderr()
    finally:
        stop_worker(w)


def test_bad_endpoint_fails_fast() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain_worker", "--endpoint", "ipc:///nonexistent-dir/w.sock"],
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b"does not exist" in proc.stderr


# ---- extensions and --describe-methods -----------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "posttrain_worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_test_methods_need_the_extension(bare_client: Client) -> None:
    for method in ("row_sums", "compute_for"):
        reply, _ = bare_client.call(method)
        assert "unknown method" in error(reply, "UNKNOWN_METHOD")
        assert method not in reply["error"]["details"]["known"]
    assert "row_sums" not in ok(bare_client.call("info")[0])["capabilities"]["methods"]


def describe_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``main(["--describe-methods", *args])`` in this process: its exit code, stdout and stderr."""
    try:
        code = cli.main(["--describe-methods", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (None, "no such file"),
        ("import nonexistent_module_xyz\n", "import failed: ModuleNotFoundError"),
        ("def register(:\n", "import failed: SyntaxError"),
        ("REGISTER = 1\n", "defines no register(registry) function"),
        ("def register(registry):\n    raise RuntimeError()\n", "register(registry) failed: RuntimeError"),
        (
            "def register(registry):\n    registry.add('ping', lambda c, a: {}, thread='io')\n",
            "method 'ping' is already registered",
        ),
    ],
)
def test_bad_extension_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, source: str | None, reason: str
) -> None:
    path = tmp_path / "ext.py"
    if source is not None:
        path.write_text(source)
    code, out, err = describe_in_process(capsys, "--extension", str(DIAGNOSTICS), "--extension", str(path))
    assert code == 2 and out == ""
    assert f"--extension {str(path)!r}: {reason}" in err, err


def test_worker_with_a_bad_extension_does_not_start(tmp_path: Path) -> None:
    missing = tmp_path / "missing.py"
    proc = run_cli("--endpoint", f"ipc://{tmp_path}/w.sock", "--extension", str(missing))
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"--extension {str(missing)!r}: no such file" in proc.stderr
    assert not (tmp_path / "w.sock").exists()


def test_endpoint_is_required_unless_describing() -> None:
    proc = run_cli("--worker-id", "1")
    assert proc.returncode == 2
    assert "the following arguments are required: --endpoint" in proc.stderr


def test_describe_methods_lists_every_method_with_its_args() -> None:
    proc = run_cli("--describe-methods")
    assert proc.returncode == 0, proc.stderr
    described = json.loads(proc.stdout)
    assert described == default_registry().describe()
    methods = described["methods"]
    assert list(methods) == sorted(default_registry().names)
    assert "row_sums" not in methods and "compute_for" not in methods
    assert methods["ping"] == {"thread": "io", "payloads": [], "args": {}}
    assert methods["echo"]["payloads"] == "any"
    assert methods["generate"]["payloads"] == ["tensordict"]
    load = methods["load_model"]
    assert load["thread"] == "compute"
    assert load["args"]["name"] == {"type": "string", "required": True, "nullable": False}
    assert load["args"]["path"] == {"type": "string", "required": True, "nullable": False}
    assert load["args"]["dtype"] == {"type": "choice", "required": False, "nullable": False}
    assert load["args"]["maxModelLen"] == {"type": "integer", "required": False, "nullable": True}
    assert set(load["args"]) == {
        "name",
        "path",
        "dtype",
        "device",
        "replace",
        "backend",
        "gpuMemoryUtilization",
        "maxModelLen",
        "enablePrefixCaching",
        "enforceEager",
        "chatTemplate",
    }
    create = methods["trainer_create"]["args"]
    assert create["loss"] == {"type": "object", "required": True, "nullable": False}
    assert create["gradClip"] == {"type": "number", "required": False, "nullable": True}
    assert methods["save_checkpoint"]["args"]["dataPosition"]["type"] == "json"


def test_describe_methods_with_the_extension(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = describe_in_process(capsys, "--extension", str(DIAGNOSTICS))
    assert code == 0, err
    methods = json.loads(out)["methods"]
    assert set(methods) == {*default_registry().names, "row_sums", "compute_for"}
    assert methods["row_sums"] == {"thread": "compute", "payloads": ["tensordict"], "args": {}}
    assert methods["compute_for"] == {
        "thread": "compute",
        "payloads": [],
        "args": {"seconds": {"type": "number", "required": True, "nullable": False}},
    }


def test_registry_describe_in_process() -> None:
    registry = MethodRegistry()
    schema = ArgsSchema((Arg("b", "integer", default=None, nullable=True), Arg("a", "strings")))
    registry.add("zeta", lambda _c, _a: {}, thread="io", args=schema, payloads="any")
    registry.add("alpha", lambda _c, _a: {}, thread="compute", payloads=("tensor", "bytes"))
    assert registry.names == ["zeta", "alpha"]  # registration order: the handshake's list
    described = registry.describe()
    assert json.loads(json.dumps(described)) == described
    assert described == {
        "methods": {
            "alpha": {"thread": "compute", "payloads": ["tensor", "bytes"], "args": {}},
            "zeta": {
                "thread": "io",
                "payloads": "any",
                "args": {
                    "a": {"type": "strings", "required": True, "nullable": False},
                    "b": {"type": "integer", "required": False, "nullable": True},
                },
            },
        }
    }
    assert list(described["methods"]) == ["alpha", "zeta"]
    assert list(described["methods"]["zeta"]["args"]) == ["a", "b"]
