"""Which Python modules each tracker needs, checked before any of them is imported."""

from __future__ import annotations

import importlib.util

from ..errors import WorkerFailure
from .errors import INSTALL_HINT, TRACKER_UNAVAILABLE

REQUIRED_MODULES: dict[str, tuple[str, ...]] = {
    # torch.utils.tensorboard writes the event files; it imports the tensorboard package for them
    "tensorboard": ("tensorboard",),
    "wandb": ("wandb",),
    # the local SQLite store needs SQLAlchemy and alembic (not in mlflow-skinny); log_table needs pandas
    "mlflow": ("mlflow", "sqlalchemy", "alembic", "pandas"),
    "trackio": ("trackio",),
}
"""Module names to import, by tracker (the PyPI packages are in the ``trackers`` extra of pyproject.toml)."""


def missing_modules(tracker: str) -> list[str]:
    """The modules ``tracker`` needs that cannot be found."""
    return [name for name in REQUIRED_MODULES[tracker] if importlib.util.find_spec(name) is None]


def check_available(trackers: list[str]) -> None:
    """Raises ``TRACKER_UNAVAILABLE`` naming the first tracker missing a module, and the extra to install."""
    for tracker in trackers:
        missing = missing_modules(tracker)
        if missing:
            raise WorkerFailure(
                TRACKER_UNAVAILABLE,
                f'loggers: "{tracker}" needs the Python package(s) {", ".join(missing)}, not installed in '
                f"the worker environment; install the trackers extra: {INSTALL_HINT}",
                {"tracker": tracker, "missing": missing, "install": INSTALL_HINT},
            )
