"""The decoder of posttrain Arrow IPC streams into a ``TensorBatch`` (docs/protocol.md).

Arrow parsing is pyarrow's IPC stream reader over the caller's buffer, without copying: with one record
batch, every tensor of the result shares memory with ``buf`` (``torch.frombuffer`` over pyarrow's buffers,
which keep ``buf`` alive). A buffer that does not start 8-byte aligned is copied once to an aligned one first.
The framing is checked before pyarrow reads (so a truncated stream is reported as such), every record batch is
validated by pyarrow, and every length this module relies on is checked; all failures are ``CodecError``.

Decoded tensors that view a read-only buffer (``bytes``, a received ``zmq.Frame``) must not be written to.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import warnings
from collections.abc import Sequence
from typing import Any, Final

import pyarrow as pa
import torch

from posttrain_worker.codec.errors import CodecError
from posttrain_worker.codec.flatbuf import (
    HEADER_DICTIONARY_BATCH,
    HEADER_RECORD_BATCH,
    HEADER_SCHEMA,
    read_message_header,
    read_record_batch_header,
)
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
    WIRE_FORMAT_VERSION,
)
from posttrain_worker.codec.types import DTYPE_TO_TORCH, Column, HistoryColumn, Ragged, TensorBatch

_CONTINUATION: Final = 0xFFFFFFFF

_PA_STORAGE: Final[dict[str, pa.DataType]] = {
    "float32": pa.float32(),
    "float64": pa.float64(),
    "float16": pa.float16(),
    "bfloat16": pa.uint16(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "int16": pa.int16(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "bool": pa.uint8(),
}

Path = tuple[str, ...]

_HISTORY_LAYOUT: Final = (
    "list<struct<role: string, content: string, name: string, tool_calls: string, "
    "tool_responses: list<string>, is_complete: uint8>>"
)


def _bad(path: Sequence[str], message: str) -> CodecError:
    return CodecError(f'invalid tensordict payload: column "{"/".join(path)}": {message}')


# ----------------------------------------------------------------------------------------------------
# Input buffer and framing


def _aligned_buffer(buf: object) -> pa.Buffer:
    try:
        data = buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)
    except (TypeError, ValueError, BufferError) as exc:
        raise CodecError(
            f"expected a contiguous buffer-protocol object, found {type(buf).__name__}: {exc}"
        ) from exc
    if data.address % 8 == 0:
        return data
    # Arrow's memory pool aligns to 64 bytes. Cheaper than a torch tensor plus a numpy view: this copy is on
    # the path of every split payload, whose small metadata frame libzmq may deliver at any offset.
    aligned = pa.allocate_buffer(data.size)
    memoryview(aligned)[:] = memoryview(data)
    return aligned


class _Stream:
    """The payload as one byte stream, whole or in parts (docs/protocol.md, "Split payloads").

    ``view(pos, n)`` is the memory of stream bytes ``[pos, pos + n)`` inside the one part that holds them; a
    range that spans two parts is a ``CodecError``.
    """

    def __init__(self, parts: Sequence[pa.Buffer]) -> None:
        self.parts = [memoryview(p) for p in parts]
        self.starts: list[int] = []
        self.length = 0
        for part in self.parts:
            self.starts.append(self.length)
            self.length += len(part)

    def view(self, pos: int, n: int, what: str) -> memoryview:
        i = bisect.bisect_right(self.starts, pos) - 1
        local = pos - self.starts[i]
        part = self.parts[i]
        if local + n > len(part):
            raise CodecError(
                f"invalid split payload: {what} (stream bytes {pos}..{pos + n}) spans parts {i} and {i + 1}; "
                "a message header with its metadata and each body buffer must lie within one part"
            )
        return part[local : local + n]

    def part_of(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos) - 1


def _check_framing(stream: _Stream) -> tuple[memoryview, list[tuple[memoryview, int, int]]]:
    """Walks the messages: lengths inside the stream, schema first, record batches, end of stream.

    Returns the schema message (header and metadata) and each record batch's metadata with its body start and
    body length.
    """
    n = stream.length
    pos = 0
    index = 0
    schema = memoryview(b"")
    batches: list[tuple[memoryview, int, int]] = []
    while True:
        if n - pos < 8:
            empty = " (empty payload)" if n == 0 else ""
            raise CodecError(
                f"truncated Arrow stream: expected a message header (8 bytes) at byte {pos}, "
                f"but {n - pos} bytes remain{empty}"
            )
        head = stream.view(pos, 8, f"the header of message {index}")
        marker = int.from_bytes(head[0:4], "little")
        if marker != _CONTINUATION:
            raise CodecError(
                f"not an Arrow IPC stream: expected the continuation marker 0xFFFFFFFF at byte {pos}, "
                f"found 0x{marker:08X}"
            )
        length = int.from_bytes(head[4:8], "little", signed=True)
        if length == 0:
            if index == 0:
                raise CodecError("invalid Arrow stream: end-of-stream marker before the schema")
            if pos + 8 != n:
                raise CodecError(
                    f"invalid Arrow stream: {n - pos - 8} unexpected bytes after the end-of-stream marker"
                )
            return schema, batches
        if length < 0 or length % 8 != 0:
            raise CodecError(
                f"invalid Arrow stream: message {index} at byte {pos} declares metadata length {length} "
                "(expected a positive multiple of 8)"
            )
        end = pos + 8 + length
        if end > n:
            raise CodecError(
                f"truncated Arrow stream: message {index} at byte {pos} declares {length} bytes of metadata, "
                f"but {n - pos - 8} bytes remain"
            )
        message = stream.view(pos, 8 + length, f"message {index}")
        try:
            _version, header_type, body_length = read_message_header(message[8:])
        except ValueError as exc:
            raise CodecError(
                f"invalid Arrow stream: cannot read message {index} at byte {pos}: {exc}"
            ) from exc
        if body_length < 0:
            raise CodecError(f"invalid Arrow stream: message {index} declares body length {body_length}")
        if end + body_length > n:
            raise CodecError(
                f"truncated Arrow stream: message {index} at byte {pos} declares a body of "
                f"{body_length} bytes, "
                f"but {n - end} bytes remain"
            )
        if index == 0 and header_type != HEADER_SCHEMA:
            raise CodecError(
                f"invalid Arrow stream: the first message must be a schema, found header type {header_type}"
            )
        if index > 0 and header_type == HEADER_DICTIONARY_BATCH:
            raise CodecError(
                "unsupported Arrow stream: dictionary batches are not part of the posttrain format"
            )
        if index > 0 and header_type != HEADER_RECORD_BATCH:
            raise CodecError(
                f"invalid Arrow stream: message {index} has header type {header_type}, "
                "expected a record batch"
            )
        if index == 0:
            schema = message
        else:
            batches.append((message[8:], end, body_length))
        pos = end + body_length
        index += 1


# ----------------------------------------------------------------------------------------------------
# Metadata


def _meta(field: pa.Field) -> dict[str, str]:
    raw = field.metadata or {}
    try:
        return {k.decode(): v.decode() for k, v in raw.items()}
    except UnicodeDecodeError as exc:
        raise CodecError(
            f'invalid tensordict payload: field "{field.name}" has metadata that is not UTF-8'
        ) from exc


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _int_list(value: object, minimum: int) -> list[int] | None:
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= minimum for d in value
    ):
        return None
    return list(value)


def _batch_size(schema: pa.Schema) -> tuple[int, ...]:
    raw = schema.metadata or {}
    version = raw.get(META_VERSION.encode())
    if version is None:
        raise CodecError(f'invalid tensordict payload: the schema metadata has no "{META_VERSION}"')
    if version != WIRE_FORMAT_VERSION.encode():
        raise CodecError(
            f'unsupported tensordict payload: "{META_VERSION}" is {version!r}, this reader knows '
            f"{WIRE_FORMAT_VERSION!r}"
        )
    text = raw.get(META_BATCH_SIZE.encode())
    if text is None:
        raise CodecError(f'invalid tensordict payload: the schema metadata has no "{META_BATCH_SIZE}"')
    sizes = _int_list(_json(text.decode("utf-8", "replace")), 0)
    if sizes is None:
        raise CodecError(
            f'invalid tensordict payload: "{META_BATCH_SIZE}" must be a JSON array of non-negative integers, '
            f"found {text!r}"
        )
    return tuple(sizes)


def _dtype(meta: dict[str, str], path: Path) -> str:
    dtype = meta.get(META_DTYPE)
    if dtype is None:
        raise _bad(path, f'the field has no "{META_DTYPE}" metadata')
    if dtype not in DTYPE_TO_TORCH:
        raise _bad(path, f'unknown "{META_DTYPE}" {dtype!r}')
    return dtype


def _check_storage(t: pa.DataType, dtype: str, path: Path, what: str = "") -> None:
    if t != _PA_STORAGE[dtype]:
        raise _bad(path, f"dtype {dtype} must be stored as {_PA_STORAGE[dtype]}, found {what}{t}")


def _fixed_shape(meta: dict[str, str], list_size: int, path: Path) -> list[int]:
    """Row shape of a FixedSizeList column whose extension type pyarrow did not load."""
    name = meta.get(META_EXTENSION_NAME)
    if name != FIXED_SHAPE_TENSOR:
        raise _bad(
            path,
            f'a FixedSizeList column must carry "{META_EXTENSION_NAME}" = "{FIXED_SHAPE_TENSOR}", '
            f"found {name!r}",
        )
    text = meta.get(META_EXTENSION_METADATA, "")
    parsed = _json(text)
    shape = _int_list(parsed.get("shape") if isinstance(parsed, dict) else None, 0)
    if not shape:
        raise _bad(
            path,
            f'"{META_EXTENSION_METADATA}" must be a JSON object with a non-empty "shape", found {text!r}',
        )
    permutation = parsed.get("permutation") if isinstance(parsed, dict) else None
    _check_permutation(permutation, path)
    if math.prod(shape) != list_size:
        raise _bad(
            path, f"the row shape {shape} has {math.prod(shape)} elements, but the list size is {list_size}"
        )
    return shape


def _check_permutation(permutation: object, path: Path) -> None:
    """Only the identity permutation (row-major rows) is supported."""
    if permutation is None:
        return
    perm = [int(p) for p in permutation] if isinstance(permutation, (list, tuple)) else None
    if perm != list(range(len(perm or []))):
        raise _bad(path, f"fixed_shape_tensor permutation {permutation!r} is not supported")


def _ragged_tail(meta: dict[str, str], list_size: int | None, path: Path) -> list[int]:
    text = meta.get(META_SHAPE)
    if text is None:
        raise _bad(path, f'a List column must carry "{META_SHAPE}" metadata')
    shape = _int_list(_json(text), -1)
    if not shape or shape[0] != -1 or any(d < 0 for d in shape[1:]):
        raise _bad(path, f'"{META_SHAPE}" must be [-1, ...non-negative integers], found {text!r}')
    tail = shape[1:]
    if list_size is None and tail:
        raise _bad(
            path, f'"{META_SHAPE}" {text} has a tail shape, but the list items are not fixed-size lists'
        )
    if list_size is not None and (not tail or math.prod(tail) != list_size):
        raise _bad(path, f'"{META_SHAPE}" {text} does not match the item list size {list_size}')
    return tail


def _is_history_child(child: pa.Field, k: int) -> bool:
    if child.name != HISTORY_FIELDS[k]:
        return False
    if k < 4:
        return child.type == pa.string()
    if k == 4:
        return pa.types.is_list(child.type) and child.type.value_type == pa.string()
    return child.type == pa.uint8()


def _check_history_type(field: pa.Field, kind: str, path: Path) -> None:
    """The Arrow type of a column that carries ``posttrain.kind`` (only ``history`` exists)."""
    if kind != HISTORY_KIND:
        raise _bad(path, f'unknown "{META_KIND}" {kind!r}')
    t = field.type
    item = t.value_type if pa.types.is_list(t) else None
    children = [item.field(i) for i in range(item.num_fields)] if pa.types.is_struct(item) else []
    if len(children) != len(HISTORY_FIELDS) or not all(
        _is_history_child(c, k) for k, c in enumerate(children)
    ):
        raise _bad(path, f'a "{META_KIND}" = "{HISTORY_KIND}" column must be {_HISTORY_LAYOUT}, found {t}')
    dtype = _meta(children[5]).get(META_DTYPE)
    if dtype != "bool":
        raise _bad(path, f'the is_complete field must carry "{META_DTYPE}" = "bool", found {dtype!r}')


def _tool_calls(text: str, path: Path, at: str) -> list[Any]:
    """The parsed tool calls; JSON as JavaScript's ``JSON.parse`` reads it (no NaN or Infinity)."""

    def reject(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        value = json.loads(text, parse_constant=reject)
    except ValueError:
        value = None
    if not isinstance(value, list):
        shown = text if len(text) <= 40 else f"{text[:40]}…"
        raise _bad(path, f"{at}: tool_calls must be the JSON text of an array, found {shown!r}")
    return value


def _history(arr: pa.Array, path: Path) -> HistoryColumn:
    """A history column (type checked): absent optional values are left out of each message dict."""
    rows: list[list[dict[str, Any]]] = []
    for i, row in enumerate(arr.to_pylist()):
        if row is None:
            raise _bad(path, f"row {i} is null; the posttrain format has no nulls")
        messages: list[dict[str, Any]] = []
        for j, m in enumerate(row):
            at = f"row {i}, message {j}"
            if m is None or any(m[k] is None for k in HISTORY_FIELDS) or None in m["tool_responses"]:
                raise _bad(path, f"{at} has nulls; the posttrain format has no nulls")
            message: dict[str, Any] = {"role": m["role"], "content": m["content"]}
            if m["name"]:
                message["name"] = m["name"]
            if m["tool_calls"]:
                message["tool_calls"] = _tool_calls(m["tool_calls"], path, at)
            if m["tool_responses"]:
                message["tool_responses"] = list(m["tool_responses"])
            if m["is_complete"] == 0:
                message["is_complete"] = False
            elif m["is_complete"] != 1:
                raise _bad(path, f"{at}: is_complete is {m['is_complete']}, expected 0 or 1")
            messages.append(message)
        rows.append(messages)
    return HistoryColumn(rows=rows)


# ----------------------------------------------------------------------------------------------------
# Arrays to tensors


class _ReadonlyWarning:
    """Whether this process already made torch give (and this module swallow) its read-only buffer warning."""

    spent = False


_readonly_warning = _ReadonlyWarning()


def _from_buffer(
    buf: pa.Buffer | None, start: int, count: int, dtype: torch.dtype, path: Path
) -> torch.Tensor:
    """``count`` elements at byte ``start`` of ``buf``: a view when aligned, else a copy."""
    if count == 0:
        return torch.empty(0, dtype=dtype)
    size = dtype.itemsize
    if buf is None or buf.size < start + count * size:
        found = 0 if buf is None else buf.size
        raise _bad(path, f"the values buffer holds {found} bytes, expected {start + count * size}")
    if (buf.address + start) % size != 0:
        copy = bytearray(memoryview(buf)[start : start + count * size])
        return torch.frombuffer(copy, dtype=dtype)
    view = memoryview(buf)
    if not view.readonly or _readonly_warning.spent:
        return torch.frombuffer(view, dtype=dtype, count=count, offset=start)
    # torch warns about a read-only buffer once per process (TORCH_WARN_ONCE): only the first such call needs
    # the filter, whose catch_warnings costs more than the view itself on every later payload.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        tensor = torch.frombuffer(view, dtype=dtype, count=count, offset=start)
    _readonly_warning.spent = True
    return tensor


def _primitive(arr: pa.Array, dtype: str, path: Path) -> torch.Tensor:
    """A 1-D tensor over a primitive array's values."""
    if arr.null_count:
        raise _bad(path, f"{arr.null_count} nulls; the posttrain format has no nulls")
    storage = torch.uint8 if dtype == "bool" else DTYPE_TO_TORCH[dtype]
    t = _from_buffer(arr.buffers()[1], arr.offset * storage.itemsize, len(arr), storage, path)
    if dtype == "bool":
        if t.numel() and bool((t > 1).any()):
            raise _bad(path, "a bool value is neither 0 nor 1")
        t = t.view(torch.bool)
    return t


def _offsets(arr: pa.Array, path: Path) -> torch.Tensor:
    if len(arr) == 0:
        return torch.zeros(1, dtype=torch.int32)
    return _from_buffer(arr.buffers()[1], arr.offset * 4, len(arr) + 1, torch.int32, path)


def _list_values(arr: pa.FixedSizeListArray) -> pa.Array:
    """The values of a FixedSizeList array without nulls (checked by its caller): what ``flatten()`` returns,
    sliced here directly (``flatten`` dispatches through Arrow's compute registry, the dearer part of a dense
    column's decode)."""
    size = arr.type.list_size
    return arr.values.slice(arr.offset * size, len(arr) * size)


def _column(field: pa.Field, arr: pa.Array, path: Path) -> Column:
    """One column of one record batch; dense tensors have shape ``[rows, *row_shape]``."""
    t = field.type
    if arr.null_count:
        raise _bad(path, f"{arr.null_count} nulls; the posttrain format has no nulls")
    kind = _meta(field).get(META_KIND)
    if kind is not None:
        _check_history_type(field, kind, path)
        return _history(arr, path)
    if pa.types.is_struct(t):
        children = arr.flatten()
        out: dict[str, Column] = {}
        for i in range(t.num_fields):
            child = t.field(i)
            if child.name in out:
                raise _bad((*path, child.name), "duplicate key")
            out[child.name] = _column(child, children[i], (*path, child.name))
        return out
    if pa.types.is_string(t):
        return [str(s) for s in arr.to_pylist()]
    meta = _meta(field)
    rows = len(arr)
    if isinstance(t, pa.FixedShapeTensorType):
        dtype = _dtype(meta, path)
        _check_storage(t.value_type, dtype, path, "fixed_shape_tensor of ")
        _check_permutation(t.permutation, path)
        shape = [int(d) for d in t.shape]
        return _primitive(_list_values(arr.storage), dtype, path).view(rows, *shape)
    if pa.types.is_fixed_size_list(t):
        dtype = _dtype(meta, path)
        _check_storage(t.value_type, dtype, path, "FixedSizeList of ")
        shape = _fixed_shape(meta, t.list_size, path)
        return _primitive(_list_values(arr), dtype, path).view(rows, *shape)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        dtype = _dtype(meta, path)
        _check_storage(t, dtype, path)
        return _primitive(arr, dtype, path)
    if pa.types.is_list(t):
        if pa.types.is_struct(t.value_type):
            raise _bad(path, f'a list of struct column must carry "{META_KIND}" = "{HISTORY_KIND}"')
        dtype = _dtype(meta, path)
        child = arr.values
        if child.null_count:
            raise _bad(path, "the list items have nulls; the posttrain format has no nulls")
        if pa.types.is_fixed_size_list(t.value_type):
            _check_storage(t.value_type.value_type, dtype, path, "List of FixedSizeList of ")
            tail = _ragged_tail(meta, t.value_type.list_size, path)
            values = _primitive(_list_values(child), dtype, path).view(len(child), *tail)
        else:
            _check_storage(t.value_type, dtype, path, "List of ")
            _ragged_tail(meta, None, path)
            values = _primitive(child, dtype, path)
        return Ragged(values=values, offsets=_offsets(arr, path))
    raise _bad(path, f"unsupported Arrow type {t}")


def _record_batch(schema: pa.Schema, batch: pa.RecordBatch) -> dict[str, Column]:
    out: dict[str, Column] = {}
    for i, field in enumerate(schema):
        if field.name in out:
            raise _bad((field.name,), "duplicate key")
        out[field.name] = _column(field, batch.column(i), (field.name,))
    return out


def _concat(parts: Sequence[Column], path: Path) -> Column:
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([p for p in parts if isinstance(p, torch.Tensor)])
    if isinstance(first, Ragged):
        ragged = [p for p in parts if isinstance(p, Ragged)]
        values: list[torch.Tensor] = []
        offsets: list[torch.Tensor] = [torch.zeros(1, dtype=torch.int64)]
        base = 0
        for r in ragged:
            off = r.offsets.to(torch.int64)
            start, end = int(off[0]), int(off[-1])
            values.append(r.values[start:end])
            offsets.append(off[1:] - start + base)
            base += end - start
        if base > MAX_INT32:
            raise _bad(path, "the concatenated ragged column exceeds int32 offsets")
        return Ragged(values=torch.cat(values), offsets=torch.cat(offsets).to(torch.int32))
    if isinstance(first, HistoryColumn):
        return HistoryColumn(rows=[r for p in parts if isinstance(p, HistoryColumn) for r in p.rows])
    if isinstance(first, dict):
        dicts = [p for p in parts if isinstance(p, dict)]
        return {name: _concat([d[name] for d in dicts], (*path, name)) for name in first}
    return [s for p in parts if isinstance(p, list) for s in p]


def _reshape(column: Column, batch_size: tuple[int, ...]) -> Column:
    if isinstance(column, torch.Tensor):
        return column.view((*batch_size, *column.shape[1:]))
    if isinstance(column, dict):
        return {name: _reshape(c, batch_size) for name, c in column.items()}
    return column


def _load_record_batch(
    schema: pa.Schema, metadata: memoryview, body: tuple[int, int], stream: _Stream, index: int
) -> pa.RecordBatch:
    """One record batch of a split payload, its arrays built over views of the parts (no copy).

    The schema's fields are walked in pre-order, each taking its field node and buffers as the Arrow format
    lays them out; pyarrow's full validation runs on the result like on any other record batch.
    """
    what = f"record batch {index}"
    body_start, body_length = body
    try:
        header = read_record_batch_header(metadata)
    except ValueError as exc:
        raise CodecError(f"invalid Arrow stream: cannot read {what}: {exc}") from exc
    if header.compressed:
        raise CodecError("unsupported Arrow stream: compressed record batches are not supported")
    nodes = iter(header.nodes)
    buffers = iter(enumerate(header.buffers))

    def node() -> tuple[int, int]:
        found = next(nodes, None)
        if found is None:
            raise CodecError(f"invalid Arrow stream: {what} has fewer field nodes than its schema needs")
        return found

    def buffer() -> pa.Buffer:
        k, region = next(buffers, (-1, (0, 0)))
        if k < 0:
            raise CodecError(f"invalid Arrow stream: {what} has fewer buffers than its schema needs")
        offset, length = region
        if offset < 0 or length < 0:
            raise CodecError(f"invalid Arrow stream: buffer {k} of {what} has offset {offset}, size {length}")
        # The checks Arrow's own reader makes on a one-frame stream: a buffer lies inside its message's
        # body (not in the next message) and starts 8-byte aligned.
        if offset + length > body_length or offset % 8:
            raise CodecError(
                f"invalid Arrow stream: buffer {k} of {what} (offset {offset}, length {length}) is not an "
                f"8-byte aligned region of its {body_length}-byte body"
            )
        return pa.py_buffer(stream.view(body_start + offset, length, f"buffer {k} of {what}"))

    def load(t: pa.DataType) -> pa.Array:
        if isinstance(t, pa.BaseExtensionType):
            return pa.ExtensionArray.from_storage(t, load(t.storage_type))
        length, nulls = node()
        validity = buffer()
        bitmap = validity if nulls else None
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            return pa.Array.from_buffers(t, length, [bitmap, buffer()], nulls)
        if pa.types.is_string(t):
            offsets = buffer()
            return pa.Array.from_buffers(t, length, [bitmap, offsets, buffer()], nulls)
        if pa.types.is_list(t):
            offsets = buffer()
            return pa.Array.from_buffers(t, length, [bitmap, offsets], nulls, children=[load(t.value_type)])
        if pa.types.is_fixed_size_list(t):
            return pa.Array.from_buffers(t, length, [bitmap], nulls, children=[load(t.value_type)])
        if pa.types.is_struct(t):
            children = [load(t.field(i).type) for i in range(t.num_fields)]
            return pa.Array.from_buffers(t, length, [bitmap], nulls, children=children)
        raise CodecError(f"unsupported Arrow type {t} in {what}")

    arrays = [load(f.type) for f in schema]
    if next(nodes, None) is not None or next(buffers, None) is not None:
        raise CodecError(
            f"invalid Arrow stream: {what} has {len(header.nodes)} field nodes and {len(header.buffers)} "
            "buffers, more than its schema takes"
        )
    if not arrays:  # from_arrays would count 0 rows; a batch of no columns still has its row count
        return pa.RecordBatch.from_struct_array(
            pa.Array.from_buffers(pa.struct([]), header.length, [None], children=[])
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@functools.lru_cache(maxsize=128)
def _read_schema(message: bytes) -> pa.Schema:
    """The schema of an encapsulated schema message: the same layout comes again and again, parsed once."""
    return pa.ipc.read_schema(pa.py_buffer(message))


def _read_parts(stream: _Stream) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    schema_message, messages = _check_framing(stream)
    try:
        schema = _read_schema(bytes(schema_message))
        return schema, [
            _load_record_batch(schema, metadata, (start, length), stream, i + 1)
            for i, (metadata, start, length) in enumerate(messages)
        ]
    except CodecError:
        raise
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise CodecError(f"invalid Arrow stream: {exc}") from exc


def _read_whole(data: pa.Buffer) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    _check_framing(_Stream([data]))
    try:
        reader = pa.ipc.open_stream(data)
        return reader.schema, list(reader)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CodecError(f"invalid Arrow stream: {exc}") from exc


def decode_batch(buf: object) -> TensorBatch:
    """Decodes one Arrow IPC stream (from ``encode_batch``, the TypeScript encoder, or any Arrow writer that
    follows docs/protocol.md) into a ``TensorBatch``.

    ``buf`` is any contiguous buffer-protocol object: ``bytes``, ``bytearray``, ``memoryview``,
    ``zmq.Frame.buffer``, ``pyarrow.Buffer``; or a list or tuple of them, the parts of a split payload
    (docs/protocol.md, "Split payloads": each message header with its metadata and each body buffer within
    one part). With one record batch the tensors share memory with ``buf`` (which they keep alive); an
    unaligned ``buf`` or part is copied once. Several record batches are concatenated (copied). Dense tensors
    have shape ``[*batch_size, *row_shape]``; ragged offsets are int32 tensors. Raises ``CodecError`` for
    anything that is not a valid posttrain payload.
    """
    if isinstance(buf, (list, tuple)):
        if not buf:
            raise CodecError("invalid split payload: no parts")
        parts = [_aligned_buffer(p) for p in buf]
        empty = next((i for i, p in enumerate(parts) if p.size == 0), None)
        if empty is not None and len(parts) > 1:
            raise CodecError(f"invalid split payload: part {empty} is empty")
        schema, batches = _read_whole(parts[0]) if len(parts) == 1 else _read_parts(_Stream(parts))
    else:
        schema, batches = _read_whole(_aligned_buffer(buf))
    try:
        for b in batches:
            b.validate(full=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CodecError(f"invalid Arrow stream: {exc}") from exc
    batch_size = _batch_size(schema)
    rows = math.prod(batch_size)
    found = sum(b.num_rows for b in batches)
    if found != rows:
        raise CodecError(
            f"invalid tensordict payload: batch size {list(batch_size)} means {rows} rows, "
            f"but the record batches hold {found}"
        )
    if not batches:
        batches = [pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)]
    try:
        decoded = [_record_batch(schema, b) for b in batches]
    except CodecError:
        raise
    except (UnicodeDecodeError, pa.ArrowException, RuntimeError, ValueError) as exc:
        raise CodecError(f"invalid tensordict payload: {exc}") from exc
    columns = decoded[0] if len(decoded) == 1 else _concat(decoded, ())
    assert isinstance(columns, dict)
    return TensorBatch(
        batch_size=batch_size, columns={k: _reshape(c, batch_size) for k, c in columns.items()}
    )
