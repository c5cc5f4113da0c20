"""``generate`` and ``score`` on a model of the store (docs/models.md, "Generation and scoring in the
worker").

Payload keys follow TorchRL's LLM wrappers. Generation reads ``("tokens", "prompt")``,
``("text", "prompt")`` or ``("history", "prompt")`` (rendered with the model's chat template) and writes
``tokens`` and ``text`` (``prompt``, ``response``, ``full``), ``log_probs`` (``response``, ``full``),
``masks`` (``all_attention_mask``, ``all_assistant_mask``) and ``finish_reason``. Scoring reads
``("tokens", "full")`` (or ``("text", "full")``, tokenized here and echoed as
``("tokens", "full")``) and writes ``("log_probs", "full")``.

Both backends go through here: argument checks, prompt checks and the output payload are shared, and only the
token generation and the teacher-forced log-probs come from the transformers decoding loop or, for a model
loaded with ``backend: "vllm"``, from its :class:`~posttrain_worker.models.vllm_engine.VllmEngine`.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.types import Column, Ragged, TensorBatch
from posttrain_worker.methods.chat import render_rows
from posttrain_worker.methods.payload_keys import key_name, lookup, missing_key, ragged, single_batch
from posttrain_worker.models.generation import GeneratedRow, pad_token_id
from posttrain_worker.models.generation import generate as run_generation
from posttrain_worker.models.sampling import SamplingParams, make_generators
from posttrain_worker.models.scoring import score as run_scoring
from posttrain_worker.models.store import LoadedModel, ModelStore
from posttrain_worker.protocol.args import ArgReader
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
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


def _model_name(reader: ArgReader) -> str:
    name = reader.string("model")
    assert name is not None
    if not name:
        raise reader.fail('"model" must be a non-empty string')
    return name


def parse_generate(method: str, args: dict[str, Any]) -> GenerateArgs:
    reader = ArgReader(method, args)
    model = _model_name(reader)
    max_new_tokens = reader.integer("maxNewTokens", minimum=1)
    temperature = reader.number("temperature", required=False, default=1.0, minimum=0)
    top_p = reader.number("topP", required=False, default=1.0, maximum=1)
    top_k = reader.integer("topK", required=False, default=0, minimum=0)
    penalty = reader.number("repetitionPenalty", required=False, default=1.0)
    stop = reader.strings("stop", required=False, default=[])
    seed = reader.integer("seed", required=False, default=None, minimum=0, maximum=MAX_SEED, nullable=True)
    num_samples = reader.integer("numSamples", required=False, default=1, minimum=1)
    micro = reader.integer("microBatchSize", required=False, default=None, minimum=1, nullable=True)
    truncate = reader.choice("truncate", TRUNCATE_MODES, required=False, default="error")
    reader.finish()
    assert max_new_tokens is not None and temperature is not None and top_p is not None
    assert top_k is not None and penalty is not None and stop is not None and num_samples is not None
    assert truncate is not None
    if top_p <= 0:
        raise reader.fail(f'"topP" must be in (0, 1], got {top_p:g}')
    if penalty <= 0:
        raise reader.fail(f'"repetitionPenalty" must be > 0, got {penalty:g}')
    for index, item in enumerate(stop):
        if not item:
            raise reader.fail(f'"stop[{index}]" must be a non-empty string')
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, repetition_penalty=penalty)
    return GenerateArgs(model, max_new_tokens, params, tuple(stop), seed, num_samples, micro, truncate)


def parse_score(method: str, args: dict[str, Any]) -> ScoreArgs:
    reader = ArgReader(method, args)
    model = _model_name(reader)
    micro = reader.integer("microBatchSize", required=False, default=None, minimum=1, nullable=True)
    reader.finish()
    return ScoreArgs(model, micro)


# ---- payload reading -----------------------------------------------------------------------------------


def _token_rows(method: str, key: tuple[str, ...], column: Column, batch: TensorBatch) -> list[torch.Tensor]:
    """The rows of an integer ragged (or dense ``[*batch, L]``) column as int64 CPU tensors."""
    rows = batch.rows
    if isinstance(column, Ragged):
        values = column.values
        if values.dim() != 1:
            raise WorkerFailure(
                BAD_PAYLOAD,
                f"{method}: {key_name(key)} must hold one token id per item, got rows of shape "
                f"[-1, {', '.join(str(d) for d in values.shape[1:])}]",
            )
    elif isinstance(column, torch.Tensor) and column.dim() == len(batch.batch_size) + 1:
        values = column
    else:
        raise WorkerFailure(
            BAD_PAYLOAD, f"{method}: {key_name(key)} must be a ragged (or [batch, length]) integer tensor"
        )
    if not _is_integer(values.dtype):
        raise WorkerFailure(
            BAD_PAYLOAD, f"{method}: {key_name(key)} must hold integer token ids, got {values.dtype}"
        )
    if isinstance(column, Ragged):
        bounds = column.offsets.to(torch.int64).tolist()
        flat = values.to("cpu", torch.int64)
        return [flat[bounds[i] : bounds[i + 1]] for i in range(rows)]
    return list(values.reshape(rows, values.shape[-1]).to("cpu", torch.int64).unbind(0))


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _check_ids(method: str, rows: Sequence[torch.Tensor], vocab: int) -> None:
    for index, row in enumerate(rows):
        if row.numel() == 0:
            continue
        bad = (row < 0) | (row >= vocab)
        if bool(bad.any()):
            token = int(row[int(torch.nonzero(bad)[0])])
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"{method}: row {index} holds token id {token}, outside the model's vocabulary [0, {vocab})",
                {"row": index, "tokenId": token, "vocabSize": vocab},
            )


def _vocab_size(loaded: LoadedModel) -> int:
    if loaded.engine is not None:
        return loaded.engine.vocab_size
    return int(loaded.model.get_input_embeddings().weight.shape[0])


def _max_positions(loaded: LoadedModel) -> int | None:
    if loaded.engine is not None:
        return loaded.engine.max_model_len
    value = getattr(loaded.model.config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def _decode(tokenizer: Any, ids: torch.Tensor) -> str:
    return str(tokenizer.decode(ids.tolist(), skip_special_tokens=False))


def _tokens_or_text(
    method: str, loaded: LoadedModel, batch: TensorBatch, keys: tuple[tuple[str, ...], tuple[str, ...]]
) -> tuple[list[torch.Tensor], list[str | None]]:
    """Token rows from ``keys[0]`` (ragged ids) or else from ``keys[1]`` (strings, tokenized here without
    special tokens); the strings are returned too (``None`` where tokens came in)."""
    tokens = lookup(batch, keys[0])
    texts = lookup(batch, keys[1])
    if tokens is not None:
        rows = _token_rows(method, keys[0], tokens, batch)
        return rows, [None] * len(rows)
    if texts is None:
        raise missing_key(method, batch, keys)
    if not isinstance(texts, list):
        raise WorkerFailure(BAD_PAYLOAD, f"{method}: {key_name(keys[1])} must be a string column")
    encoded = loaded.tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    return [torch.tensor(ids, dtype=torch.int64) for ids in encoded], list(texts)


# ---- generate ------------------------------------------------------------------------------------------

PROMPT_KEYS = (("tokens", "prompt"), ("text", "prompt"))
HISTORY_PROMPT = ("history", "prompt")


def _prompts(
    ctx: CallContext, args: GenerateArgs, loaded: LoadedModel, batch: TensorBatch
) -> tuple[list[torch.Tensor], list[str | None]]:
    """The prompt token rows, and for text or history input the prompt strings (``None`` where tokens came
    in). Conversations (``("history", "prompt")``, read when neither tokens nor text are given) are rendered
    with the model's chat template and its generation prompt, as ``apply_chat_template`` renders them."""
    history = lookup(batch, HISTORY_PROMPT)
    if history is not None and all(lookup(batch, key) is None for key in PROMPT_KEYS):
        rendered = render_rows(
            ctx.method, loaded, HISTORY_PROMPT, history, add_generation_prompt=True, continue_final=False
        )
        rows: list[torch.Tensor] = [r.tokens for r in rendered]
        strings: list[str | None] = [r.text for r in rendered]
    elif all(lookup(batch, key) is None for key in PROMPT_KEYS):
        raise missing_key(ctx.method, batch, (*PROMPT_KEYS, HISTORY_PROMPT))
    else:
        rows, strings = _tokens_or_text(ctx.method, loaded, batch, PROMPT_KEYS)
    for index, row in enumerate(rows):
        if row.numel() == 0:
            raise WorkerFailure(
                BAD_ARGUMENTS, f"{ctx.method}: the prompt of row {index} is empty (0 tokens)", {"row": index}
            )
    _check_ids(ctx.method, rows, _vocab_size(loaded))

    max_positions = _max_positions(loaded)
    if max_positions is not None:
        limit = max_positions - args.max_new_tokens
        if limit < 1:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f'{ctx.method}: "maxNewTokens" ({args.max_new_tokens}) leaves no room for a prompt: '
                f"the model {args.model!r} has maxPositionEmbeddings {max_positions}",
            )
        for index, row in enumerate(rows):
            if row.numel() <= limit:
                continue
            if args.truncate == "error":
                raise WorkerFailure(
                    BAD_ARGUMENTS,
                    f"{ctx.method}: the prompt of row {index} has {row.numel()} tokens, more than the "
                    f"limit of {limit} (maxPositionEmbeddings {max_positions} - maxNewTokens "
                    f"{args.max_new_tokens}); "
                    'pass truncate: "left" to keep its last tokens',
                    {"row": index, "length": int(row.numel()), "limit": limit},
                )
            rows[index] = row[-limit:]
            strings[index] = None  # the text is re-decoded from the tokens the model saw
    return rows, strings


