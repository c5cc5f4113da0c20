"""Which tensors a weight sync moves, and the sync between two models of one worker.

A sync moves a model's parameters by name (tied weights once). A LoRA model sends its merged weights under the
base model's names, so a plain model of the same architecture receives them. Receiving checks names and shapes
before anything is written; a different dtype is converted by ``copy_``.

In one worker (``sync_in_worker``), a target that shares its parameter tensors with the source (a clone made
with ``shareParameters``, colocated generation) needs no copy at all: only the policy version moves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.types import DTYPE_TO_TORCH, TORCH_TO_DTYPE
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.models.store import LoadedModel
from posttrain_worker.training.errors import WEIGHT_SYNC_FAILED
from posttrain_worker.training.lora import is_peft_model


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * DTYPE_TO_TORCH[self.dtype].itemsize

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


def spec_of(name: str, tensor: torch.Tensor) -> TensorSpec:
    return TensorSpec(name, TORCH_TO_DTYPE[tensor.dtype], tuple(tensor.shape))


def _merged_name(name: str) -> str | None:
    """The base model's name of a parameter of a peft model; ``None`` for adapter weights."""
    if "lora_" in name:
        return None
    return name.replace(".base_layer.", ".")


@contextlib.contextmanager
def outgoing_weights(model: Any) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """The ``(name, tensor)`` pairs to send, valid inside the ``with`` (LoRA adapters merged meanwhile)."""
    if model is None:
        raise WorkerFailure(
            WEIGHT_SYNC_FAILED, "this model's backend has no torch module to read weights from"
        )
    if not is_peft_model(model):
        yield [(name, p.detach()) for name, p in model.named_parameters()]
        return
    model.merge_adapter()
    try:
        base = model.get_base_model()
        pairs = []
        for name, p in base.named_parameters():
            merged = _merged_name(name)
            if merged is not None:
                pairs.append((merged, p.detach()))
        yield pairs
    finally:
        model.unmerge_adapter()


def incoming_targets(model: Any) -> dict[str, torch.Tensor]:
    """The parameters a sync writes into, by name (a LoRA model cannot receive: it trains adapters)."""
    if model is None:
        raise WorkerFailure(WEIGHT_SYNC_FAILED, "this model's backend has no torch module to write into")
    if is_peft_model(model):
        raise WorkerFailure(WEIGHT_SYNC_FAILED, "a model with LoRA adapters cannot receive weights")
    return dict(model.named_parameters())


def check_manifest(target: str, specs: Sequence[TensorSpec], params: dict[str, torch.Tensor]) -> None:
    """Names and shapes of the incoming tensors equal the target's parameters, or ``WEIGHT_SYNC_FAILED``."""
    names = {s.name for s in specs}
    missing = sorted(set(params) - names)
    extra = sorted(names - set(params))
    if missing or extra:
        raise WorkerFailure(
            WEIGHT_SYNC_FAILED,
            f"the weights sent do not match the parameters of {target!r}: "
            f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} unknown (e.g. {extra[:3]})",
            {"missing": missing[:20], "unknown": extra[:20]},
        )
    for spec in specs:
        shape = tuple(params[spec.name].shape)
        if spec.shape != shape:
            raise WorkerFailure(
                WEIGHT_SYNC_FAILED,
                f"{spec.name}: sent with shape {list(spec.shape)}, but {target!r} has {list(shape)}",
                {"name": spec.name},
            )


def shares_parameters(source: Any, target: Any) -> bool:
    """True when every parameter of ``target`` is the very tensor of ``source`` with its name."""
    if source is target:
        return True
    theirs = dict(source.named_parameters())
    for name, p in target.named_parameters():
        other = theirs.get(name)
        if other is None or other.data_ptr() != p.data_ptr() or other.shape != p.shape:
            return False
    return True


@torch.no_grad()
def sync_in_worker(source: LoadedModel, target: LoadedModel) -> dict[str, Any]:
    """Source -> target in one worker: nothing to move when they share parameters, else one ``copy_`` each."""
    version = source.policy_version + 1
    moved = 0
    shared = (
        source.model is not None
        and target.model is not None
        and shares_parameters(source.model, target.model)
    )
    if not shared:
        params = incoming_targets(target.model)
        with outgoing_weights(source.model) as pairs:
            check_manifest(target.name, [spec_of(n, t) for n, t in pairs], params)
            for name, tensor in pairs:
                params[name].copy_(tensor)
                moved += tensor.numel() * tensor.element_size()
    source.policy_version = version
    target.policy_version = version
    return {"policyVersion": version, "shared": shared, "bytes": moved}
