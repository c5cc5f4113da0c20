"""The Arrow IPC codec (posttrain_worker.codec): golden vectors shared with the TypeScript suite, zero-copy
decoding (also from real zmq frames), round trips, streams from pyarrow's writer, and rejection of malformed
input with CodecError."""

from __future__ import annotations

import gc
import json
import math
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
import zmq
from posttrain_worker.codec import (
    DTYPE_TO_TORCH,
    CodecError,
    HistoryColumn,
    Ragged,
    TensorBatch,
    arrow_decode,
    arrow_encode,
    decode_batch,
    encode_batch,
    tensor_from_bytes,
    tensor_to_bytes,
)
from posttrain_worker.codec.types import Column

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES: list[dict[str, Any]] = json.loads((GOLDEN / "cases.json").read_text("utf-8"))["cases"]
CASE_IDS = [c["name"] for c in CASES]


def golden(name: str) -> bytes:
    return (GOLDEN / f"{name}.arrows").read_bytes()


# ----------------------------------------------------------------------------------------------------------
# JSON <-> tensors (value conventions: test/golden/generate.ts)


def tensor_from_json(dtype: str, values: list[Any], shape: list[int]) -> torch.Tensor:
    if dtype in ("float16", "bfloat16"):
        bits = [v - 65536 if v >= 32768 else v for v in values]
        t = torch.tensor(bits, dtype=torch.int16).view(DTYPE_TO_TORCH[dtype])
    elif dtype == "int64":
        t = torch.tensor([int(v) for v in values], dtype=torch.int64)
    elif dtype == "bool":
        t = torch.tensor(values, dtype=torch.uint8).view(torch.bool)
    else:
        t = torch.tensor(values, dtype=DTYPE_TO_TORCH[dtype])
    return t.reshape(shape)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as same-width integers, so that NaNs and -0 compare bit for bit."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(as_int)


def assert_same_tensor(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.dtype == expected.dtype, what
    assert list(actual.shape) == list(expected.shape), what
    assert torch.equal(bits(actual), bits(expected)), what


def column_from_json(col: dict[str, Any], batch_size: list[int]) -> Column:
    kind = col["kind"]
    if kind == "dense":
        return tensor_from_json(col["dtype"], col["values"], [*batch_size, *col["rowShape"]])
    if kind == "ragged":
        total = col["offsets"][-1]
        values = tensor_from_json(col["dtype"], col["values"], [total, *col["tailShape"]])
        return Ragged(values=values, offsets=torch.tensor(col["offsets"], dtype=torch.int32))
    if kind == "strings":
        return list(col["values"])
    if kind == "history":
        return HistoryColumn(rows=[[message_from_json(m) for m in row] for row in col["rows"]])
    return {c["name"]: column_from_json(c, batch_size) for c in col["columns"]}


def message_from_json(m: dict[str, Any]) -> dict[str, Any]:
    """A cases.json message (TypeScript names, tool calls as JSON text) as the Python codec holds it."""
    out: dict[str, Any] = {"role": m["role"], "content": m["content"]}
    if "name" in m:
        out["name"] = m["name"]
    if "toolCalls" in m:
        out["tool_calls"] = json.loads(m["toolCalls"])
    if "toolResponses" in m:
        out["tool_responses"] = list(m["toolResponses"])
    if "isComplete" in m:
        out["is_complete"] = m["isComplete"]
    return out


def batch_from_json(case: dict[str, Any]) -> TensorBatch:
    bs = case["batchSize"]
    return TensorBatch(
        batch_size=tuple(bs), columns={c["name"]: column_from_json(c, bs) for c in case["columns"]}
    )


def assert_same_column(actual: Column, expected: Column, path: str) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), path
        assert_same_tensor(actual, expected, path)
    elif isinstance(expected, Ragged):
        assert isinstance(actual, Ragged), path
        assert_same_tensor(actual.values, expected.values, f"{path}.values")
        assert actual.offsets.tolist() == expected.offsets.tolist(), path
    elif isinstance(expected, HistoryColumn):
        assert isinstance(actual, HistoryColumn), path
        assert actual.rows == expected.rows, path
        for row in actual.rows:
            for m in row:  # the decoder leaves absent values out; is_complete is False when present
                assert {"role", "content"} <= set(m) and m.get("is_complete", False) is False, path
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert list(actual) == list(expected), path
        for name in expected:
            assert_same_column(actual[name], expected[name], f"{path}/{name}")
    else:
        assert actual == expected, path


def assert_same_batch(actual: TensorBatch, expected: TensorBatch) -> None:
    assert actual.batch_size == expected.batch_size
    assert_same_column(actual.columns, expected.columns, "")


def tensors_of(column: Column) -> list[torch.Tensor]:
    if isinstance(column, torch.Tensor):
        return [column]
    if isinstance(column, Ragged):
        return [column.values, column.offsets]
    if isinstance(column, dict):
        return [t for c in column.values() for t in tensors_of(c)]
    return []


