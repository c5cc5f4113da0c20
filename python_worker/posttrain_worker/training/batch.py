"""Reading a training batch (a decoded tensordict payload, TorchRL's keys) into padded tensors.

Keys (docs/training.md, "The training batch"):

- ``("tokens", "full")``: the sequences, ragged int64 (or dense ``[*batch, L]``), at least one token a row;
- the loss mask, by the loss's ``maskingStrategy`` (TorchRL's, ``objectives/masks.py``) over the attention
  mask (``("masks", "all_attention_mask")``, else every token): ``sft`` (the default) trains on the tokens
  after ``("tokens", "prompt")``, or on ``("masks", "all_assistant_mask")`` when the prompt is not given;
  ``rlhf`` on the assistant mask; ``generic`` on every attended token. SFT losses use the assistant mask
  when it is given, else the tokens after the prompt;
- ``("log_probs", "full")``: the behaviour policy's log-probs (ragged float), when the loss needs them;
- ``("ref_log_probs", "full")``: the reference model's log-probs, when the loss needs them and no reference
  model is configured in the worker (else they may still be sent, and are then used as they are);
- ``"advantage"``: ``[*batch]`` or ``[*batch, 1]`` (one per sequence), or per token (ragged like the tokens,
  or dense ``[*batch, T]`` with ``T`` the longest row), when the loss needs it.

Every row-level tensor comes back right-padded to ``[B, T]`` (``B`` = rows, ``T`` = the longest row), zeros on
the padding; the batch dimensions of the payload are flattened row-major.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from posttrain_worker.codec.keys import key_name, leaf_keys, lookup
from posttrain_worker.codec.rows import column_rows
from posttrain_worker.codec.types import Ragged, TensorBatch
from posttrain_worker.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.models.prompts import check_ids, check_lengths, token_rows

TOKENS = ("tokens", "full")
PROMPT = ("tokens", "prompt")
ASSISTANT_MASK = ("masks", "all_assistant_mask")
ATTENTION_MASK = ("masks", "all_attention_mask")
OLD_LOG_PROBS = ("log_probs", "full")
REF_LOG_PROBS = ("ref_log_probs", "full")
ADVANTAGE = ("advantage",)


@dataclass(frozen=True)
class Needs:
    """Which optional inputs the loss reads."""

    masking: str
    """``sft``, ``rlhf``, ``generic``, or ``sft_loss`` (the assistant mask, else the tokens after the
    prompt)."""
    old_log_probs: bool
    ref_log_probs: bool
    """The payload must carry ``("ref_log_probs", "full")`` (no reference model scores them in the worker)."""
    advantages: bool


@dataclass(frozen=True)
class TrainBatch:
    rows: list[torch.Tensor]
    """Token ids, int64 1-D CPU tensors."""
    mask: torch.Tensor
    """``[B, T]`` bool: the tokens the loss is computed on."""
    old_log_probs: torch.Tensor | None
    ref_log_probs: torch.Tensor | None
    advantages: torch.Tensor | None
    """``[B, 1]`` or ``[B, T]`` float32."""

    @property
    def lengths(self) -> list[int]:
        return [int(r.numel()) for r in self.rows]

    def with_ref(self, ref_log_probs: torch.Tensor) -> TrainBatch:
        return TrainBatch(self.rows, self.mask, self.old_log_probs, ref_log_probs, self.advantages)


def _check_lengths(
    method: str, key: tuple[str, ...], rows: Sequence[torch.Tensor], lengths: list[int]
) -> None:
    for index, (row, length) in enumerate(zip(rows, lengths, strict=True)):
        if int(row.numel()) != length:
            raise WorkerFailure(
                BAD_PAYLOAD,
                f"{method}: row {index} of {key_name(key)} has {row.numel()} values, but its sequence in "
                f"{key_name(TOKENS)} has {length} tokens",
                {"key": list(key), "row": index, "values": int(row.numel()), "tokens": length},
            )


def _pad(rows: Sequence[torch.Tensor], width: int, dtype: torch.dtype) -> torch.Tensor:
    """``[len(rows), width]`` right-padded with zeros (one C++ call, not a copy per row)."""
    out = torch.nn.utils.rnn.pad_sequence([r.to(dtype) for r in rows], batch_first=True)
    return out if out.shape[1] == width else torch.nn.functional.pad(out, (0, width - out.shape[1]))


def _attention(lengths: list[int]) -> torch.Tensor:
    """``[B, max(lengths)]`` bool: true on each row's first ``length`` columns."""
    counts = torch.tensor(lengths, dtype=torch.int64)
    return torch.arange(max(lengths)).unsqueeze(0) < counts.unsqueeze(1)


