"""Split payloads (docs/protocol.md, "Split payloads").

``encode_batch_parts`` cuts the canonical stream so that large tensors are sent from their own memory;
``decode_batch`` reads a stream in parts in place; any cut that keeps each message and each buffer within one
part reads the same, other cuts are ``CodecError``; the envelope and the frame checks carry the frame count.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from posttrain_worker.codec import (
    SPLIT_MIN_BYTES,
    CodecError,
    Ragged,
    TensorBatch,
    decode_batch,
    encode_batch,
    encode_batch_parts,
)
from posttrain_worker.codec.flatbuf import read_message_header, read_record_batch_header
from posttrain_worker.protocol.envelope import (
    ProtocolViolation,
    TensorDictPayload,
    parse_payload,
    payload_to_json,
)
from posttrain_worker.protocol.errors import BAD_PAYLOAD, WorkerFailure
from posttrain_worker.server.payloads import check_frames, decode_payloads, encode_payloads

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = [c["name"] for c in json.loads((GOLDEN / "cases.json").read_text("utf-8"))["cases"]]


def mixed_batch(rows: int = 300) -> TensorBatch:
    """A large float32 column (over the split threshold) beside small dense, string and ragged ones."""
    return TensorBatch(
        batch_size=(rows,),
        columns={
            "big": torch.arange(rows * 256, dtype=torch.float32).view(rows, 256) * 0.25,
            "small": torch.arange(rows, dtype=torch.int32),
            "text": [f"row {i} ✓" for i in range(rows)],
            "ragged": Ragged(
                values=torch.full((rows * 3,), 1.5, dtype=torch.float64), offsets=torch.arange(rows + 1) * 3
            ),
        },
    )


def address(buf: memoryview | bytes) -> int:
    return np.frombuffer(buf, dtype=np.uint8).ctypes.data


def legal_cuts(stream: bytes) -> list[int]:
    """Every offset a writer may cut at: the start and the padded end of each record batch buffer."""
    cuts: set[int] = set()
    pos = 0
    while True:
        length = int.from_bytes(stream[pos + 4 : pos + 8], "little", signed=True)
        if length == 0:
            break
        metadata = memoryview(stream)[pos + 8 : pos + 8 + length]
        body_start = pos + 8 + length
        if pos > 0:
            for offset, size in read_record_batch_header(metadata).buffers:
                cuts.update((body_start + offset, body_start + offset + (size + 7) // 8 * 8))
        pos = body_start + read_message_header(metadata)[2]
        cuts.add(pos)
    return sorted(c for c in cuts if 0 < c < len(stream))


def cut_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def test_parts_concatenate_to_the_canonical_stream_and_alias_the_large_tensor() -> None:
    batch = mixed_batch()
    parts = encode_batch_parts(batch)
    assert b"".join(bytes(p) for p in parts) == bytes(encode_batch(batch))
    assert len(parts) == 3
    big = batch.columns["big"]
    assert isinstance(big, torch.Tensor)
    assert address(parts[1]) == big.data_ptr() and len(parts[1]) == big.numel() * 4
    at = 0
    for part in parts:
        assert at % 8 == 0
        at += len(part)


def test_small_batches_and_unpadded_buffers_stay_one_part() -> None:
    small = TensorBatch(batch_size=(2,), columns={"x": torch.zeros(2, SPLIT_MIN_BYTES // 8 - 1)})
    assert len(encode_batch_parts(small)) == 1
    odd = TensorBatch(batch_size=(1,), columns={"b": torch.zeros(1, SPLIT_MIN_BYTES + 3, dtype=torch.uint8)})
    assert len(encode_batch_parts(odd)) == 1  # its padding must follow it: written, not a view


def test_decoding_parts_views_them_and_matches_the_whole_stream() -> None:
    batch = mixed_batch()
    parts = [bytes(p) for p in encode_batch_parts(batch)]
    decoded = decode_batch(parts)
    assert bytes(encode_batch(decoded)) == bytes(encode_batch(batch))
    big = decoded.columns["big"]
    assert isinstance(big, torch.Tensor) and big.data_ptr() == address(parts[1])


@pytest.mark.parametrize("name", CASES)
def test_every_golden_stream_reads_the_same_cut_at_every_legal_point(name: str) -> None:
    stream = (GOLDEN / f"{name}.arrows").read_bytes()
    expected = bytes(encode_batch(decode_batch(stream)))
    cuts = legal_cuts(stream)
    assert bytes(encode_batch(decode_batch(cut_at(stream, cuts)))) == expected
    for cut in cuts:
        assert bytes(encode_batch(decode_batch(cut_at(stream, [cut])))) == expected, cut


def test_cuts_through_a_buffer_or_a_message_and_empty_parts_are_refused() -> None:
    batch = mixed_batch()
    stream = bytes(encode_batch(batch))
    head = len(encode_batch_parts(batch)[0])
    with pytest.raises(CodecError, match=r"buffer \d+ of record batch 1 .* spans parts 0 and 1"):
        decode_batch(cut_at(stream, [head + 1024]))
    with pytest.raises(CodecError, match=r"the header of message 0 .* spans parts 0 and 1"):
        decode_batch(cut_at(stream, [4]))
    with pytest.raises(CodecError, match=r"message 0 .* spans parts 0 and 1"):
        decode_batch(cut_at(stream, [16]))
    with pytest.raises(CodecError, match="part 1 is empty"):
        decode_batch([stream[:8], b"", stream[8:]])
    with pytest.raises(CodecError, match="no parts"):
        decode_batch([])
    with pytest.raises(CodecError, match="truncated Arrow stream"):
        decode_batch([*cut_at(stream, legal_cuts(stream))[:-1], stream[-8:-4]])


def test_the_descriptor_carries_the_frame_count() -> None:
    assert parse_payload({"kind": "tensordict"}) == TensorDictPayload(frames=1)
    assert parse_payload({"kind": "tensordict", "frames": 3}) == TensorDictPayload(frames=3)
    assert payload_to_json(TensorDictPayload(frames=3)) == {"kind": "tensordict", "frames": 3}
    assert payload_to_json(TensorDictPayload()) == {"kind": "tensordict"}
    for bad in (0, -1, 1.5, "2", True, None):
        with pytest.raises(ProtocolViolation, match=r'"payloads\[0\]\.frames" must be an integer >= 1'):
            parse_payload({"kind": "tensordict", "frames": bad}, "payloads[0]")


def test_frames_are_counted_grouped_decoded_and_encoded_per_payload() -> None:
    batch = mixed_batch()
    parts = [bytes(p) for p in encode_batch_parts(batch)]
    descriptors = [TensorDictPayload(frames=len(parts)), TensorDictPayload()]
    frames = [*parts, bytes(encode_batch(batch))]
    check_frames(descriptors, frames, 1 << 30)  # type: ignore[arg-type]
    with pytest.raises(WorkerFailure, match=r"describes 2 payload\(s\) in 4 frames .* carries 3") as caught:
        check_frames(descriptors, frames[:3], 1 << 30)  # type: ignore[arg-type]
    assert caught.value.code == BAD_PAYLOAD
    first, second = decode_payloads(descriptors, frames)
    assert isinstance(first, TensorBatch) and isinstance(second, TensorBatch)
    assert bytes(encode_batch(first)) == bytes(encode_batch(second)) == bytes(encode_batch(batch))
    out_descriptors, out_frames = encode_payloads([first, second])
    assert out_descriptors == [TensorDictPayload(frames=3), TensorDictPayload(frames=3)]
    assert b"".join(bytes(f) for f in out_frames[:3]) == bytes(encode_batch(batch))


def test_corrupted_split_metadata_raises_only_codec_error() -> None:
    stream = bytes(encode_batch(mixed_batch()))
    cuts = legal_cuts(stream)
    rng = random.Random(7)
    for _ in range(300):
        parts = [bytearray(p) for p in cut_at(stream, cuts)]
        parts[0][rng.randrange(len(parts[0]))] = rng.randrange(256)
        try:
            decode_batch([bytes(p) for p in parts])
        except CodecError:
            pass


def _four_int64_stream() -> tuple[bytes, int, bytes]:
    """The stream of a batch of 4 int64s, where its record batch's body starts, and the bytes of its data
    buffer's (offset, length) region in the metadata, for tampering."""
    batch = TensorBatch(batch_size=(4,), columns={"x": torch.arange(4, dtype=torch.int64)})
    stream = bytes(encode_batch(batch))
    schema_end = 8 + int.from_bytes(stream[4:8], "little")
    meta_length = int.from_bytes(stream[schema_end + 4 : schema_end + 8], "little")
    return stream, schema_end + 8 + meta_length, (0).to_bytes(8, "little") + (32).to_bytes(8, "little")


