"""A worker extension with the faults only liveness tests cause: a compute method that never returns, and a
grandchild process that keeps the worker's stderr open.

Load it with ``--extension test/python/extensions/liveness.py`` (``WorkerPool.local({ extensions:
[LIVENESS_EXTENSION] })`` in the TypeScript tests).

- ``hang`` (compute, no args): blocks the compute thread forever and ignores cancellation, as a deadlocked
  collective or a stuck CUDA kernel does. Only a kill ends it (the worker's own shutdown gives up on it).
- ``raise_base_exception`` (compute, no args): raises a ``BaseException`` subclass that is no ``Exception``,
  as torch.distributed.checkpoint's ``CheckpointException`` is: the caller must get an ``INTERNAL`` reply.
- ``spawn_stderr_holder`` (io, no args): ``{pid}`` of a new ``sleep`` process, in a session of its own, that
  inherited the worker's stderr (and the stdout aliased to it): the worker's pipes stay open after the worker
  dies, until the caller kills that pid.
- ``spawn_group_child`` (io, no args): ``{pid}`` of a new ``sleep`` process in the worker's own process group,
  as the processes a worker starts are (vLLM's engine, compile workers): a kill of the worker's group ends it.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from posttrain_worker.server.registry import CallContext, MethodRegistry

HOLDER_SECONDS = 600


def hang(_ctx: CallContext, _args: None) -> dict[str, Any]:
    """Never returns; does not look at ``ctx.cancelled()``."""
    while True:
        time.sleep(3600)


class NotAnException(BaseException):
    """Derives from BaseException only, like torch.distributed.checkpoint's CheckpointException."""


def raise_base_exception(_ctx: CallContext, _args: None) -> dict[str, Any]:
    raise NotAnException("raised outside the Exception hierarchy")


def spawn_stderr_holder(_ctx: CallContext, _args: None) -> dict[str, Any]:
    # stdin from /dev/null (the worker's stdin is its parent-death pipe, which the holder must not keep);
    # stdout and stderr inherited. A new session: a signal to the worker's process group misses it.
    holder = subprocess.Popen(
        ["sleep", str(HOLDER_SECONDS)], stdin=subprocess.DEVNULL, start_new_session=True
    )
    return {"pid": holder.pid}


def spawn_group_child(_ctx: CallContext, _args: None) -> dict[str, Any]:
    # No pipe of the worker's: only a signal to the group can end it early.
    child = subprocess.Popen(
        ["sleep", str(HOLDER_SECONDS)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return {"pid": child.pid}


def register(registry: MethodRegistry) -> None:
    """The worker's ``--extension`` entry point."""
    registry.add("hang", hang, thread="compute")
    registry.add("raise_base_exception", raise_base_exception, thread="compute")
    registry.add("spawn_stderr_holder", spawn_stderr_holder, thread="io")
    registry.add("spawn_group_child", spawn_group_child, thread="io")