def _float_rows(method: str, key: tuple[str, ...], batch: TensorBatch, lengths: list[int]) -> torch.Tensor:
    column = lookup(batch, key)
    assert column is not None
    rows = column_rows(method, key, column, batch)
    if rows and not rows[0].dtype.is_floating_point:
        raise WorkerFailure(BAD_PAYLOAD, f"{method}: {key_name(key)} must hold floats, got {rows[0].dtype}")
    _check_lengths(method, key, rows, lengths)
    return _pad(rows, max(lengths), torch.float32)


def _token_rows(
    method: str, batch: TensorBatch, vocab_size: int, max_positions: int | None
) -> list[torch.Tensor]:
    column = lookup(batch, TOKENS)
    assert column is not None
    rows = token_rows(method, TOKENS, column, batch)
    for index, row in enumerate(rows):
        if row.numel() == 0:
            raise WorkerFailure(BAD_ARGUMENTS, f"{method}: row {index} has no tokens", {"row": index})
    check_lengths(method, rows, max_positions)
    check_ids(method, rows, vocab_size)
    return rows


def _loss_mask(method: str, batch: TensorBatch, lengths: list[int], masking: str) -> torch.Tensor:
    from posttrain_worker.objectives.masks import loss_mask

    width = max(lengths)
    attention = _attention(lengths)
    given = lookup(batch, ATTENTION_MASK)
    if given is not None:
        rows = column_rows(method, ATTENTION_MASK, given, batch)
        _check_lengths(method, ATTENTION_MASK, rows, lengths)
        attention &= _pad([r != 0 for r in rows], width, torch.bool)
    assistant: torch.Tensor | None = None
    column = lookup(batch, ASSISTANT_MASK)
    if column is not None:
        rows = column_rows(method, ASSISTANT_MASK, column, batch)
        _check_lengths(method, ASSISTANT_MASK, rows, lengths)
        assistant = _pad([r != 0 for r in rows], width, torch.bool)
    prompt_lengths: torch.Tensor | None = None
    prompt = lookup(batch, PROMPT)
    if prompt is not None and not (masking == "sft_loss" and assistant is not None):
        counts = [int(r.numel()) for r in column_rows(method, PROMPT, prompt, batch)]
        for index, (start, end) in enumerate(zip(counts, lengths, strict=True)):
            if start > end:
                raise WorkerFailure(
                    BAD_PAYLOAD,
                    f"{method}: row {index} has a prompt of {start} tokens in {key_name(PROMPT)}, "
                    f"longer than its full sequence ({end} tokens)",
                    {"row": index},
                )
        prompt_lengths = torch.tensor(counts, dtype=torch.int64)
    strategy = "sft" if masking == "sft_loss" else masking
    return loss_mask(
        strategy, attention_mask=attention, assistant_mask=assistant, prompt_lengths=prompt_lengths
    )