def address_range(buf: Any) -> tuple[int, int]:
    arr = np.frombuffer(buf, dtype=np.uint8)
    return int(arr.ctypes.data), int(arr.ctypes.data) + arr.nbytes


# ----------------------------------------------------------------------------------------------------------
# Golden files


def test_cases_cover_files() -> None:
    assert sorted(CASE_IDS) == sorted(p.stem for p in GOLDEN.glob("*.arrows"))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_decodes_to_cases_json(case: dict[str, Any]) -> None:
    assert_same_batch(decode_batch(golden(case["name"])), batch_from_json(case))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_reencodes_byte_for_byte(case: dict[str, Any]) -> None:
    raw = golden(case["name"])
    assert bytes(encode_batch(decode_batch(raw))) == raw


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_python_encoder_writes_the_golden_bytes(case: dict[str, Any]) -> None:
    """The Python encoder, fed the content of cases.json, writes exactly what the TypeScript encoder wrote."""
    assert bytes(encode_batch(batch_from_json(case))) == golden(case["name"])


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_reads_with_pyarrow(case: dict[str, Any]) -> None:
    reader = pa.ipc.open_stream(golden(case["name"]))
    batches = list(reader)
    assert len(batches) == 1
    batches[0].validate(full=True)
    assert batches[0].num_rows == math.prod(case["batchSize"])
    meta = reader.schema.metadata
    assert meta[b"posttrain.version"] == b"1"
    assert json.loads(meta[b"posttrain.batch_size"]) == case["batchSize"]

    def check(fields: list[pa.Field], cols: list[dict[str, Any]]) -> None:
        assert [f.name for f in fields] == [c["name"] for c in cols]
        for f, c in zip(fields, cols, strict=True):
            if c["kind"] == "dense" and c["rowShape"]:
                assert isinstance(f.type, pa.FixedShapeTensorType), f.name
                assert f.type.extension_name == "arrow.fixed_shape_tensor"
                assert list(f.type.shape) == c["rowShape"]
            if c["kind"] == "struct":
                check([f.type.field(i) for i in range(f.type.num_fields)], c["columns"])
            if c["kind"] == "history":
                assert f.metadata == {b"posttrain.kind": b"history"}
                assert f.type == HISTORY_TYPE, f.name
                assert f.type.value_field.name == "item"
                assert f.type.value_type.field("tool_responses").type.value_field.name == "item"
                assert f.type.value_type.field("is_complete").metadata == {b"posttrain.dtype": b"bool"}
            assert not f.nullable

    check(list(reader.schema), case["columns"])


HISTORY_TYPE = pa.list_(
    pa.field(
        "item",
        pa.struct(
            [
                pa.field("role", pa.string(), nullable=False),
                pa.field("content", pa.string(), nullable=False),
                pa.field("name", pa.string(), nullable=False),
                pa.field("tool_calls", pa.string(), nullable=False),
                pa.field(
                    "tool_responses", pa.list_(pa.field("item", pa.string(), nullable=False)), nullable=False
                ),
                pa.field("is_complete", pa.uint8(), nullable=False, metadata={"posttrain.dtype": "bool"}),
            ]
        ),
        nullable=False,
    )
)


def test_golden_tool_calls_are_the_compact_json_python_writes() -> None:
    """The TypeScript side carries tool calls as text: the golden texts are exactly what json.dumps writes."""
    case = next(c for c in CASES if c["name"] == "history")
    texts = [m["toolCalls"] for row in case["columns"][0]["rows"] for m in row if "toolCalls" in m]
    assert len(texts) == 2
    for text in texts:
        assert json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":")) == text


def test_golden_layout() -> None:
    for case in CASES:
        raw = golden(case["name"])
        assert len(raw) % 8 == 0
        assert raw[-8:] == b"\xff\xff\xff\xff\x00\x00\x00\x00"
        start, _ = address_range(raw)
        for t in tensors_of(decode_batch(raw).columns):
            if t.numel():
                assert (t.data_ptr() - start) % 8 == 0


# ----------------------------------------------------------------------------------------------------------
# Zero copy


def big_batch(rows: int = 1 << 14) -> TensorBatch:
    return TensorBatch(
        batch_size=(rows,),
        columns={
            "x": torch.arange(rows * 4, dtype=torch.float32).reshape(rows, 4),
            "next": {"reward": torch.arange(rows, dtype=torch.float64)},
            "tokens": Ragged(
                values=torch.arange(rows * 2, dtype=torch.int64), offsets=torch.arange(rows + 1) * 2
            ),
            "mask": torch.ones(rows, dtype=torch.bool),
            "h": torch.zeros(rows, 2, dtype=torch.bfloat16),
        },
    )


def assert_views(batch: TensorBatch, buf: Any) -> None:
    start, end = address_range(buf)
    tensors = [t for t in tensors_of(batch.columns) if t.numel()]
    assert tensors
    for t in tensors:
        assert start <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= end


def test_zero_copy_from_bytes_and_memoryview() -> None:
    raw = bytes(encode_batch(big_batch()))
    assert_views(decode_batch(raw), raw)
    mv = memoryview(raw)
    assert_views(decode_batch(mv), raw)


