"""Named Hugging Face causal LMs held by one worker (``policy``, ``ref``, ...).

Loading checks, in order: the path exists (or is a hub id: well formed, and reachable online or cached when
offline, see ``hub``), the config is a causal LM, the tokenizer loads, the weights load. Each failure is a
:class:`WorkerFailure` naming the path and the cause; nothing half-loaded is kept.

A model has a backend: ``"transformers"`` (the default: ``model`` is the HF model, in this process) or
``"vllm"`` (``model`` is None and ``engine`` is a :class:`~posttrain_worker.models.vllm_engine.VllmEngine`
holding the weights; generation and scoring go through it, training cannot use it). The tokenizer is the
HF tokenizer in both cases, so chat templates and decoded text do not depend on the backend.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.models.errors import (
    MODEL_ALREADY_LOADED,
    MODEL_LOAD_FAILED,
    MODEL_NOT_FOUND,
    MODEL_NOT_LOADED,
)
from posttrain_worker.models.hub import cached_snapshot, check_hub_id, hub_offline, online_failure
from posttrain_worker.models.vllm_engine import VllmEngine, VllmOptions
from posttrain_worker.models.vllm_import import import_vllm

BACKENDS = ("transformers", "vllm")
"""Model backends ``load_model`` accepts; ``"vllm"`` needs the vllm package (see ``vllm_import``)."""

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")
"""A local model directory must hold one of these for its tokenizer to be usable."""


@dataclass
class LoadedModel:
    name: str
    path: str
    model: Any  # transformers.PreTrainedModel; None when backend is "vllm"
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    dtype: str
    device: torch.device
    policy_version: int = 0
    """Bumped by every weight sync into (or out of) this model (docs/training.md, "Weight sync")."""
    backend: str = "transformers"
    """``"transformers"`` or ``"vllm"`` (then ``model`` is None and ``engine`` holds the weights)."""
    engine: VllmEngine | None = None

    def describe(self) -> dict[str, Any]:
        """JSON facts: parameter count, memory, vocabulary, context length, special tokens, backend."""
        facts = self._model_facts()
        return {
            "name": self.name,
            "path": self.path,
            "modelType": facts["modelType"],
            "dtype": self.dtype,
            "device": str(self.device),
            "parameters": facts["parameters"],
            "memoryBytes": facts["memoryBytes"],
            "vocabSize": len(self.tokenizer),
            "maxPositionEmbeddings": facts["maxPositionEmbeddings"],
            "eosTokenId": self.tokenizer.eos_token_id,
            "eosTokens": self._eos_texts(),
            "padTokenId": self.tokenizer.pad_token_id,
            "hasChatTemplate": bool(getattr(self.tokenizer, "chat_template", None)),
            "policyVersion": self.policy_version,
            "backend": self.backend,
            "engine": facts["engine"],
        }

    def _eos_texts(self) -> list[str]:
        """The text of every token that ends generation (a response ending on one ends with its text)."""
        from posttrain_worker.models.generation import eos_token_ids

        ids = eos_token_ids(self.model, self.tokenizer)
        return sorted({self.tokenizer.decode([i], skip_special_tokens=False) for i in ids})

    def _model_facts(self) -> dict[str, Any]:
        if self.engine is not None:  # the context length is the engine's max_model_len
            engine = self.engine
            return {
                "modelType": engine.model_type,
                "parameters": engine.parameters,
                "memoryBytes": engine.memory_bytes,
                "maxPositionEmbeddings": engine.max_model_len,
                "engine": engine.engine,
            }
        import transformers

        params = list(self.model.parameters())
        buffers = list(self.model.buffers())
        config = self.model.config
        return {
            "modelType": str(config.model_type),
            "parameters": sum(p.numel() for p in params),
            "memoryBytes": sum(t.numel() * t.element_size() for t in (*params, *buffers)),
            "maxPositionEmbeddings": getattr(config, "max_position_embeddings", None),
            "engine": f"transformers {transformers.__version__}",
        }


def _looks_local(path: str) -> bool:
    """A filesystem path rather than a hub id (``org/name``)."""
    return path.startswith(("/", "./", "../", "~"))


class ModelStore:
    """The models loaded in this worker, by name (used from the compute thread; the lock guards listing)."""

    def __init__(self) -> None:
        self._models: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._models)

    def get(self, name: str) -> LoadedModel:
        with self._lock:
            loaded = self._models.get(name)
            if loaded is None:
                known = ", ".join(self._models) or "none"
                raise WorkerFailure(
                    MODEL_NOT_LOADED,
                    f"no model named {name!r} is loaded (loaded: {known})",
                    {"loaded": list(self._models)},
                )
            return loaded

    def load(
        self,
        name: str,
        path: str,
        dtype: str,
        device: torch.device,
        replace: bool = False,
        *,
        backend: str = "transformers",
        vllm_options: VllmOptions | None = None,
        chat_template: str | None = None,
    ) -> LoadedModel:
        """Loads ``path`` under ``name``. Replacing a model that runs on a vLLM engine stops that engine
        first (its GPU memory is needed), so the name is left unloaded when the new load then fails.
        ``chat_template`` replaces the directory's template (checked by rendering a one-message chat before
        anything loads: ``BAD_ARGUMENTS`` naming ``chatTemplate``)."""
        with self._lock:
            previous = self._models.get(name)
            if previous is not None and not replace:
                raise WorkerFailure(
                    MODEL_ALREADY_LOADED,
                    f"a model named {name!r} is already loaded from {previous.path}; "
                    "unload it first or pass replace",
                )
        if chat_template is not None:
            _check_chat_template(path, chat_template)
        if previous is not None and previous.engine is not None:
            self.unload(name)
        if backend == "vllm":
            engine, tokenizer = _load_vllm(path, dtype, vllm_options or VllmOptions())
            loaded = LoadedModel(name, path, None, tokenizer, dtype, device, backend="vllm", engine=engine)
        else:
            loaded = LoadedModel(name, path, *_load(path, dtype, device), dtype=dtype, device=device)
        if chat_template is not None:
            loaded.tokenizer.chat_template = chat_template  # saved with the model's checkpoints
        with self._lock:
            self._models[name] = loaded
        return loaded

    def add(self, loaded: LoadedModel, replace: bool = False) -> None:
        """Registers an already built model (a clone or an alias of another one) under ``loaded.name``."""
        with self._lock:
            if loaded.name in self._models and not replace:
                raise WorkerFailure(
                    MODEL_ALREADY_LOADED,
                    f"a model named {loaded.name!r} is already loaded from {self._models[loaded.name].path}; "
                    "unload it first or pass replace",
                )
            self._models[loaded.name] = loaded

    def unload(self, name: str) -> None:
        loaded = self.get(name)
        with self._lock:
            self._models.pop(name, None)
        if loaded.engine is not None:
            loaded.engine.shutdown()
        del loaded
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _check_chat_template(path: str, template: str) -> None:
    """``BAD_ARGUMENTS`` when ``template`` does not render a one-message chat with ``path``'s tokenizer."""
    _expanded, _config, tokenizer = _open(path)
    try:
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], chat_template=template, tokenize=False
        )
    except Exception as exc:  # jinja2's TemplateSyntaxError/UndefinedError, and the template's own raise
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'"chatTemplate" does not render a one-message chat ({type(exc).__name__}: {exc})',
            {"field": "chatTemplate"},
        ) from None