def _advantages(method: str, batch: TensorBatch, lengths: list[int]) -> torch.Tensor:
    column = lookup(batch, ADVANTAGE)
    width = max(lengths)
    b = len(lengths)
    if isinstance(column, Ragged):
        if not column.values.dtype.is_floating_point:
            raise WorkerFailure(BAD_PAYLOAD, f"{method}: {key_name(ADVANTAGE)} must hold floats")
        rows = column_rows(method, ADVANTAGE, column, batch)
        _check_lengths(method, ADVANTAGE, rows, lengths)
        return _pad(rows, width, torch.float32)
    if isinstance(column, torch.Tensor) and column.dtype.is_floating_point:
        rest = tuple(column.shape[len(batch.batch_size) :])
        if rest in ((), (1,)):
            return column.reshape(b, 1).to("cpu", torch.float32)
        if rest == (width,):
            return column.reshape(b, width).to("cpu", torch.float32)
        shape = list(column.shape)
    elif isinstance(column, torch.Tensor):
        raise WorkerFailure(
            BAD_PAYLOAD, f"{method}: {key_name(ADVANTAGE)} must hold floats, got {column.dtype}"
        )
    else:
        raise WorkerFailure(BAD_PAYLOAD, f"{method}: {key_name(ADVANTAGE)} must be a tensor")
    dims = list(batch.batch_size)
    raise WorkerFailure(
        BAD_PAYLOAD,
        f"{method}: {key_name(ADVANTAGE)} has shape {shape}, which does not broadcast to the tokens: "
        f"expected {dims} or {[*dims, 1]} (one per sequence), {[*dims, width]} (per token, {width} = the "
        "longest row) or ragged rows as long as the sequences",
        {"shape": shape, "batchSize": dims, "longestRow": width},
    )


def missing_keys(batch: TensorBatch, needs: Needs) -> list[str]:
    """Every required key the payload lacks (alternatives joined with "or")."""
    missing: list[tuple[tuple[str, ...], ...]] = []
    if lookup(batch, TOKENS) is None:
        missing.append((TOKENS,))
    has_assistant = lookup(batch, ASSISTANT_MASK) is not None
    if needs.masking == "rlhf" and not has_assistant:
        missing.append((ASSISTANT_MASK,))
    if needs.masking in ("sft", "sft_loss") and not has_assistant and lookup(batch, PROMPT) is None:
        missing.append((ASSISTANT_MASK, PROMPT))
    if needs.old_log_probs and lookup(batch, OLD_LOG_PROBS) is None:
        missing.append((OLD_LOG_PROBS,))
    if needs.ref_log_probs and lookup(batch, REF_LOG_PROBS) is None:
        missing.append((REF_LOG_PROBS,))
    if needs.advantages and lookup(batch, ADVANTAGE) is None:
        missing.append((ADVANTAGE,))
    return [" or ".join(key_name(k) for k in keys) for keys in missing]


def read_train_batch(
    method: str, batch: TensorBatch, needs: Needs, *, vocab_size: int, max_positions: int | None
) -> TrainBatch:
    """The padded batch, or ``BAD_PAYLOAD`` listing every missing key / ``BAD_ARGUMENTS`` for bad values."""
    missing = missing_keys(batch, needs)
    if missing:
        present = leaf_keys(batch.columns)
        raise WorkerFailure(
            BAD_PAYLOAD,
            f"{method}: the batch is missing {len(missing)} key(s): {'; '.join(missing)}; "
            f"present keys: {', '.join(present) or 'none'}",
            {"missing": missing, "present": present},
        )
    if batch.rows == 0:
        raise WorkerFailure(BAD_ARGUMENTS, f"{method}: the batch has no rows")
    rows = _token_rows(method, batch, vocab_size, max_positions)
    lengths = [int(r.numel()) for r in rows]
    mask = _loss_mask(method, batch, lengths, needs.masking)
    if not bool(mask.any()):
        raise WorkerFailure(BAD_PAYLOAD, f"{method}: the loss mask selects no token in the whole batch")
    old = (
        _float_rows(method, OLD_LOG_PROBS, batch, lengths)
        if lookup(batch, OLD_LOG_PROBS) is not None
        else None
    )
    ref = (
        _float_rows(method, REF_LOG_PROBS, batch, lengths)
        if lookup(batch, REF_LOG_PROBS) is not None
        else None
    )
    advantages = _advantages(method, batch, lengths) if lookup(batch, ADVANTAGE) is not None else None
    return TrainBatch(rows, mask, old, ref, advantages)