def test_decoded_tensors_keep_the_buffer_alive() -> None:
    expected = big_batch()
    buf = bytearray(encode_batch(expected))
    decoded = decode_batch(memoryview(buf))
    del buf
    gc.collect()
    assert_same_batch(decoded, expected)


def test_unaligned_buffer_is_copied_and_decoded() -> None:
    raw = bytes(encode_batch(big_batch(64)))
    host = bytearray(len(raw) + 3)
    host[3:] = raw
    view = memoryview(host)[3:]
    decoded = decode_batch(view)
    assert_same_batch(decoded, decode_batch(raw))
    start, end = address_range(host)
    for t in tensors_of(decoded.columns):
        if t.numel():
            assert not (start <= t.data_ptr() < end)


def test_unaligned_copy_is_64_byte_aligned_and_independent() -> None:
    host = bytearray(range(256)) * 4
    view = memoryview(host)[3:1003]
    copy = arrow_decode._aligned_buffer(view)
    assert copy.address % 64 == 0 and copy.to_pybytes() == bytes(view)
    host[3] = 99  # the copy does not share the caller's memory
    assert copy.to_pybytes()[0] == 3


def test_read_only_buffers_decode_without_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The filter is skipped once torch's once-per-process warning has been swallowed: no call may let it out.
    monkeypatch.setattr(arrow_decode._readonly_warning, "spent", False)
    expected = big_batch(64)
    raw = bytes(encode_batch(expected))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            assert_same_batch(decode_batch(raw), expected)
    assert arrow_decode._readonly_warning.spent


@pytest.mark.parametrize("transport", ["inproc", "ipc"])
def test_zero_copy_from_zmq_frame(transport: str, tmp_path: Path) -> None:
    ctx = zmq.Context()
    a = ctx.socket(zmq.PAIR)
    b = ctx.socket(zmq.PAIR)
    try:
        endpoint = "inproc://codec-test" if transport == "inproc" else f"ipc://{tmp_path / 'codec.sock'}"
        a.bind(endpoint)
        b.connect(endpoint)
        expected = big_batch()
        payload = encode_batch(expected)
        assert len(payload) > 64 * 1024
        a.send(payload, copy=False)
        assert b.poll(5000)
        frame = b.recv(copy=False)
        assert isinstance(frame, zmq.Frame)
        decoded = decode_batch(frame.buffer)
        assert_views(decoded, frame.buffer)
        start, _ = address_range(frame.buffer)
        if start % 8 == 0:  # zero-copy needs the frame 8-aligned; otherwise the codec copies
            assert_same_batch(decoded, expected)
        del frame
        gc.collect()
        assert_same_batch(decoded, expected)
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


# ----------------------------------------------------------------------------------------------------------
# Round trips and encoder inputs


DTYPES = list(DTYPE_TO_TORCH)


def random_tensor(rng: random.Random, dtype: str, shape: list[int]) -> torch.Tensor:
    n = math.prod(shape)
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    if dtype == "bool":
        t = torch.randint(0, 2, (n,), generator=g).bool()
    elif dtype in ("float32", "float64", "float16", "bfloat16"):
        t = (torch.randn(n, generator=g) * 100).to(DTYPE_TO_TORCH[dtype])
    else:
        info = torch.iinfo(DTYPE_TO_TORCH[dtype])
        t = torch.randint(max(info.min, -(1 << 62)), min(info.max, 1 << 62), (n,), generator=g)
        t = t.to(DTYPE_TO_TORCH[dtype])
    return t.reshape(shape)


def random_columns(rng: random.Random, batch_size: list[int], depth: int) -> dict[str, Column]:
    rows = math.prod(batch_size)
    out: dict[str, Column] = {}
    for k in range(rng.randint(1, 5)):
        name = f"c{k}" + ("é" if rng.random() < 0.2 else "")
        dtype = rng.choice(DTYPES)
        kind = rng.random()
        if kind < 0.35:
            row_shape = [rng.randint(1, 3) for _ in range(rng.randint(0, 3))]
            out[name] = random_tensor(rng, dtype, [*batch_size, *row_shape])
        elif kind < 0.65:
            tail = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
            start = rng.randint(0, 2)
            lengths = [rng.randint(0, 3) for _ in range(rows)]
            offsets = torch.tensor([start, *lengths]).cumsum(0)
            values = random_tensor(rng, dtype, [int(offsets[-1]) + rng.randint(0, 1), *tail])
            out[name] = Ragged(values=values, offsets=offsets)
        elif kind < 0.75:
            words = ["", "a", "héllo", "日本", "😀", "\x00", "\ufeffx"]
            out[name] = [rng.choice(words) for _ in range(rows)]
        elif kind < 0.85 or depth >= 2:
            out[name] = HistoryColumn(
                rows=[[random_message(rng) for _ in range(rng.randint(0, 3))] for _ in range(rows)]
            )
        else:
            out[name] = random_columns(rng, batch_size, depth + 1)
    return out


