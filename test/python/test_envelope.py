"""The envelope schema and endpoint parsing, without sockets."""

from __future__ import annotations

import json

import pytest
from posttrain_worker.protocol.envelope import (
    BytesPayload,
    Cancel,
    Heartbeat,
    Request,
    TensorDictPayload,
    TensorPayload,
    heartbeat_reply,
    parse_envelope,
    response_error,
    response_ok,
)
from posttrain_worker.protocol.errors import ProtocolViolation
from posttrain_worker.server.endpoint import parse_endpoint


def parse(obj: object) -> object:
    return parse_envelope(json.dumps(obj).encode())


def test_parses_the_three_client_types() -> None:
    request = parse(
        {
            "v": 1,
            "type": "request",
            "id": 7,
            "method": "echo",
            "args": {"a": 1},
            "payloads": [
                {"kind": "tensordict"},
                {"kind": "tensor", "dtype": "bfloat16", "shape": [2, 3], "name": "w"},
                {"kind": "bytes"},
            ],
            "future_field": "ignored",
        }
    )
    assert request == Request(
        7,
        "echo",
        {"a": 1},
        (TensorDictPayload(), TensorPayload("bfloat16", (2, 3), "w"), BytesPayload()),
    )
    assert isinstance(request, Request) and request.payloads[1].nbytes == 12  # type: ignore[union-attr]
    assert parse({"v": 1, "type": "request", "id": 0, "method": "ping"}) == Request(0, "ping", {}, ())
    assert parse({"v": 1, "type": "heartbeat", "id": 8}) == Heartbeat(8)
    assert parse({"v": 1, "type": "cancel", "id": 7}) == Cancel(7)


@pytest.mark.parametrize(
    ("obj", "code", "message", "request_id"),
    [
        ({"v": 1, "type": "request", "id": "abc", "method": "x"}, "BAD_ENVELOPE", '"id" must be', None),
        ({"v": 1, "type": "request", "id": 2**53, "method": "x"}, "BAD_ENVELOPE", "2**53 - 1", None),
        ({"v": 1, "type": "request", "id": True, "method": "x"}, "BAD_ENVELOPE", "got true", None),
        ({"v": 3, "type": "request", "id": 4, "method": "x"}, "UNSUPPORTED_VERSION", "version 3", 4),
        ({"v": 1, "type": "request", "id": 4, "method": ""}, "BAD_ENVELOPE", '"method"', 4),
        ({"v": 1, "type": "request", "id": 4, "method": "x", "args": None}, "BAD_ENVELOPE", "got null", 4),
        (
            {
                "v": 1,
                "type": "request",
                "id": 4,
                "method": "x",
                "payloads": [{"kind": "tensor", "dtype": "int64"}],
            },
            "BAD_ENVELOPE",
            '"payloads[0].shape" must be an array of non-negative integers, got nothing',
            4,
        ),
        (
            {"v": 1, "type": "request", "id": 4, "method": "x", "payloads": [1]},
            "BAD_ENVELOPE",
            '"payloads[0]" must be an object',
            4,
        ),
        (
            {"v": 1, "type": "request", "id": 4, "method": "x", "payloads": [{"kind": "tensor", "name": 1}]},
            "BAD_ENVELOPE",
            '"payloads[0].dtype"',
            4,
        ),
        ("just a string", "BAD_ENVELOPE", "JSON object", None),
    ],
)
def test_violations_name_the_field(obj: object, code: str, message: str, request_id: int | None) -> None:
    with pytest.raises(ProtocolViolation) as info:
        parse(obj)
    assert info.value.code == code
    assert message in info.value.message
    assert info.value.request_id == request_id


def test_builders() -> None:
    assert json.loads(response_ok(3, {"x": 1}, [TensorPayload("float32", (2,)), BytesPayload()])) == {
        "v": 1,
        "type": "response",
        "id": 3,
        "ok": True,
        "result": {"x": 1},
        "payloads": [{"kind": "tensor", "dtype": "float32", "shape": [2]}, {"kind": "bytes"}],
    }
    assert json.loads(response_error(None, "BAD_ENVELOPE", "bad")) == {
        "v": 1,
        "type": "response",
        "id": None,
        "ok": False,
        "error": {"code": "BAD_ENVELOPE", "message": "bad", "details": {}},
    }
    assert json.loads(heartbeat_reply(8, True, 2)) == {
        "v": 1,
        "type": "heartbeat",
        "id": 8,
        "busy": True,
        "queued": 2,
    }
    with pytest.raises(ValueError):
        response_ok(1, {"x": float("inf")})


def test_endpoints() -> None:
    assert parse_endpoint("tcp://127.0.0.1:0").bind_address == "tcp://127.0.0.1:*"
    assert parse_endpoint("tcp://127.0.0.1:*").is_loopback
    assert not parse_endpoint("tcp://0.0.0.0:5555").is_loopback
    assert parse_endpoint("ipc:///tmp/w.sock").ipc_path == "/tmp/w.sock"
    assert parse_endpoint("ipc://@abstract").ipc_path is None
    for bad, text in [
        ("udp://x", "expected ipc://PATH or tcp://HOST:PORT"),
        ("tcp://127.0.0.1:99999", "port"),
        ("tcp://nohostport", "expected tcp://HOST:PORT"),
        ("ipc://", "needs a path"),
        ("ipc:///no/such/dir/w.sock", "does not exist"),
        ("ipc:///tmp/" + "x" * 120, "at most 107"),
    ]:
        with pytest.raises(ValueError, match=text):
            parse_endpoint(bad)
