"""Glue between payload frames and the codec: frame checks, decoding to torch, encoding replies.

Decoding is zero-copy where the codec allows it: tensors view the received ``zmq.Frame`` memory, and the
memoryview they hold keeps the frame alive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import zmq

from posttrain_worker.codec import (
    CodecError,
    decode_batch,
    encode_batch_parts,
    tensor_from_bytes,
    tensor_to_bytes,
)
from posttrain_worker.codec.types import TORCH_TO_DTYPE, TensorBatch
from posttrain_worker.protocol.envelope import (
    BytesPayload,
    PayloadDescriptor,
    TensorDictPayload,
    TensorPayload,
    describe_payload,
)
from posttrain_worker.protocol.errors import BAD_PAYLOAD, PAYLOAD_TOO_LARGE, WorkerFailure
from posttrain_worker.server.registry import InputPayload, OutputPayload, RawTensor


def frame_size(frame: zmq.Frame | bytes | memoryview) -> int:
    return frame.nbytes if isinstance(frame, memoryview) else len(frame)


def frame_count(descriptor: PayloadDescriptor) -> int:
    """How many frames a payload occupies: a split tensordict several, anything else one."""
    return descriptor.frames if isinstance(descriptor, TensorDictPayload) else 1


def group_frames(descriptors: Sequence[PayloadDescriptor], frames: Sequence[Any]) -> list[list[Any]]:
    """The frames of each payload, in order (the counts were checked by ``check_frames``)."""
    groups: list[list[Any]] = []
    at = 0
    for descriptor in descriptors:
        count = frame_count(descriptor)
        groups.append(list(frames[at : at + count]))
        at += count
    return groups


def check_frames(
    descriptors: Sequence[PayloadDescriptor], frames: Sequence[zmq.Frame], max_payload_bytes: int
) -> None:
    """Cheap checks done on the I/O thread before a request is queued: size, count, raw tensor lengths."""
    if not descriptors and not frames:  # the usual small call: none described, none carried
        return
    total = sum(frame_size(f) for f in frames)
    if total > max_payload_bytes:
        raise WorkerFailure(
            PAYLOAD_TOO_LARGE,
            f"the payload frames hold {total} bytes, "
            f"more than this worker's maxPayloadBytes ({max_payload_bytes})",
            {"bytes": total, "maxPayloadBytes": max_payload_bytes},
        )
    expected = sum(frame_count(d) for d in descriptors)
    if len(frames) != expected:
        split = f" in {expected} frames" if expected != len(descriptors) else ""
        raise WorkerFailure(
            BAD_PAYLOAD,
            f'the envelope describes {len(descriptors)} payload(s){split} in "payloads" '
            f"but the message carries {len(frames)} payload frame(s)",
            {"described": len(descriptors), "frames": len(frames)},
        )
    groups = group_frames(descriptors, frames)
    for index, (descriptor, group) in enumerate(zip(descriptors, groups, strict=True)):
        if isinstance(descriptor, TensorPayload) and frame_size(group[0]) != descriptor.nbytes:
            raise WorkerFailure(
                BAD_PAYLOAD,
                f"payload {index} ({describe_payload(descriptor)}): expected {descriptor.nbytes} bytes "
                f"(numel {descriptor.numel} x itemsize), got {frame_size(group[0])}",
                {"payloadIndex": index},
            )


def _buffer(frame: zmq.Frame | bytes | memoryview) -> memoryview:
    return frame.buffer if isinstance(frame, zmq.Frame) else memoryview(frame)


def decode_payloads(
    descriptors: Sequence[PayloadDescriptor], frames: Sequence[zmq.Frame | bytes | memoryview]
) -> list[InputPayload]:
    """Decode every payload; any failure is ``BAD_PAYLOAD`` naming the payload index."""
    decoded: list[InputPayload] = []
    groups = group_frames(descriptors, frames)
    for index, (descriptor, group) in enumerate(zip(descriptors, groups, strict=True)):
        buf = _buffer(group[0])
        try:
            if isinstance(descriptor, TensorDictPayload):
                decoded.append(decode_batch(buf if len(group) == 1 else [_buffer(f) for f in group]))
            elif isinstance(descriptor, TensorPayload):
                tensor = tensor_from_bytes(buf, descriptor.dtype, list(descriptor.shape))
                decoded.append(RawTensor(tensor, descriptor.name))
            else:
                decoded.append(buf)
        except Exception as exc:  # the codec raises CodecError; anything else is still a payload it rejects
            kind = "" if isinstance(exc, CodecError) else f" ({type(exc).__name__})"
            raise WorkerFailure(
                BAD_PAYLOAD,
                f"payload {index} ({describe_payload(descriptor)}) could not be decoded{kind}: {exc}",
                {"payloadIndex": index},
            ) from exc
    return decoded


def encode_payloads(
    outputs: Sequence[OutputPayload | zmq.Frame],
) -> tuple[list[PayloadDescriptor], list[Any]]:
    """Encode a handler's output payloads into (descriptors, frame buffers)."""
    descriptors: list[PayloadDescriptor] = []
    frames: list[Any] = []
    for index, out in enumerate(outputs):
        if isinstance(out, TensorBatch):
            # Split: large tensors go out as frames of their own, views of their memory (sent copy=False).
            parts = encode_batch_parts(out)
            descriptors.append(TensorDictPayload(frames=len(parts)))
            frames.extend(parts)
        elif isinstance(out, RawTensor):
            dtype = TORCH_TO_DTYPE.get(out.tensor.dtype)
            if dtype is None:
                raise TypeError(f"output payload {index}: dtype {out.tensor.dtype} cannot cross the wire")
            descriptors.append(TensorPayload(dtype=dtype, shape=tuple(out.tensor.shape), name=out.name))
            frames.append(tensor_to_bytes(out.tensor))
        elif isinstance(out, (bytes, bytearray, memoryview, zmq.Frame)):
            descriptors.append(BytesPayload())
            frames.append(out)
        else:
            raise TypeError(f"output payload {index}: cannot send a {type(out).__name__}")
    return descriptors, frames
