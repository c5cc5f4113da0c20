"""Error codes of moving weights between workers (in addition to the protocol's and ``WEIGHT_SYNC_FAILED``
of ``training/errors.py``, docs/protocol.md)."""

DISTRIBUTED_ERROR = "DISTRIBUTED_ERROR"
"""torch.distributed could not be set up, or is not set up for a broadcast."""
