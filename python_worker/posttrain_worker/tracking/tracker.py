"""What each tracker offers the logger loop, and the helpers they share: flattened hyperparameters, the
sample table's columns, and the ids a resumed run reads back from ``<dir>/tracking.json``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Protocol

STATE_FILE = "tracking.json"
"""Ids of the tracker runs (W&B run id, MLflow run id), so that a resumed run continues them."""

SAMPLE_COLUMNS: tuple[str, ...] = ("step", "prompt", "completion", "reward")
"""The sample table's columns (as in TRL's completions table); a sample's other keys come after them."""


class Tracker(Protocol):
    """One tracker's run, opened by its module's ``open_tracker(settings)``. Each module also has
    ``prepare(settings)``, called while the run starts its workers: it imports the library and does what needs
    no start step, so that opening the run later is quick."""

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        """Logs a step's metrics (finite numbers only; already under the trackers' names)."""
        ...

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Logs a step's sample completions as a table."""
        ...

    def close(self) -> None:
        """Flushes and ends the tracker's run."""
        ...


def finite_metrics(values: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of ``values`` (``null`` marks a metric the step did not compute)."""
    out: dict[str, float] = {}
    for name, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """A nested config as ``{"optimizer.lr": 1e-05, ...}``: scalars kept, lists and ``null`` as JSON text,
    for trackers whose hyperparameters are flat (MLflow params, TensorBoard hparams)."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, f"{name}."))
        elif isinstance(value, (str, int, float, bool)):
            out[name] = value
        else:
            out[name] = json.dumps(value)
    return out


def sample_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of a step's samples: :data:`SAMPLE_COLUMNS`, then any other keys in order seen;
    values that are not scalars become JSON text."""
    columns = list(SAMPLE_COLUMNS)
    for row in rows:
        columns.extend(key for key in row if key not in columns)

    def cell(value: Any) -> Any:
        return value if value is None or isinstance(value, (str, int, float, bool)) else json.dumps(value)

    return columns, [[cell(row.get(column)) for column in columns] for row in rows]


def read_state(directory: Path) -> dict[str, Any]:
    """The saved tracker ids (empty when none were saved)."""
    try:
        state = json.loads((directory / STATE_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def save_state(directory: Path, tracker: str, ids: dict[str, str]) -> None:
    """Records ``tracker``'s ids (atomically) for the next resume."""
    state = read_state(directory)
    state[tracker] = ids
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{STATE_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(state, indent=2), "utf-8")
    tmp.replace(directory / STATE_FILE)
