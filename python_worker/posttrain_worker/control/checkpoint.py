"""An agent's checkpoint: a directory with ``weights.safetensors`` (actor and critic parameters, the
optimizer's tensors, the sampling generator's state) and ``agent.json`` (format, config, optimizer steps,
the optimizer's param groups and non-tensor state), written last. No pickle.

The directory is written as ``DIR.tmp-<random>`` and renamed into place (an existing ``DIR`` is renamed
aside to ``DIR.old-<random>`` first and removed after), so a kill mid-save leaves the previous checkpoint
whole: at ``DIR``, or, killed between the two renames, at its one ``DIR.old-*`` sibling, which
``load_agent`` reads when ``DIR`` is missing (and the next save removes).

Usage::

    info = save_agent("control_save", agent, "/runs/a/ckpt")  # {"dir", "bytes"}
    agent = load_agent("control_load", "/runs/a/ckpt", existing)  # restores into ``existing`` or builds one
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from typing import Any

import torch

from posttrain_worker.control.agent import Agent
from posttrain_worker.control.config import AgentConfig, read_agent_config
from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.training.errors import CHECKPOINT_INVALID, CHECKPOINT_MISMATCH, CHECKPOINT_NOT_FOUND
from posttrain_worker.validation import ArgReader

FORMAT_VERSION = 1
STATE_FILE = "agent.json"
WEIGHTS_FILE = "weights.safetensors"


def _tensors(agent: Agent) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every tensor to save by name, and the optimizer's JSON part."""
    tensors: dict[str, torch.Tensor] = {}
    for prefix, module in (("actor", agent.actor), ("critic", agent.critic)):
        for name, tensor in module.state_dict().items():
            tensors[f"{prefix}.{name}"] = tensor.detach().contiguous()
    state = agent.optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value.detach().contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    tensors["generator"] = agent.generator.get_state()
    return tensors, {"paramGroups": state["param_groups"], "scalars": scalars}


def save_agent(method: str, agent: Agent, directory: str) -> dict[str, Any]:
    """Writes the checkpoint atomically; ``{"dir": <absolute path>, "bytes": <total size>}``."""
    from safetensors.torch import save_file

    final = Path(directory).expanduser().absolute()
    if final.exists() and not (final / STATE_FILE).is_file() and (not final.is_dir() or any(final.iterdir())):
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'{method}: "dir" {str(final)!r} exists and is not an agent checkpoint; refusing to replace it',
        )
    tensors, optimizer = _tensors(agent)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}.tmp-{secrets.token_hex(4)}")
    tmp.mkdir()
    try:
        save_file(tensors, str(tmp / WEIGHTS_FILE))
        state = {
            "format": FORMAT_VERSION,
            "config": agent.config.to_json(),
            "updates": agent.updates,
            "optimizer": optimizer,
        }
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2), "utf-8")
        old = final.with_name(f"{final.name}.old-{secrets.token_hex(4)}") if final.exists() else None
        if old is not None:
            final.rename(old)
        tmp.rename(final)
        for stale in _old_siblings(final):  # this save's own, and any a killed save left behind
            shutil.rmtree(stale, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(p.stat().st_size for p in final.iterdir() if p.is_file())
    return {"dir": str(final), "bytes": size}


def _old_siblings(final: Path) -> list[Path]:
    """The ``DIR.old-*`` copies a save renamed aside (more than one only if several saves were killed)."""
    if not final.parent.is_dir():
        return []
    return sorted(p for p in final.parent.glob(f"{final.name}.old-*") if p.is_dir())


def _located(final: Path) -> Path:
    """``final``, or when it is missing, its one ``DIR.old-*`` sibling holding a checkpoint: a save killed
    between renaming the previous checkpoint aside and renaming the new one into place left only that."""
    if final.exists():
        return final
    olds = [p for p in _old_siblings(final) if (p / STATE_FILE).is_file()]
    return olds[0] if len(olds) == 1 else final


def _read(method: str, final: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    if not (final / STATE_FILE).is_file():
        raise WorkerFailure(
            CHECKPOINT_NOT_FOUND, f"{method}: no agent checkpoint at {final}", {"path": str(final)}
        )
    try:
        state = json.loads((final / STATE_FILE).read_text("utf-8"))
        tensors = load_file(str(final / WEIGHTS_FILE))
    except (OSError, ValueError) as exc:
        raise WorkerFailure(
            CHECKPOINT_INVALID, f"{method}: {final} is not a readable agent checkpoint ({exc})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise WorkerFailure(
            CHECKPOINT_MISMATCH, f"{method}: {final} is not an agent checkpoint of format {FORMAT_VERSION}"
        )
    return state, tensors


def _module_state(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) + 1 :]: v for k, v in tensors.items() if k.startswith(prefix + ".")}


def load_agent(method: str, directory: str, existing: Agent | None) -> Agent:
    """The agent of the checkpoint at ``directory`` (or, when it is missing, at its one ``DIR.old-*`` sibling:
    a save killed mid-way). With ``existing`` (the agent already under that name) the saved config must equal
    its config (``CHECKPOINT_MISMATCH`` otherwise); either way a new agent is built from the saved config
    and filled, so a damaged checkpoint (``CHECKPOINT_INVALID``) leaves ``existing`` untouched; the caller
    puts the returned agent in its place."""
    final = _located(Path(directory).expanduser().absolute())
    state, tensors = _read(method, final)
    try:
        reader = ArgReader(method, state.get("config"), section="config")
        config = read_agent_config(reader)
        reader.finish()
    except WorkerFailure as exc:  # a damaged agent.json: the checkpoint's fault, not the caller's arguments
        raise WorkerFailure(CHECKPOINT_INVALID, f"{method}: {final} holds no valid config ({exc})") from None
    if existing is not None and existing.config != config:
        raise WorkerFailure(
            CHECKPOINT_MISMATCH,
            f"{method}: the checkpoint at {final} holds an agent of another config; close the agent (or load "
            "under a new name) to create it from the checkpoint",
            {"saved": config.to_json(), "current": existing.config.to_json()},
        )
    try:
        return _restored(config, state, tensors)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise WorkerFailure(
            CHECKPOINT_INVALID, f"{method}: {final} is damaged or does not fit its own config ({exc!r})"
        ) from None


def _restored(config: AgentConfig, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Agent:
    """A fresh agent of ``config`` holding the saved weights, optimizer and generator state."""
    agent = Agent(config)
    optimizer_json = state["optimizer"]
    optimizer_state: dict[str, Any] = {"state": {}, "param_groups": optimizer_json["paramGroups"]}
    for group in optimizer_state["param_groups"]:
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
    for key, tensor in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            optimizer_state["state"].setdefault(int(index), {})[name] = tensor
    for index, scalars in optimizer_json["scalars"].items():
        optimizer_state["state"].setdefault(int(index), {}).update(scalars)
    agent.actor.load_state_dict(_module_state(tensors, "actor"))
    agent.critic.load_state_dict(_module_state(tensors, "critic"))
    agent.optimizer.load_state_dict(optimizer_state)
    agent.generator.set_state(tensors["generator"])
    agent.updates = int(state["updates"])
    return agent
