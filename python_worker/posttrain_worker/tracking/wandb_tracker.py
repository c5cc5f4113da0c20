"""Weights & Biases in offline mode, under ``<dir>/wandb``: metrics, samples as a ``wandb.Table``, the run
config as the run's config. ``wandb sync <dir>/wandb/offline-run-*`` uploads it later."""

from __future__ import annotations

from typing import Any

from .settings import TrackingSettings
from .tracker import read_state, sample_table, save_state


class WandbTracker:
    """One offline W&B run; a resumed run reuses its id (``resume="allow"``)."""

    def __init__(self, settings: TrackingSettings) -> None:
        import wandb

        self._wandb = wandb
        saved = read_state(settings.directory).get("wandb", {})
        run_id = saved.get("id") if settings.resume and isinstance(saved.get("id"), str) else None
        root = settings.directory / "wandb"
        root.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=settings.project,
            name=settings.run_name,
            id=run_id,  # None: W&B picks one, saved below
            resume="allow",
            mode="offline",
            dir=str(root),
            config=settings.config,
            # no console capture and no system-metrics sampler: only what the run logs
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True),
        )
        save_state(settings.directory, "wandb", {"id": self._run.id})

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self._run.log(values, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns, data = sample_table(rows)
        self._run.log({"completions": self._wandb.Table(columns=columns, data=data)}, step=step)

    def close(self) -> None:
        self._run.finish()


def prepare(settings: TrackingSettings) -> None:
    """Imports ``wandb``."""
    import wandb  # noqa: F401


def open_tracker(settings: TrackingSettings) -> WandbTracker:
    """The offline W&B run."""
    return WandbTracker(settings)
