"""Checkpoints through real workers: a resumed trainer reproduces the uninterrupted run exactly, the directory
is a loadable Hugging Face model, a kill -9 in the middle of a save leaves the previous checkpoint whole, and
bad paths are typed errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from posttrain_worker.codec import TensorBatch
from posttrain_worker.training.checkpoint import TEST_ONLY_SLEEP_ENV
from training_harness import create, rollout, step, weights
from worker_harness import Client, Worker, error, load, ok, worker_client

CONFIG: dict[str, Any] = {
    "optimizer": {"type": "adamw", "lr": 3e-3, "weightDecay": 0.05},
    "schedule": {"type": "cosine", "warmupSteps": 1, "totalSteps": 8, "minLrRatio": 0.1},
    "loss": {"type": "grpo", "klToRefCoeff": 0.05},
    "refModel": "ref",
}


@contextmanager
def worker_with(tiny_dir: Path, env: dict[str, str] | None = None) -> Iterator[tuple[Client, Worker]]:
    """A fresh worker with "policy" and a frozen "ref" copy loaded, and its trainer."""
    with worker_client({"policy": tiny_dir}, env=env) as (client, worker):
        ok(client.call("clone_model", {"source": "policy", "name": "ref"})[0])
        create(client, **CONFIG)
        yield client, worker


def save(client: Client, directory: Path, position: Any = None, timeout: float = 60) -> dict[str, Any]:
    args = {"model": "policy", "dir": str(directory), "dataPosition": position}
    return ok(client.call("save_checkpoint", args, timeout=timeout)[0])


def test_resuming_reproduces_the_next_steps_exactly(tiny_dir: Path, tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    with worker_with(tiny_dir) as (client, _):
        batches: list[TensorBatch] = [rollout(client, seed=s) for s in range(4)]
        for batch in batches[:2]:
            ok(step(client, batch))
        saved = save(client, directory, {"epoch": 0, "index": 2})
        at_save = weights(client, "policy")
        later = [ok(step(client, batch)) for batch in batches[2:]]
        final = weights(client, "policy")
    assert saved["step"] == 2 and saved["dataPosition"] == {"epoch": 0, "index": 2}
    files = {p.name for p in directory.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "dcp",
        "scheduler.pt",
        "rng.pt",
        "trainer_state.json",
    } <= files
    assert not list(tmp_path.glob("ckpt.*"))  # no temporary or old directories left

    with worker_with(tiny_dir) as (client, _):
        restored = ok(
            client.call("load_checkpoint", {"model": "policy", "dir": str(directory)}, timeout=60)[0]
        )
        assert restored["step"] == 2 and restored["dataPosition"] == {"epoch": 0, "index": 2}
        assert restored["lr"] == later[0]["lr"]
        resumed = [ok(step(client, batch)) for batch in batches[2:]]
        for a, b in zip(later, resumed, strict=True):
            assert b["metrics"] == a["metrics"] and b["lr"] == a["lr"] and b["step"] == a["step"]
        got = weights(client, "policy")
        assert all(torch.equal(final[k], got[k]) for k in final)
        # the checkpoint directory is a Hugging Face model: load_model takes it as it is
        ok(load(client, "saved", directory))
        loaded = weights(client, "saved")
        assert all(torch.equal(at_save[k], loaded[k]) for k in at_save)


def test_a_kill_during_a_save_leaves_the_previous_checkpoint(tiny_dir: Path, tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    with worker_with(tiny_dir) as (client, _):
        batch = rollout(client, seed=1)
        ok(step(client, batch))
        save(client, directory, {"index": 1})
        first = weights(client, "policy")
    with worker_with(tiny_dir, {TEST_ONLY_SLEEP_ENV: "60"}) as (client, worker):
        ok(client.call("load_checkpoint", {"model": "policy", "dir": str(directory)}, timeout=60)[0])
        ok(step(client, batch))
        client.request(
            "save_checkpoint", {"model": "policy", "dir": str(directory), "dataPosition": {"index": 2}}
        )
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("ckpt.tmp-*/dcp/.metadata")):
            assert time.monotonic() < deadline, "the save never reached its test-only pause"
            time.sleep(0.05)
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()
    assert list(tmp_path.glob("ckpt.tmp-*"))  # the half-written save is there, beside the intact one
    state = json.loads((directory / "trainer_state.json").read_text())
    assert state["step"] == 1 and state["dataPosition"] == {"index": 1}
    with worker_with(tiny_dir) as (client, _):
        restored = ok(
            client.call("load_checkpoint", {"model": "policy", "dir": str(directory)}, timeout=60)[0]
        )
        assert restored["step"] == 1 and restored["dataPosition"] == {"index": 1}
        got = weights(client, "policy")
        assert all(torch.equal(first[k], got[k]) for k in first)
        assert save(client, directory, {"index": 3})["step"] == 1
    assert not list(tmp_path.glob("ckpt.*"))  # the next save cleaned the leftover up


def test_checkpoint_errors(tiny_dir: Path, tmp_path: Path) -> None:
    with worker_with(tiny_dir) as (client, _):

        def load_checkpoint(path: Path, code: str) -> str:
            return error(client.call("load_checkpoint", {"model": "policy", "dir": str(path)})[0], code)

        assert "no checkpoint directory" in load_checkpoint(tmp_path / "nothing", "CHECKPOINT_NOT_FOUND")
        (tmp_path / "junk").mkdir()
        (tmp_path / "junk" / "notes.txt").write_text("mine")
        assert "missing trainer_state.json" in load_checkpoint(tmp_path / "junk", "CHECKPOINT_INVALID")
        args = {"model": "policy", "dir": str(tmp_path / "junk")}
        assert "refusing to replace" in error(client.call("save_checkpoint", args)[0], "BAD_ARGUMENTS")
        assert (tmp_path / "junk" / "notes.txt").read_text() == "mine"
        save(client, tmp_path / "ckpt")
        save(client, tmp_path / "ckpt")  # replacing a checkpoint is fine
        create(client, **{**CONFIG, "optimizer": {"type": "sgd", "lr": 0.1}})
        assert "optimizer is 'adamw'" in load_checkpoint(tmp_path / "ckpt", "CHECKPOINT_MISMATCH")
        shutil.rmtree(tmp_path / "ckpt" / "dcp")
        create(client, **CONFIG)
        assert "missing dcp/" in load_checkpoint(tmp_path / "ckpt", "CHECKPOINT_INVALID")
        error(client.call("save_checkpoint", {"model": "policy"})[0], "BAD_ARGUMENTS")
        assert ok(client.call("trainer_state", {"model": "policy"})[0])["step"] == 0


def as_format_1(directory: Path) -> None:
    """Rewrites a checkpoint the way format 1 stored it: the optimizer's own state dict in ``optimizer.pt``
    (parameters by index) instead of ``dcp/`` (parameters by name)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    flat = directory / "flat.pt"
    dcp_to_torch_save(directory / "dcp", flat)
    saved = torch.load(flat, weights_only=True)["optimizer"]
    flat.unlink()
    names = [n for group in saved["param_groups"] for n in group["params"]]
    index = {name: i for i, name in enumerate(names)}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in saved["param_groups"]]
    torch.save(
        {"state": {index[n]: s for n, s in saved["state"].items()}, "param_groups": groups},
        directory / "optimizer.pt",
    )
    shutil.rmtree(directory / "dcp")
    state = json.loads((directory / "trainer_state.json").read_text())
    (directory / "trainer_state.json").write_text(json.dumps({**state, "format": 1}))