def random_message(rng: random.Random) -> dict[str, Any]:
    words = ["", "a", "héllo", "日本", "😀", "\x00", "\ufeffx", 'q"\\\n\t']
    m: dict[str, Any] = {
        "role": rng.choice(["system", "user", "assistant", "tool"]),
        "content": rng.choice(words),
    }
    # Optional values: absent, None, or given (explicit empty defaults included, which decode as absent).
    if rng.random() < 0.3:
        m["name"] = rng.choice([None, *words])
    if rng.random() < 0.3:
        m["tool_calls"] = rng.choice(
            [None, [], [{"id": rng.choice(words), "args": {"n": 1, "x": [1.5, None]}}]]
        )
    if rng.random() < 0.3:
        m["tool_responses"] = rng.choice([None, [rng.choice(words) for _ in range(rng.randint(0, 2))]])
    if rng.random() < 0.3:
        m["is_complete"] = rng.choice([None, True, False])
    return m


def canonical_message(m: dict[str, Any]) -> dict[str, Any]:
    out = {"role": m["role"], "content": m["content"]}
    for key in ("name", "tool_calls", "tool_responses"):
        if m.get(key):
            out[key] = m[key]
    if m.get("tool_calls") == []:
        out["tool_calls"] = []
    if m.get("is_complete") is False:
        out["is_complete"] = False
    return out


def canonical(column: Column) -> Column:
    """What decoding gives back: ragged offsets rebased (int32) and only the used values; history messages
    without their absent values."""
    if isinstance(column, HistoryColumn):
        return HistoryColumn(rows=[[canonical_message(m) for m in row] for row in column.rows])
    if isinstance(column, Ragged):
        first, last = int(column.offsets[0]), int(column.offsets[-1])
        return Ragged(values=column.values[first:last], offsets=(column.offsets - first).to(torch.int32))
    if isinstance(column, dict):
        return {k: canonical(v) for k, v in column.items()}
    return column


def test_random_round_trips() -> None:
    for seed in range(150):
        rng = random.Random(seed)
        batch_size = [rng.randint(1, 3) if rng.random() > 0.1 else 0 for _ in range(rng.randint(0, 2))]
        batch = TensorBatch(batch_size=tuple(batch_size), columns=random_columns(rng, batch_size, 0))
        raw = encode_batch(batch)
        decoded = decode_batch(raw)
        assert_same_batch(
            decoded, TensorBatch(batch.batch_size, {k: canonical(v) for k, v in batch.columns.items()})
        )
        assert encode_batch(decoded) == raw, f"seed {seed}"


def test_non_contiguous_tensors_and_int64_offsets() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    transposed = base.t()  # (6, 4), non-contiguous
    assert not transposed.is_contiguous()
    strided = torch.arange(20, dtype=torch.int16)[::2]
    a = encode_batch(TensorBatch((6,), {"t": transposed, "s": strided[:6]}))
    b = encode_batch(TensorBatch((6,), {"t": transposed.contiguous(), "s": strided[:6].contiguous()}))
    assert a == b
    r64 = Ragged(values=torch.arange(5), offsets=torch.tensor([0, 2, 5], dtype=torch.int64))
    r32 = Ragged(values=torch.arange(5), offsets=torch.tensor([0, 2, 5], dtype=torch.int32))
    assert encode_batch(TensorBatch((2,), {"r": r64})) == encode_batch(TensorBatch((2,), {"r": r32}))


def test_jagged_nested_tensor_is_encoded_as_ragged() -> None:
    nt = torch.nested.nested_tensor([torch.arange(3.0), torch.arange(1.0)], layout=torch.jagged)
    decoded = decode_batch(encode_batch(TensorBatch((2,), {"n": nt})))
    r = decoded.columns["n"]
    assert isinstance(r, Ragged)
    assert r.values.tolist() == [0.0, 1.0, 2.0, 0.0]
    assert r.offsets.tolist() == [0, 3, 4]


def test_bool_and_bfloat16_cross_as_bytes_and_bits() -> None:
    mask = torch.tensor([True, False, True])
    h = torch.tensor([1.5, -2.0, float("inf")], dtype=torch.bfloat16)
    decoded = decode_batch(encode_batch(TensorBatch((3,), {"mask": mask, "h": h})))
    assert_same_tensor(decoded.columns["mask"], mask, "mask")  # type: ignore[arg-type]
    assert_same_tensor(decoded.columns["h"], h, "h")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------
# Streams from pyarrow's writer


def write_stream(schema: pa.Schema, batches: list[pa.RecordBatch]) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for b in batches:
            writer.write_batch(b)
    return sink.getvalue().to_pybytes()