def _load(path: str, dtype: str, device: torch.device) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    expanded, _config, tokenizer = _open(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(expanded, dtype=DTYPES[dtype])
    except Exception as exc:  # safetensors, torch and transformers each raise their own types here
        raise WorkerFailure(
            MODEL_LOAD_FAILED,
            f"{path}: the weights could not be loaded ({type(exc).__name__}: {exc})",
            {"path": path},
        ) from None
    model.to(device)
    model.eval()
    return model, tokenizer


def _load_vllm(path: str, dtype: str, options: VllmOptions) -> tuple[VllmEngine, Any]:
    vllm = import_vllm()  # BACKEND_UNAVAILABLE before anything else
    expanded, config, tokenizer = _open(path)
    engine = VllmEngine.create(
        vllm, expanded, config=config, tokenizer=tokenizer, dtype=dtype, options=options
    )
    return engine, tokenizer


def _open(path: str) -> tuple[str, Any, Any]:
    """``(expanded path, config, tokenizer)`` after the checks every backend shares."""
    # transformers is imported here, not at module load: the worker starts without paying for it.
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    expanded = os.path.expanduser(path)
    local = Path(expanded).is_dir()
    if not local and (_looks_local(path) or Path(expanded).exists()):
        raise WorkerFailure(MODEL_NOT_FOUND, f"{path}: no such directory", {"path": path})
    if not local:
        check_hub_id(path)
        if hub_offline():  # the cached snapshot is a local directory: the local checks below apply to it
            expanded, local = cached_snapshot(path), True
    try:
        config = AutoConfig.from_pretrained(expanded)
    except (OSError, ValueError) as exc:
        if not local:
            raise online_failure(path, exc) from None
        raise WorkerFailure(
            MODEL_LOAD_FAILED, f"{path}: no readable config.json ({exc})", {"path": path}
        ) from None
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise WorkerFailure(
            MODEL_LOAD_FAILED,
            f"{path}: model type {model_type!r} is not a causal language model "
            f"(architectures: {getattr(config, 'architectures', None)})",
            {"path": path, "modelType": model_type},
        )
    if local and not any((Path(expanded) / f).is_file() for f in TOKENIZER_FILES):
        # transformers 5 would build an empty tokenizer here instead of failing.
        raise WorkerFailure(
            MODEL_LOAD_FAILED,
            f"{path}: no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)})",
            {"path": path},
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(expanded)
    except (OSError, ValueError, TypeError) as exc:
        raise WorkerFailure(
            MODEL_LOAD_FAILED, f"{path}: the tokenizer could not be loaded ({exc})", {"path": path}
        ) from None
    return expanded, config, tokenizer
