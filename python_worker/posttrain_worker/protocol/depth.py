"""How deep a JSON text nests arrays and objects, measured without recursion.

Python's ``json`` parser recurses once per level, so a 100 000-deep ``[[[[...]]]]`` raises ``RecursionError``
deep inside it instead of a ``ValueError``. The envelope parser measures the depth first, with regular
expressions and C-level iteration only (no Python loop per character), and refuses anything deeper than
:data:`MAX_NESTING_DEPTH` before parsing. The TypeScript client applies the same limit before it sends
(``bridge/protocol/envelope.ts``).

Usage::

    nesting_depth('{"a": [1, [2]], "b": "[[["}')  # 3: brackets inside strings do not count
"""

from __future__ import annotations

import re
from itertools import accumulate

__all__ = ["MAX_NESTING_DEPTH", "depth_over_limit", "nesting_depth"]

MAX_NESTING_DEPTH = 64
"""Deepest nesting of arrays and objects in an envelope, the envelope object itself being level 1 (so its
``args`` object is level 2, and a value inside ``args`` may nest 62 levels more)."""

# A complete JSON string, escapes included (the "unrolled loop" form: linear, no backtracking).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in ``text`` outside strings (0 for a scalar).

    For malformed JSON (an unterminated string) the brackets after the stray quote count too: the result is
    then an upper bound, which is all the caller needs before the parser rejects the text anyway.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


def depth_over_limit(text: str, limit: int = MAX_NESTING_DEPTH) -> int | None:
    """``nesting_depth(text)`` when it exceeds ``limit``, else ``None``; cheap for a usual envelope."""
    # Fewer opening brackets than the limit cannot nest deeper than it: two C-level counts, no regex.
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = nesting_depth(text)
    return depth if depth > limit else None