def test_several_record_batches_are_concatenated() -> None:
    for name in ["batch_2d", "ragged", "nested", "strings", "dense_shaped", "history"]:
        raw = golden(name)
        reader = pa.ipc.open_stream(raw)
        whole = reader.read_next_batch()
        cut = max(1, whole.num_rows // 2)
        parts = [whole.slice(0, cut), whole.slice(cut)]
        decoded = decode_batch(write_stream(reader.schema, parts))
        assert_same_batch(decoded, decode_batch(raw))
        assert encode_batch(decoded) == raw


def test_stream_without_record_batches_only_for_an_empty_batch() -> None:
    schema = pa.ipc.open_stream(golden("empty")).schema
    decoded = decode_batch(write_stream(schema, []))
    assert_same_batch(decoded, batch_from_json(next(c for c in CASES if c["name"] == "empty")))
    schema = pa.ipc.open_stream(golden("batch_2d")).schema
    with pytest.raises(CodecError, match="means 6 rows, but the record batches hold 0"):
        decode_batch(write_stream(schema, []))


def test_pyarrow_fixed_shape_tensor_array_decodes() -> None:
    storage = pa.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]], pa.list_(pa.int32(), 6))
    arr = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.int32(), [2, 3]), storage)
    field = pa.field("x", arr.type, nullable=False, metadata={"posttrain.dtype": "int32"})
    schema = pa.schema([field], metadata={"posttrain.version": "1", "posttrain.batch_size": "[2]"})
    decoded = decode_batch(write_stream(schema, [pa.record_batch([arr], schema=schema)]))
    assert decoded.columns["x"].tolist() == [[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]]  # type: ignore[union-attr]


def test_fixed_shape_tensor_permutation_is_rejected() -> None:
    storage = pa.array([[1, 2, 3, 4, 5, 6]], pa.list_(pa.int32(), 6))
    arr = pa.ExtensionArray.from_storage(
        pa.fixed_shape_tensor(pa.int32(), [2, 3], permutation=[1, 0]), storage
    )
    field = pa.field("x", arr.type, nullable=False, metadata={"posttrain.dtype": "int32"})
    schema = pa.schema([field], metadata={"posttrain.version": "1", "posttrain.batch_size": "[1]"})
    with pytest.raises(
        CodecError, match=r'column "x": fixed_shape_tensor permutation \[1, 0\] is not supported'
    ):
        decode_batch(write_stream(schema, [pa.record_batch([arr], schema=schema)]))


def posttrain_schema(fields: list[pa.Field], batch_size: str) -> pa.Schema:
    return pa.schema(fields, metadata={"posttrain.version": "1", "posttrain.batch_size": batch_size})


def test_nulls_and_unsupported_types_are_rejected() -> None:
    f = pa.field("x", pa.float32(), metadata={"posttrain.dtype": "float32"})
    schema = posttrain_schema([f], "[2]")
    raw = write_stream(schema, [pa.record_batch([pa.array([1.0, None], pa.float32())], schema=schema)])
    with pytest.raises(CodecError, match=r'column "x".*nulls'):
        decode_batch(raw)
    g = pa.field("flag", pa.bool_())
    schema = posttrain_schema([g], "[2]")
    raw = write_stream(schema, [pa.record_batch([pa.array([True, False])], schema=schema)])
    with pytest.raises(CodecError, match='column "flag": unsupported Arrow type bool'):
        decode_batch(raw)


