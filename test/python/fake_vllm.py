"""FAKE vLLM: a test double of the slice of vLLM's offline API that posttrain's vLLM backend calls.

THIS IS NOT vLLM. The real engine (vLLM's CPU build) runs in ``test_vllm_real.py`` where vLLM is installed;
this module stands in for what that engine cannot show: a CUDA build (it plays a GPU platform:
``platforms.current_platform.is_cpu()`` is false, so the adapter takes the plain weight-update path and the
GPU engine arguments), outputs on demand, and workers without vLLM installed (``test/ts``). It has vLLM's
module-level names (``LLM``, ``SamplingParams``, ``__version__``) and vLLM's constructor arguments and
attribute names (vLLM 0.11+ V1 API), with ``Fake`` in every class name. It is backed by
a Hugging Face model on the CPU, so its outputs are real tokens of the model it loads.

Mirrored from vLLM: ``LLM(...)`` engine arguments and ``llm.llm_engine.model_config.max_model_len``;
``SamplingParams`` fields and their checks (``temperature`` in [0, 2], ``top_p`` in (0, 1], ``top_k`` 0 or -1
for off, stop strings need ``detokenize``); ``generate`` on ``{"prompt_token_ids": [...]}`` prompts with one
params object or one per prompt; per-request seeds with sample ``i`` of ``n`` seeded ``seed + i``; raw
log-probs as ``{token_id: Logprob}`` (the sampled token, plus the top ``logprobs`` ones); ``prompt_logprobs``
with ``None`` first; the engine's stop checks (length first, then the tokenizer's eos with ``stop_reason``
None, then stop token ids, which include the generation config's other eos ids, with ``stop_reason`` the id)
and the output processor's stop strings (``stop_reason`` the string; the token completing it is kept in
``token_ids``); vLLM's input checks (empty prompt, token id out of vocabulary, prompt longer than
``max_model_len``); ``collective_rpc`` into a worker class with ``worker_extension_cls`` mixed in, whose
``model_runner.model.load_weights`` takes HF parameter names; ``reset_prefix_cache``;
``kv_cache_memory_bytes`` (taken, unused).

Not mirrored: vLLM's sampler and its random numbers (this one samples with ``torch.multinomial``), paged
attention, batching and scheduling (each sequence is recomputed from scratch at every step), CUDA, the
engine process, tensor parallelism, text prompts. Completions of a request come back in the order they
finished, not by index, so callers must not rely on the order.

A worker uses this module only when ``POSTTRAIN_FAKE_VLLM`` holds its absolute path (see
``posttrain_worker/models/vllm_import.py``); the marker below is checked there.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

POSTTRAIN_TEST_FAKE = True
"""Marks this module as a test fake (``vllm_import`` refuses a module without it)."""
__version__ = "0.0.0+posttrain.fake"


class FakePlatform:
    """``vllm.platforms.current_platform``: the fake plays a CUDA build (its layers are not re-packed)."""

    def is_cpu(self) -> bool:
        return False


platforms = SimpleNamespace(current_platform=FakePlatform())

MAX_LOGPROBS = 20
"""vLLM's default ``max_logprobs``."""
SAMPLING_EPS = 1e-5
"""Below this temperature vLLM samples greedily."""
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# ---- outputs -------------------------------------------------------------------------------------------


@dataclass
class FakeLogprob:
    """vLLM's ``Logprob``."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class FakeCompletionOutput:
    """vLLM's ``CompletionOutput``: one sample of a request."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    lora_request: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class FakeRequestOutput:
    """vLLM's ``RequestOutput``: one prompt's samples."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[int, FakeLogprob] | None] | None
    outputs: list[FakeCompletionOutput]
    finished: bool
    metrics: Any = None
    lora_request: Any = None
    encoder_prompt: str | None = None
    encoder_prompt_token_ids: list[int] | None = None
    num_cached_tokens: int | None = None


# ---- sampling params -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class FakeSamplingParams:
    """vLLM's ``SamplingParams``, the fields the fake implements (others are a ``TypeError``)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    max_tokens: int | None = 16
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    detokenize: bool = True

    def __post_init__(self) -> None:
        self.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool):
            raise TypeError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if self.repetition_penalty <= 0.0:
            raise ValueError(f"repetition_penalty must be greater than zero, got {self.repetition_penalty}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be non-negative, got {value}.")
        if self.stop and not self.detokenize:
            raise ValueError(
                "stop strings are only supported when detokenize is True. Set detokenize=True to use stop."
            )

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS


