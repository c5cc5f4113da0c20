"""A worker extension for the bridge benchmarks: ``compute_echo``, the default ``echo`` registered without
``inline``, so it always crosses to the compute thread and back, as every model method does.

``echo`` runs on the I/O thread when the worker is idle (docs/protocol.md, "Envelope"); timing both shows what
the hand-off to the compute thread costs a TensorDict call. Loaded by bench/bridge.ts with ``--extension``.
"""

from __future__ import annotations

from posttrain_worker.methods.basic import echo
from posttrain_worker.server.registry import MethodRegistry


def register(registry: MethodRegistry) -> None:
    """The worker's ``--extension`` entry point."""
    registry.add("compute_echo", echo, thread="compute", payloads="any")
