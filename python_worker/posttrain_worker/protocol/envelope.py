"""The envelope (frame 0 of every message) as typed values, with validation and reply builders.

Mirrors ``bridge/protocol/envelope.ts``; the normative description is docs/protocol.md. Parsing never
trusts the client: every field is checked and a violation raises :class:`ProtocolViolation` whose message
names the field, what was expected and what arrived, e.g. ``"id" must be a non-negative integer, got "abc"``.
Unknown fields are ignored (forward compatibility), as zod does by default on the TypeScript side. A frame
over ``MAX_ENVELOPE_BYTES`` or nested deeper than ``MAX_NESTING_DEPTH`` (``protocol/depth.py``) is refused
before it is parsed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from posttrain_worker import PROTOCOL_VERSION
from posttrain_worker.codec.types import DTYPE_TO_TORCH
from posttrain_worker.errors import render
from posttrain_worker.protocol.depth import MAX_NESTING_DEPTH, depth_over_limit
from posttrain_worker.protocol.errors import BAD_ENVELOPE, UNSUPPORTED_VERSION, ProtocolViolation

MAX_ENVELOPE_BYTES = 1024**2
"""1 MiB: the largest envelope (frame 0) a worker reads, whatever its ``--max-payload-bytes`` (big data
travels in payload frames). Checked by size before any decoding; ``bridge/protocol/limits.ts`` holds the same
number."""

MAX_ID = 2**53 - 1
"""Largest request id: ids are JSON numbers, and TypeScript numbers are exact up to 2**53 - 1."""

PayloadKind = Literal["tensordict", "tensor", "bytes"]
PAYLOAD_KINDS: tuple[PayloadKind, ...] = ("tensordict", "tensor", "bytes")
CLIENT_TYPES = ("request", "heartbeat", "cancel")


# --------------------------------------------------------------------------------------------------------
# Payload descriptors


@dataclass(frozen=True)
class TensorDictPayload:
    """Frame content: one Arrow IPC stream holding one TensorDict, in ``frames`` consecutive frames whose
    concatenation is the stream (docs/protocol.md, "Split payloads")."""

    frames: int = 1
    kind: Literal["tensordict"] = "tensordict"


@dataclass(frozen=True)
class TensorPayload:
    """Frame content: raw little-endian row-major bytes of one unbatched tensor."""

    dtype: str
    shape: tuple[int, ...]
    name: str | None = None
    kind: Literal["tensor"] = "tensor"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_TO_TORCH[self.dtype].itemsize


@dataclass(frozen=True)
class BytesPayload:
    """Frame content: opaque bytes."""

    kind: Literal["bytes"] = "bytes"


PayloadDescriptor = TensorDictPayload | TensorPayload | BytesPayload


def describe_payload(descriptor: PayloadDescriptor) -> str:
    """Short human description, for error messages: ``tensor float32 [2, 3]``."""
    if isinstance(descriptor, TensorPayload):
        name = f" {descriptor.name!r}" if descriptor.name is not None else ""
        return f"tensor{name} {descriptor.dtype} {list(descriptor.shape)}"
    return descriptor.kind


def payload_to_json(descriptor: PayloadDescriptor) -> dict[str, Any]:
    """The JSON form of a descriptor (``name`` only when set)."""
    if isinstance(descriptor, TensorPayload):
        out: dict[str, Any] = {"kind": "tensor", "dtype": descriptor.dtype, "shape": list(descriptor.shape)}
        if descriptor.name is not None:
            out["name"] = descriptor.name
        return out
    if isinstance(descriptor, TensorDictPayload) and descriptor.frames != 1:
        return {"kind": "tensordict", "frames": descriptor.frames}
    return {"kind": descriptor.kind}


# --------------------------------------------------------------------------------------------------------
# Client -> worker envelopes


@dataclass(frozen=True)
class Request:
    id: int
    method: str
    args: dict[str, Any] = field(default_factory=dict)
    payloads: tuple[PayloadDescriptor, ...] = ()


@dataclass(frozen=True)
class Heartbeat:
    id: int


@dataclass(frozen=True)
class Cancel:
    """Cancel the request ``id`` (sent by the same client) if it has not started yet."""

    id: int


ClientEnvelope = Request | Heartbeat | Cancel


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_id(value: Any) -> int | None:
    return value if _is_int(value) and 0 <= value <= MAX_ID else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder/encoder each: json.loads/json.dumps with keyword options build a new one on every call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _load_json(frame: bytes | bytearray | memoryview) -> Any:
    size = len(frame) if type(frame) is bytes else memoryview(frame).nbytes
    if size > MAX_ENVELOPE_BYTES:
        raise ProtocolViolation(
            BAD_ENVELOPE,
            f"frame 0 (the envelope) is {size} bytes, over the limit of {MAX_ENVELOPE_BYTES} bytes "
            "(send large data as payload frames)",
            None,
            {"bytes": size, "maxEnvelopeBytes": MAX_ENVELOPE_BYTES},
        )
    raw = frame if type(frame) is bytes else bytes(frame)
    if not raw:
        raise ProtocolViolation(BAD_ENVELOPE, "frame 0 (the envelope) is empty; expected a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolViolation(BAD_ENVELOPE, f"frame 0 (the envelope) is not valid UTF-8: {exc}") from None
    depth = depth_over_limit(text)
    if depth is not None:
        # Refused before parsing: the json module recurses per level and would die of RecursionError.
        raise ProtocolViolation(
            BAD_ENVELOPE,
            f"frame 0 (the envelope) nests arrays/objects {depth} levels deep; the limit is "
            f"{MAX_NESTING_DEPTH} (the envelope object counts as level 1)",
            _leading_id(text),
            {"depth": depth, "maxDepth": MAX_NESTING_DEPTH},
        )
    # raw_decode skips decode()'s two whitespace scans, a quarter of the parse of a small envelope. Same
    # grammar; what it does not take whole (whitespace around the object, trailing data, bad JSON) goes
    # through decode(), which accepts the whitespace and words the error.
    try:
        obj, end = _DECODER.raw_decode(text)
        if end == len(text):
            return obj
    except ValueError:
        pass
    try:
        return _DECODER.decode(text)
    except ValueError as exc:
        raise ProtocolViolation(
            BAD_ENVELOPE, f"frame 0 (the envelope) is not valid JSON: {exc}; got {render(text)}"
        ) from None


# "id" among the scalar members before the first nested value (where the TypeScript client puts it).
_LEADING_ID = re.compile(r'\s*\{(?:[^"{}\[\]]|"[^"\\]*(?:\\.[^"\\]*)*")*?"id"\s*:\s*(\d{1,16})\s*[,}]')


def _leading_id(text: str) -> int | None:
    """The request id of an envelope too deep to parse, when it comes before the nested members."""
    match = _LEADING_ID.match(text)
    return _read_id(int(match.group(1))) if match else None


def _plain_request(obj: Any) -> Request | None:
    """The request, when ``obj`` is a valid request without payloads (the usual small call); else None, and
    the full checks below decide and word the error. The same rules, checked in one pass: JSON values are of
    exact types (``type(x) is int`` also refuses ``true`` as an integer)."""
    if type(obj) is not dict:
        return None
    version, kind, request_id, method = obj.get("v"), obj.get("type"), obj.get("id"), obj.get("method")
    if not (
        type(version) is int
        and version == PROTOCOL_VERSION
        and kind == "request"
        and type(request_id) is int
        and 0 <= request_id <= MAX_ID
        and type(method) is str
        and method
    ):
        return None
    args, payloads = obj.get("args", {}), obj.get("payloads", ())
    if type(args) is not dict or payloads not in ((), []):
        return None
    return Request(request_id, method, args, ())


def parse_envelope(frame: bytes | bytearray | memoryview) -> ClientEnvelope:
    """Parse and validate frame 0 of a client message.

    Raises :class:`ProtocolViolation` with ``BAD_ENVELOPE`` or ``UNSUPPORTED_VERSION``; its ``request_id``
    is the envelope's id when that could be read, so the error reply can carry it.
    """
    obj = _load_json(frame)
    fast = _plain_request(obj)
    if fast is not None:
        return fast
    if not isinstance(obj, dict):
        raise ProtocolViolation(BAD_ENVELOPE, f"the envelope must be a JSON object, got {render(obj)}")
    request_id = _read_id(obj.get("id"))

    def violation(message: str, code: str = BAD_ENVELOPE) -> ProtocolViolation:
        return ProtocolViolation(code, message, request_id)

    if "v" not in obj:
        raise violation(f'missing field "v" (the protocol version, {PROTOCOL_VERSION})')
    version = obj["v"]
    if not _is_int(version):
        raise violation(f'"v" must be an integer protocol version, got {render(version)}')
    if version != PROTOCOL_VERSION:
        raise violation(
            f"unsupported protocol version {version}: this worker speaks version {PROTOCOL_VERSION}",
            UNSUPPORTED_VERSION,
        )

    if "type" not in obj:
        raise violation('missing field "type" (one of "request", "heartbeat", "cancel")')
    kind = obj["type"]
    if kind not in CLIENT_TYPES:
        raise violation(f'"type" must be one of "request", "heartbeat", "cancel", got {render(kind)}')

    if "id" not in obj:
        raise violation('missing field "id" (a non-negative integer)')
    if request_id is None:
        raise violation(f'"id" must be a non-negative integer (at most 2**53 - 1), got {render(obj["id"])}')

    if kind == "heartbeat":
        return Heartbeat(request_id)
    if kind == "cancel":
        return Cancel(request_id)

    if "method" not in obj:
        raise violation('missing field "method" (the method name) in a request')
    method = obj["method"]
    if not isinstance(method, str) or not method:
        raise violation(f'"method" must be a non-empty string, got {render(method)}')

    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise violation(f'"args" must be a JSON object, got {render(args)}')

    raw_payloads = obj.get("payloads", [])
    if not isinstance(raw_payloads, list):
        raise violation(f'"payloads" must be an array of payload descriptors, got {render(raw_payloads)}')
    try:
        payloads = tuple(parse_payload(entry, f"payloads[{i}]") for i, entry in enumerate(raw_payloads))
    except ProtocolViolation as exc:
        raise violation(exc.message) from None
    return Request(request_id, method, args, payloads)


def parse_payload(entry: Any, where: str = "payload") -> PayloadDescriptor:
    """Validate one payload descriptor; ``where`` names it in error messages (``payloads[2]``)."""
    if not isinstance(entry, dict):
        raise ProtocolViolation(
            BAD_ENVELOPE, f'"{where}" must be an object with a "kind", got {render(entry)}'
        )
    kind = entry.get("kind")
    if kind == "tensordict":
        frames = entry.get("frames", 1)
        if not (_is_int(frames) and frames >= 1):
            raise ProtocolViolation(
                BAD_ENVELOPE, f'"{where}.frames" must be an integer >= 1 or absent, got {render(frames)}'
            )
        return TensorDictPayload(frames=frames)
    if kind == "bytes":
        return BytesPayload()
    if kind != "tensor":
        expected = ", ".join(f'"{k}"' for k in PAYLOAD_KINDS)
        got = render(kind) if "kind" in entry else "nothing"
        raise ProtocolViolation(BAD_ENVELOPE, f'"{where}.kind" must be one of {expected}, got {got}')

    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_TO_TORCH:
        expected = ", ".join(DTYPE_TO_TORCH)
        got = render(dtype) if "dtype" in entry else "nothing"
        raise ProtocolViolation(BAD_ENVELOPE, f'"{where}.dtype" must be one of {expected}, got {got}')
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        got = render(shape) if "shape" in entry else "nothing"
        raise ProtocolViolation(
            BAD_ENVELOPE, f'"{where}.shape" must be an array of non-negative integers, got {got}'
        )
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        raise ProtocolViolation(
            BAD_ENVELOPE, f'"{where}.name" must be a string when present, got {render(name)}'
        )
    return TensorPayload(dtype=dtype, shape=tuple(shape), name=name)


# --------------------------------------------------------------------------------------------------------
# Worker -> client envelopes


def _dump(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode("utf-8")


_OK_HEAD = b'{"v":%d,"type":"response","id":' % PROTOCOL_VERSION


def response_ok(
    request_id: int, result: Mapping[str, Any], payloads: Sequence[PayloadDescriptor] = ()
) -> bytes:
    """``{"v":1,"type":"response","id":…,"ok":true,"result":…,"payloads":[…]}``.

    Raises ``TypeError``/``ValueError`` when ``result`` is not JSON (non-finite floats included).
    """
    # Joined from pieces rather than dumped as one dict: the same bytes, without a JSON encoder run over the
    # fixed members; an empty result or payload list (a no-op call) runs no encoder at all.
    body = b"{}" if type(result) is dict and not result else _dump(result)
    described = _dump([payload_to_json(p) for p in payloads]) if payloads else b"[]"
    return b"".join(
        (_OK_HEAD, b"%d" % request_id, b',"ok":true,"result":', body, b',"payloads":', described, b"}")
    )


def response_error(
    request_id: int | None, code: str, message: str, details: Mapping[str, Any] | None = None
) -> bytes:
    """``{"v":1,"type":"response","id":…,"ok":false,"error":{"code","message","details"}}``."""
    error = {"code": code, "message": message, "details": dict(details) if details else {}}
    try:
        return _dump(
            {"v": PROTOCOL_VERSION, "type": "response", "id": request_id, "ok": False, "error": error}
        )
    except (TypeError, ValueError):
        error["details"] = {"unserializable": render(details)}
        return _dump(
            {"v": PROTOCOL_VERSION, "type": "response", "id": request_id, "ok": False, "error": error}
        )


def heartbeat_reply(heartbeat_id: int, busy: bool, queued: int) -> bytes:
    """``{"v":1,"type":"heartbeat","id":…,"busy":…,"queued":…}``."""
    return _dump(
        {"v": PROTOCOL_VERSION, "type": "heartbeat", "id": heartbeat_id, "busy": busy, "queued": queued}
    )
