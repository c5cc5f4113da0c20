"""The canonical encoder of a ``TensorBatch`` into one Arrow IPC stream (docs/protocol.md).

Byte-identical to ``encodeBatch`` in ``bridge/wire/encode.ts``: same field layout, same body layout, and the
flatbuffer metadata is built by ``flatbuf.py`` with the same builder calls. The output is allocated once and
each tensor's bytes are copied into it once (through a uint8 view of the output).
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import torch

from posttrain_worker.codec.errors import CodecError
from posttrain_worker.codec.flatbuf import ArrowType, FieldPlan, record_batch_message, schema_message
from posttrain_worker.codec.format import (
    FIXED_SHAPE_TENSOR,
    HISTORY_FIELDS,
    HISTORY_KIND,
    MAX_INT32,
    META_BATCH_SIZE,
    META_DTYPE,
    META_EXTENSION_METADATA,
    META_EXTENSION_NAME,
    META_KIND,
    META_SHAPE,
    META_VERSION,
    STORAGE,
    WIRE_FORMAT_VERSION,
    int_list_json,
    tool_calls_json,
)
from posttrain_worker.codec.types import TORCH_TO_DTYPE, Column, HistoryColumn, Ragged, TensorBatch

_CONTINUATION: Final = b"\xff\xff\xff\xff"
_UTF8: Final = ArrowType("utf8")
_LIST: Final = ArrowType("list")
_STRUCT: Final = ArrowType("struct")


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def _where(path: Sequence[str]) -> str:
    return f'column "{"/".join(path)}"' if path else "batch"


def _fail(path: Sequence[str], message: str) -> CodecError:
    return CodecError(f"cannot encode {_where(path)}: {message}")


@dataclass
class _Body:
    """Field nodes, buffer regions and the pending copies of the record batch body."""

    nodes: list[int] = field(default_factory=list)
    buffers: list[int] = field(default_factory=list)
    tensors: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (body offset, uint8 tensor)
    blobs: list[tuple[int, bytes]] = field(default_factory=list)
    length: int = 0

    def node(self, length: int) -> None:
        self.nodes.append(length)

    def buffer(self, nbytes: int) -> int:
        at = self.length
        self.buffers += (at, nbytes)
        self.length += _pad8(nbytes)
        return at

    def validity(self) -> None:
        self.buffer(0)

    def tensor(self, t: torch.Tensor) -> None:
        """Reserves a buffer for a contiguous CPU tensor and records its copy."""
        raw = t.reshape(-1).view(torch.uint8) if t.numel() > 0 else torch.empty(0, dtype=torch.uint8)
        at = self.buffer(raw.numel())
        if raw.numel() > 0:
            self.tensors.append((at, raw))


def _cpu_contiguous(t: torch.Tensor, path: Sequence[str]) -> torch.Tensor:
    if t.layout != torch.strided:
        raise _fail(path, f"expected a dense (strided) tensor, found layout {t.layout}")
    if t.dtype not in TORCH_TO_DTYPE:
        raise _fail(path, f"dtype {t.dtype} cannot cross the wire (supported: {', '.join(STORAGE)})")
    return t.detach().to("cpu").contiguous()


def _dense(
    name: str, t: torch.Tensor, batch_size: tuple[int, ...], path: Sequence[str], body: _Body
) -> FieldPlan:
    dims = len(batch_size)
    if tuple(t.shape[:dims]) != batch_size:
        raise _fail(
            path,
            f"a tensor must have shape [*batch_size, *row_shape] with batch_size {list(batch_size)}, "
            f"found shape {list(t.shape)}",
        )
    t = _cpu_contiguous(t, path)
    dtype = TORCH_TO_DTYPE[t.dtype]
    row_shape = [int(d) for d in t.shape[dims:]]
    rows = math.prod(batch_size)
    dtype_meta = (META_DTYPE, dtype)
    if not row_shape:
        body.node(rows)
        body.validity()
        body.tensor(t)
        return FieldPlan(name, STORAGE[dtype], (), (dtype_meta,))
    per_row = math.prod(row_shape)
    if per_row > MAX_INT32:
        raise _fail(path, f"a row holds {per_row} elements; at most {MAX_INT32} fit a fixed-size list")
    body.node(rows)
    body.validity()
    body.node(rows * per_row)
    body.validity()
    body.tensor(t)
    return FieldPlan(
        name,
        ArrowType.fixed_size_list(per_row),
        (FieldPlan("item", STORAGE[dtype]),),
        (
            (META_EXTENSION_NAME, FIXED_SHAPE_TENSOR),
            (META_EXTENSION_METADATA, '{"shape":' + int_list_json(row_shape) + "}"),
            dtype_meta,
        ),
    )


def _ragged(name: str, r: Ragged, rows: int, path: Sequence[str], body: _Body) -> FieldPlan:
    if not isinstance(r.values, torch.Tensor) or not isinstance(r.offsets, torch.Tensor):
        raise _fail(path, "Ragged values and offsets must be tensors")
    if r.offsets.dim() != 1 or r.offsets.dtype.is_floating_point or r.offsets.dtype == torch.bool:
        raise _fail(
            path,
            f"offsets must be a 1-D integer tensor, found {r.offsets.dtype} of shape {list(r.offsets.shape)}",
        )
    if r.offsets.numel() != rows + 1:
        raise _fail(path, f"offsets must have rows + 1 = {rows + 1} entries, found {r.offsets.numel()}")
    if r.values.dim() < 1:
        raise _fail(path, "values must have at least one dimension (the ragged one)")
    offsets = r.offsets.detach().to("cpu", torch.int64)
    first = int(offsets[0])
    last = int(offsets[-1])
    if first < 0:
        raise _fail(path, f"offsets must be non-negative, found offsets[0] = {first}")
    if rows > 0:
        steps = offsets[1:] - offsets[:-1]
        if bool((steps < 0).any()):
            i = int(torch.nonzero(steps < 0)[0])
            raise _fail(
                path,
                f"offsets must be non-decreasing, found offsets[{i}] = {int(offsets[i])} > "
                f"offsets[{i + 1}] = {int(offsets[i + 1])}",
            )
    if last > r.values.shape[0]:
        raise _fail(path, f"offsets[{rows}] = {last} exceeds the {r.values.shape[0]} items of values")
    if last - first > MAX_INT32:
        raise _fail(
            path, f"{last - first} items along the ragged dimension; int32 offsets allow at most {MAX_INT32}"
        )
    values = _cpu_contiguous(r.values[first:last], path)
    dtype = TORCH_TO_DTYPE[values.dtype]
    tail = [int(d) for d in values.shape[1:]]
    per_item = math.prod(tail)
    if per_item > MAX_INT32:
        raise _fail(path, f"an item holds {per_item} elements; at most {MAX_INT32} fit a fixed-size list")
    total = last - first
    body.node(rows)
    body.validity()
    body.tensor((offsets - first).to(torch.int32))
    body.node(total)
    body.validity()
    item = FieldPlan("item", STORAGE[dtype])
    metadata = ((META_DTYPE, dtype), (META_SHAPE, int_list_json([-1, *tail])))
    if not tail:
        body.tensor(values)
        return FieldPlan(name, _LIST, (item,), metadata)
    body.node(total * per_item)
    body.validity()
    body.tensor(values)
    return FieldPlan(
        name, _LIST, (FieldPlan("item", ArrowType.fixed_size_list(per_item), (item,)),), metadata
    )


def _strings(name: str, values: Sequence[object], rows: int, path: Sequence[str], body: _Body) -> FieldPlan:
    if len(values) != rows:
        raise _fail(path, f"a string column must hold one string per row ({rows}), found {len(values)}")
    encoded: list[bytes] = []
    for i, s in enumerate(values):
        if not isinstance(s, str):
            raise _fail(path, f"row {i} must be a str, found {type(s).__name__}")
        try:
            encoded.append(s.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise _fail(path, f"row {i} is not encodable as UTF-8 ({exc.reason})") from exc
    _utf8(encoded, path, "the strings", body)
    return FieldPlan(name, _UTF8)


def _utf8(encoded: Sequence[bytes], path: Sequence[str], what: str, body: _Body) -> None:
    """Node, validity, offsets and data of one Utf8 array of already encoded strings."""
    count = len(encoded)
    lengths = torch.tensor([len(e) for e in encoded], dtype=torch.int64)
    offsets = torch.zeros(count + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    nbytes = int(offsets[-1])
    if nbytes > MAX_INT32:
        raise _fail(path, f"{what} take {nbytes} bytes of UTF-8; int32 offsets allow at most {MAX_INT32}")
    body.node(count)
    body.validity()
    body.tensor(offsets.to(torch.int32))
    at = body.buffer(nbytes)
    if nbytes > 0:
        body.blobs.append((at, b"".join(encoded)))


def _int32_offsets(counts: Sequence[int]) -> torch.Tensor:
    offsets = torch.zeros(len(counts) + 1, dtype=torch.int64)
    torch.cumsum(torch.tensor(counts, dtype=torch.int64), 0, out=offsets[1:])
    return offsets.to(torch.int32)


def _message_text(value: object, optional: bool, path: Sequence[str], at: str, key: str) -> bytes:
    """A str of a chat message as UTF-8; ``b""`` for an absent (missing or None) optional one."""
    if value is None and optional:
        return b""
    if not isinstance(value, str):
        found = "nothing" if value is None else type(value).__name__
        raise _fail(path, f"{at}: {key} must be a str{' or absent' if optional else ''}, found {found}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _fail(path, f"{at}: {key} is not encodable as UTF-8 ({exc.reason})") from exc


def _history(name: str, column: HistoryColumn, rows: int, path: Sequence[str], body: _Body) -> FieldPlan:
    history = column.rows
    if not isinstance(history, (list, tuple)):
        raise _fail(path, f"rows must be a list of message lists, found {type(history).__name__}")
    if len(history) != rows:
        raise _fail(
            path, f"a history column must hold one message list per row ({rows}), found {len(history)}"
        )
    texts: tuple[list[bytes], ...] = ([], [], [], [])  # role, content, name, tool_calls
    row_counts: list[int] = []
    responses: list[bytes] = []
    response_counts: list[int] = []
    complete: list[int] = []
    for i, row in enumerate(history):
        if not isinstance(row, (list, tuple)):
            raise _fail(path, f"row {i} must be a list of messages, found {type(row).__name__}")
        row_counts.append(len(row))
        for j, message in enumerate(row):
            at = f"row {i}, message {j}"
            if not isinstance(message, Mapping):
                raise _fail(path, f"{at} must be a dict, found {type(message).__name__}")
            unknown = [k for k in message if k not in HISTORY_FIELDS]
            if unknown:
                raise _fail(path, f"{at}: unknown key {unknown[0]!r} (known: {', '.join(HISTORY_FIELDS)})")
            texts[0].append(_message_text(message.get("role"), False, path, at, "role"))
            texts[1].append(_message_text(message.get("content"), False, path, at, "content"))
            texts[2].append(_message_text(message.get("name"), True, path, at, "name"))
            calls = message.get("tool_calls")
            if calls is not None and not isinstance(calls, (list, tuple)):
                raise _fail(path, f"{at}: tool_calls must be a list or absent, found {type(calls).__name__}")
            try:
                calls_text = None if calls is None else tool_calls_json(calls)
            except (TypeError, ValueError) as exc:
                raise _fail(path, f"{at}: tool_calls cannot be written as JSON ({exc})") from exc
            texts[3].append(_message_text(calls_text, True, path, at, "tool_calls"))
            answers = message.get("tool_responses")
            if answers is None:
                answers = ()
            if not isinstance(answers, (list, tuple)):
                found = type(answers).__name__
                raise _fail(path, f"{at}: tool_responses must be a list of str or absent, found {found}")
            for k, answer in enumerate(answers):
                responses.append(_message_text(answer, False, path, at, f"tool_responses[{k}]"))
            response_counts.append(len(answers))
            done = message.get("is_complete")
            if done is not None and not isinstance(done, bool):
                raise _fail(path, f"{at}: is_complete must be a bool or absent, found {type(done).__name__}")
            complete.append(0 if done is False else 1)
    messages = len(complete)
    if messages > MAX_INT32:
        raise _fail(path, f"{messages} messages; int32 offsets allow at most {MAX_INT32}")
    if len(responses) > MAX_INT32:
        raise _fail(path, f"{len(responses)} tool responses; int32 offsets allow at most {MAX_INT32}")
    # Schema pre-order: the list, its message struct, the struct's six children (tool_responses: 2 nodes).
    body.node(rows)
    body.validity()
    body.tensor(_int32_offsets(row_counts))
    body.node(messages)
    body.validity()
    for key, encoded in zip(HISTORY_FIELDS[:4], texts, strict=True):
        _utf8(encoded, path, f"the {key} values", body)
    body.node(messages)
    body.validity()
    body.tensor(_int32_offsets(response_counts))
    _utf8(responses, path, "the tool responses", body)
    body.node(messages)
    body.validity()
    body.tensor(torch.tensor(complete, dtype=torch.uint8))
    message_struct = FieldPlan(
        "item",
        _STRUCT,
        (
            FieldPlan("role", _UTF8),
            FieldPlan("content", _UTF8),
            FieldPlan("name", _UTF8),
            FieldPlan("tool_calls", _UTF8),
            FieldPlan("tool_responses", _LIST, (FieldPlan("item", _UTF8),)),
            FieldPlan("is_complete", STORAGE["bool"], (), ((META_DTYPE, "bool"),)),
        ),
    )
    return FieldPlan(name, _LIST, (message_struct,), ((META_KIND, HISTORY_KIND),))


def _columns(
    columns: Mapping[str, Column], batch_size: tuple[int, ...], path: tuple[str, ...], body: _Body
) -> tuple[FieldPlan, ...]:
    if not isinstance(columns, Mapping):
        raise _fail(path, f"columns must be a dict, found {type(columns).__name__}")
    rows = math.prod(batch_size)
    fields: list[FieldPlan] = []
    for name, column in columns.items():
        here = (*path, name)
        if not isinstance(name, str):
            raise _fail(path, f"keys must be str, found {type(name).__name__}")
        if isinstance(column, torch.Tensor) and column.is_nested:
            column = _nested_to_ragged(column, batch_size, here)
        if isinstance(column, torch.Tensor):
            fields.append(_dense(name, column, batch_size, here, body))
        elif isinstance(column, Ragged):
            fields.append(_ragged(name, column, rows, here, body))
        elif isinstance(column, HistoryColumn):
            fields.append(_history(name, column, rows, here, body))
        elif isinstance(column, Mapping):
            body.node(rows)
            body.validity()
            fields.append(FieldPlan(name, _STRUCT, _columns(column, batch_size, here, body)))
        elif isinstance(column, (list, tuple)):
            fields.append(_strings(name, column, rows, here, body))
        else:
            raise _fail(here, f"unsupported column type {type(column).__name__}")
    return tuple(fields)


def _nested_to_ragged(t: torch.Tensor, batch_size: tuple[int, ...], path: Sequence[str]) -> Ragged:
    if t.layout != torch.jagged or len(batch_size) != 1 or t.size(0) != batch_size[0]:
        raise _fail(
            path, "nested tensors are accepted only as torch.jagged with one batch dimension; use Ragged"
        )
    return Ragged(values=t.values(), offsets=t.offsets())


def _check_batch_size(batch_size: object) -> tuple[int, ...]:
    if not isinstance(batch_size, (tuple, list, torch.Size)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in batch_size
    ):
        raise _fail((), f"batch_size must be a sequence of non-negative ints, found {batch_size!r}")
    return tuple(int(d) for d in batch_size)


def _framed(metadata: bytes) -> int:
    return 8 + _pad8(len(metadata))


def _write_framed(out: memoryview, at: int, metadata: bytes) -> int:
    padded = _pad8(len(metadata))
    out[at : at + 4] = _CONTINUATION
    out[at + 4 : at + 8] = padded.to_bytes(4, "little")
    out[at + 8 : at + 8 + len(metadata)] = metadata
    out[at + 8 + len(metadata) : at + 8 + padded] = bytes(padded - len(metadata))
    return at + 8 + padded


SPLIT_MIN_BYTES: Final = 64 * 1024
"""The smallest body buffer ``encode_batch_parts`` sends as a part of its own (below it a copy is cheaper)."""


# The flatbuffer metadata of a batch depends on its layout only, which repeats from call to call (same keys,
# dtypes and shapes): built once per layout. The pure-Python flatbuffers Builder was most of the encoding time
# of a 1 MB batch. The caches hold immutable bytes.
_schema_message = functools.lru_cache(maxsize=128)(schema_message)
_record_batch_message = functools.lru_cache(maxsize=128)(record_batch_message)


@dataclass(frozen=True)
class _Plan:
    """A planned stream: its metadata messages and body layout, before any byte is written."""

    schema: bytes
    record_batch: bytes
    body: _Body
    body_start: int
    total: int


def _plan(batch: TensorBatch) -> _Plan:
    batch_size = _check_batch_size(batch.batch_size)
    body = _Body()
    fields = _columns(batch.columns, batch_size, (), body)
    schema = _schema_message(
        fields, ((META_VERSION, WIRE_FORMAT_VERSION), (META_BATCH_SIZE, int_list_json(batch_size)))
    )
    rows = math.prod(batch_size)
    record_batch = _record_batch_message(rows, tuple(body.nodes), tuple(body.buffers), body.length)
    body_start = _framed(schema) + _framed(record_batch)
    return _Plan(schema, record_batch, body, body_start, body_start + body.length + 8)


# Where a write at a stream offset lands: the part's uint8 array and the offset within it.
_Locate = Callable[[int], tuple[np.ndarray, int]]


def _write(plan: _Plan, locate: _Locate, own: frozenset[int]) -> None:
    """Writes every byte of ``plan`` except the tensors whose index is in ``own`` (parts of their own).

    The copies go through numpy (a plain memcpy): torch's copy_ into fresh memory measured 2-3x slower here.
    """
    body, start = plan.body, plan.body_start
    head, _ = locate(0)
    _write_framed(memoryview(head), _write_framed(memoryview(head), 0, plan.schema), plan.record_batch)
    for index, (at, raw) in enumerate(body.tensors):
        if index not in own:
            out, local = locate(start + at)
            out[local : local + raw.numel()] = raw.detach().numpy()
    for at, blob in body.blobs:
        out, local = locate(start + at)
        out[local : local + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    for at, nbytes in zip(body.buffers[0::2], body.buffers[1::2], strict=True):
        if nbytes % 8:
            out, local = locate(start + at + nbytes)
            out[local : local + 8 - nbytes % 8] = 0
    tail, local = locate(plan.total - 8)
    tail[local : local + 8] = np.frombuffer(_CONTINUATION + bytes(4), dtype=np.uint8)


def encode_batch(batch: TensorBatch) -> memoryview:
    """Encodes a batch as one canonical Arrow IPC stream (schema, one record batch, end-of-stream marker).

    Tensors may live on any device and be non-contiguous: they are made contiguous CPU tensors first. ``bool``
    crosses as one byte per value and ``bfloat16`` as its 16-bit patterns. Ragged offsets that do not start at
    0 are rebased. Raises ``CodecError`` naming the column when the batch cannot be encoded.
    """
    return _whole(_plan(batch))


def encode_batch_parts(batch: TensorBatch) -> list[memoryview]:
    """Encodes a batch as the stream of ``encode_batch``, cut into parts so that large tensors are not copied.

    Each body buffer of at least ``SPLIT_MIN_BYTES`` whose length is a multiple of 8 is a part of its own, a
    view of the (contiguous CPU) tensor's memory; the bytes between them are written into fresh parts. The
    concatenation of the parts is exactly the ``encode_batch`` result and every cut lies at a multiple of 8
    (docs/protocol.md, "Split payloads"). The parts alias the batch's tensors: they must not be modified
    until the parts have been sent.
    """
    plan = _plan(batch)
    sizes = [raw.numel() for _, raw in plan.body.tensors]
    own = frozenset(i for i, size in enumerate(sizes) if size >= SPLIT_MIN_BYTES and size % 8 == 0)
    if not own:
        return [_whole(plan)]
    # Stream ranges [start, end) of the parts, with the tensor of each own part.
    ranges: list[tuple[int, int, torch.Tensor | None]] = []
    pos = 0
    for index, (at, raw) in enumerate(plan.body.tensors):
        if index in own:
            start = plan.body_start + at
            if start > pos:
                ranges.append((pos, start, None))
            ranges.append((start, start + raw.numel(), raw))
            pos = start + raw.numel()
    ranges.append((pos, plan.total, None))
    memory = np.empty(sum(end - start for start, end, raw in ranges if raw is None), dtype=np.uint8)
    arrays: list[np.ndarray] = []
    used = 0
    for start, end, raw in ranges:
        if raw is not None:
            arrays.append(raw.detach().numpy())
        else:
            arrays.append(memory[used : used + end - start])
            used += end - start
    starts = [start for start, _, _ in ranges]

    def locate(at: int) -> tuple[np.ndarray, int]:
        i = bisect.bisect_right(starts, at) - 1
        return arrays[i], at - starts[i]

    _write(plan, locate, own)
    return [memoryview(a) for a in arrays]


def _whole(plan: _Plan) -> memoryview:
    # Uninitialised memory: zero-filling a large output first would cost as much as the copy itself, so
    # only the padding after each buffer is zeroed (the bytes must be canonical).
    target = np.empty(plan.total, dtype=np.uint8)
    _write(plan, lambda at: (target, at), frozenset())
    return memoryview(target)
