"""Bad input at the door: nesting-depth and envelope-size limits, the socket's frame-size limit, the cap on
requests in flight.

One real worker (``--max-payload-bytes 2 MiB --max-in-flight 3``, with the test extension's ``compute_for``)
serves every test; each checks that the worker answers (or drops the sender) and keeps serving.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from posttrain_worker import PROTOCOL_VERSION
from posttrain_worker.protocol.depth import MAX_NESTING_DEPTH, depth_over_limit, nesting_depth
from posttrain_worker.protocol.envelope import MAX_ENVELOPE_BYTES
from posttrain_worker.server.config import MIN_FRAME_LIMIT_BYTES, ServerConfig
from worker_harness import DIAGNOSTICS, LIVENESS, Client, Worker, error, ok, start_worker, stop_worker
from zmq.utils.monitor import recv_monitor_message

# 2 MiB, the socket's frame limit too: above the envelope cap, so an envelope over the cap reaches the parser.
MAX_PAYLOAD = 2 * MAX_ENVELOPE_BYTES
MAX_IN_FLIGHT = 3


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = start_worker(
        None,
        "--max-payload-bytes",
        str(MAX_PAYLOAD),
        "--max-in-flight",
        str(MAX_IN_FLIGHT),
        extensions=[DIAGNOSTICS, LIVENESS],
    )
    yield w
    stop_worker(w)


@pytest.fixture
def client(zctx: zmq.Context, worker: Worker) -> Iterator[Client]:
    c = Client(zctx, worker.endpoint)
    yield c
    c.close()


def assert_serving(client: Client) -> None:
    assert ok(client.call("ping")[0]) == {}


# ---- nesting depth -------------------------------------------------------------------------------------


def test_nesting_depth_skips_strings_and_escapes() -> None:
    assert nesting_depth("3") == 0
    assert nesting_depth('{"a": [1, [2]], "b": "[[[{{{"}') == 3
    assert nesting_depth(r'["\"[[[", {"k\\": [[]]}]') == 4
    assert depth_over_limit("[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH) is None
    over = MAX_NESTING_DEPTH + 1
    assert depth_over_limit("[" * over + "]" * over) == over


def _unterminated(size: int, tail: str = "") -> str:
    """``{"a":"\\"\\"...`` + ``tail``, ``size`` characters: a string that never ends (the worst case of a
    string-skipping regex, which backtracks from every quote)."""
    head = '{"a":"'
    return head + '\\"' * ((size - len(head) - len(tail)) // 2) + tail


def test_nesting_depth_is_linear_on_an_unterminated_string() -> None:
    for tail in ("", "[" * 1000):
        text = _unterminated(4 * 1024**2, tail)
        started = time.monotonic()
        assert nesting_depth(text) == 1  # the brackets are inside the string that never ends
        assert depth_over_limit(text) is None
        assert time.monotonic() - started < 5, "the depth check is not linear"


def test_an_unterminated_string_in_a_1_mib_envelope_is_answered_promptly(client: Client) -> None:
    # Checked before the secret: a quadratic depth check would stall the worker's I/O thread for an hour.
    for tail in ("", "[" * 1000):
        head = _unterminated(MAX_ENVELOPE_BYTES, tail).encode()
        assert len(head) <= MAX_ENVELOPE_BYTES
        client.send(head)
        reply, _ = client.recv(timeout=10)
        assert "not valid JSON" in error(reply, "BAD_ENVELOPE")
    assert_serving(client)


def test_an_envelope_over_its_cap_gets_bad_envelope_naming_size_and_limit(client: Client) -> None:
    envelope = {"v": PROTOCOL_VERSION, "type": "request", "id": 31, "method": "ping", "args": {"note": ""}}
    filler = MAX_ENVELOPE_BYTES + 1 - len(json.dumps(envelope))
    envelope["args"] = {"note": "x" * filler}
    head = json.dumps(envelope).encode()
    assert len(head) == MAX_ENVELOPE_BYTES + 1  # under the socket's frame limit: it reaches the parser
    client.send(head)
    reply, _ = client.recv()
    message = error(reply, "BAD_ENVELOPE")
    assert f"{MAX_ENVELOPE_BYTES + 1} bytes" in message and str(MAX_ENVELOPE_BYTES) in message, message
    assert reply["id"] is None  # refused unread
    details = {"bytes": MAX_ENVELOPE_BYTES + 1, "maxEnvelopeBytes": MAX_ENVELOPE_BYTES}
    assert reply["error"]["details"] == details
    assert_serving(client)


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_a_100k_deep_envelope_gets_bad_envelope_with_its_id(client: Client) -> None:
    head = (
        f'{{"v":{PROTOCOL_VERSION},"type":"request","id":4242,"method":"ping",'
        f'"args":{{"x":{_deep(100_000)}}},"payloads":[]}}'
    )
    client.send(head.encode())
    reply, _ = client.recv()
    message = error(reply, "BAD_ENVELOPE")
    assert reply["id"] == 4242  # read from before the deep part, so a client's pending request is answered
    assert str(MAX_NESTING_DEPTH) in message and "100002 levels" in message, message
    assert reply["error"]["details"] == {"depth": 100_002, "maxDepth": MAX_NESTING_DEPTH}
    assert_serving(client)


def test_a_deep_envelope_with_its_id_after_the_deep_part_gets_id_null(client: Client) -> None:
    head = f'{{"args":{{"x":{_deep(500)}}},"v":{PROTOCOL_VERSION},"type":"request","id":7,"method":"ping"}}'
    client.send(head.encode())
    reply, _ = client.recv()
    error(reply, "BAD_ENVELOPE")
    assert reply["id"] is None
    assert_serving(client)


def test_nesting_up_to_the_limit_is_parsed(client: Client) -> None:
    # The envelope is level 1 and args level 2: a value nested 62 more levels reaches exactly the limit.
    inner = MAX_NESTING_DEPTH - 2
    head = (
        f'{{"v":{PROTOCOL_VERSION},"type":"request","id":99,"method":"ping",'
        f'"args":{{"x":{_deep(inner)}}}}}'
    )
    client.send(head.encode())
    reply, _ = client.recv()
    # Parsed: ping takes no arguments, so the method's own check answers, not the envelope's.
    assert "x" in error(reply, "BAD_ARGUMENTS")
    client.send(head.replace('"x":', '"x":[', 1).replace("}}", "]}}", 1).encode())
    reply, _ = client.recv()
    assert "65 levels" in error(reply, "BAD_ENVELOPE")


# ---- the socket's frame-size limit -----------------------------------------------------------------------


def test_frame_limit_is_the_payload_limit_with_a_floor() -> None:
    assert ServerConfig("ipc:///x", max_payload_bytes=10).max_frame_bytes == MIN_FRAME_LIMIT_BYTES
    assert MIN_FRAME_LIMIT_BYTES >= MAX_ENVELOPE_BYTES  # an envelope up to its cap is answered, never cut
    assert ServerConfig("ipc:///x", max_payload_bytes=5 * 1024**3).max_frame_bytes == 5 * 1024**3


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM line")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status")
def test_an_oversized_frame_disconnects_its_sender_before_it_is_buffered(
    zctx: zmq.Context, worker: Worker, client: Client
) -> None:
    foreign = zctx.socket(zmq.DEALER)
    foreign.setsockopt(zmq.LINGER, 0)
    monitor = foreign.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    try:
        foreign.connect(worker.endpoint)
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_CONNECTED
        peak_before = _peak_rss_bytes(worker.proc.pid)
        envelope = {"v": PROTOCOL_VERSION, "type": "request", "id": 1, "method": "echo", "args": {}}
        envelope["payloads"] = [{"kind": "bytes"}]
        oversized = bytes(64 * 1024**2)  # 64 x the limit
        foreign.send_multipart([json.dumps(envelope).encode(), oversized])
        assert monitor.poll(10_000), "the worker did not disconnect the sender"
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
        assert not foreign.poll(300), "an oversized frame got a reply"
        # The frame was dropped from its header: the worker never held the 64 MiB.
        grown = _peak_rss_bytes(worker.proc.pid) - peak_before
        assert grown < 32 * 1024**2, f"the worker's peak memory grew by {grown} bytes"
        assert_serving(client)  # and another client is served as before
    finally:
        foreign.disable_monitor()
        monitor.close(linger=0)
        foreign.close(linger=0)


def test_a_frame_at_the_limit_is_received_and_answered(client: Client) -> None:
    # Exactly the limit: received whole (the socket cuts only larger frames) and echoed back.
    reply, frames = client.call(
        "echo", payloads=[{"kind": "bytes"}], frames=(b"\x07" * MAX_PAYLOAD,), timeout=30
    )
    ok(reply)
    assert len(frames[0]) == MAX_PAYLOAD


# ---- the cap on requests in flight ----------------------------------------------------------------------


def test_requests_over_the_cap_get_overloaded_at_once(client: Client) -> None:
    accepted = [client.request("compute_for", {"seconds": 0.4}) for _ in range(MAX_IN_FLIGHT)]
    refused = [client.request("compute_for", {"seconds": 0.0}) for _ in range(4)]
    ping = client.request("ping")  # the I/O thread still answers while the compute queue is full
    answers: dict[int, Any] = {}
    while len(answers) < len(accepted) + len(refused) + 1:
        reply, _ = client.recv(timeout=30)
        answers[reply["id"]] = reply
    for request_id in refused:
        message = error(answers[request_id], "OVERLOADED")
        assert "compute_for" in message and str(MAX_IN_FLIGHT) in message, message
        assert answers[request_id]["error"]["details"] == {"maxInFlight": MAX_IN_FLIGHT}
    for request_id in accepted:
        assert ok(answers[request_id])["iterations"] > 0
    assert ok(answers[ping]) == {}
    # Refused at once: the OVERLOADED answers and the ping's came before the first compute_for finished.
    assert list(answers)[: len(refused) + 1] == [*refused, ping], list(answers)
    # Once answered, the slots are free again.
    assert ok(client.call("compute_for", {"seconds": 0.0})[0])["iterations"] == 0


def test_max_in_flight_below_one_is_a_usage_error() -> None:
    endpoint = "ipc:///tmp/unused.sock"
    done = subprocess.run(
        [sys.executable, "-m", "posttrain_worker", "--endpoint", endpoint, "--max-in-flight", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--max-in-flight must be >= 1, got 0" in done.stderr


# ---- faults outside the Exception hierarchy --------------------------------------------------------------


def test_a_method_raising_a_base_exception_gets_internal_and_the_worker_keeps_serving(client: Client) -> None:
    message = error(client.call("raise_base_exception")[0], "INTERNAL")
    assert "NotAnException" in message
    assert_serving(client)
