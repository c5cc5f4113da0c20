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
    payload_to_json,
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
        # near misses of a plain request (the parser's one-pass path must leave each to the full checks)
        ({"v": True, "type": "request", "id": 4, "method": "x"}, "BAD_ENVELOPE", '"v" must be an integer', 4),
        ({"v": 1.0, "type": "request", "id": 4, "method": "x"}, "BAD_ENVELOPE", '"v" must be an integer', 4),
        ({"v": 1, "type": "request", "id": -1, "method": "x"}, "BAD_ENVELOPE", '"id" must be', None),
        ({"v": 1, "type": "request", "id": 4.0, "method": "x"}, "BAD_ENVELOPE", '"id" must be', None),
        ({"v": 1, "type": "request", "id": 4, "method": 7}, "BAD_ENVELOPE", '"method"', 4),
        ({"v": 1, "type": "request", "id": 4}, "BAD_ENVELOPE", 'missing field "method"', 4),
        ({"v": 1, "type": "request", "id": 4, "method": "x", "args": []}, "BAD_ENVELOPE", '"args"', 4),
        ({"v": 1, "type": "request", "id": 4, "method": "x", "payloads": {}}, "BAD_ENVELOPE", "payloads", 4),
        ({"v": 1, "type": "request", "id": 4, "method": "x", "payloads": 0}, "BAD_ENVELOPE", "payloads", 4),
        ({"v": 1, "type": "Request", "id": 4, "method": "x"}, "BAD_ENVELOPE", '"type" must be one of', 4),
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


@pytest.mark.parametrize(
    ("result", "payloads"),
    [
        ({}, []),
        ({"x": 1, "s": "é\u2028", "nested": {"a": [1, 2.5, None, True]}}, []),
        ({}, [TensorDictPayload(), TensorPayload("bfloat16", (2, 3), "w"), BytesPayload()]),
    ],
)
def test_response_ok_is_the_one_dump_of_the_whole_reply(
    result: dict[str, object], payloads: list[object]
) -> None:
    # The reply is joined from pieces (no encoder run for an empty result): the bytes must still be exactly
    # those of the whole object dumped at once, key order and separators included.
    whole = {
        "v": 1,
        "type": "response",
        "id": 2**53 - 1,
        "ok": True,
        "result": result,
        "payloads": [payload_to_json(p) for p in payloads],  # type: ignore[arg-type]
    }
    expected = json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()
    assert response_ok(2**53 - 1, result, payloads) == expected  # type: ignore[arg-type]


def test_response_ok_still_refuses_results_that_are_not_json() -> None:
    with pytest.raises(ValueError):
        response_ok(1, {"x": float("nan")})
    with pytest.raises(TypeError):
        response_ok(1, {"x": object()})
    with pytest.raises(TypeError):
        response_ok(1, {1j: 1})  # type: ignore[dict-item]


def test_a_request_without_payloads_parses_to_an_empty_tuple() -> None:
    request = parse_envelope(b'{"v":1,"type":"request","id":4,"method":"ping","args":{},"payloads":[]}')
    assert request == Request(4, "ping", {}, ())
    assert parse_envelope(b'{"v":1,"type":"request","id":4,"method":"ping"}') == Request(4, "ping", {}, ())


def test_whitespace_around_the_envelope_is_accepted_and_trailing_data_is_not() -> None:
    # The parser's fast path takes the object alone; the rest of JSON's grammar must still hold around it.
    assert parse_envelope(b' \n{"v":1,"type":"heartbeat","id":3}\t ') == Heartbeat(3)
    with pytest.raises(ProtocolViolation, match="Extra data"):
        parse_envelope(b'{"v":1,"type":"heartbeat","id":3} {}')
    with pytest.raises(ProtocolViolation, match="Infinity is not valid JSON"):
        parse_envelope(b' {"v":1,"type":"request","id":3,"method":"m","args":{"x":Infinity}}')


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
