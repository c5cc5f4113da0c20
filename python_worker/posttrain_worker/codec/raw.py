"""Raw tensor frames (docs/protocol.md, "Raw tensor frames"): little-endian, row-major bytes of one tensor."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch

from posttrain_worker.codec.errors import CodecError
from posttrain_worker.codec.types import DTYPE_TO_TORCH, TORCH_TO_DTYPE


def tensor_to_bytes(t: torch.Tensor) -> memoryview:
    """The frame bytes of a tensor: a view of its memory when it is a contiguous CPU tensor, else of a copy.

    ``bool`` is one byte per value, ``bfloat16`` its 16-bit patterns. Raises ``CodecError`` for a dtype that
    cannot cross the wire.
    """
    if t.dtype not in TORCH_TO_DTYPE:
        raise CodecError(f"raw tensor: dtype {t.dtype} cannot cross the wire")
    if t.layout != torch.strided:
        raise CodecError(f"raw tensor: expected a dense (strided) tensor, found layout {t.layout}")
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def tensor_from_bytes(buf: object, dtype: str, shape: Sequence[int]) -> torch.Tensor:
    """A tensor over a raw frame: shares memory with ``buf`` when it is aligned to the element size.

    Raises ``CodecError`` for an unknown dtype, an invalid shape, or a frame whose length is not
    ``prod(shape) * itemsize``.
    """
    torch_dtype = DTYPE_TO_TORCH.get(dtype)
    if torch_dtype is None:
        raise CodecError(f"raw tensor: unknown dtype {dtype!r}")
    dims = list(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise CodecError(f"raw tensor: shape must be non-negative ints, found {dims!r}")
    try:
        mv = memoryview(buf).cast("B")  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise CodecError(
            f"raw tensor: expected a contiguous buffer, found {type(buf).__name__}: {exc}"
        ) from exc
    expected = math.prod(dims) * torch_dtype.itemsize
    if mv.nbytes != expected:
        raise CodecError(
            f"raw tensor: a {dtype} tensor of shape {dims} takes {expected} bytes, the frame has {mv.nbytes}"
        )
    if expected == 0:
        return torch.empty(dims, dtype=torch_dtype)
    storage = torch.uint8 if dtype == "bool" else torch_dtype
    if _address(mv) % storage.itemsize != 0:
        t = torch.frombuffer(bytearray(mv), dtype=storage)
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            t = torch.frombuffer(mv, dtype=storage)
    if dtype == "bool":
        if bool((t > 1).any()):
            raise CodecError("raw tensor: a bool value is neither 0 nor 1")
        t = t.view(torch.bool)
    return t.view(dims)


def _address(mv: memoryview) -> int:
    import numpy as np

    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)
