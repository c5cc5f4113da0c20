"""Splitting a batch into micro-batches under a token budget (docs/training.md, "Micro-batches").

A micro-batch is a run of consecutive rows whose padded size, ``rows x longest row``, stays within the
budget; a row longer than the budget on its own is a micro-batch by itself. The order of the rows is kept, so
the split depends only on the lengths and the budget.
"""

from __future__ import annotations

from collections.abc import Sequence


def token_budget_slices(lengths: Sequence[int], budget: int | None) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(len(lengths))``; one slice for everything when ``budget`` is
    ``None``."""
    n = len(lengths)
    if budget is None or n == 0:
        return [(0, n)]
    slices: list[tuple[int, int]] = []
    start, width = 0, 0
    for i, length in enumerate(lengths):
        grown = max(width, length)
        if i > start and grown * (i - start + 1) > budget:
            slices.append((start, i))
            start, grown = i, length
        width = grown
    slices.append((start, n))
    return slices
