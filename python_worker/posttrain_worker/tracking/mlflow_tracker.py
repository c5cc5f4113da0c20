"""MLflow with a local SQLite store, ``<dir>/mlflow/mlflow.db``, and its artifacts beside it: metrics by
step, the run config as params (flattened: ``optimizer.lr``), the samples as the ``completions.json`` table
(``log_table`` appends each step's rows). Browse with ``mlflow ui --backend-store-uri sqlite:///...``."""

from __future__ import annotations

import time
from typing import Any

from .settings import TrackingSettings
from .tracker import flat_params, read_state, sample_table, save_state

PARAM_VALUE_LIMIT = 6000
"""MLflow rejects longer param values; a longer config value is cut to this many characters."""


def tracking_uri(settings: TrackingSettings) -> str:
    """The SQLite store of the run's trackers folder."""
    return f"sqlite:///{settings.directory / 'mlflow' / 'mlflow.db'}"


def prepare(settings: TrackingSettings) -> str:
    """Creates the store (its schema migrations take seconds) and the experiment; returns its id."""
    from mlflow.tracking import MlflowClient

    root = settings.directory / "mlflow"
    root.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=tracking_uri(settings))
    experiment = client.get_experiment_by_name(settings.project)
    if experiment is not None:
        return str(experiment.experiment_id)
    return str(client.create_experiment(settings.project, artifact_location=(root / "artifacts").as_uri()))


class MlflowTracker:
    """One MLflow run through an ``MlflowClient`` (no global active run); a resumed run continues it."""

    def __init__(self, settings: TrackingSettings) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=tracking_uri(settings))
        experiment_id = prepare(settings)
        saved = read_state(settings.directory).get("mlflow", {})
        run_id = saved.get("runId") if settings.resume else None
        if isinstance(run_id, str):
            self._client.update_run(run_id, status="RUNNING")
            self._run_id = run_id
        else:
            self._run_id = self._client.create_run(experiment_id, run_name=settings.run_name).info.run_id
            params = [Param(k, str(v)[:PARAM_VALUE_LIMIT]) for k, v in flat_params(settings.config).items()]
            for start in range(0, len(params), 100):  # log_batch takes at most 100 params a call
                self._client.log_batch(self._run_id, params=params[start : start + 100])
        save_state(settings.directory, "mlflow", {"runId": self._run_id, "experimentId": experiment_id})

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(name, value, now, step) for name, value in values.items()]
        self._client.log_batch(self._run_id, metrics=metrics)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns, data = sample_table(rows)
        table = {column: [row[i] for row in data] for i, column in enumerate(columns)}
        self._client.log_table(self._run_id, data=table, artifact_file="completions.json")

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


def open_tracker(settings: TrackingSettings) -> MlflowTracker:
    """The MLflow run."""
    return MlflowTracker(settings)