def test_a_format_1_checkpoint_still_resumes_exactly(tiny_dir: Path, tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    with worker_with(tiny_dir) as (client, _):
        batches = [rollout(client, seed=s) for s in range(3)]
        ok(step(client, batches[0]))
        save(client, directory)
        later = [ok(step(client, batch)) for batch in batches[1:]]
        final = weights(client, "policy")
    as_format_1(directory)
    assert (directory / "optimizer.pt").is_file() and not (directory / "dcp").exists()
    with worker_with(tiny_dir) as (client, _):
        restored = ok(
            client.call("load_checkpoint", {"model": "policy", "dir": str(directory)}, timeout=60)[0]
        )
        assert restored["step"] == 1
        resumed = [ok(step(client, batch)) for batch in batches[1:]]
        assert [r["metrics"] for r in resumed] == [r["metrics"] for r in later]
        got = weights(client, "policy")
        assert all(torch.equal(final[k], got[k]) for k in final)


def test_the_rng_file_restores_numpy_python_and_torch_states(tmp_path: Path) -> None:
    """``rng.pt`` holds NumPy's global state too, and reads back with ``weights_only=True`` as a load does."""
    import random

    import numpy as np
    from posttrain_worker.training.checkpoint import _rng_state, _set_rng_state

    np.random.seed(1234)
    random.seed(5)
    torch.manual_seed(6)
    np.random.standard_normal()  # leaves a cached Gaussian in the state: it must round-trip too
    torch.save(_rng_state(), tmp_path / "rng.pt")
    expected = (np.random.random(5).tolist(), np.random.standard_normal(), random.random(), torch.rand(3))
    np.random.seed(0)
    random.seed(0)
    torch.manual_seed(0)
    _set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    again = (np.random.random(5).tolist(), np.random.standard_normal(), random.random(), torch.rand(3))
    assert again[:3] == expected[:3]
    assert torch.equal(again[3], expected[3])

    # a checkpoint written before NumPy's state was saved still loads (NumPy's state is left alone)
    older = _rng_state()
    del older["numpy"]
    np.random.seed(42)
    _set_rng_state(older)
    assert np.random.random() == np.random.RandomState(42).random()