# ---- engine internals the adapter reaches --------------------------------------------------------------


@dataclass
class FakeModelConfig:
    max_model_len: int
    vocab_size: int


@dataclass
class FakeEngineCoreClient:
    shut_down: bool = False

    def shutdown(self) -> None:
        self.shut_down = True


@dataclass
class FakeLLMEngine:
    model_config: FakeModelConfig
    engine_core: FakeEngineCoreClient = field(default_factory=FakeEngineCoreClient)


class FakeVllmModel(torch.nn.Module):
    """Stands in for vLLM's model module: ``load_weights`` takes ``(hf_name, tensor)`` pairs."""

    def __init__(self, hf_model: Any) -> None:
        super().__init__()
        self.hf = hf_model

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.hf.named_parameters(remove_duplicate=False))
        loaded: set[str] = set()
        for name, tensor in weights:
            param = params[name]  # vLLM, too, fails with a KeyError on a name the model does not have
            assert param.shape == tensor.shape, f"{name}: shape {tuple(tensor.shape)} != {tuple(param.shape)}"
            with torch.no_grad():
                param.copy_(tensor.to(param.dtype))
            loaded.add(name)
        return loaded


@dataclass
class FakeModelRunner:
    model: FakeVllmModel


class FakeGPUWorker:
    """vLLM's GPU worker, reduced to its ``model_runner``."""

    def __init__(self, model_runner: FakeModelRunner) -> None:
        self.model_runner = model_runner


def _worker_class(qualname: str) -> type[FakeGPUWorker]:
    """vLLM's rule: the class named by ``worker_extension_cls`` joins the worker class's bases."""
    if not qualname:
        return FakeGPUWorker
    module_name, _, class_name = qualname.rpartition(".")
    extension = getattr(importlib.import_module(module_name), class_name)
    return type("FakeGPUWorkerWithExtension", (FakeGPUWorker, extension), {})


# ---- LLM -----------------------------------------------------------------------------------------------


