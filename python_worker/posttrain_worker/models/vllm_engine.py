"""The vLLM backend: an adapter from vLLM's offline ``LLM`` API to the worker's ``generate`` and ``score``.

Target API: the V1 engine of vLLM 0.11 and later, checked against the v0.15 API reference. What is used:

- ``vllm.LLM(model, tokenizer, dtype, seed, gpu_memory_utilization, enable_prefix_caching, max_model_len,
  enforce_eager, worker_extension_cls, logprobs_mode="raw_logprobs")`` and
  ``llm.llm_engine.model_config.max_model_len``;
- ``vllm.SamplingParams(n, temperature, top_p, top_k, repetition_penalty, max_tokens, stop, seed, logprobs,
  prompt_logprobs, include_stop_str_in_output, skip_special_tokens, detokenize)``, where ``top_k=0`` is off;
- ``llm.generate([{"prompt_token_ids": ids}, ...], [params, ...], use_tqdm=False)``, answering one
  ``RequestOutput`` per prompt: ``.outputs[i]`` (``CompletionOutput``: ``.index``, ``.token_ids``,
  ``.logprobs`` = one ``{token_id: Logprob}`` per token, ``.finish_reason`` ``"stop"``/``"length"``,
  ``.stop_reason`` = the stop string, a stop token id, or ``None`` for eos) and ``.prompt_logprobs``
  (``None`` first, then one ``{token_id: Logprob}`` per prompt token);
- ``llm.collective_rpc(name, args=...)`` into :mod:`posttrain_worker.models.vllm_worker` (weight loading,
  model facts), and ``llm.reset_prefix_cache()`` after new weights.

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

import gc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from posttrain_worker.errors import BAD_ARGUMENTS, INTERNAL, WorkerFailure
from posttrain_worker.models.errors import MODEL_LOAD_FAILED
from posttrain_worker.models.generation import GeneratedRow, eos_token_ids
from posttrain_worker.models.sampling import SamplingParams, row_seed
from posttrain_worker.models.vllm_import import engine_label
from posttrain_worker.models.vllm_worker import WORKER_EXTENSION

REQUEST_SEED_BITS = 62
"""vLLM gives the ``i``-th of ``n`` samples of a request the seed ``seed + i``: 62 bits leave that room."""


@dataclass(frozen=True)
class VllmOptions:
    """Engine options of ``load_model`` with ``backend: "vllm"`` (vLLM's names, snake_cased)."""

    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    """``None``: vLLM derives it from the config (``max_position_embeddings``)."""
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    seed: int = 0


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


class VllmEngine:
    """One ``vllm.LLM`` engine holding one model, behind the interface ``methods/generation.py`` uses."""

    def __init__(
        self, vllm: ModuleType, llm: Any, *, vocab_size: int, model_type: str, eos_ids: set[int]
    ) -> None:
        self.vllm = vllm
        self.llm = llm
        self.vocab_size = vocab_size
        self.model_type = model_type
        self.eos_ids = eos_ids
        self.engine = engine_label(vllm)
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        facts = self._rpc("posttrain_model_facts")
        self.parameters = int(facts["parameters"])
        self.memory_bytes = int(facts["memoryBytes"])

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
        """Starts an engine on the model directory ``path`` (``MODEL_LOAD_FAILED`` when vLLM cannot).
        ``config`` and ``tokenizer`` are the checkpoint's, as the transformers backend loads them."""
        try:
            llm = vllm.LLM(
                model=path,
                tokenizer=path,
                dtype=dtype,
                seed=options.seed,
                gpu_memory_utilization=options.gpu_memory_utilization,
                enable_prefix_caching=options.enable_prefix_caching,
                max_model_len=options.max_model_len,
                enforce_eager=options.enforce_eager,
                worker_extension_cls=WORKER_EXTENSION,
                logprobs_mode="raw_logprobs",
            )
        except Exception as exc:  # vLLM raises ValueError, RuntimeError, torch errors, ... from its engine
            raise WorkerFailure(
                MODEL_LOAD_FAILED,
                f"{path}: vLLM could not start an engine ({type(exc).__name__}: {exc})",
                {"path": path, "backend": "vllm"},
            ) from None
        return cls(
            vllm,
            llm,
            vocab_size=int(config.vocab_size),
            model_type=str(config.model_type),
            eos_ids=checkpoint_eos_ids(path, tokenizer),
        )

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
        """Copies ``(hf_name, tensor)`` pairs into the engine's model (names as in the HF checkpoint; vLLM
        maps them onto its fused layers), then drops the prefix cache, whose KV entries the old weights made.
        Returns the number of tensors loaded. The tensors cross to vLLM's engine process on the CPU."""
        pairs = [(name, tensor.detach().to("cpu")) for name, tensor in weights]
        try:
            loaded = int(self._rpc("posttrain_load_weights", pairs))
        except (KeyError, ValueError, RuntimeError, AssertionError) as exc:
            raise WorkerFailure(
                BAD_ARGUMENTS, f"load_weights: vLLM could not load the weights ({type(exc).__name__}: {exc})"
            ) from None
        self.llm.reset_prefix_cache()
        return loaded

    # ---- lifetime --------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stops the engine (its background engine process, where vLLM runs one) and frees its memory."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        stop = getattr(core, "shutdown", None)
        if callable(stop):
            stop()
        self.llm = None
        gc.collect()

    # ---- helpers ---------------------------------------------------------------------------------------

    def _generate(self, prompts: Sequence[torch.Tensor], sampling: Sequence[Any]) -> list[Any]:
        requests = [{"prompt_token_ids": [int(t) for t in p.tolist()]} for p in prompts]
        outputs = list(self.llm.generate(requests, list(sampling), use_tqdm=False))
        if len(outputs) != len(requests):
            raise WorkerFailure(INTERNAL, f"vLLM answered {len(outputs)} outputs for {len(requests)} prompts")
        return outputs

    def _rpc(self, method: str, *args: Any) -> Any:
        """``collective_rpc`` into :class:`PosttrainWorkerExtension`; the first (only) worker's answer."""
        results = self.llm.collective_rpc(method, args=args)
        return results[0]
