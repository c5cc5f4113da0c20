"""Model hosting methods: load_model, unload_model, list_models (docs/models.md).

``load_model`` takes ``backend`` (``"transformers"``, the default, or ``"vllm"``) and, for ``"vllm"`` only,
the engine options ``gpuMemoryUtilization``, ``maxModelLen``, ``enablePrefixCaching`` and ``enforceEager``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.models.store import BACKENDS, DTYPES, ModelStore
from posttrain_worker.models.vllm_engine import VllmOptions
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
    backend: str = "transformers"
    vllm_options: VllmOptions | None = None


VLLM_ONLY = ("gpuMemoryUtilization", "maxModelLen", "enablePrefixCaching", "enforceEager")
"""``load_model`` arguments that only the vLLM backend takes."""


def _parse_vllm_options(
    method: str, reader: ArgReader, backend: str, args: dict[str, Any]
) -> VllmOptions | None:
    defaults = VllmOptions()
    utilization = reader.number(
        "gpuMemoryUtilization", required=False, default=defaults.gpu_memory_utilization
    )
    max_len = reader.integer("maxModelLen", required=False, default=None, minimum=1, nullable=True)
    prefix = reader.boolean("enablePrefixCaching", required=False, default=defaults.enable_prefix_caching)
    eager = reader.boolean("enforceEager", required=False, default=defaults.enforce_eager)
    assert utilization is not None and prefix is not None and eager is not None
    if backend != "vllm":
        given = [key for key in VLLM_ONLY if key in args]
        if given:
            raise WorkerFailure(
                BAD_ARGUMENTS, f'{method}: "{given[0]}" is an option of backend "vllm", not of "{backend}"'
            )
        return None
    if not 0 < utilization <= 1:
        raise WorkerFailure(
            BAD_ARGUMENTS, f'{method}: "gpuMemoryUtilization" must be in (0, 1], got {utilization:g}'
        )
    return VllmOptions(
        gpu_memory_utilization=utilization,
        max_model_len=max_len,
        enable_prefix_caching=prefix,
        enforce_eager=eager,
    )


def parse_load(method: str, args: dict[str, Any]) -> LoadArgs:
    reader = ArgReader(method, args)
    name = reader.string("name")
    path = reader.string("path")
    dtype = reader.choice("dtype", tuple(DTYPES), required=False, default="float32")
    device = reader.string("device", required=False)
    replace = reader.boolean("replace", required=False, default=False)
    backend = reader.choice("backend", BACKENDS, required=False, default="transformers")
    assert backend is not None
    vllm_options = _parse_vllm_options(method, reader, backend, args)
    reader.finish()
    assert name is not None and path is not None and dtype is not None and replace is not None
    if not name:
        raise WorkerFailure(BAD_ARGUMENTS, f'{method}: "name" must be a non-empty string')
    if backend == "vllm" and device is not None:
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'{method}: "device" is not an option of backend "vllm" (vLLM runs on the worker\'s own GPU)',
        )
    if device is not None:
        try:
            torch.device(device)
        except RuntimeError:
            raise WorkerFailure(
                BAD_ARGUMENTS, f'{method}: "device" is not a torch device, got {device!r}'
            ) from None
    return LoadArgs(name, path, dtype, device, replace, backend, vllm_options)


def parse_name(method: str, args: dict[str, Any]) -> str:
    reader = ArgReader(method, args)
    name = reader.string("name")
    reader.finish()
    assert name is not None
    return name


def register_model_methods(registry: MethodRegistry, store: ModelStore) -> None:
    def load_model(ctx: CallContext, args: LoadArgs) -> dict[str, Any]:
        device = torch.device(args.device) if args.device is not None else ctx.worker.device
        return store.load(
            args.name,
            args.path,
            args.dtype,
            device,
            args.replace,
            backend=args.backend,
            vllm_options=args.vllm_options,
        ).describe()

    def unload_model(_ctx: CallContext, name: str) -> dict[str, Any]:
        store.unload(name)
        return {}

    def list_models(_ctx: CallContext, _args: None) -> dict[str, Any]:
        return {"models": [store.get(name).describe() for name in store.names()]}

    registry.add("load_model", load_model, thread="compute", parse_args=parse_load)
    registry.add("unload_model", unload_model, thread="compute", parse_args=parse_name)
    registry.add("list_models", list_models, thread="compute")
