"""``python -m posttrain_worker.data.hub_dataset``, run as the TypeScript loader runs it, offline
(``HF_HUB_OFFLINE=1``) against a temporary ``HF_HOME`` whose ``datasets`` cache holds a Hub id, and against
``save_to_disk`` copies (hub_datasets.py builds both with the ``datasets`` library): the rows come back as an
Arrow stream; a missing id, config or split, a missing directory and a missing ``datasets`` library give their
codes, naming what was asked for. Nothing here reaches a network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hub_datasets import GSM8K_ID, GSM8K_TEST, GSM8K_TRAIN, build
from posttrain_worker.data import hub_dataset
from posttrain_worker.data.errors import (
    DATASET_FORMAT,
    DATASET_NOT_CACHED,
    DATASET_NOT_FOUND,
    DATASETS_NOT_INSTALLED,
)
from posttrain_worker.errors import WorkerFailure


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build(tmp_path_factory.mktemp("hub-datasets"))


def load(built: dict[str, str], tmp_path: Path, *args: str) -> tuple[dict[str, Any], pa.Table | None]:
    """Runs the program offline; its result line, and the rows it wrote."""
    out = tmp_path / "rows.arrows"
    env = {**os.environ, "HF_HOME": built["hfHome"], "HF_HUB_OFFLINE": "1"}
    env.pop("HF_DATASETS_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-m", "posttrain_worker.data.hub_dataset", *args, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == (0 if result["ok"] else 1), done.stderr
    table = pa.ipc.open_stream(out.read_bytes()).read_all() if result["ok"] else None
    return result, table


def test_a_cached_hub_id_loads_offline(built: dict[str, str], tmp_path: Path) -> None:
    result, table = load(built, tmp_path, "--hub", GSM8K_ID, "--config", "main", "--split", "train")
    assert result == {"ok": True, "rows": len(GSM8K_TRAIN), "columns": ["question", "answer"]}
    assert table is not None and table.to_pylist() == GSM8K_TRAIN


def test_streaming_with_a_limit_reads_the_first_rows(built: dict[str, str], tmp_path: Path) -> None:
    args = ("--hub", GSM8K_ID, "--config", "main", "--split", "test", "--streaming", "--limit", "2")
    result, table = load(built, tmp_path, *args)
    assert result["rows"] == len(GSM8K_TEST) and table is not None and table.to_pylist() == GSM8K_TEST


def test_an_uncached_id_or_config_names_id_config_split_and_the_cache(
    built: dict[str, str], tmp_path: Path
) -> None:
    result, _ = load(
        built, tmp_path, "--hub", "posttrain-test/never-downloaded", "--config", "main", "--split", "train"
    )
    assert result["code"] == DATASET_NOT_CACHED
    message = result["message"]
    for part in (
        "posttrain-test/never-downloaded",
        '"main"',
        '"train"',
        "offline",
        built["hfHome"],
        "save_to_disk",
    ):
        assert part in message
    assert result["details"]["cacheDir"].startswith(built["hfHome"])
    result, _ = load(built, tmp_path, "--hub", GSM8K_ID, "--config", "socratic", "--split", "train")
    assert result["code"] == DATASET_NOT_CACHED and '"socratic"' in result["message"]
    assert "Available configs in the cache: ['main']" in result["message"]


def test_a_missing_split_of_a_hub_id_names_the_field_and_the_splits(
    built: dict[str, str], tmp_path: Path
) -> None:
    result, _ = load(built, tmp_path, "--hub", GSM8K_ID, "--config", "main", "--split", "validation")
    assert result["code"] == DATASET_NOT_FOUND and result["details"]["field"] == "split"
    assert "validation" in result["message"] and "'train', 'test'" in result["message"]


# save_to_disk copies need no cache or offline switch: these run in this process (``datasets`` imported once).


def rows_of(source: hub_dataset.DatasetSource, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / "rows.arrows"
    result = hub_dataset.load_to_arrow(source, out)
    table = pa.ipc.open_stream(out.read_bytes()).read_all()
    assert result == {"ok": True, "rows": table.num_rows, "columns": table.column_names}
    return table.to_pylist()


def test_save_to_disk_copies_load_by_split(built: dict[str, str], tmp_path: Path) -> None:
    test_rows = rows_of(hub_dataset.DatasetSource(disk=built["prompts"], split="test"), tmp_path)
    assert test_rows == [{"question": "5+5", "solution": "10", "level": 1}]
    # `hub` naming a save_to_disk directory reads it the same way; a single Dataset needs no split.
    train = rows_of(hub_dataset.DatasetSource(hub=built["promptsTrain"], limit=2), tmp_path)
    assert [row["level"] for row in train] == [1, 2]
    # Nested columns (IFEval's kwargs: a list of structs with null arguments) cross as Arrow types.
    ifeval = rows_of(hub_dataset.DatasetSource(disk=built["ifeval"]), tmp_path)
    assert ifeval[0]["kwargs"][0]["num_words"] == 40 and ifeval[0]["kwargs"][1]["relation"] is None


def test_missing_splits_and_directories_of_copies_name_the_field(
    built: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(WorkerFailure) as caught:
        hub_dataset.open_split(hub_dataset.DatasetSource(disk=built["prompts"]))
    assert caught.value.code == DATASET_NOT_FOUND and caught.value.details["field"] == "split"
    assert "['test', 'train']" in caught.value.message
    with pytest.raises(WorkerFailure) as caught:
        hub_dataset.open_split(hub_dataset.DatasetSource(disk=built["prompts"], split="validation"))
    assert caught.value.details["field"] == "split" and "validation" in caught.value.message
    with pytest.raises(WorkerFailure) as caught:
        hub_dataset.open_split(hub_dataset.DatasetSource(disk=str(tmp_path / "nowhere")))
    assert caught.value.code == DATASET_NOT_FOUND and caught.value.details["field"] == "disk"


def test_without_the_datasets_library_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # what an import of a missing package raises
    with pytest.raises(WorkerFailure) as caught:
        hub_dataset.open_split(hub_dataset.DatasetSource(hub=GSM8K_ID, split="train"))
    assert caught.value.code == DATASETS_NOT_INSTALLED
    assert (
        "npx posttrain setup --extras datasets" in caught.value.message
        and caught.value.details["extra"] == "datasets"
    )


@pytest.mark.parametrize("kind", ["httpx", "local-entry"])
def test_network_errors_of_the_hub_libraries_mean_not_cached(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The libraries' own classes, as a download that cannot reach the hub raises them.
    import datasets
    import httpx
    from huggingface_hub.errors import LocalEntryNotFoundError

    error = httpx.ConnectError("no route") if kind == "httpx" else LocalEntryNotFoundError("not in the cache")

    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(datasets, "load_dataset", fail)
    with pytest.raises(WorkerFailure) as caught:
        hub_dataset.open_split(hub_dataset.DatasetSource(hub="posttrain-test/remote", split="train"))
    assert caught.value.code == DATASET_NOT_CACHED and caught.value.details["hub"] == "posttrain-test/remote"


def test_an_unexpected_library_error_is_one_typed_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import datasets

    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyError("features")

    monkeypatch.setattr(datasets, "load_dataset", fail)
    status = hub_dataset.main(
        ["--hub", "posttrain-test/odd", "--split", "train", "--out", str(tmp_path / "o")]
    )
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == 1 and line["ok"] is False and line["code"] == DATASET_FORMAT
    assert line["details"]["type"] == "KeyError" and "features" in line["message"]