def generate(store: ModelStore, ctx: CallContext, args: GenerateArgs) -> MethodOutcome:
    loaded = store.get(args.model)
    batch = single_batch(ctx)
    prompts, prompt_texts = _prompts(ctx, args, loaded, batch)
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
        rows = run_generation(
            loaded.model,
            tokenizer,
            prompts,
            max_new_tokens=args.max_new_tokens,
            params=args.params,
            generators=generators,
            num_samples=k,
            stop=args.stop,
            micro_batch_size=args.micro_batch_size,
            device=loaded.device,
            check_cancelled=ctx.check_cancelled,
        )
    return _generate_outcome(batch, tokenizer, prompts, prompt_texts, expanded, rows, k, seed)


def _generate_outcome(
    batch: TensorBatch,
    tokenizer: Any,
    prompts: list[torch.Tensor],
    prompt_texts: list[str | None],
    expanded: list[torch.Tensor],
    rows: Sequence[GeneratedRow],
    k: int,
    seed: int,
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
    }
    assert math.prod(batch_size) == len(rows)
    return MethodOutcome({"seed": seed}, [TensorBatch(batch_size, columns)])


# ---- score ---------------------------------------------------------------------------------------------

FULL_KEYS = (("tokens", "full"), ("text", "full"))


def score(store: ModelStore, ctx: CallContext, args: ScoreArgs) -> MethodOutcome:
    loaded = store.get(args.model)
    batch = single_batch(ctx)
    sequences, texts = _tokens_or_text(ctx.method, loaded, batch, FULL_KEYS)
    _check_ids(ctx.method, sequences, _vocab_size(loaded))
    max_positions = _max_positions(loaded)
    if max_positions is not None:
        for index, seq in enumerate(sequences):
            if seq.numel() > max_positions:
                raise WorkerFailure(
                    BAD_ARGUMENTS,
                    f"{ctx.method}: row {index} has {seq.numel()} tokens, more than the model's "
                    f"maxPositionEmbeddings ({max_positions})",
                    {"row": index, "length": int(seq.numel()), "limit": max_positions},
                )
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

    registry.add(
        "generate", generate_handler, thread="compute", parse_args=parse_generate, payloads=("tensordict",)
    )
    registry.add("score", score_handler, thread="compute", parse_args=parse_score, payloads=("tensordict",))
