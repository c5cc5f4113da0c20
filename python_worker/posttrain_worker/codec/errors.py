"""The codec's error type."""

from __future__ import annotations


class CodecError(ValueError):
    """Bytes that are not a valid posttrain payload, or a batch that cannot be encoded.

    The message names the column (as a ``/``-joined key path) and the problem.
    """