def test_a_buffer_reaching_past_its_body_is_refused_as_in_one_frame() -> None:
    # A tampered stream whose data buffer runs 8 bytes into the end-of-stream marker: pyarrow refuses it in
    # one frame, and the split reader must too (its buffers may not leave their own message's body).
    stream, body_start, region = _four_int64_stream()
    assert stream.count(region) == 1
    tampered = stream.replace(region, (8).to_bytes(8, "little") + (32).to_bytes(8, "little"))
    with pytest.raises(CodecError):
        decode_batch([tampered])
    with pytest.raises(CodecError, match=r"buffer 1 of record batch 1 \(offset 8, length 32\)"):
        decode_batch([tampered[:body_start], tampered[body_start:]])
    misaligned = stream.replace(region, (4).to_bytes(8, "little") + (24).to_bytes(8, "little"))
    with pytest.raises(CodecError, match="8-byte aligned"):
        decode_batch([misaligned[:body_start], misaligned[body_start:]])


def test_parsed_headers_are_reused_by_their_bytes_but_a_bad_message_is_refused_every_time() -> None:
    # The readers keep parsed flatbuffers by their bytes: a tampered copy of a layout already read is other
    # bytes, read and refused; a refusal is not remembered as a parse, so it comes again.
    stream, body_start, region = _four_int64_stream()
    misaligned = stream.replace(region, (4).to_bytes(8, "little") + (24).to_bytes(8, "little"))
    for _ in range(2):
        good = decode_batch([stream[:body_start], stream[body_start:]]).columns["x"]
        assert isinstance(good, torch.Tensor) and good.tolist() == [0, 1, 2, 3]
        with pytest.raises(CodecError, match="8-byte aligned"):
            decode_batch([misaligned[:body_start], misaligned[body_start:]])
    schema_end = 8 + int.from_bytes(stream[4:8], "little")
    metadata = stream[schema_end + 8 : body_start]
    assert read_record_batch_header(metadata).buffers[1] == (0, 32)
    bad_root = b"\xff\xff\xff\x7f" + metadata[4:]
    for _ in range(2):
        with pytest.raises(ValueError, match="out of range"):
            read_record_batch_header(bad_root)
        with pytest.raises(ValueError, match="out of range"):
            read_message_header(bad_root)