def test_plain_arrow_streams_and_files_are_rejected() -> None:
    table = pa.table({"x": pa.array([1.0, 2.0], pa.float32())})
    with pytest.raises(CodecError, match=r'no "posttrain\.version"'):
        decode_batch(write_stream(table.schema, table.to_batches()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(CodecError, match="not an Arrow IPC stream"):
        decode_batch(sink.getvalue())


# ----------------------------------------------------------------------------------------------------------
# Malformed input


@pytest.mark.parametrize("name", ["nested", "strings", "empty", "history"])
def test_every_truncation_raises_codec_error(name: str) -> None:
    raw = golden(name)
    for n in range(len(raw)):
        with pytest.raises(CodecError):
            decode_batch(raw[:n])


def test_truncation_messages() -> None:
    raw = golden("nested")
    with pytest.raises(CodecError, match="empty payload"):
        decode_batch(b"")
    with pytest.raises(CodecError, match=r"message 0 .* declares \d+ bytes of metadata"):
        decode_batch(raw[:100])
    with pytest.raises(CodecError, match=r"message 1 .* body of\s+\d+ bytes"):
        decode_batch(raw[:-16])
    with pytest.raises(CodecError, match="expected a message header"):
        decode_batch(raw[:-8])
    with pytest.raises(CodecError, match="8 unexpected bytes after the end-of-stream marker"):
        decode_batch(raw + bytes(8))


def test_random_bytes_raise_codec_error() -> None:
    rng = random.Random(7)
    for k in range(300):
        data = bytearray(rng.randbytes(rng.randrange(600)))
        if k % 2 == 0 and len(data) >= 8:
            data[:4] = b"\xff\xff\xff\xff"
        with pytest.raises(CodecError):
            decode_batch(bytes(data))


def test_corrupted_streams_raise_only_codec_error() -> None:
    rng = random.Random(11)
    for name in ["nested", "ragged", "strings", "dense_shaped", "history"]:
        original = golden(name)
        for _ in range(300):
            data = bytearray(original)
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            try:
                decode_batch(bytes(data))
            except CodecError:
                pass


def patched(raw: bytes, old: str, new: str) -> bytes:
    assert len(old) == len(new) and old.encode() in raw
    return raw.replace(old.encode(), new.encode(), 1)


@pytest.mark.parametrize(
    ("name", "old", "new", "message"),
    [
        ("batch_2d", "posttrain.version", "posttrain.versioX", 'no "posttrain.version"'),
        ("batch_2d", "posttrain.batch_size", "posttrain.batch_sizX", 'no "posttrain.batch_size"'),
        ("batch_2d", "[2,3]", "[2,4]", r"batch size \[2, 4\] means 8 rows, but the record batches hold 6"),
        ("batch_2d", "[2,3]", "[2,x]", '"posttrain.batch_size" must be a JSON array'),
        ("dense_scalar", "float32", "float33", r'column "float\w*": unknown "posttrain.dtype" \'float33\''),
        ("dense_scalar", "float32", "float64", r'column "float\w*": dtype float64 must be stored as double'),
        (
            "dense_scalar",
            "posttrain.dtype",
            "posttrain.dtypX",
            r'column "\w+": the field has no "posttrain.dtype"',
        ),
        ("ragged", "[-1]", "[-2]", r'column "\w+": "posttrain.shape" must be \[-1'),
        ("ragged", "[-1,2]", "[-1,3]", r'column "pairs": "posttrain.shape" \[-1,3\] does not match'),
        ("nested", "float64", "float65", r'column "next/obs/x": unknown "posttrain.dtype"'),
    ],
)
def test_invalid_metadata(name: str, old: str, new: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_batch(patched(golden(name), old, new))


def test_wrong_fixed_shape_metadata() -> None:
    # pyarrow itself rejects an inconsistent fixed_shape_tensor extension; the error is still a CodecError.
    raw = patched(golden("dense_shaped"), '{"shape":[2,3]}', '{"shape":[3,3]}')
    with pytest.raises(CodecError):
        decode_batch(raw)


def small_history() -> bytes:
    rows = [
        [{"role": "user", "content": "QQQ", "is_complete": False}],
        [{"role": "assistant", "content": "", "tool_calls": ["tc"]}],
    ]
    raw = bytes(encode_batch(TensorBatch((2,), {"h": HistoryColumn(rows=rows)})))
    assert decode_batch(raw).columns["h"] == HistoryColumn(rows=rows)
    return raw


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("history", "historX", 'column "h": unknown "posttrain.kind" \'historX\''),
        (
            "posttrain.kind",
            "posttrain.kinX",
            'column "h": a list of struct column must carry "posttrain.kind" = "history"',
        ),
        (
            "tool_calls",
            "tool_callX",
            r'column "h": a "posttrain.kind" = "history" column must be list<struct<role: string, .*found '
            r"list<item: struct<.*tool_callX",
        ),
        (
            "bool",
            "boox",
            'column "h": the is_complete field must carry "posttrain.dtype" = "bool", found \'boox\'',
        ),
        ('["tc"]', '["tc"}', r'column "h": row 1, message 0: tool_calls must be the JSON text of an array'),
    ],
)
def test_invalid_history_metadata_and_values(old: str, new: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_batch(patched(small_history(), old, new))


def test_invalid_history_bytes() -> None:
    raw = small_history()
    with pytest.raises(CodecError, match="invalid Arrow stream"):  # pyarrow's full validation: UTF-8
        decode_batch(raw.replace(b"QQQ", b"\xffQQ", 1))
    flag = bytearray(raw)
    flag[-16] = 2  # is_complete is the last body buffer, just before the end-of-stream marker
    with pytest.raises(CodecError, match=r'column "h": row 0, message 0: is_complete is 2, expected 0 or 1'):
        decode_batch(bytes(flag))


def history_stream(messages: pa.Array, offsets: list[int]) -> bytes:
    arr = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), messages, type=HISTORY_TYPE)
    field = pa.field("h", HISTORY_TYPE, nullable=False, metadata={"posttrain.kind": "history"})
    schema = posttrain_schema([field], f"[{len(offsets) - 1}]")
    return write_stream(schema, [pa.record_batch([arr], schema=schema)])


def message_array(**overrides: list[Any]) -> pa.StructArray:
    columns: dict[str, list[Any]] = {
        "role": ["user"],
        "content": ["x"],
        "name": [""],
        "tool_calls": [""],
        "tool_responses": [[]],
        "is_complete": [1],
    }
    columns.update(overrides)
    return pa.StructArray.from_arrays(
        [pa.array(columns[f.name], f.type) for f in HISTORY_TYPE.value_type],
        fields=list(HISTORY_TYPE.value_type),
    )


