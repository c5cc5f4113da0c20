"""How deep a JSON text nests arrays and objects, measured in one linear pass without recursion.

Python's ``json`` parser recurses once per level, so a 100 000-deep ``[[[[...]]]]`` raises ``RecursionError``
deep inside it instead of a ``ValueError``. The envelope parser measures the depth first and refuses anything
deeper than :data:`MAX_NESTING_DEPTH` before parsing. It runs before the secret check, on text from anyone,
so it is one loop over the characters with no regular expression: a regex that skips strings backtracks from
every quote of an unterminated string, quadratic in its length (16 KB of ``\\"`` took a second). The
TypeScript client applies the same limit before it sends (``bridge/protocol/limits.ts``).

Usage::

    nesting_depth('{"a": [1, [2]], "b": "[[["}')  # 3: brackets inside strings do not count
"""

from __future__ import annotations

__all__ = ["MAX_NESTING_DEPTH", "depth_over_limit", "nesting_depth"]

MAX_NESTING_DEPTH = 64
"""Deepest nesting of arrays and objects in an envelope, the envelope object itself being level 1 (so its
``args`` object is level 2, and a value inside ``args`` may nest 62 levels more)."""


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in ``text`` outside strings (0 for a scalar).

    An unterminated string runs to the end of the text, so brackets after a stray quote do not count: the
    parser rejects such a text as bad JSON at that quote, before it could reach them.
    """
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "[" or char == "{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif char == "]" or char == "}":
            depth -= 1
    return deepest


def depth_over_limit(text: str, limit: int = MAX_NESTING_DEPTH) -> int | None:
    """``nesting_depth(text)`` when it exceeds ``limit``, else ``None``; cheap for a usual envelope."""
    # Fewer opening brackets than the limit cannot nest deeper than it: two C-level counts, no loop.
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = nesting_depth(text)
    return depth if depth > limit else None
