"""Which tensors a weight sync moves, and the sync between two models of one worker.

A sync moves a model's parameters by name (tied weights once). A LoRA model sends its merged weights under the
base model's names, so a plain model of the same architecture receives them. Receiving checks names and shapes
before anything is written; a different dtype is converted by ``copy_``.

In one worker (``sync_in_worker``), a target that shares its parameter tensors with the source (a clone made
with ``shareParameters``, colocated generation) needs no copy at all: only the policy version moves.

A target on the vLLM backend (``LoadedModel.engine``) has no torch module here: it takes the pairs with their
HF names through ``VllmEngine.load_weights``, which maps them onto the engine's fused layers. The manifest
is checked first by the engine's own check (``VllmEngine.check_weights``: the checkpoint's names and shapes,
whole layers where it re-packs), received weights are staged and handed over at the end of the transfer, so
the engine sees one consistent set; the engine's refusals and failures become ``WEIGHT_SYNC_FAILED`` naming
the target.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.types import DTYPE_TO_TORCH, TORCH_TO_DTYPE
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.models.store import LoadedModel
from posttrain_worker.models.vllm_engine import VllmEngine
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


@contextlib.contextmanager
def engine_failures(target: str) -> Iterator[None]:
    """A ``WorkerFailure`` of a vLLM engine (its check, its load) as ``WEIGHT_SYNC_FAILED`` naming
    ``target``, with the engine's message and details."""
    try:
        yield
    except WorkerFailure as failure:
        if failure.code == WEIGHT_SYNC_FAILED:
            raise
        raise WorkerFailure(
            WEIGHT_SYNC_FAILED,
            f"{target!r} (vLLM engine) did not take the weights: {failure.message}",
            {**failure.details, "target": target, "cause": failure.code},
        ) from None


def load_into_engine(engine: VllmEngine, target: str, pairs: Iterable[tuple[str, torch.Tensor]]) -> None:
    with engine_failures(target):
        engine.load_weights(pairs)


class IncomingWeights:
    """Where a transfer into ``target`` writes: ``check`` the manifest, ``write`` each tensor, ``finish``
    once every tensor arrived. A torch model is written in place (names and shapes checked first); a vLLM
    engine gets copies staged and loaded in ``finish`` (it maps the HF names and refuses unknown ones)."""

    def __init__(self, target: LoadedModel) -> None:
        self.target = target
        self._staged: list[tuple[str, torch.Tensor]] = []
        self._params = None if target.engine is not None else incoming_targets(target.model)

    def check(self, specs: Sequence[TensorSpec]) -> None:
        engine = self.target.engine
        if self._params is not None:
            check_manifest(self.target.name, specs, self._params)
        elif engine is not None:  # before any byte moves
            with engine_failures(self.target.name):
                engine.check_weights((spec.name, spec.shape) for spec in specs)

    @torch.no_grad()
    def write(self, name: str, tensor: torch.Tensor) -> None:
        if self._params is not None:
            self._params[name].copy_(tensor)
        else:  # the frame's buffer is reused for the next bucket
            self._staged.append((name, tensor.detach().clone()))

    def finish(self) -> None:
        engine = self.target.engine
        if engine is not None:
            staged, self._staged = self._staged, []
            load_into_engine(engine, self.target.name, staged)


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
    """Source -> target in one worker: nothing to move when they share parameters, one ``copy_`` each into a
    torch model, or ``load_weights`` into a vLLM engine."""
    version = source.policy_version + 1
    moved = 0
    shared = (
        source.model is not None
        and target.model is not None
        and shares_parameters(source.model, target.model)
    )
    if target.engine is not None:
        with outgoing_weights(source.model) as pairs:
            load_into_engine(target.engine, target.name, pairs)
            moved = sum(t.numel() * t.element_size() for _, t in pairs)
    elif not shared:
        params = incoming_targets(target.model)
        with outgoing_weights(source.model) as pairs:
            check_manifest(target.name, [spec_of(n, t) for n, t in pairs], params)
            for name, tensor in pairs:
                params[name].copy_(tensor)
                moved += tensor.numel() * tensor.element_size()
    source.policy_version = version
    target.policy_version = version
    return {"policyVersion": version, "shared": shared, "bytes": moved}
