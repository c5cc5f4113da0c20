"""Model hosting methods: load_model, unload_model, list_models (docs/models.md).

``load_model`` takes ``backend`` (``"transformers"``, the default, or ``"vllm"``) and, for ``"vllm"`` only,
the engine options ``gpuMemoryUtilization``, ``maxModelLen``, ``enablePrefixCaching`` and ``enforceEager``
(absent: on for vLLM's CPU engine, off on a GPU; see ``vllm_engine.engine_arguments``). ``chatTemplate``
(either backend) replaces the directory's chat template with the given Jinja text, for instance one whose
assistant turns sit in ``{% generation %}`` blocks (docs/history.md, "Assistant masks").
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import torch

from posttrain_worker.models.store import BACKENDS, DTYPES, ModelStore
from posttrain_worker.models.vllm_engine import VllmOptions
from posttrain_worker.protocol.args import Arg, ArgsSchema, ParsedArgs
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
    chat_template: str | None = None


VLLM_ONLY = ("gpuMemoryUtilization", "maxModelLen", "enablePrefixCaching", "enforceEager")
"""``load_model`` arguments that only the vLLM backend takes."""

_VLLM_DEFAULTS = VllmOptions()


def _vllm_options(parsed: ParsedArgs, backend: str) -> VllmOptions | None:
    if backend != "vllm":
        given = [key for key in VLLM_ONLY if key in parsed.given]
        if given:
            raise parsed.fail(f'"{given[0]}" is an option of backend "vllm", not of "{backend}"')
        return None
    utilization = parsed["gpuMemoryUtilization"]
    if not 0 < utilization <= 1:
        raise parsed.fail(f'"gpuMemoryUtilization" must be in (0, 1], got {utilization:g}')
    return VllmOptions(
        gpu_memory_utilization=utilization,
        max_model_len=parsed["maxModelLen"],
        enable_prefix_caching=parsed["enablePrefixCaching"],
        enforce_eager=parsed["enforceEager"],
    )


def build_load(parsed: ParsedArgs) -> LoadArgs:
    """The vLLM-only options (only with ``backend: "vllm"``), a torch device."""
    backend, device = parsed["backend"], parsed["device"]
    vllm_options = _vllm_options(parsed, backend)
    if backend == "vllm" and device is not None:
        raise parsed.fail('"device" is not an option of backend "vllm" (vLLM runs on the worker\'s own GPU)')
    if device is not None:
        try:
            torch.device(device)
        except RuntimeError:
            raise parsed.fail(f'"device" is not a torch device, got {device!r}') from None
    return LoadArgs(
        parsed["name"],
        parsed["path"],
        parsed["dtype"],
        device,
        parsed["replace"],
        backend,
        vllm_options,
        parsed["chatTemplate"],
    )


LOAD_ARGS = ArgsSchema(
    (
        Arg("name", "string", non_empty=True),
        Arg("path", "string"),
        Arg("dtype", "choice", choices=tuple(DTYPES), default="float32"),
        Arg("device", "string", default=None),
        Arg("replace", "boolean", default=False),
        Arg("backend", "choice", choices=BACKENDS, default="transformers"),
        Arg("gpuMemoryUtilization", "number", default=_VLLM_DEFAULTS.gpu_memory_utilization),
        Arg("maxModelLen", "integer", default=None, minimum=1, nullable=True),
        Arg("enablePrefixCaching", "boolean", default=_VLLM_DEFAULTS.enable_prefix_caching),
        Arg("enforceEager", "boolean", default=_VLLM_DEFAULTS.enforce_eager),  # None: the machine's default
        Arg("chatTemplate", "string", default=None, non_empty=True),
    ),
    build=build_load,
)
NAME_ARGS = ArgsSchema((Arg("name", "string"),), build=itemgetter("name"))

MODEL_ARG = Arg("model", "string", non_empty=True)
"""The ``model`` argument of the methods that use a loaded model: its name in the store."""
ONLY_MODEL_ARGS = ArgsSchema((MODEL_ARG,), build=itemgetter("model"))
"""The schema of a method whose one argument is ``model``; the handler gets the name."""


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
            chat_template=args.chat_template,
        ).describe()

    def unload_model(_ctx: CallContext, name: str) -> dict[str, Any]:
        store.unload(name)
        return {}

    def list_models(_ctx: CallContext, _args: None) -> dict[str, Any]:
        return {"models": [store.get(name).describe() for name in store.names()]}

    registry.add("load_model", load_model, thread="compute", args=LOAD_ARGS)
    registry.add("unload_model", unload_model, thread="compute", args=NAME_ARGS)
    registry.add("list_models", list_models, thread="compute")
