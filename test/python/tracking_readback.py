"""Reads back what the tracker logger wrote, each tracker with its own reader: TensorBoard's
``EventAccumulator``, W&B's transaction-log reader (``wandb leet inspect --json``), an ``MlflowClient`` on the
SQLite store, trackio's ``SQLiteStorage``. Shared by test_tracking.py and test/ts/trackers.test.ts, which runs
``python tracking_readback.py DIR PROJECT RUN_NAME`` and reads the JSON it prints:

``{tracker: {"metrics": {name: [[step, value]]}, "samples": [row], "config": {...}, "runs": [...]}}``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

Readback = dict[str, Any]


def _add(metrics: dict[str, list[list[float]]], name: str, step: int, value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        metrics.setdefault(name, []).append([step, float(value)])


def read_tensorboard(directory: Path) -> Readback:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    metrics: dict[str, list[list[float]]] = {}
    for tag in tags["scalars"]:
        for event in events.Scalars(tag):
            _add(metrics, tag, event.step, event.value)
    samples = [
        {"step": event.step, "markdown": event.tensor_proto.string_val[0].decode("utf-8")}
        for tag in tags["tensors"]
        if tag.startswith("completions")
        for event in events.Tensors(tag)
    ]
    hparams = events.PluginTagToContent("hparams")
    return {
        "metrics": metrics,
        "samples": samples,
        "config": {"hparams_tags": sorted(hparams)},
        "runs": ["."],
    }


def read_wandb(directory: Path) -> Readback:
    runs = sorted((directory / "wandb" / "wandb").glob("offline-run-*"))
    metrics: dict[str, list[list[float]]] = {}
    samples: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    ids = []
    for run in runs:
        out = subprocess.run(
            [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in out.splitlines():
            record = json.loads(line)
            if record.get("type") == "run":
                ids.append(record["run"]["run_id"])
                config = {
                    k: v
                    for k, v in record["run"].get("config", {}).get("update", {}).items()
                    if k != "_wandb"
                }
            elif record.get("type") == "history":
                item = record["history"]["item"]
                step = int(item["_step"])
                for name, value in item.items():
                    if not name.startswith("_") and not name.startswith("completions."):
                        _add(metrics, name, step, value)
                if item.get("completions._type") == "table-file":
                    table = json.loads((run / "files" / item["completions.path"]).read_text("utf-8"))
                    samples += [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    return {"metrics": metrics, "samples": samples, "config": config, "runs": ids}


def read_mlflow(directory: Path, project: str) -> Readback:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{directory / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(project)
    assert experiment is not None, f"no MLflow experiment {project!r}"
    runs = client.search_runs([experiment.experiment_id])
    metrics: dict[str, list[list[float]]] = {}
    samples: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    for run in runs:
        config = dict(run.data.params)
        for name in run.data.metrics:
            for point in client.get_metric_history(run.info.run_id, name):
                _add(metrics, name, point.step, point.value)
        if any(f.path == "completions.json" for f in client.list_artifacts(run.info.run_id)):
            table = json.loads(
                Path(client.download_artifacts(run.info.run_id, "completions.json")).read_text()
            )
            samples += [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    for values in metrics.values():
        values.sort(key=lambda point: point[0])
    return {"metrics": metrics, "samples": samples, "config": config, "runs": [r.info.run_id for r in runs]}


def read_trackio(directory: Path, project: str, run_name: str) -> Readback:
    # trackio fixes its store's folder (TRACKIO_DIR) when first imported, and another test of the same pytest
    # process may have imported it already (TRL's integrations do): read in a fresh interpreter.
    if "trackio" in sys.modules or os.environ.get("TRACKIO_DIR") != str(directory / "trackio"):
        env = {**os.environ, "TRACKIO_DIR": str(directory / "trackio")}
        out = subprocess.run(
            [sys.executable, __file__, str(directory), project, run_name, "trackio"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        return json.loads(out)["trackio"]
    from trackio.sqlite_storage import SQLiteStorage

    metrics: dict[str, list[list[float]]] = {}
    samples: list[dict[str, Any]] = []
    for log in SQLiteStorage.get_logs(project, run_name):
        step = int(log["step"])
        for name, value in log.items():
            if name == "completions":
                samples += value["_value"]
            elif name not in ("step", "timestamp"):
                _add(metrics, name, step, value)
    config = SQLiteStorage.get_run_config(project, run_name) or {}
    return {
        "metrics": metrics,
        "samples": samples,
        "config": {k: v for k, v in config.items() if not k.startswith("_")},
        "runs": SQLiteStorage.get_runs(project),
    }


def read_all(directory: Path, project: str, run_name: str, trackers: list[str]) -> dict[str, Readback]:
    """What each of ``trackers`` holds under ``directory`` (the run's ``tracking.dir``)."""
    readers = {
        "tensorboard": lambda: read_tensorboard(directory),
        "wandb": lambda: read_wandb(directory),
        "mlflow": lambda: read_mlflow(directory, project),
        "trackio": lambda: read_trackio(directory, project, run_name),
    }
    return {name: readers[name]() for name in trackers}


if __name__ == "__main__":
    directory, project, run_name, *trackers = sys.argv[1:]
    result = read_all(
        Path(directory), project, run_name, trackers or ["tensorboard", "wandb", "mlflow", "trackio"]
    )
    sys.stdout.write(json.dumps(result) + "\n")
