"""Trainer checkpoints: a directory that is both a Hugging Face model and a resumable training state.

Layout of ``DIR`` (docs/training.md, "Checkpoints"):

- the model as ``save_pretrained`` writes it (``config.json``, ``model.safetensors``; with LoRA the
  adapter's ``adapter_config.json`` and ``adapter_model.safetensors``) and the tokenizer, so ``load_model``
  takes ``DIR``;
- ``dcp/``: the model's and the optimizer's state dicts written by torch.distributed.checkpoint, each rank of
  a trainer group its own shard; a load reshards them, so a run saved on N ranks resumes on M (1 included);
- ``scheduler.pt``, ``rng.pt``: ``torch.save`` of rank 0's state dicts (RNG: torch, CUDA, Python's ``random``
  and NumPy's global generator) (files, never the wire; read back with
  ``weights_only=True``);
- ``trainer_state.json``, written last: step, policy version, the caller's data position, the trainer config,
  the world size.

In a trainer group every rank calls save and load together (the ranks share the filesystem); rank 0 writes
everything but the other ranks' shards. Format 1 (``optimizer.pt`` instead of ``dcp/``) still loads into a
trainer without FSDP.

Everything is written into ``DIR.tmp-<random>`` and fsynced, then renamed into place: a kill at any moment
leaves the previous ``DIR`` whole. (Replacing an existing ``DIR`` is two renames, ``DIR`` ->
``DIR.old-<random>`` then the new one -> ``DIR``; a kill between the two leaves ``DIR.old-*``, which ``load``
renames back.)
"""

from __future__ import annotations

import json
import os
import pickle
import random
import secrets
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.training.errors import (
    CHECKPOINT_INVALID,
    CHECKPOINT_MISMATCH,
    CHECKPOINT_NOT_FOUND,
)
from posttrain_worker.training.lora import is_peft_model
from posttrain_worker.training.parallel import agree, barrier, broadcast_token
from posttrain_worker.training.trainer import Trainer

