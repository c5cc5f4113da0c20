"""A model's input as token ids, read from a payload: the prompts of generation and the sequences of scoring.

Prompts come from ``("tokens", "prompt")`` (ragged ids), else ``("text", "prompt")`` (tokenized here without
special tokens), else ``("history", "prompt")`` (rendered with the model's chat template and its generation
prompt); full sequences from ``("tokens", "full")`` or ``("text", "full")``. Every row is checked against the
model (ids inside its vocabulary, lengths within its context) and a mistake is a typed failure naming the row.

Usage::

    prompts, texts = generation_prompts("generate", loaded, batch, max_new_tokens=64, truncate="error")
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain_worker.codec.keys import key_name, lookup, missing_key
from posttrain_worker.codec.rows import column_rows
from posttrain_worker.codec.types import Column, Ragged, TensorBatch
from posttrain_worker.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.models.chat import render_rows
from posttrain_worker.models.store import LoadedModel

PROMPT_KEYS = (("tokens", "prompt"), ("text", "prompt"))
HISTORY_PROMPT = ("history", "prompt")
FULL_KEYS = (("tokens", "full"), ("text", "full"))


def token_rows(method: str, key: tuple[str, ...], column: Column, batch: TensorBatch) -> list[torch.Tensor]:
    """The rows of an integer ragged (or dense ``[*batch, L]``) column as int64 CPU tensors."""
    values = column.values if isinstance(column, Ragged) else column
    dtype = values.dtype if isinstance(values, torch.Tensor) else None
    if dtype is not None and (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        raise WorkerFailure(
            BAD_PAYLOAD, f"{method}: {key_name(key)} must hold integer token ids, got {dtype}"
        )
    return column_rows(method, key, column, batch, torch.int64)


def check_ids(method: str, rows: Sequence[torch.Tensor], vocab: int) -> None:
    """Every id in ``[0, vocab)``, or ``BAD_ARGUMENTS`` naming the first row and id outside it."""
    if not rows:
        return
    # One check over all the ids; the row is looked for only when one is out of range.
    flat = torch.cat(list(rows))
    if not bool(((flat < 0) | (flat >= vocab)).any()):
        return
    for index, row in enumerate(rows):
        bad = (row < 0) | (row >= vocab)
        if bool(bad.any()):
            token = int(row[int(torch.nonzero(bad)[0])])
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"{method}: row {index} holds token id {token}, outside the model's vocabulary [0, {vocab})",
                {"row": index, "tokenId": token, "vocabSize": vocab},
            )


def check_lengths(method: str, rows: Sequence[torch.Tensor], context: int | None) -> None:
    """Every row within the model's context (``None``: unknown, no limit), or ``BAD_ARGUMENTS`` naming the
    first longer row."""
    if context is None:
        return
    for index, row in enumerate(rows):
        if row.numel() > context:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"{method}: row {index} has {row.numel()} tokens, more than the model's "
                f"maxPositionEmbeddings ({context})",
                {"row": index, "length": int(row.numel()), "limit": context},
            )


def vocab_size(loaded: LoadedModel) -> int:
    if loaded.engine is not None:
        return loaded.engine.vocab_size
    return int(loaded.model.get_input_embeddings().weight.shape[0])


def max_positions(loaded: LoadedModel) -> int | None:
    """The model's context length, or ``None`` when its config does not say."""
    if loaded.engine is not None:
        return loaded.engine.max_model_len
    value = getattr(loaded.model.config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def tokens_or_text(
    method: str, loaded: LoadedModel, batch: TensorBatch, keys: tuple[tuple[str, ...], tuple[str, ...]]
) -> tuple[list[torch.Tensor], list[str | None]]:
    """Token rows from ``keys[0]`` (ragged ids) or else from ``keys[1]`` (strings, tokenized here without
    special tokens); the strings are returned too (``None`` where tokens came in)."""
    tokens = lookup(batch, keys[0])
    texts = lookup(batch, keys[1])
    if tokens is not None:
        rows = token_rows(method, keys[0], tokens, batch)
        return rows, [None] * len(rows)
    if texts is None:
        raise missing_key(method, batch, keys)
    if not isinstance(texts, list):
        raise WorkerFailure(BAD_PAYLOAD, f"{method}: {key_name(keys[1])} must be a string column")
    encoded = loaded.tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    return [torch.tensor(ids, dtype=torch.int64) for ids in encoded], list(texts)


def generation_prompts(
    method: str, loaded: LoadedModel, batch: TensorBatch, *, max_new_tokens: int, truncate: str
) -> tuple[list[torch.Tensor], list[str | None]]:
    """The prompt token rows, and for text or history input the prompt strings (``None`` where tokens came
    in). Conversations (``("history", "prompt")``, read when neither tokens nor text are given) are rendered
    with the model's chat template and its generation prompt, as ``apply_chat_template`` renders them.

    A prompt longer than the context leaves room for ``max_new_tokens`` is ``BAD_ARGUMENTS`` with
    ``truncate="error"``, and keeps its last tokens with ``truncate="left"`` (its string is then ``None``)."""
    history = lookup(batch, HISTORY_PROMPT)
    if history is not None and all(lookup(batch, key) is None for key in PROMPT_KEYS):
        rendered = render_rows(
            method,
            loaded,
            HISTORY_PROMPT,
            history,
            add_generation_prompt=True,
            continue_final=False,
            masks=False,  # generation needs no assistant mask
        )
        rows: list[torch.Tensor] = [r.tokens for r in rendered]
        strings: list[str | None] = [r.text for r in rendered]
    elif all(lookup(batch, key) is None for key in PROMPT_KEYS):
        raise missing_key(method, batch, (*PROMPT_KEYS, HISTORY_PROMPT))
    else:
        rows, strings = tokens_or_text(method, loaded, batch, PROMPT_KEYS)
    for index, row in enumerate(rows):
        if row.numel() == 0:
            raise WorkerFailure(
                BAD_ARGUMENTS, f"{method}: the prompt of row {index} is empty (0 tokens)", {"row": index}
            )
    check_ids(method, rows, vocab_size(loaded))

    context = max_positions(loaded)
    if context is not None:
        limit = context - max_new_tokens
        if limit < 1:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f'{method}: "maxNewTokens" ({max_new_tokens}) leaves no room for a prompt: '
                f"the model {loaded.name!r} has maxPositionEmbeddings {context}",
            )
        for index, row in enumerate(rows):
            if row.numel() <= limit:
                continue
            if truncate == "error":
                raise WorkerFailure(
                    BAD_ARGUMENTS,
                    f"{method}: the prompt of row {index} has {row.numel()} tokens, more than the "
                    f"limit of {limit} (maxPositionEmbeddings {context} - maxNewTokens "
                    f"{max_new_tokens}); "
                    'pass truncate: "left" to keep its last tokens',
                    {"row": index, "length": int(row.numel()), "limit": limit},
                )
            rows[index] = row[-limit:]
            strings[index] = None  # the text is re-decoded from the tokens the model saw
    return rows, strings


def scoring_sequences(
    method: str, loaded: LoadedModel, batch: TensorBatch
) -> tuple[list[torch.Tensor], list[str | None]]:
    """The full sequences to score as token rows (from ``FULL_KEYS``), with their strings where text came in;
    every id inside the vocabulary and every row within the model's context, or ``BAD_ARGUMENTS``."""
    sequences, texts = tokens_or_text(method, loaded, batch, FULL_KEYS)
    check_ids(method, sequences, vocab_size(loaded))
    check_lengths(method, sequences, max_positions(loaded))
    return sequences, texts
