"""The first line the TypeScript run sends: which trackers, where, under which names, and the run config."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..validation import ArgReader

TRACKERS: tuple[str, ...] = ("tensorboard", "wandb", "mlflow", "trackio")
"""The trackers this process writes to (``jsonl`` is the TypeScript side's own ``metrics.jsonl``)."""


@dataclass(frozen=True)
class TrackingSettings:
    """What the ``start`` message holds (docs/trackers.md)."""

    trackers: list[str]
    """Names from :data:`TRACKERS`, without repeats."""
    directory: Path
    """The trackers' folder in the run directory; each tracker writes under ``directory / <tracker>``."""
    project: str
    """Project (W&B, trackio) or experiment (MLflow) name."""
    run_name: str
    """The tracker run's display name."""
    resume: bool
    """Whether the TypeScript run resumes from a checkpoint: trackers continue their run where they can."""
    config: dict[str, Any]
    """The resolved run config (``config.yaml``), logged as hyperparameters."""
    start_step: int = 0
    """The step the run continues after (0 for a fresh run; from the ``open`` message): TensorBoard drops
    the events a crashed run logged after it."""


def parse_start(message: Any) -> TrackingSettings:
    """The settings of a ``start`` message; a ``BAD_ARGUMENTS`` failure names a wrong field."""
    reader = ArgReader("tracking start", message)
    reader.choice("type", ("start",))
    trackers = reader.strings("trackers") or []
    for index, name in enumerate(trackers):
        if name not in TRACKERS:
            raise reader.failure(f"trackers[{index}]", f"must be one of {', '.join(TRACKERS)}, got {name!r}")
    directory = Path(reader.string("dir", non_empty=True) or "")
    if not directory.is_absolute():
        raise reader.fail("dir", f"must be an absolute path, got {str(directory)!r}")
    settings = TrackingSettings(
        trackers=list(dict.fromkeys(trackers)),
        directory=directory,
        project=reader.string("project", non_empty=True) or "",
        run_name=reader.string("runName", non_empty=True) or "",
        resume=bool(reader.boolean("resume")),
        config=reader.object("config") or {},
    )
    reader.finish()
    return settings


def parse_open(message: Any, settings: TrackingSettings) -> TrackingSettings:
    """``settings`` with the ``startStep`` of an ``open`` message."""
    reader = ArgReader("tracking open", message)
    reader.choice("type", ("open",))
    start_step = reader.integer("startStep", minimum=0) or 0
    reader.finish()
    return replace(settings, start_step=start_step)
