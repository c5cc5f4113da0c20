"""Arrow IPC message metadata written with the ``flatbuffers`` Builder.

The sequence of builder calls here is exactly the one of ``bridge/wire/encode.ts`` (same objects, same order,
same defaults left out), so both sides produce identical bytes. Keep the two in step: the golden files in
``test/golden/`` pin the result.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final

import flatbuffers

# Arrow flatbuffer enum values (format/Schema.fbs, format/Message.fbs).
_METADATA_V5: Final = 4
HEADER_SCHEMA: Final = 1
HEADER_DICTIONARY_BATCH: Final = 2
HEADER_RECORD_BATCH: Final = 3
_TYPE_INT: Final = 2
_TYPE_FLOATING_POINT: Final = 3
_TYPE_UTF8: Final = 5
_TYPE_LIST: Final = 12
_TYPE_STRUCT: Final = 13
_TYPE_FIXED_SIZE_LIST: Final = 16


@dataclass(frozen=True)
class ArrowType:
    """The Arrow type of one field: ``id`` is int, float, utf8, list, struct or fixed_size_list."""

    HALF: ClassVar[int] = 0
    SINGLE: ClassVar[int] = 1
    DOUBLE: ClassVar[int] = 2

    id: str
    bit_width: int = 0
    signed: bool = False
    precision: int = 0
    list_size: int = 0

    @staticmethod
    def int_(bit_width: int, *, signed: bool) -> ArrowType:
        return ArrowType("int", bit_width=bit_width, signed=signed)

    @staticmethod
    def float_(precision: int) -> ArrowType:
        return ArrowType("float", precision=precision)

    @staticmethod
    def fixed_size_list(list_size: int) -> ArrowType:
        return ArrowType("fixed_size_list", list_size=list_size)


@dataclass(frozen=True)
class FieldPlan:
    """One non-nullable Arrow field of the schema message."""

    name: str
    type: ArrowType
    children: tuple[FieldPlan, ...] = ()
    metadata: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _offset_vector(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _key_values(b: flatbuffers.Builder, pairs: Sequence[tuple[str, str]]) -> int:
    tables: list[int] = []
    for key, value in pairs:
        k = b.CreateString(key)
        v = b.CreateString(value)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, k, 0)
        b.PrependUOffsetTRelativeSlot(1, v, 0)
        tables.append(b.EndObject())
    return _offset_vector(b, tables)


def _type(b: flatbuffers.Builder, t: ArrowType) -> tuple[int, int]:
    if t.id == "int":
        b.StartObject(2)
        b.PrependInt32Slot(0, t.bit_width, 0)
        b.PrependInt8Slot(1, 1 if t.signed else 0, 0)
        return _TYPE_INT, b.EndObject()
    if t.id == "float":
        b.StartObject(1)
        b.PrependInt16Slot(0, t.precision, 0)
        return _TYPE_FLOATING_POINT, b.EndObject()
    if t.id == "fixed_size_list":
        b.StartObject(1)
        b.PrependInt32Slot(0, t.list_size, 0)
        return _TYPE_FIXED_SIZE_LIST, b.EndObject()
    type_ids = {"utf8": _TYPE_UTF8, "list": _TYPE_LIST, "struct": _TYPE_STRUCT}
    b.StartObject(0)
    return type_ids[t.id], b.EndObject()


def _field(b: flatbuffers.Builder, f: FieldPlan) -> int:
    children = [_field(b, child) for child in f.children]
    name = b.CreateString(f.name)
    type_type, type_offset = _type(b, f.type)
    children_vector = _offset_vector(b, children)
    metadata = _key_values(b, f.metadata) if f.metadata else 0
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUint8Slot(2, type_type, 0)
    b.PrependUOffsetTRelativeSlot(3, type_offset, 0)
    b.PrependUOffsetTRelativeSlot(5, children_vector, 0)
    b.PrependUOffsetTRelativeSlot(6, metadata, 0)
    return b.EndObject()


def _finish_message(b: flatbuffers.Builder, header_type: int, header: int, body_length: int) -> bytes:
    b.StartObject(5)
    b.PrependInt64Slot(3, body_length, 0)
    b.PrependUOffsetTRelativeSlot(2, header, 0)
    b.PrependInt16Slot(0, _METADATA_V5, 0)
    b.PrependUint8Slot(1, header_type, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def schema_message(fields: Sequence[FieldPlan], metadata: Sequence[tuple[str, str]]) -> bytes:
    """The flatbuffer of a Schema message (body length 0) with these fields and schema metadata."""
    b = flatbuffers.Builder(1024)
    field_tables = [_field(b, f) for f in fields]
    fields_vector = _offset_vector(b, field_tables)
    meta = _key_values(b, metadata)
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(1, fields_vector, 0)
    b.PrependUOffsetTRelativeSlot(2, meta, 0)
    return _finish_message(b, HEADER_SCHEMA, b.EndObject(), 0)


def record_batch_message(rows: int, nodes: Sequence[int], buffers: Sequence[int], body_length: int) -> bytes:
    """The flatbuffer of a RecordBatch message.

    ``nodes`` are the field node lengths in schema pre-order (null counts are 0); ``buffers`` are flattened
    ``(offset, length)`` pairs relative to the body start.
    """
    b = flatbuffers.Builder(256 + 16 * (len(nodes) + len(buffers) // 2))
    b.StartVector(16, len(nodes), 8)
    for length in reversed(nodes):
        b.Prep(8, 16)
        b.PrependInt64(0)  # null_count
        b.PrependInt64(length)
    nodes_vector = b.EndVector()
    count = len(buffers) // 2
    b.StartVector(16, count, 8)
    for i in range(count - 1, -1, -1):
        b.Prep(8, 16)
        b.PrependInt64(buffers[2 * i + 1])  # length
        b.PrependInt64(buffers[2 * i])  # offset
    buffers_vector = b.EndVector()
    b.StartObject(5)
    b.PrependInt64Slot(0, rows, 0)
    b.PrependUOffsetTRelativeSlot(1, nodes_vector, 0)
    b.PrependUOffsetTRelativeSlot(2, buffers_vector, 0)
    return _finish_message(b, HEADER_RECORD_BATCH, b.EndObject(), body_length)


# The same layout sends the same metadata bytes call after call: each reader below parses a given flatbuffer
# once (its result is immutable; a flatbuffer it rejects raises again each time, exceptions are not cached).
_PARSED_CACHE_SIZE: Final = 256


def read_message_header(metadata: memoryview | bytes) -> tuple[int, int, int]:
    """``(version, header_type, body_length)`` of a Message flatbuffer, with bounds checks.

    Raises ``ValueError`` when the flatbuffer offsets point outside ``metadata``.
    """
    return _read_message_header(bytes(metadata))


@functools.lru_cache(maxsize=_PARSED_CACHE_SIZE)
def _read_message_header(metadata: bytes) -> tuple[int, int, int]:
    n = len(metadata)

    def u32(at: int) -> int:
        if at < 0 or at + 4 > n:
            raise ValueError(f"flatbuffer offset {at} out of range")
        return int.from_bytes(metadata[at : at + 4], "little")

    def u16(at: int) -> int:
        if at < 0 or at + 2 > n:
            raise ValueError(f"flatbuffer offset {at} out of range")
        return int.from_bytes(metadata[at : at + 2], "little")

    table = u32(0)
    vtable = (
        table - int.from_bytes(metadata[table : table + 4], "little", signed=True) if table + 4 <= n else -1
    )
    vtable_size = u16(vtable)

    def slot(index: int, width: int, signed: bool = False) -> int:
        entry = 4 + 2 * index
        if entry + 2 > vtable_size:
            return 0
        off = u16(vtable + entry)
        if off == 0:
            return 0
        at = table + off
        if at + width > n:
            raise ValueError(f"flatbuffer field at {at} out of range")
        return int.from_bytes(metadata[at : at + width], "little", signed=signed)

    return slot(0, 2, True), slot(1, 1), slot(3, 8, True)


@dataclass(frozen=True)
class RecordBatchHeader:
    """The metadata of a record batch message: rows, field nodes ``(length, null_count)`` and body buffer
    regions ``(offset, length)``, in schema pre-order."""

    length: int
    nodes: tuple[tuple[int, int], ...]
    buffers: tuple[tuple[int, int], ...]
    compressed: bool


def read_record_batch_header(metadata: memoryview | bytes) -> RecordBatchHeader:
    """The record batch of a Message flatbuffer whose header type is ``HEADER_RECORD_BATCH``, bounds-checked.

    Read here rather than by pyarrow for split payloads, whose body is not one buffer. Raises ``ValueError``
    when an offset points outside ``metadata``.
    """
    return _read_record_batch_header(bytes(metadata))


@functools.lru_cache(maxsize=_PARSED_CACHE_SIZE)
def _read_record_batch_header(metadata: bytes) -> RecordBatchHeader:
    n = len(metadata)

    def read(at: int, width: int, signed: bool = False) -> int:
        if at < 0 or at + width > n:
            raise ValueError(f"flatbuffer offset {at} out of range")
        return int.from_bytes(metadata[at : at + width], "little", signed=signed)

    def field_at(table: int, index: int) -> int:
        """Absolute position of a table's field, 0 when absent."""
        vtable = table - read(table, 4, True)
        entry = 4 + 2 * index
        if entry + 2 > read(vtable, 2):
            return 0
        off = read(vtable + entry, 2)
        return table + off if off else 0

    def table_at(at: int) -> int:
        return at + read(at, 4) if at else 0

    def structs(at: int) -> tuple[tuple[int, int], ...]:
        if not at:
            return ()
        start = at + read(at, 4)
        count = read(start, 4)
        if start + 4 + 16 * count > n:
            raise ValueError(f"a vector of {count} entries at {start} runs past the metadata")
        at = start + 4
        return tuple((read(at + 16 * i, 8, True), read(at + 8 + 16 * i, 8, True)) for i in range(count))

    message = read(0, 4)  # the root table
    header = table_at(field_at(message, 2))
    if not header:
        raise ValueError("the message has no header")
    length_at = field_at(header, 0)
    return RecordBatchHeader(
        length=read(length_at, 8, True) if length_at else 0,
        nodes=structs(field_at(header, 1)),
        buffers=structs(field_at(header, 2)),
        compressed=field_at(header, 3) != 0,
    )