def test_history_from_pyarrow_writer() -> None:
    decoded = decode_batch(history_stream(message_array(), [0, 0, 1]))
    assert decoded.columns["h"] == HistoryColumn(rows=[[], [{"role": "user", "content": "x"}]])
    with pytest.raises(CodecError, match=r'column "h": row 0, message 0 has nulls'):
        decode_batch(history_stream(message_array(name=[None]), [0, 1]))
    with pytest.raises(CodecError, match=r'column "h": row 0, message 0 has nulls'):
        decode_batch(history_stream(message_array(tool_responses=[["a", None]]), [0, 1]))
    with pytest.raises(CodecError, match=r"row 0, message 0: tool_calls must be the JSON text of an array"):
        decode_batch(history_stream(message_array(tool_calls=["[NaN]"]), [0, 1]))
    with pytest.raises(CodecError, match=r"row 0, message 0: tool_calls must be the JSON text of an array"):
        decode_batch(history_stream(message_array(tool_calls=['{"a":1}']), [0, 1]))
    # A list of structs without "posttrain.kind" is not a history.
    arr = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), message_array(), type=HISTORY_TYPE)
    schema = posttrain_schema([pa.field("h", HISTORY_TYPE, nullable=False)], "[1]")
    with pytest.raises(CodecError, match=r'a list of struct column must carry "posttrain\.kind"'):
        decode_batch(write_stream(schema, [pa.record_batch([arr], schema=schema)]))


def test_history_values_and_normalization() -> None:
    given = [
        [
            {
                "role": "user",
                "content": "a",
                "name": "",
                "tool_calls": None,
                "tool_responses": [],
                "is_complete": True,
            },
            {"role": "tool", "content": "", "tool_calls": [], "tool_responses": [""], "is_complete": False},
            {"role": "assistant", "content": "日本", "tool_calls": [{"f": "é", "a": [1, 2.5, None, True]}]},
        ],
        [],
    ]
    raw = encode_batch(TensorBatch((2,), {"h": HistoryColumn(rows=given)}))
    assert decode_batch(raw).columns["h"] == HistoryColumn(
        rows=[
            [
                {"role": "user", "content": "a"},
                {
                    "role": "tool",
                    "content": "",
                    "tool_calls": [],
                    "tool_responses": [""],
                    "is_complete": False,
                },
                {
                    "role": "assistant",
                    "content": "日本",
                    "tool_calls": [{"f": "é", "a": [1, 2.5, None, True]}],
                },
            ],
            [],
        ]
    )
    text = pa.ipc.open_stream(raw).read_next_batch().column(0).to_pylist()[0][2]["tool_calls"]
    assert text == '[{"f":"é","a":[1,2.5,null,true]}]'
    minimal = [[{"role": "user", "content": "a"}, *given[0][1:]], []]
    assert encode_batch(TensorBatch((2,), {"h": HistoryColumn(rows=minimal)})) == raw


def test_non_buffer_input() -> None:
    with pytest.raises(CodecError, match="buffer-protocol"):
        decode_batch(12345)


# ----------------------------------------------------------------------------------------------------------
# Invalid batches given to encode_batch