class FakeLLM:
    """vLLM's offline ``LLM`` over a Hugging Face model on the CPU."""

    def __init__(
        self,
        model: str,
        *,
        tokenizer: str | None = None,
        dtype: str = "auto",
        seed: int = 0,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        enable_prefix_caching: bool | None = None,
        enforce_eager: bool = False,
        kv_cache_memory_bytes: int | None = None,
        worker_extension_cls: str = "",
        logprobs_mode: str = "raw_logprobs",
    ) -> None:
        self.init_kwargs: dict[str, Any] = {
            "model": model,
            "tokenizer": tokenizer,
            "dtype": dtype,
            "seed": seed,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "enable_prefix_caching": enable_prefix_caching,
            "enforce_eager": enforce_eager,
            "kv_cache_memory_bytes": kv_cache_memory_bytes,
            "worker_extension_cls": worker_extension_cls,
            "logprobs_mode": logprobs_mode,
        }
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"GPU memory utilization must be within (0, 1], got {gpu_memory_utilization}")
        if logprobs_mode != "raw_logprobs":
            raise NotImplementedError(
                f"the fake implements logprobs_mode 'raw_logprobs' only, got {logprobs_mode!r}"
            )
        hf_dtype = None if dtype == "auto" else DTYPES[dtype]
        self._model = AutoModelForCausalLM.from_pretrained(model, dtype=hf_dtype).eval()
        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer or model)
        config = self._model.config
        derived = int(config.max_position_embeddings)
        if max_model_len is not None and max_model_len > derived:
            raise ValueError(
                f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
                f"(max_position_embeddings={derived} in model's config.json)."
            )
        self.llm_engine = FakeLLMEngine(FakeModelConfig(max_model_len or derived, int(config.vocab_size)))
        self._eos = self._tokenizer.eos_token_id
        self._generation_eos = _generation_eos_ids(model) - {self._eos}
        self._worker = _worker_class(worker_extension_cls)(FakeModelRunner(FakeVllmModel(self._model)))
        self._request_ids = itertools.count()
        self._unseeded = torch.Generator().manual_seed(seed)
        self.generate_calls: list[tuple[list[list[int]], list[FakeSamplingParams]]] = []
        """Every ``generate`` call's prompts and per-prompt params (for tests)."""
        self.prefix_cache_resets = 0

    def get_tokenizer(self) -> Any:
        return self._tokenizer

    def reset_prefix_cache(self) -> bool:
        self.prefix_cache_resets += 1
        return True

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        call = getattr(self._worker, method) if isinstance(method, str) else method.__get__(self._worker)
        return [call(*args, **(kwargs or {}))]

    def generate(
        self,
        prompts: dict[str, Any] | Sequence[dict[str, Any]],
        sampling_params: FakeSamplingParams | Sequence[FakeSamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
    ) -> list[FakeRequestOutput]:
        batch = [prompts] if isinstance(prompts, dict) else list(prompts)
        if sampling_params is None:
            params = [FakeSamplingParams()] * len(batch)
        elif isinstance(sampling_params, FakeSamplingParams):
            params = [sampling_params] * len(batch)
        else:
            params = list(sampling_params)
            if len(params) != len(batch):
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
        ids = [self._check_prompt(prompt) for prompt in batch]
        for p in params:
            if not isinstance(p, FakeSamplingParams):
                raise TypeError(f"sampling_params must be SamplingParams, got {type(p).__name__}")
            for requested in (p.logprobs, p.prompt_logprobs):
                if requested is not None and requested > MAX_LOGPROBS:
                    raise ValueError(
                        f"Requested sample logprobs of {requested}, which is greater than max allowed: "
                        f"{MAX_LOGPROBS}"
                    )
        self.generate_calls.append((ids, params))
        with torch.inference_mode():
            return [self._request(prompt, p) for prompt, p in zip(ids, params, strict=True)]

    # ---- internals -------------------------------------------------------------------------------------

    def _check_prompt(self, prompt: dict[str, Any]) -> list[int]:
        if not isinstance(prompt, dict) or "prompt_token_ids" not in prompt:
            raise TypeError("the fake takes TokensPrompt inputs only: {'prompt_token_ids': [...]}")
        ids = [int(t) for t in prompt["prompt_token_ids"]]
        config = self.llm_engine.model_config
        if not ids:
            raise ValueError("The decoder prompt cannot be empty")
        for token in ids:
            if not 0 <= token < config.vocab_size:
                raise ValueError(f"Token id {token} is out of vocabulary")
        if len(ids) > config.max_model_len:
            raise ValueError(
                f"The decoder prompt (length {len(ids)}) is longer than the maximum model length of "
                f"{config.max_model_len}."
            )
        return ids

    def _request(self, prompt: list[int], params: FakeSamplingParams) -> FakeRequestOutput:
        outputs = []
        for index in range(params.n):
            seed = params.seed + index if params.seed is not None else None
            generator = torch.Generator().manual_seed(
                seed if seed is not None else int(torch.randint(0, 2**62, (1,), generator=self._unseeded))
            )
            outputs.append(self._complete(index, prompt, params, generator))
        outputs.sort(key=lambda o: len(o.token_ids))  # the order they finished in
        prompt_logprobs = None
        if params.prompt_logprobs is not None:
            raw = torch.log_softmax(self._model(input_ids=torch.tensor([prompt])).logits[0].float(), dim=-1)
            prompt_logprobs = [None] + [
                self._logprob_entry(raw[t - 1], prompt[t], params.prompt_logprobs)
                for t in range(1, len(prompt))
            ]
        return FakeRequestOutput(
            request_id=str(next(self._request_ids)),
            prompt=None,
            prompt_token_ids=prompt,
            prompt_logprobs=prompt_logprobs,
            outputs=outputs,
            finished=True,
        )

    def _complete(
        self, index: int, prompt: list[int], params: FakeSamplingParams, generator: torch.Generator
    ) -> FakeCompletionOutput:
        max_len = self.llm_engine.model_config.max_model_len
        max_tokens = params.max_tokens if params.max_tokens is not None else max_len - len(prompt)
        stop_ids = set(params.stop_token_ids or []) | self._generation_eos
        sequence = list(prompt)
        tokens: list[int] = []
        entries: list[dict[int, FakeLogprob]] = []
        total = 0.0
        text = ""
        reason: str | None = None
        stop_reason: int | str | None = None
        while reason is None:
            logits = self._model(input_ids=torch.tensor([sequence])).logits[0, -1].float()
            raw = torch.log_softmax(logits, dim=-1)
            token = self._choose(logits, sequence, params, generator)
            sequence.append(token)
            tokens.append(token)
            total += float(raw[token])
            if params.logprobs is not None:
                entries.append(self._logprob_entry(raw, token, params.logprobs))
            # the engine core's checks
            if len(tokens) >= max_tokens or len(sequence) >= max_len:
                reason = "length"
            elif not params.ignore_eos and token == self._eos:
                reason = "stop"
            elif token in stop_ids:
                reason, stop_reason = "stop", token
            # the output processor's stop strings
            if params.detokenize:
                text = self._tokenizer.decode(tokens, skip_special_tokens=params.skip_special_tokens)
                for stop in params.stop or []:
                    at = text.find(stop)
                    if at >= 0:
                        reason, stop_reason = "stop", stop
                        text = text[: at + len(stop)] if params.include_stop_str_in_output else text[:at]
                        break
        return FakeCompletionOutput(
            index=index,
            text=text,
            token_ids=tokens,
            cumulative_logprob=total if params.logprobs is not None else None,
            logprobs=entries if params.logprobs is not None else None,
            finish_reason=reason,
            stop_reason=stop_reason,
        )

    def _choose(
        self,
        logits: torch.Tensor,
        sequence: list[int],
        params: FakeSamplingParams,
        generator: torch.Generator,
    ) -> int:
        processed = logits.clone()
        if params.repetition_penalty != 1.0:
            seen = torch.tensor(sorted(set(sequence)), dtype=torch.int64)
            values = processed[seen]
            processed[seen] = torch.where(
                values > 0, values / params.repetition_penalty, values * params.repetition_penalty
            )
        if params.greedy:
            return int(torch.argmax(processed))
        processed = processed / params.temperature
        if 0 < params.top_k < processed.numel():
            kth = torch.topk(processed, params.top_k).values[-1]
            processed = processed.masked_fill(processed < kth, float("-inf"))
        if params.top_p < 1.0:
            ordered, order = torch.sort(processed, descending=True)
            probs = torch.softmax(ordered, dim=-1)
            drop = probs.cumsum(dim=-1) - probs >= params.top_p  # the mass before the token already suffices
            processed = processed.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
        return int(torch.multinomial(torch.softmax(processed, dim=-1), 1, generator=generator))

    def _logprob_entry(self, raw: torch.Tensor, token: int, top: int) -> dict[int, FakeLogprob]:
        entry = {token: self._logprob(raw, token)}
        if top > 0:
            for candidate in torch.topk(raw, top).indices.tolist():
                entry.setdefault(int(candidate), self._logprob(raw, int(candidate)))
        return entry

    def _logprob(self, raw: torch.Tensor, token: int) -> FakeLogprob:
        value = float(raw[token])
        rank = int((raw > raw[token]).sum()) + 1
        return FakeLogprob(value, rank, self._tokenizer.decode([token], skip_special_tokens=False))


def _generation_eos_ids(path: str) -> set[int]:
    try:
        value = GenerationConfig.from_pretrained(path).eos_token_id
    except OSError:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value or []}


LLM = FakeLLM
SamplingParams = FakeSamplingParams
RequestOutput = FakeRequestOutput
CompletionOutput = FakeCompletionOutput
Logprob = FakeLogprob
