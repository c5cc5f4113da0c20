"""The logger process's loop. Protocol (JSON lines; docs/trackers.md):

- TS → logger, first: ``{"type": "start", "trackers": [...], "dir": ..., "project": ..., "runName": ...,
  "resume": false, "config": {...}}``
- logger → TS: ``{"type": "checked"}`` once every tracker's packages are found; the logger then prepares them
  (imports their libraries, creates MLflow's database) while the run starts its workers
- TS → logger, once the run knows the step it starts after: ``{"type": "open", "startStep": 0}``
- logger → TS: ``{"type": "ready", "trackers": [...]}`` once their runs are open. Instead of ``checked`` or
  ``ready``: ``{"type": "error", "code", "message", "details"}`` and exit code 2 (``TRACKER_UNAVAILABLE``,
  ``TRACKER_FAILED``, ``BAD_ARGUMENTS``); EOF instead of ``open`` (the run failed to start): exit code 0
- TS → logger: ``{"type": "metrics", "step": 3, "values": {"reward": 0.5, "kl": null}}`` and
  ``{"type": "samples", "step": 3, "rows": [{"step": 3, "prompt": ..., "completion": ..., "reward": ...}]}``
- logger → TS, when a tracker fails while logging: ``{"type": "warning", "tracker", "message"}``; that tracker
  is closed and dropped, the others go on
- TS → logger, at the end of each ``run()``: ``{"type": "flush"}``; logger → TS: ``{"type": "flushed"}`` once
  every message before it went to the trackers' libraries (which may still hold it in their own buffers: W&B
  and trackio write in the background until ``close``)
- TS → logger: ``{"type": "close"}`` (or EOF, when the run's process is gone); every tracker is closed, then
  ``{"type": "closed"}`` and exit code 0.

The replies go to a private copy of the original stdout: fd 1 is pointed at stderr, so whatever the trackers'
libraries print (trackio and W&B do) cannot garble the protocol.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, TextIO

from ..errors import INTERNAL, WorkerFailure
from .availability import check_available
from .errors import TRACKER_FAILED
from .settings import TrackingSettings, parse_open, parse_start
from .tracker import Tracker, finite_metrics


def _private_stdout() -> TextIO:
    """A stream on a duplicate of fd 1; fd 1 (and ``sys.stdout``) then go to stderr."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return replies


def _send(replies: TextIO, message: dict[str, Any]) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def _tracker_module(name: str) -> Any:
    return importlib.import_module(f"{__package__}.{name}_tracker")


def prepare_trackers(settings: TrackingSettings) -> None:
    """Each tracker's ``prepare``: its library imported, what needs no start step done (no run yet)."""
    for name in settings.trackers:
        try:
            _tracker_module(name).prepare(settings)
        except Exception as error:
            raise WorkerFailure(
                TRACKER_FAILED, f'loggers: "{name}" could not prepare: {error}', {"tracker": name}
            ) from error


def open_trackers(settings: TrackingSettings) -> dict[str, Tracker]:
    """Each tracker's run, in ``settings.trackers`` order; a failure closes those already open."""
    opened: dict[str, Tracker] = {}
    for name in settings.trackers:
        try:
            opened[name] = _tracker_module(name).open_tracker(settings)
        except Exception as error:
            close_all(opened)
            raise WorkerFailure(
                TRACKER_FAILED, f'loggers: "{name}" could not open its run: {error}', {"tracker": name}
            ) from error
    return opened


def close_all(trackers: dict[str, Tracker]) -> list[tuple[str, str]]:
    """Closes every tracker; returns ``(tracker, message)`` for those whose close failed."""
    failed = []
    for name, tracker in trackers.items():
        try:
            tracker.close()
        except Exception as error:
            failed.append((name, f"{type(error).__name__}: {error}"))
    trackers.clear()
    return failed


def _dispatch(message: dict[str, Any], trackers: dict[str, Tracker], replies: TextIO) -> None:
    """Hands one ``metrics`` or ``samples`` message to every tracker; a failing tracker is dropped."""
    kind = message.get("type")
    step = message.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        _send(replies, {"type": "warning", "tracker": None, "message": f"{kind}: step must be an integer"})
        return
    for name in list(trackers):
        try:
            if kind == "metrics":
                values = finite_metrics(message.get("values") or {})
                if values:
                    trackers[name].log_metrics(step, values)
            else:
                rows = [row for row in message.get("rows") or [] if isinstance(row, dict)]
                if rows:
                    trackers[name].log_samples(step, rows)
        except Exception as error:
            failed = trackers.pop(name)
            problems = close_all({name: failed})
            note = f" (and its close: {problems[0][1]})" if problems else ""
            problem = f"{name} failed at step {step}, dropped: {type(error).__name__}: {error}{note}"
            _send(replies, {"type": "warning", "tracker": name, "message": problem})


def main() -> int:
    """Runs the logger until ``close`` or EOF on stdin (see the module notes)."""
    replies = _private_stdout()
    trackers: dict[str, Tracker] = {}
    try:
        first = sys.stdin.readline()
        settings = parse_start(json.loads(first) if first.strip() else None)
        check_available(settings.trackers)
        _send(replies, {"type": "checked"})
        prepare_trackers(settings)  # seconds (torch, MLflow's database), while the run starts its workers
        second = sys.stdin.readline()
        if not second.strip():
            return 0  # the run did not start: no tracker run is created
        settings = parse_open(json.loads(second), settings)
        trackers = open_trackers(settings)
    except WorkerFailure as failure:
        _send(
            replies,
            {"type": "error", "code": failure.code, "message": failure.message, "details": failure.details},
        )
        return 2
    except Exception as error:  # a torn first line, or a bug
        _send(
            replies,
            {"type": "error", "code": INTERNAL, "message": f"{type(error).__name__}: {error}", "details": {}},
        )
        return 2
    _send(replies, {"type": "ready", "trackers": list(trackers)})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError as error:
            _send(
                replies, {"type": "warning", "tracker": None, "message": f"unreadable line skipped: {error}"}
            )
            continue
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "close":
            break
        if kind in ("metrics", "samples"):
            _dispatch(message, trackers, replies)
        elif kind == "flush":
            _send(replies, {"type": "flushed"})
        else:
            _send(replies, {"type": "warning", "tracker": None, "message": f"unknown message type {kind!r}"})
    for name, problem in close_all(trackers):
        _send(replies, {"type": "warning", "tracker": name, "message": f"{name} failed to close: {problem}"})
    _send(replies, {"type": "closed"})
    return 0
