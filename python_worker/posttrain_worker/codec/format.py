"""Constants of the posttrain Arrow layout (docs/protocol.md, "TensorDict payloads")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from posttrain_worker.codec.flatbuf import ArrowType

WIRE_FORMAT_VERSION: Final = "1"
"""Value of the schema metadata key ``posttrain.version``."""

META_VERSION: Final = "posttrain.version"
META_BATCH_SIZE: Final = "posttrain.batch_size"
META_DTYPE: Final = "posttrain.dtype"
META_SHAPE: Final = "posttrain.shape"
META_KIND: Final = "posttrain.kind"
META_EXTENSION_NAME: Final = "ARROW:extension:name"
META_EXTENSION_METADATA: Final = "ARROW:extension:metadata"
FIXED_SHAPE_TENSOR: Final = "arrow.fixed_shape_tensor"
HISTORY_KIND: Final = "history"
"""Value of ``posttrain.kind`` on a conversation (history) column."""
HISTORY_FIELDS: Final = ("role", "content", "name", "tool_calls", "tool_responses", "is_complete")
"""The children of a history column's message struct, in wire order."""

MAX_INT32: Final = 2**31 - 1
"""Largest int32 list offset: the cap on a ragged leaf's total length along its ragged dimension."""

STORAGE: Final[dict[str, ArrowType]] = {
    "float32": ArrowType.float_(ArrowType.SINGLE),
    "float64": ArrowType.float_(ArrowType.DOUBLE),
    "float16": ArrowType.float_(ArrowType.HALF),
    "bfloat16": ArrowType.int_(16, signed=False),
    "int64": ArrowType.int_(64, signed=True),
    "int32": ArrowType.int_(32, signed=True),
    "int16": ArrowType.int_(16, signed=True),
    "int8": ArrowType.int_(8, signed=True),
    "uint8": ArrowType.int_(8, signed=False),
    "bool": ArrowType.int_(8, signed=False),
}
"""The Arrow storage type of each dtype."""


def int_list_json(values: Sequence[int]) -> str:
    """A list of ints (shapes, batch sizes) as JSON the way the TypeScript side writes it (``JSON.stringify``:
    no spaces); built directly, cheaper than ``json.dumps`` on the path of every encoded payload."""
    return f"[{','.join(str(int(v)) for v in values)}]"


def tool_calls_json(value: object) -> str:
    """The wire text of a message's tool calls; the TypeScript side carries this text as it is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