FORMAT_VERSION = 2
STATE_FILE = "trainer_state.json"
DCP_DIR = "dcp"
OPTIMIZER_FILE = "optimizer.pt"
"""Format 1's optimizer state (read only)."""
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng.pt"
TEST_ONLY_SLEEP_ENV = "POSTTRAIN_TEST_ONLY_CHECKPOINT_SLEEP_S"
"""Test-only: seconds to sleep inside a save, after the weights and the optimizer state are written and before
the rest, so a test can kill the worker mid-save. Never set it outside tests."""


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _numpy_rng_state() -> dict[str, Any]:
    """NumPy's global (legacy MT19937) state as a tensor and numbers: ``torch.load(weights_only=True)``
    reads it back, where a pickled ndarray would be refused."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    return {
        "kind": str(kind),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def _set_numpy_rng_state(state: dict[str, Any]) -> None:
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state((state["kind"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"]))


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": _numpy_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "numpy" in state:  # checkpoints written before NumPy's state was saved leave it as it is
        _set_numpy_rng_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _save_model(trainer: Trainer, out: Path) -> None:
    from transformers.utils import logging as hf_logging

    progress_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        trainer.model.save_pretrained(out, safe_serialization=True)
    finally:
        if progress_was_on:
            hf_logging.enable_progress_bar()
    trainer.loaded.tokenizer.save_pretrained(out)


def _is_checkpoint(path: Path) -> bool:
    return (path / STATE_FILE).is_file()


def _check_target(method: str, final: Path) -> WorkerFailure | None:
    if final.exists() and not final.is_dir():
        return WorkerFailure(BAD_ARGUMENTS, f"{method}: {final} exists and is not a directory")
    if final.is_dir() and any(final.iterdir()) and not _is_checkpoint(final):
        return WorkerFailure(
            BAD_ARGUMENTS,
            f"{method}: {final} is a non-empty directory that is not a checkpoint; refusing to replace it",
        )
    return None


def _dcp_state(trainer: Trainer) -> dict[str, Any]:
    """The model's and the optimizer's state dicts as DCP reads and writes them (this rank's shards)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(trainer.module, trainer.optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


@contextmanager
def _one_process_is_intended() -> Iterator[None]:
    """DCP warns that it assumes one process when there is no process group: that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.distributed is disabled")
        yield


def save_checkpoint(method: str, trainer: Trainer, directory: str, data_position: Any) -> dict[str, Any]:
    """Writes the checkpoint atomically (every rank of a group at once); returns its ``trainer_state.json``
    content plus the path."""
    import torch.distributed.checkpoint as dcp

    group = trainer.group
    lead = group is None or group.rank == 0
    final = Path(directory).expanduser().absolute()
    agree(_check_target(method, final), group, "the checkpoint's checks")
    tmp = final.with_name(f"{final.name}.tmp-{broadcast_token(secrets.token_hex(4), group)}")
    if lead:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    barrier(group)
    state: dict[str, Any] = {}
    try:
        with _one_process_is_intended():
            dcp.save(_dcp_state(trainer), checkpoint_id=tmp / DCP_DIR)
        if lead:
            _save_model(trainer, tmp)
            delay = os.environ.get(TEST_ONLY_SLEEP_ENV)
            if delay:
                time.sleep(float(delay))
            torch.save(trainer.scheduler.state_dict(), tmp / SCHEDULER_FILE)
            torch.save(_rng_state(), tmp / RNG_FILE)
            state = {
                "format": FORMAT_VERSION,
                "step": trainer.step_count,
                "policyVersion": trainer.loaded.policy_version,
                "dataPosition": data_position,
                "model": {"name": trainer.loaded.name, "path": trainer.loaded.path},
                "lora": is_peft_model(trainer.model),
                "worldSize": group.world_size if group is not None else 1,
                **trainer.config.to_json(),
            }
            (tmp / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", "utf-8")
            _fsync_tree(tmp)
        barrier(group)
        if lead:
            _swap_into_place(tmp, final)
    except BaseException:
        if lead:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if lead:
        _remove_stale(final)
    barrier(group)
    if not lead:
        state = json.loads((final / STATE_FILE).read_text("utf-8"))
    return {**state, "path": str(final)}


def _swap_into_place(tmp: Path, final: Path) -> None:
    if final.exists():
        old = final.with_name(f"{final.name}.old-{secrets.token_hex(4)}")
        os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(final.parent)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
        _fsync_dir(final.parent)


def _remove_stale(final: Path) -> None:
    """Leftovers of saves killed earlier (``DIR.tmp-*``), and of replaced checkpoints (``DIR.old-*``)."""
    for sibling in final.parent.glob(f"{final.name}.tmp-*"):
        shutil.rmtree(sibling, ignore_errors=True)
    for sibling in final.parent.glob(f"{final.name}.old-*"):
        shutil.rmtree(sibling, ignore_errors=True)


def _recover(final: Path) -> None:
    """A kill between the two renames of a replacing save leaves only ``DIR.old-*``: put it back."""
    if final.exists():
        return
    olds = sorted(
        (p for p in final.parent.glob(f"{final.name}.old-*") if _is_checkpoint(p)),
        key=lambda p: p.stat().st_mtime,
    )
    if olds:
        os.rename(olds[-1], final)
        _fsync_dir(final.parent)


def _read_tensors(directory: Path, prefix: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob(f"{prefix}*.safetensors")):
        tensors.update(load_file(str(file)))
    return tensors


def _prepare_weights(method: str, trainer: Trainer, directory: Path) -> Callable[[], None]:
    """Reads and checks the checkpoint's weights; returns the function that copies them into the model."""
    model = trainer.model
    if is_peft_model(model):
        from peft import set_peft_model_state_dict

        adapter = _read_tensors(directory, "adapter_model")
        if not adapter:
            raise WorkerFailure(
                CHECKPOINT_INVALID, f"{method}: {directory} holds no adapter_model.safetensors"
            )
        return lambda: set_peft_model_state_dict(model, adapter)
    tensors = _read_tensors(directory, "model")
    params = list(model.named_parameters())
    missing = [name for name, _ in params if name not in tensors]
    if missing:
        raise WorkerFailure(
            CHECKPOINT_MISMATCH,
            f"{method}: {directory} lacks {len(missing)} parameter(s) of the model, e.g. {missing[0]!r}",
            {"missing": missing[:20]},
        )
    for name, param in params:
        if tuple(tensors[name].shape) != tuple(param.shape):
            raise WorkerFailure(
                CHECKPOINT_MISMATCH,
                f"{method}: {name} has shape {list(tensors[name].shape)} in the checkpoint, "
                f"{list(param.shape)} in the model",
            )

    @torch.no_grad()
    def apply() -> None:
        for name, param in params:
            param.copy_(tensors[name])

    return apply


def _check_loadable(
    method: str, trainer: Trainer, final: Path
) -> tuple[WorkerFailure | None, dict[str, Any]]:
    if not final.is_dir():
        return WorkerFailure(
            CHECKPOINT_NOT_FOUND, f"{method}: no checkpoint directory at {final}", {"path": str(final)}
        ), {}
    sharded = (final / DCP_DIR).is_dir()
    missing = [f for f in (STATE_FILE, SCHEDULER_FILE, RNG_FILE) if not (final / f).is_file()]
    if not sharded and not (final / OPTIMIZER_FILE).is_file():
        missing.append(f"{DCP_DIR}/")
    if missing:
        return WorkerFailure(
            CHECKPOINT_INVALID,
            f"{method}: {final} is not a complete checkpoint (missing {', '.join(missing)})",
            {"missing": missing},
        ), {}
    try:
        state = json.loads((final / STATE_FILE).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        return WorkerFailure(CHECKPOINT_INVALID, f"{method}: unreadable {STATE_FILE}: {exc}"), {}
    saved_type = (state.get("optimizer") or {}).get("type")
    if saved_type != trainer.config.optimizer.type:
        return WorkerFailure(
            CHECKPOINT_MISMATCH,
            f"{method}: the checkpoint's optimizer is {saved_type!r}, this trainer's is "
            f"{trainer.config.optimizer.type!r}",
        ), {}
    if bool(state.get("lora")) != is_peft_model(trainer.model):
        return WorkerFailure(
            CHECKPOINT_MISMATCH, f"{method}: the checkpoint and this trainer disagree on LoRA"
        ), {}
    if not sharded and trainer.sharded:
        return WorkerFailure(
            CHECKPOINT_MISMATCH,
            f"{method}: {final} is a format-1 checkpoint (optimizer.pt); an FSDP trainer loads only "
            "format 2 (dcp/): resume it on one rank or with DDP and save again",
        ), {}
    return None, state


def _load_dcp(method: str, trainer: Trainer, path: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _dcp_state(trainer)
    # DCP raises its own CheckpointException (and RuntimeError) for a state that does not fit or a truncated
    # shard; CheckpointException derives from BaseException, so it is named here or it would kill the thread
    try:
        with _one_process_is_intended():
            dcp.load(state, checkpoint_id=path)
    except (Exception, CheckpointException) as exc:
        # a CheckpointException's text is a traceback per rank: name the first rank's cause instead
        causes = [f[0] for f in exc.failures.values()] if isinstance(exc, CheckpointException) else [exc]
        cause = causes[0] if causes else exc
        raise WorkerFailure(
            CHECKPOINT_INVALID,
            f"{method}: the model or optimizer state in {path} does not fit or is unreadable: "
            f"{type(cause).__name__}: {cause}",
        ) from None
    set_state_dict(
        trainer.module,
        trainer.optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )


def _load_format_1(method: str, trainer: Trainer, final: Path) -> None:
    optimizer_state = torch.load(final / OPTIMIZER_FILE, weights_only=True, map_location="cpu")
    apply_weights = _prepare_weights(method, trainer, final)
    try:
        trainer.optimizer.load_state_dict(optimizer_state)
    except (ValueError, KeyError) as exc:
        raise WorkerFailure(
            CHECKPOINT_INVALID, f"{method}: the optimizer state does not fit: {exc}"
        ) from None
    apply_weights()


def _read_state_file(method: str, path: Path) -> Any:
    """``torch.load`` of a state file; a truncated or corrupt one is ``CHECKPOINT_INVALID`` (a resume then
    falls back to an older checkpoint), not an internal error."""
    try:
        return torch.load(path, weights_only=True)
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError) as exc:
        raise WorkerFailure(CHECKPOINT_INVALID, f"{method}: unreadable {path.name}: {exc}") from None


def load_checkpoint(method: str, trainer: Trainer, directory: str) -> dict[str, Any]:
    """Restores weights, optimizer, schedule, RNG, step and policy version (every rank of a group at once,
    from a checkpoint saved on any number of ranks); returns the saved state."""
    group = trainer.group
    final = Path(directory).expanduser().absolute()
    if group is None or group.rank == 0:
        _recover(final)
    barrier(group)
    problem, state = _check_loadable(method, trainer, final)
    agree(problem, group, "the checkpoint's checks")
    scheduler_state = _read_state_file(method, final / SCHEDULER_FILE)
    rng_state = _read_state_file(method, final / RNG_FILE)
    if (final / DCP_DIR).is_dir():
        _load_dcp(method, trainer, final / DCP_DIR)
    else:
        _load_format_1(method, trainer, final)
    trainer.scheduler.load_state_dict(scheduler_state)
    _set_rng_state(rng_state)
    trainer.step_count = int(state["step"])
    trainer.loaded.policy_version = int(state["policyVersion"])
    trainer.publish()
    return {**state, "path": str(final)}
