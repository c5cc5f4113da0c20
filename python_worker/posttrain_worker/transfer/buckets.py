"""How a weight transfer groups tensors into messages; the ZeroMQ and torch.distributed transfers share it."""

from __future__ import annotations

from collections.abc import Sequence


def buckets_of(sizes: Sequence[int], bucket_bytes: int) -> list[list[int]]:
    """Indices of tensors of ``sizes`` bytes, grouped in order into buckets of at most ``bucket_bytes`` (a
    bigger tensor alone)."""
    out: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, n in enumerate(sizes):
        if current and size + n > bucket_bytes:
            out.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        out.append(current)
    return out
