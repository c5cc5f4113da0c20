"""Model hosting methods: load_model, unload_model, list_models (docs/models.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.models.store import DTYPES, ModelStore
from posttrain_worker.protocol.args import ArgReader
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodRegistry


@dataclass(frozen=True)
class LoadArgs:
    name: str
    path: str
    dtype: str
    device: str | None
    replace: bool


def parse_load(method: str, args: dict[str, Any]) -> LoadArgs:
    reader = ArgReader(method, args)
    name = reader.string("name")
    path = reader.string("path")
    dtype = reader.choice("dtype", tuple(DTYPES), required=False, default="float32")
    device = reader.string("device", required=False)
    replace = reader.boolean("replace", required=False, default=False)
    reader.finish()
    assert name is not None and path is not None and dtype is not None and replace is not None
    if not name:
        raise WorkerFailure(BAD_ARGUMENTS, f'{method}: "name" must be a non-empty string')
    if device is not None:
        try:
            torch.device(device)
        except RuntimeError:
            raise WorkerFailure(
                BAD_ARGUMENTS, f'{method}: "device" is not a torch device, got {device!r}'
            ) from None
    return LoadArgs(name, path, dtype, device, replace)


def parse_name(method: str, args: dict[str, Any]) -> str:
    reader = ArgReader(method, args)
    name = reader.string("name")
    reader.finish()
    assert name is not None
    return name


def register_model_methods(registry: MethodRegistry, store: ModelStore) -> None:
    def load_model(ctx: CallContext, args: LoadArgs) -> dict[str, Any]:
        device = torch.device(args.device) if args.device is not None else ctx.worker.device
        return store.load(args.name, args.path, args.dtype, device, args.replace).describe()

    def unload_model(_ctx: CallContext, name: str) -> dict[str, Any]:
        store.unload(name)
        return {}

    def list_models(_ctx: CallContext, _args: None) -> dict[str, Any]:
        return {"models": [store.get(name).describe() for name in store.names()]}

    registry.add("load_model", load_model, thread="compute", parse_args=parse_load)
    registry.add("unload_model", unload_model, thread="compute", parse_args=parse_name)
    registry.add("list_models", list_models, thread="compute")
