"""trackio with its local store under ``<dir>/trackio`` (``TRACKIO_DIR``): metrics, the samples as a
``trackio.Table``, the run config as the run's config. ``trackio show`` with that ``TRACKIO_DIR`` opens it."""

from __future__ import annotations

import os
from typing import Any

from .settings import TrackingSettings
from .tracker import sample_table


def prepare(settings: TrackingSettings) -> None:
    """Points trackio at ``<dir>/trackio`` and imports it (it reads ``TRACKIO_DIR`` when first imported)."""
    os.environ["TRACKIO_DIR"] = str(settings.directory / "trackio")
    import trackio  # noqa: F401


class TrackioTracker:
    """One trackio run; a resumed run continues the run of the same name (``resume="allow"``)."""

    def __init__(self, settings: TrackingSettings) -> None:
        prepare(settings)
        import trackio

        self._trackio = trackio
        self._run = trackio.init(
            project=settings.project,
            name=settings.run_name,
            config=settings.config,
            resume="allow",
            embed=False,
            auto_log_cpu=False,
            auto_log_gpu=False,
        )

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self._run.log(values, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns, data = sample_table(rows)
        self._run.log({"completions": self._trackio.Table(columns=columns, data=data)}, step=step)

    def close(self) -> None:
        self._run.finish()


def open_tracker(settings: TrackingSettings) -> TrackioTracker:
    """The trackio run."""
    return TrackioTracker(settings)
