"""TensorBoard through ``torch.utils.tensorboard``: scalars, the samples as a Markdown table in the Text tab,
and the run config in the HParams tab, under ``<dir>/tensorboard``."""

from __future__ import annotations

from typing import Any

from .settings import TrackingSettings
from .tracker import flat_params, sample_table


def _markdown_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\r", "").replace("\n", "<br>")


class TensorBoardTracker:
    """One ``SummaryWriter``; flushed after every step, so a killed run keeps what it logged."""

    def __init__(self, settings: TrackingSettings) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        log_dir = settings.directory / "tensorboard"
        logged_before = log_dir.is_dir() and any(log_dir.glob("events.out.tfevents.*"))
        # a resumed run drops the events a crashed run wrote after its checkpoint (TensorBoard's purge_step)
        purge = settings.start_step + 1 if settings.resume else None
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge)
        if not logged_before:  # the hyperparameters once per log directory
            for summary in hparams(flat_params(settings.config), {}):
                self._writer.file_writer.add_summary(summary)
        self._writer.flush()

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns, data = sample_table(rows)
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_markdown_cell(v) for v in row) + " |" for row in data]
        self._writer.add_text("completions", "\n".join(lines), step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def prepare(settings: TrackingSettings) -> None:
    """Imports ``torch.utils.tensorboard`` (and torch: seconds)."""
    import torch.utils.tensorboard  # noqa: F401


def open_tracker(settings: TrackingSettings) -> TensorBoardTracker:
    """The TensorBoard writer of the run."""
    return TensorBoardTracker(settings)
