"""A test-only worker extension that SIGKILLs its own worker at chosen points of the real code, as the
OOM killer would: for the supervision tests (test/ts/supervision.test.ts). It adds no method; it wraps:

- ``generate``: the generation method, before it samples (the caller's call is in flight);
- ``optimizer_step``: ``Trainer.step``, after the optimizer and the schedule stepped in memory, before the
  reply (the worker's weights are ahead of everything the caller knows and of every checkpoint);
- ``checkpoint_save``: the checkpoint writer, after every file of the new checkpoint is written and fsynced
  into its temporary directory, before the rename that puts it in place.

The faults come from the ``POSTTRAIN_TEST_FAULTS`` environment variable: a JSON list of
``{"point": <one of the above>, "at": N, "marker": PATH, "action": "kill" | "hang"}``. A fault fires when
its point is reached for the N-th time in this process (1-based), unless ``PATH`` exists: it creates ``PATH``
first (``O_EXCL``), so a restarted worker (which counts again from 1) never fires the same fault twice.
``"kill"`` (the default) SIGKILLs the process; ``"hang"`` blocks the compute thread for good, answering no
cancellation (a call watchdog must find it). Never load it outside tests.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import posttrain_worker.methods.generation as generation
import posttrain_worker.training.checkpoint as checkpoint
from posttrain_worker.server.registry import MethodRegistry
from posttrain_worker.training.trainer import Trainer

FAULTS_ENV = "POSTTRAIN_TEST_FAULTS"
POINTS = ("generate", "optimizer_step", "checkpoint_save")
ACTIONS = ("kill", "hang")


class _Faults:
    """The faults of this process and how often each point was reached."""

    def __init__(self, spec: str) -> None:
        faults = json.loads(spec) if spec else []
        if not isinstance(faults, list):
            raise ValueError(f"{FAULTS_ENV}: expected a JSON list, got {spec!r}")
        for fault in faults:
            well_formed = isinstance(fault, dict) and fault.get("point") in POINTS
            if not well_formed or not isinstance(fault.get("at"), int) or not fault.get("marker"):
                raise ValueError(f"{FAULTS_ENV}: needs a point of {POINTS}, an int at, a marker: {fault!r}")
            if fault.setdefault("action", "kill") not in ACTIONS:
                raise ValueError(f"{FAULTS_ENV}: action must be one of {ACTIONS}: {fault!r}")
        self.faults: list[dict[str, Any]] = faults
        self.reached = dict.fromkeys(POINTS, 0)

    def reach(self, point: str) -> None:
        """Counts ``point``; SIGKILLs this process (or blocks for good) when a fault fires here."""
        self.reached[point] += 1
        for fault in self.faults:
            if fault["point"] != point or fault["at"] != self.reached[point]:
                continue
            try:
                fd = os.open(fault["marker"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue  # fired in an earlier process
            os.write(fd, f"{point} {self.reached[point]} pid {os.getpid()}\n".encode())
            os.fsync(fd)
            os.close(fd)
            if fault["action"] == "hang":
                threading.Event().wait()  # never set: only a kill ends it
            os.kill(os.getpid(), signal.SIGKILL)


def _before(faults: _Faults, point: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        faults.reach(point)
        return original(*args, **kwargs)

    return wrapped


def _after(faults: _Faults, point: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        faults.reach(point)
        return result

    return wrapped


def register(_registry: MethodRegistry) -> None:
    """The worker's ``--extension`` entry point: installs the wrappers (module attributes the real code
    looks up at call time)."""
    faults = _Faults(os.environ.get(FAULTS_ENV, ""))
    for fault in faults.faults:
        Path(fault["marker"]).parent.mkdir(parents=True, exist_ok=True)
    generation.generate = _before(faults, "generate", generation.generate)  # type: ignore[assignment]
    Trainer.step = _after(faults, "optimizer_step", Trainer.step)  # type: ignore[method-assign]
    checkpoint._swap_into_place = _before(faults, "checkpoint_save", checkpoint._swap_into_place)  # type: ignore[assignment]
