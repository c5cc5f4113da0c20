"""Arrow IPC <-> torch codec of TensorDict payloads and raw tensor frames (docs/protocol.md)."""

from posttrain_worker.codec.arrow_decode import decode_batch
from posttrain_worker.codec.arrow_encode import SPLIT_MIN_BYTES, encode_batch, encode_batch_parts
from posttrain_worker.codec.errors import CodecError
from posttrain_worker.codec.raw import tensor_from_bytes, tensor_to_bytes
from posttrain_worker.codec.types import (
    DTYPE_TO_TORCH,
    TORCH_TO_DTYPE,
    Column,
    HistoryColumn,
    Ragged,
    TensorBatch,
)

__all__ = [
    "DTYPE_TO_TORCH",
    "SPLIT_MIN_BYTES",
    "TORCH_TO_DTYPE",
    "CodecError",
    "Column",
    "HistoryColumn",
    "Ragged",
    "TensorBatch",
    "decode_batch",
    "encode_batch",
    "encode_batch_parts",
    "tensor_from_bytes",
    "tensor_to_bytes",
]
