"""The tracker logger (``python -m posttrain_worker.tracking``): a real process writing to TensorBoard, W&B
(offline), MLflow (local SQLite store) and trackio (local store), read back with each tracker's own reader
(tracking_readback.py), a resume continuing the same tracker runs, and its typed failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.tracking.availability import check_available
from posttrain_worker.tracking.errors import TRACKER_UNAVAILABLE
from posttrain_worker.tracking.settings import parse_start
from posttrain_worker.tracking.tracker import flat_params, sample_table
from tracking_readback import read_all

TRACKERS = ["tensorboard", "wandb", "mlflow", "trackio"]
PROJECT = "posttrain-test"
RUN_NAME = "run-a"
SAMPLE = {"step": 1, "prompt": "2+2?", "completion": "4", "reward": 1.0}
CONFIG = {"optimizer": {"type": "adamw", "lr": 0.001}, "loggers": ["jsonl", *TRACKERS], "steps": 4}


def start_message(directory: Path, resume: bool) -> dict[str, Any]:
    return {
        "type": "start",
        "trackers": TRACKERS,
        "dir": str(directory),
        "project": PROJECT,
        "runName": RUN_NAME,
        "resume": resume,
        "config": CONFIG,
    }


def run_logger(lines: list[dict[str, Any]], close: bool = True) -> tuple[list[dict[str, Any]], int]:
    """Runs one logger process on ``lines`` (then ``close``, or plain EOF as when the run's process dies)."""
    text = "".join(json.dumps(line) + "\n" for line in [*lines, *([{"type": "close"}] if close else [])])
    done = subprocess.run(
        [sys.executable, "-m", "posttrain_worker.tracking"],
        input=text,
        capture_output=True,
        text=True,
        timeout=300,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    return replies, done.returncode


def metrics(step: int, reward: float) -> dict[str, Any]:
    return {
        "type": "metrics",
        "step": step,
        "values": {"reward": reward, "kl": None, "clip_ratio/region_mean": 0.1},
    }


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run that logged steps 1-3 and crashed after its checkpoint at step 2, then its resume: steps 3-4
    again (the resumed process ends on EOF, without ``close``)."""
    directory = tmp_path_factory.mktemp("tracking") / "trackers"
    first, first_code = run_logger(
        [
            start_message(directory, resume=False),
            {"type": "open", "startStep": 0},
            metrics(1, 0.25),
            {"type": "samples", "step": 1, "rows": [SAMPLE]},
            metrics(2, 0.5),
            metrics(3, 0.75),
        ]
    )
    second, second_code = run_logger(
        [
            start_message(directory, resume=True),
            {"type": "open", "startStep": 2},
            metrics(3, 0.8),
            metrics(4, 0.9),
        ],
        close=False,
    )
    return {
        "replies": (first, second),
        "codes": (first_code, second_code),
        "read": read_all(directory, PROJECT, RUN_NAME, TRACKERS),
    }


def test_logger_answers_checked_ready_closed(resumed: dict[str, Any]) -> None:
    for replies, code in zip(resumed["replies"], resumed["codes"], strict=True):
        assert [r["type"] for r in replies] == ["checked", "ready", "closed"], replies
        assert replies[1]["trackers"] == TRACKERS
        assert code == 0


@pytest.mark.parametrize("tracker", TRACKERS)
def test_each_tracker_holds_the_metrics_by_step(resumed: dict[str, Any], tracker: str) -> None:
    read = resumed["read"][tracker]
    assert "kl" not in read["metrics"]  # null: not computed, not logged
    assert [step for step, _ in read["metrics"]["clip_ratio/region_mean"]][:3] == [1, 2, 3]
    reward = sorted(read["metrics"]["reward"])
    if tracker == "tensorboard":
        # purge_step: the resume dropped the crashed run's step 3 (0.75)
        expected = [[1, 0.25], [2, 0.5], [3, 0.8], [4, 0.9]]
    else:
        # the others keep it beside the resumed run's (docs/trackers.md, "Resume")
        expected = [[1, 0.25], [2, 0.5], [3, 0.75], [3, 0.8], [4, 0.9]]
    assert [step for step, _ in reward] == [step for step, _ in expected]
    assert [value for _, value in reward] == pytest.approx([value for _, value in expected])  # float32 in TB


@pytest.mark.parametrize("tracker", ["wandb", "mlflow", "trackio"])
def test_each_table_tracker_holds_the_samples(resumed: dict[str, Any], tracker: str) -> None:
    assert resumed["read"][tracker]["samples"] == [
        {"step": 1, "prompt": "2+2?", "completion": "4", "reward": 1.0}
    ]


def test_tensorboard_holds_the_samples_as_text_and_the_config_as_hparams(resumed: dict[str, Any]) -> None:
    read = resumed["read"]["tensorboard"]
    assert read["samples"] == [
        {
            "step": 1,
            "markdown": "| step | prompt | completion | reward |\n|---|---|---|---|\n| 1 | 2+2? | 4 | 1.0 |",
        }
    ]
    assert "_hparams_/experiment" in read["config"]["hparams_tags"]


def test_the_config_is_logged_as_hyperparameters(resumed: dict[str, Any]) -> None:
    read = resumed["read"]
    assert read["wandb"]["config"]["optimizer"] == {"type": "adamw", "lr": 0.001}
    assert read["trackio"]["config"]["optimizer"] == {"type": "adamw", "lr": 0.001}
    assert read["mlflow"]["config"]["optimizer.lr"] == "0.001"
    assert json.loads(read["mlflow"]["config"]["loggers"]) == CONFIG["loggers"]


def test_a_resume_continues_the_same_tracker_runs(resumed: dict[str, Any]) -> None:
    read = resumed["read"]
    wandb_ids = read["wandb"]["runs"]
    assert len(wandb_ids) == 2 and wandb_ids[0] == wandb_ids[1]  # two offline folders of one run id
    assert len(read["mlflow"]["runs"]) == 1
    assert read["trackio"]["runs"] == [RUN_NAME]


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trackio", None)  # importlib.util.find_spec then finds nothing
    with pytest.raises(WorkerFailure) as caught:
        check_available(["tensorboard", "trackio"])
    failure = caught.value
    assert failure.code == TRACKER_UNAVAILABLE
    assert failure.details["tracker"] == "trackio" and failure.details["missing"] == ["trackio"]
    assert "npx posttrain setup --extras trackers" in failure.message


def test_bad_start_messages_name_the_field(tmp_path: Path) -> None:
    good = start_message(tmp_path, resume=False)
    with pytest.raises(WorkerFailure, match=r'"trackers\[1\]" must be one of') as caught:
        parse_start({**good, "trackers": ["wandb", "neptune"]})
    assert caught.value.code == BAD_ARGUMENTS
    with pytest.raises(WorkerFailure, match='"dir" must be an absolute path'):
        parse_start({**good, "dir": "relative/trackers"})
    with pytest.raises(WorkerFailure, match="unknown argument"):
        parse_start({**good, "startStep": 3})


def test_a_start_error_is_a_reply_and_exit_code_2(tmp_path: Path) -> None:
    replies, code = run_logger([{**start_message(tmp_path, resume=False), "project": ""}])
    assert code == 2
    assert (
        replies[0]["type"] == "error"
        and replies[0]["code"] == BAD_ARGUMENTS
        and '"project"' in replies[0]["message"]
    )


def test_flat_params_and_sample_table() -> None:
    flat = flat_params({"a": {"b": 1, "c": [1, 2]}, "d": None, "e": "x"})
    assert flat == {"a.b": 1, "a.c": "[1, 2]", "d": "null", "e": "x"}
    columns, rows = sample_table([{**SAMPLE, "extra": {"k": 1}}])
    assert columns == ["step", "prompt", "completion", "reward", "extra"]
    assert rows == [[1, "2+2?", "4", 1.0, '{"k": 1}']]