def nested(column: Column) -> TensorBatch:
    return TensorBatch((2, 3), {"next": {"obs": {"x": column}}})


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (
            nested(torch.zeros(2, 4)),
            r'column "next/obs/x": a tensor must have shape \[\*batch_size, \*row_shape\]',
        ),
        (
            nested(torch.zeros(2, 3, dtype=torch.complex64)),
            'column "next/obs/x": dtype torch.complex64 cannot',
        ),
        (nested(Ragged(torch.zeros(3), torch.tensor([0, 1, 2]))), r"offsets must have rows \+ 1 = 7 entries"),
        (
            TensorBatch((2,), {"r": Ragged(torch.zeros(3), torch.tensor([0, 2, 1]))}),
            r"offsets must be non-decreasing, found offsets\[1\] = 2 > offsets\[2\] = 1",
        ),
        (
            TensorBatch((2,), {"r": Ragged(torch.zeros(3), torch.tensor([0, 2, 5]))}),
            r"offsets\[2\] = 5 exceeds",
        ),
        (TensorBatch((2,), {"r": Ragged(torch.zeros(3), torch.tensor([-1, 0, 1]))}), "must be non-negative"),
        (
            TensorBatch((2,), {"r": Ragged(torch.zeros(3), torch.tensor([0.0, 1.0, 2.0]))}),
            "1-D integer tensor",
        ),
        (
            TensorBatch((2,), {"s": ["a"]}),
            r'column "s": a string column must hold one string per row \(2\), found 1',
        ),
        (TensorBatch((2,), {"s": ["a", 3]}), 'column "s": row 1 must be a str, found int'),  # type: ignore[list-item]
        (TensorBatch((1,), {"s": ["\ud800"]}), "not encodable as UTF-8"),
        (TensorBatch((1,), {"o": object()}), 'column "o": unsupported column type object'),  # type: ignore[dict-item]
        (TensorBatch((-1,), {}), "batch_size must be a sequence of non-negative ints"),
    ],
)
def test_encode_rejects_invalid_batches(batch: TensorBatch, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        encode_batch(batch)


def history(rows: Any) -> TensorBatch:
    return TensorBatch((2,), {"next": {"h": HistoryColumn(rows=rows)}})


OK_MESSAGE = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [[OK_MESSAGE]],
            r'column "next/h": a history column must hold one message list per row \(2\), found 1',
        ),
        ("xy", 'column "next/h": rows must be a list of message lists, found str'),
        ([[], OK_MESSAGE], 'column "next/h": row 1 must be a list of messages, found dict'),
        ([[], [OK_MESSAGE, "m"]], 'column "next/h": row 1, message 1 must be a dict, found str'),
        (
            [[], [OK_MESSAGE, {"role": 7, "content": ""}]],
            'column "next/h": row 1, message 1: role must be a str, found int',
        ),
        ([[{"role": "user"}], []], "row 0, message 0: content must be a str, found nothing"),
        ([[{**OK_MESSAGE, "toolCalls": []}], []], "row 0, message 0: unknown key 'toolCalls'"),
        ([[{**OK_MESSAGE, "name": 3}], []], "row 0, message 0: name must be a str or absent, found int"),
        ([[{**OK_MESSAGE, "content": "\ud800"}], []], "row 0, message 0: content is not encodable as UTF-8"),
        (
            [[{**OK_MESSAGE, "tool_calls": "[]"}], []],
            "row 0, message 0: tool_calls must be a list or absent, found str",
        ),
        (
            [[{**OK_MESSAGE, "tool_calls": [float("nan")]}], []],
            "row 0, message 0: tool_calls cannot be written as JSON",
        ),
        (
            [[{**OK_MESSAGE, "tool_calls": [object()]}], []],
            "row 0, message 0: tool_calls cannot be written as JSON",
        ),
        (
            [[{**OK_MESSAGE, "tool_responses": "r"}], []],
            "row 0, message 0: tool_responses must be a list of str or absent",
        ),
        (
            [[{**OK_MESSAGE, "tool_responses": ["a", 1]}], []],
            r"row 0, message 0: tool_responses\[1\] must be a str",
        ),
        (
            [[{**OK_MESSAGE, "is_complete": 0}], []],
            "row 0, message 0: is_complete must be a bool or absent, found int",
        ),
    ],
)
def test_encode_rejects_invalid_history(rows: Any, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        encode_batch(history(rows))


def test_encode_history_int32_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_encode, "MAX_INT32", 4)
    with pytest.raises(CodecError, match=r'column "next/h": 5 messages; int32 offsets allow at most 4'):
        encode_batch(history([[OK_MESSAGE] * 3, [OK_MESSAGE] * 2]))
    with pytest.raises(
        CodecError, match="the content values take 5 bytes of UTF-8; int32 offsets allow at most 4"
    ):
        encode_batch(history([[{"role": "u", "content": "hello"}], []]))
    with pytest.raises(CodecError, match="5 tool responses; int32 offsets allow at most 4"):
        encode_batch(
            history(
                [
                    [{**OK_MESSAGE, "tool_responses": ["", "", ""]}],
                    [{**OK_MESSAGE, "tool_responses": ["", ""]}],
                ]
            )
        )


def test_encode_rebases_offsets() -> None:
    r = Ragged(values=torch.tensor([7, 7, 1, 2, 3, 8], dtype=torch.int32), offsets=torch.tensor([2, 4, 5]))
    out = decode_batch(encode_batch(TensorBatch((2,), {"r": r}))).columns["r"]
    assert isinstance(out, Ragged)
    assert out.values.tolist() == [1, 2, 3]
    assert out.offsets.tolist() == [0, 2, 3]


# ----------------------------------------------------------------------------------------------------------
# Raw tensor frames


@pytest.mark.parametrize("dtype", DTYPES)
def test_raw_round_trip(dtype: str) -> None:
    t = random_tensor(random.Random(dtype), dtype, [3, 4])
    mv = tensor_to_bytes(t)
    assert mv.nbytes == t.numel() * t.element_size()
    assert address_range(mv)[0] == t.data_ptr()  # a view, no copy
    back = tensor_from_bytes(bytes(mv), dtype, [3, 4])
    assert_same_tensor(back, t, dtype)


def test_raw_zero_copy_and_checks() -> None:
    t = torch.arange(6, dtype=torch.float64)
    raw = bytes(tensor_to_bytes(t))
    back = tensor_from_bytes(raw, "float64", [2, 3])
    assert back.data_ptr() == address_range(raw)[0]
    with pytest.raises(CodecError, match=r"takes 32 bytes, the frame has 48"):
        tensor_from_bytes(raw, "float64", [2, 2])
    with pytest.raises(CodecError, match="unknown dtype"):
        tensor_from_bytes(raw, "complex64", [3])
    with pytest.raises(CodecError, match="neither 0 nor 1"):
        tensor_from_bytes(b"\x00\x02", "bool", [2])
    host = bytearray(49)
    host[1:] = raw
    assert tensor_from_bytes(memoryview(host)[1:], "float64", [6]).tolist() == t.tolist()
    assert (
        tensor_to_bytes(t.reshape(2, 3).t()).tobytes() == t.reshape(2, 3).t().contiguous().numpy().tobytes()
    )
    assert tensor_from_bytes(b"", "float32", [0, 3]).shape == (0, 3)
    scalar = tensor_from_bytes(tensor_to_bytes(torch.tensor(2.5)), "float32", [])
    assert scalar.shape == () and float(scalar) == 2.5
