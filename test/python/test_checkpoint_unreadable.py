"""Loading an unreadable checkpoint through a real worker: a truncated DCP shard (torch raises a
``CheckpointException``, a ``BaseException``) and a truncated ``rng.pt`` are typed ``CHECKPOINT_INVALID``
errors naming the cause, and the worker keeps serving (a resume then falls back to an older checkpoint)."""

from __future__ import annotations

import shutil
from pathlib import Path

from test_training_checkpoint import save, worker_with
from worker_harness import error, ok


def _truncate(path: Path, size: int) -> None:
    with path.open("r+b") as f:
        f.truncate(size)


def test_truncated_files_are_typed_errors_and_the_worker_keeps_serving(
    tiny_dir: Path, tmp_path: Path
) -> None:
    whole = tmp_path / "whole"
    with worker_with(tiny_dir) as (client, _):
        save(client, whole)
        shard_cut, rng_cut = tmp_path / "shard-cut", tmp_path / "rng-cut"
        shutil.copytree(whole, shard_cut)
        shutil.copytree(whole, rng_cut)
        shard = next((shard_cut / "dcp").glob("*.distcp"))
        _truncate(shard, shard.stat().st_size // 2)
        _truncate(rng_cut / "rng.pt", 10)

        def load(directory: Path) -> dict[str, object]:
            args = {"model": "policy", "dir": str(directory)}
            return client.call("load_checkpoint", args, timeout=30)[0]

        message = error(load(shard_cut), "CHECKPOINT_INVALID")
        assert "does not fit or is unreadable: EOFError" in message
        assert "Traceback" not in message
        assert "unreadable rng.pt" in error(load(rng_cut), "CHECKPOINT_INVALID")
        # the same worker still serves: the whole checkpoint loads
        assert ok(load(whole))["step"] == 0
