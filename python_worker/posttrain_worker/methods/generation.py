"""``generate`` and ``score`` on a model of the store (docs/models.md, "Generation and scoring in the
worker").

Payload keys follow TorchRL's LLM wrappers. Generation reads ``("tokens", "prompt")``,
``("text", "prompt")`` or ``("history", "prompt")`` (rendered with the model's chat template) and writes
``tokens`` and ``text`` (``prompt``, ``response``, ``full``), ``log_probs`` (``response``, ``full``),
``masks`` (``all_attention_mask``, ``all_assistant_mask``), ``finish_reason`` and ``policy_version``
(the version of the weights that sampled each row). Scoring reads
``("tokens", "full")`` (or ``("text", "full")``, tokenized here and echoed as
``("tokens", "full")``) and writes ``("log_probs", "full")``.

Both backends go through here: argument checks, the input token ids (``models/prompts.py``) and the output
payload are shared, and only the token generation and the teacher-forced log-probs come from the transformers
decoding loop or, for a model loaded with ``backend: "vllm"``, from its
:class:`~posttrain_worker.models.vllm_engine.VllmEngine`.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.types import Column, Ragged, TensorBatch
from posttrain_worker.methods.models import MODEL_ARG
from posttrain_worker.methods.payload_keys import ragged, single_batch
from posttrain_worker.models.generation import GeneratedRow, pad_token_id
from posttrain_worker.models.generation import generate as run_generation
from posttrain_worker.models.prompts import generation_prompts, scoring_sequences
from posttrain_worker.models.sampling import SamplingParams, make_generators
from posttrain_worker.models.scoring import score as run_scoring
from posttrain_worker.models.store import ModelStore
from posttrain_worker.protocol.args import Arg, ArgsSchema, ParsedArgs
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry

TRUNCATE_MODES = ("error", "left")
MAX_SEED = 2**64 - 1

# ---- arguments -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateArgs:
    model: str
    max_new_tokens: int
    params: SamplingParams
    stop: tuple[str, ...]
    seed: int | None
    num_samples: int
    micro_batch_size: int | None
    truncate: str


@dataclass(frozen=True)
class ScoreArgs:
    model: str
    micro_batch_size: int | None


MICRO_BATCH_SIZE = Arg("microBatchSize", "integer", default=None, minimum=1, nullable=True)


def build_generate(parsed: ParsedArgs) -> GenerateArgs:
    """``topP`` in (0, 1], ``repetitionPenalty`` > 0, no empty stop string; the sampling parameters."""
    top_p, penalty, stop = parsed["topP"], parsed["repetitionPenalty"], parsed["stop"]
    if top_p <= 0:
        raise parsed.fail(f'"topP" must be in (0, 1], got {top_p:g}')
    if penalty <= 0:
        raise parsed.fail(f'"repetitionPenalty" must be > 0, got {penalty:g}')
    for index, item in enumerate(stop):
        if not item:
            raise parsed.fail(f'"stop[{index}]" must be a non-empty string')
    params = SamplingParams(
        temperature=parsed["temperature"], top_p=top_p, top_k=parsed["topK"], repetition_penalty=penalty
    )
    return GenerateArgs(
        parsed["model"],
        parsed["maxNewTokens"],
        params,
        tuple(stop),
        parsed["seed"],
        parsed["numSamples"],
        parsed["microBatchSize"],
        parsed["truncate"],
    )


GENERATE_ARGS = ArgsSchema(
    (
        MODEL_ARG,
        Arg("maxNewTokens", "integer", minimum=1),
        Arg("temperature", "number", default=1.0, minimum=0),
        Arg("topP", "number", default=1.0, maximum=1),
        Arg("topK", "integer", default=0, minimum=0),
        Arg("repetitionPenalty", "number", default=1.0),
        Arg("stop", "strings", default=()),
        Arg("seed", "integer", default=None, minimum=0, maximum=MAX_SEED, nullable=True),
        Arg("numSamples", "integer", default=1, minimum=1),
        MICRO_BATCH_SIZE,
        Arg("truncate", "choice", choices=TRUNCATE_MODES, default="error"),
    ),
    build=build_generate,
)
SCORE_ARGS = ArgsSchema((MODEL_ARG, MICRO_BATCH_SIZE), build=ScoreArgs)


# ---- generate ------------------------------------------------------------------------------------------


def _decode(tokenizer: Any, ids: torch.Tensor) -> str:
    return str(tokenizer.decode(ids.tolist(), skip_special_tokens=False))


def generate(store: ModelStore, ctx: CallContext, args: GenerateArgs) -> MethodOutcome:
    loaded = store.get(args.model)
    batch = single_batch(ctx)
    prompts, prompt_texts = generation_prompts(
        ctx.method, loaded, batch, max_new_tokens=args.max_new_tokens, truncate=args.truncate
    )
    tokenizer = loaded.tokenizer
    seed = args.seed if args.seed is not None else secrets.randbits(53)
    k = args.num_samples
    expanded = [p for p in prompts for _ in range(k)]
    if loaded.engine is not None:
        rows = loaded.engine.generate(
            prompts,
            max_new_tokens=args.max_new_tokens,
            params=args.params,
            num_samples=k,
            stop=args.stop,
            seed=seed,
            micro_batch_size=args.micro_batch_size,
            check_cancelled=ctx.check_cancelled,
        )
    else:
        generators = None if args.params.greedy else make_generators(seed, len(prompts), k)
        # rows repeating one prompt (a GRPO group) share its prefill, as a prompt's samples do; each row keeps
        # its own generator, so the tokens are those of generating the rows one by one
        unique, repeats = _repeated_prompts(prompts) if k == 1 else (prompts, k)
        rows = run_generation(
            loaded.model,
            tokenizer,
            unique,
            max_new_tokens=args.max_new_tokens,
            params=args.params,
            generators=generators,
            num_samples=repeats,
            stop=args.stop,
            micro_batch_size=args.micro_batch_size,
            device=loaded.device,
            check_cancelled=ctx.check_cancelled,
        )
    # the version of the weights sampled with, read on the compute thread: a weight update queued behind this
    # call cannot change it mid-generation, so the collector records it instead of guessing
    version = loaded.policy_version
    return _generate_outcome(batch, tokenizer, prompts, prompt_texts, expanded, rows, k, seed, version)


def _repeated_prompts(prompts: list[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
    """``(unique, m)`` when the rows are runs of ``m > 1`` equal prompts one after the other, else
    ``(prompts, 1)``."""
    n = len(prompts)
    m = 1
    while m < n and prompts[m].shape == prompts[0].shape and torch.equal(prompts[m], prompts[0]):
        m += 1
    if m == 1 or n % m != 0:
        return prompts, 1
    unique = prompts[::m]
    for start in range(0, n, m):
        first = prompts[start]
        for row in prompts[start + 1 : start + m]:
            if row.shape != first.shape or not torch.equal(row, first):
                return prompts, 1
    return unique, m


def _generate_outcome(
    batch: TensorBatch,
    tokenizer: Any,
    prompts: list[torch.Tensor],
    prompt_texts: list[str | None],
    expanded: list[torch.Tensor],
    rows: Sequence[GeneratedRow],
    k: int,
    seed: int,
    version: int,
) -> MethodOutcome:
    """The ``generate`` payload from the rows of either backend (``k`` consecutive rows per prompt).

    Built with one concatenation per column rather than per row: with a few hundred short rows the per-row
    tensor calls would cost more than the decoding loop's last steps."""
    prompt_strings = [
        text if text is not None else _decode(tokenizer, prompt)
        for prompt, text in zip(prompts, prompt_texts, strict=True)
    ]
    responses = [r.tokens for r in rows]
    decoded = tokenizer.batch_decode([r.tolist() for r in responses], skip_special_tokens=False)
    response_text = [str(t) for t in decoded] if responses else []
    prompt_text = [prompt_strings[i // k] for i in range(len(expanded))]
    prompt_len = torch.tensor([int(p.numel()) for p in expanded], dtype=torch.int64)
    full_len = prompt_len + torch.tensor([int(r.numel()) for r in responses], dtype=torch.int64)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = full_len.cumsum(0)
    total = int(offsets[-1])
    # Position of each value inside its row: the assistant mask is "at or past the prompt's length".
    row_of = torch.repeat_interleave(torch.arange(len(rows)), full_len)
    position = torch.arange(total) - offsets[:-1][row_of]
    no_log_probs = torch.zeros(int(prompt_len.max()) if len(rows) else 0, dtype=torch.float32)
    full_tokens = torch.cat(
        [t for p, r in zip(expanded, responses, strict=True) for t in (p, r)] or [torch.zeros(0)]
    )
    full_logps = torch.cat(
        [t for p, r in zip(expanded, rows, strict=True) for t in (no_log_probs[: p.numel()], r.log_probs)]
        or [torch.zeros(0)]
    )

    batch_size = (*batch.batch_size, k) if k > 1 else batch.batch_size
    columns: dict[str, Column] = {
        "tokens": {
            "prompt": ragged(expanded, torch.int64),
            "response": ragged(responses, torch.int64),
            "full": Ragged(full_tokens.to(torch.int64), offsets),
        },
        "text": {
            "prompt": prompt_text,
            "response": response_text,
            "full": [p + r for p, r in zip(prompt_text, response_text, strict=True)],
        },
        "log_probs": {
            "response": ragged([r.log_probs for r in rows], torch.float32),
            "full": Ragged(full_logps.to(torch.float32), offsets),
        },
        "masks": {
            "all_attention_mask": Ragged(torch.ones(total, dtype=torch.bool), offsets),
            "all_assistant_mask": Ragged(position >= prompt_len[row_of], offsets),
        },
        "finish_reason": [r.finish_reason for r in rows],
        "policy_version": torch.full((len(rows),), version, dtype=torch.int64).reshape(batch_size),
    }
    assert math.prod(batch_size) == len(rows)
    return MethodOutcome({"seed": seed}, [TensorBatch(batch_size, columns)])


# ---- score ---------------------------------------------------------------------------------------------


def score(store: ModelStore, ctx: CallContext, args: ScoreArgs) -> MethodOutcome:
    loaded = store.get(args.model)
    batch = single_batch(ctx)
    sequences, texts = scoring_sequences(ctx.method, loaded, batch)
    if loaded.engine is not None:
        log_probs = loaded.engine.score(
            sequences, micro_batch_size=args.micro_batch_size, check_cancelled=ctx.check_cancelled
        )
    else:
        log_probs = run_scoring(
            loaded.model,
            sequences,
            pad_id=pad_token_id(loaded.tokenizer),
            micro_batch_size=args.micro_batch_size,
            device=loaded.device,
            check_cancelled=ctx.check_cancelled,
        )
    columns: dict[str, Column] = {"log_probs": {"full": ragged(log_probs, torch.float32)}}
    if any(t is not None for t in texts):  # text came in: say which tokens the log-probs belong to
        columns["tokens"] = {"full": ragged(sequences, torch.int64)}
    return MethodOutcome({}, [TensorBatch(batch.batch_size, columns)])


# ---- registration --------------------------------------------------------------------------------------


def register_generation_methods(registry: MethodRegistry, store: ModelStore) -> None:
    def generate_handler(ctx: CallContext, args: GenerateArgs) -> MethodOutcome:
        return generate(store, ctx, args)

    def score_handler(ctx: CallContext, args: ScoreArgs) -> MethodOutcome:
        return score(store, ctx, args)

    registry.add("generate", generate_handler, thread="compute", args=GENERATE_ARGS, payloads=("tensordict",))
    registry.add("score", score_handler, thread="compute", args=SCORE_ARGS, payloads=("tensordict",))
