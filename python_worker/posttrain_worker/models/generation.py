"""Autoregressive generation with a Hugging Face causal LM: our own decoding loop over the model's forward
and its KV cache (``use_cache`` / ``past_key_values``), so that per-token log-probabilities, per-row seeds and
stop strings are under our control.

Conventions (docs/models.md, "Generation and scoring in the worker"):

- Each micro-batch is left-padded; the attention mask hides the padding and position ids count real tokens
  only, so a row's result does not depend on which rows share its forward (up to float rounding).
- The log-probability of a generated token is ``log_softmax`` of the model's raw logits (float32) at that
  step, whatever temperature / top-k / top-p / repetition penalty chose it (as TorchRL and vLLM report).
- A row ends on the first of: an eos token (``"eos"``, the token is kept in the response), a stop string
  appearing in the decoded response (``"stop"``, the response ends with the token that completed it), or
  ``max_new_tokens`` tokens (``"length"``). Finished rows leave the batch (their cache rows are dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.models.sampling import SamplingParams, choose, draw_uniforms


@dataclass
class GeneratedRow:
    tokens: torch.Tensor
    """The response token ids (int64, on the CPU), eos included when the row ended on it."""
    log_probs: torch.Tensor
    """float32, one per response token: log p(token | prompt, earlier response tokens) under the raw model."""
    finish_reason: str
    """``"eos"``, ``"stop"`` or ``"length"``."""


class StopStrings:
    """Detects the first stop string in a growing response by decoding the response's recent tokens."""

    def __init__(self, tokenizer: Any, stop: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        longest = max((len(s) for s in self.stop), default=0)
        # A stop string not seen before the newest token ends within its last ``longest`` characters; a token
        # decodes to at least one character once its UTF-8 bytes are complete (at most 4 bytes per character),
        # so this many trailing tokens always cover it.
        self.window = 4 * longest + 8

    def __bool__(self) -> bool:
        return bool(self.stop)

    def hit(self, tokens: Sequence[int]) -> bool:
        """True when the decoded ``tokens`` contain a stop string (checked after every new token)."""
        tail = tokens[-self.window :] if len(tokens) > self.window else tokens
        text = self.tokenizer.decode(list(tail), skip_special_tokens=False)
        return any(s in text for s in self.stop)


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The model's ``generation_config.eos_token_id`` (an int or a list) and the tokenizer's eos token."""
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    value = getattr(config, "eos_token_id", None) if config is not None else None
    if isinstance(value, int):
        ids.add(value)
    elif isinstance(value, (list, tuple)):
        ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def pad_token_id(tokenizer: Any) -> int:
    """Any id pads (the attention mask hides it): the tokenizer's pad token, else its eos, else 0."""
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return 0


def cache_rows_copyable(cache: Any) -> bool:
    """Whether rows of this cache may be selected, dropped or repeated (plain dynamic caches)."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - transformers is required by the model store anyway
        return False
    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, DynamicCache)
        and layers is not None
        and all(isinstance(layer, DynamicLayer) for layer in layers)
    )


def forward_with_cache(model: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """The model's forward keeping its KV cache: ``(float32 logits of the last position, cache)``."""
    out = model(**kwargs, use_cache=True, return_dict=True)
    return out.logits[:, -1, :].float(), out.past_key_values


def left_padded(
    prompts: Sequence[torch.Tensor], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention, positions, lengths)`` of left-padded prompts."""
    n = len(prompts)
    lengths = torch.tensor([int(p.numel()) for p in prompts], dtype=torch.int64)
    width = int(lengths.max())
    input_ids = torch.full((n, width), pad_id, dtype=torch.int64)
    attention = torch.zeros((n, width), dtype=torch.int64)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - prompt.numel() :] = prompt
        attention[i, width - prompt.numel() :] = 1
    input_ids = input_ids.to(device)
    attention = attention.to(device)
    positions = (attention.cumsum(dim=-1) - 1).clamp(min=0)
    return input_ids, attention, positions, lengths


def _prefill(
    model: Any, prompts: Sequence[torch.Tensor], repeats: int, pad_id: int, device: torch.device
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompts' forward: ``(last logits, cache, input_ids, attention, lengths)`` for ``len(prompts) *
    repeats`` rows, each prompt's rows consecutive. A prompt repeated ``repeats`` times (a GRPO group) is run
    once and its cache copied, which spares ``repeats - 1`` prefills of it; caches that cannot be copied
    row-wise get the repeated prompts run as they are."""
    input_ids, attention, positions, lengths = left_padded(prompts, pad_id, device)
    logits, cache = forward_with_cache(
        model, input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=1
    )
    if repeats == 1:
        return logits, cache, input_ids, attention, lengths
    if not cache_rows_copyable(cache):
        expanded = [p for p in prompts for _ in range(repeats)]
        return _prefill(model, expanded, 1, pad_id, device)
    cache.batch_repeat_interleave(repeats)
    return (
        logits.repeat_interleave(repeats, dim=0),
        cache,
        input_ids.repeat_interleave(repeats, dim=0),
        attention.repeat_interleave(repeats, dim=0),
        lengths.repeat_interleave(repeats, dim=0),
    )


class PendingLogProbs:
    """The log-probabilities of the picked tokens, computed a few steps at a time rather than at every step.

    ``log_softmax`` works row by row (a row's values do not depend on the rows beside it), so one call over
    the logits of several steps gives the same bits as one call per step, for a fraction of the per-call cost
    that dominates the decoding loop of a small model. The pending logits are bounded (``budget`` floats), so
    a large vocabulary flushes every few steps."""

    def __init__(self, out: list[list[float]], budget: int = 1 << 22) -> None:
        self.out = out
        self.budget = budget
        self.logits: list[torch.Tensor] = []
        self.picked: list[torch.Tensor] = []
        self.rows: list[int] = []  # the output row of each pending logits row, in order
        self.size = 0

    def add(self, logits: torch.Tensor, picked: torch.Tensor, rows: Sequence[int]) -> None:
        """One step: ``logits[i]`` chose ``picked[i]`` for output row ``rows[i]``."""
        self.logits.append(logits)
        self.picked.append(picked)
        self.rows.extend(rows)
        self.size += logits.numel()
        if self.size >= self.budget:
            self.flush()

    def flush(self) -> None:
        if not self.logits:
            return
        logits = self.logits[0] if len(self.logits) == 1 else torch.cat(self.logits)
        picked = self.picked[0] if len(self.picked) == 1 else torch.cat(self.picked)
        logps = torch.log_softmax(logits, dim=-1).gather(-1, picked.unsqueeze(-1)).squeeze(-1)
        out = self.out
        for r, logp in zip(self.rows, logps.cpu().tolist(), strict=True):
            out[r].append(logp)
        self.logits, self.picked, self.rows, self.size = [], [], [], 0


def generate_batch(
    model: Any,
    prompts: Sequence[torch.Tensor],
    *,
    max_new_tokens: int,
    params: SamplingParams,
    generators: Sequence[torch.Generator] | None,
    eos_ids: set[int],
    pad_id: int,
    stop: StopStrings,
    device: torch.device,
    repeats: int = 1,
    check_cancelled: Callable[[], None] = lambda: None,
) -> list[GeneratedRow]:
    """Generate for one micro-batch of non-empty prompts (int64 1-D CPU tensors), all rows in one forward:
    ``repeats`` rows per prompt (consecutive), ``generators[i]`` for row ``i``."""
    n = len(prompts) * repeats
    check_cancelled()
    logits, cache, input_ids, attention, lengths = _prefill(model, prompts, repeats, pad_id, device)
    prune = cache_rows_copyable(cache)
    vocab = int(logits.shape[-1])
    seen: torch.Tensor | None = None  # per row, the tokens already in it (for the repetition penalty)
    if params.repetition_penalty != 1.0:
        counts = torch.zeros((n, vocab), dtype=torch.int64, device=device)
        seen = counts.scatter_add_(1, input_ids.clamp(max=vocab - 1), attention) > 0

    out_tokens: list[list[int]] = [[] for _ in range(n)]
    out_logps: list[list[float]] = [[] for _ in range(n)]
    pending = PendingLogProbs(out_logps)
    reasons: list[str | None] = [None] * n
    batch_rows = list(range(n))  # prompt index of each row of ``logits`` and of the cache
    live = [True] * n  # per batch row: still generating (always all true when finished rows are pruned)
    all_live = True
    next_pos = lengths.to(device)  # position id of the next token of each batch row
    # Every token after the prompt is attended to: the mask is the prompt's followed by ones, allocated once
    # and passed as a growing view. Without padding it is all ones, which the model reads as no mask at all:
    # it is then not passed (the same attention, without building and checking a mask at every step).
    width = int(attention.shape[1])
    padded = bool((lengths != width).any())
    mask = torch.ones((n, width + max_new_tokens), dtype=attention.dtype, device=device)
    mask[:, :width] = attention
    stop_hit = stop.hit if stop else None
    check_eos = bool(eos_ids)

    # Row r's uniform at step t is the t-th number of generators[r], drawn up front in one call per row.
    uniforms = draw_uniforms(generators, max_new_tokens) if generators is not None else None
    for step in range(max_new_tokens):
        check_cancelled()
        if all_live:
            live_rows = range(len(batch_rows))
            rows_now = batch_rows
            sub_logits, sub_seen = logits, seen
        else:
            live_rows = [b for b, alive in enumerate(live) if alive]
            rows_now = [batch_rows[b] for b in live_rows]
            index = torch.tensor(live_rows, dtype=torch.int64, device=device)
            sub_logits = logits[index]
            sub_seen = seen[index] if seen is not None else None
        row_uniforms = None
        if uniforms is not None:
            row_uniforms = uniforms[torch.tensor(rows_now, dtype=torch.int64), step]
        picked_live = choose(sub_logits, sub_seen, params, row_uniforms)
        pending.add(sub_logits, picked_live, rows_now)
        picked_cpu = picked_live.cpu().tolist()

        last = step + 1 >= max_new_tokens
        still: list[int] = []  # batch rows that keep generating
        for b, r, token in zip(live_rows, rows_now, picked_cpu, strict=True):
            tokens = out_tokens[r]
            tokens.append(token)
            if check_eos and token in eos_ids:
                reasons[r] = "eos"
            elif stop_hit is not None and stop_hit(tokens):
                reasons[r] = "stop"
            elif last:
                reasons[r] = "length"
            else:
                still.append(b)
        if not still:
            break

        if all_live:
            picked = picked_live
        else:  # finished rows (kept only when the cache cannot drop them) are fed the pad token
            picked = torch.full((len(batch_rows),), pad_id, dtype=torch.int64, device=device)
            picked[index] = picked_live
        if len(still) < len(batch_rows):
            if prune:
                keep = torch.tensor(still, dtype=torch.int64, device=device)
                cache.batch_select_indices(keep)
                mask = mask[keep]
                next_pos = next_pos[keep]
                picked = picked[keep]
                if seen is not None:
                    seen = seen[keep]
                batch_rows = [batch_rows[b] for b in still]
                live = [True] * len(batch_rows)
            else:
                kept = set(still)
                live = [b in kept for b in range(len(batch_rows))]
                all_live = False
        if seen is not None:
            seen.scatter_(1, picked.clamp(max=vocab - 1).unsqueeze(-1), True)

        logits, cache = forward_with_cache(
            model,
            input_ids=picked.unsqueeze(-1),
            attention_mask=mask[:, : width + step + 1] if padded else None,
            position_ids=next_pos.unsqueeze(-1),
            past_key_values=cache,
        )
        next_pos = next_pos + 1

    pending.flush()
    return [
        GeneratedRow(
            torch.tensor(out_tokens[r], dtype=torch.int64),
            torch.tensor(out_logps[r], dtype=torch.float32),
            reasons[r] or "length",
        )
        for r in range(n)
    ]


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[torch.Tensor],
    *,
    max_new_tokens: int,
    params: SamplingParams,
    generators: Sequence[torch.Generator] | None,
    num_samples: int = 1,
    stop: Sequence[str] = (),
    micro_batch_size: int | None = None,
    device: torch.device | None = None,
    check_cancelled: Callable[[], None] = lambda: None,
) -> list[GeneratedRow]:
    """Generate ``num_samples`` rows per prompt (consecutive; ``generators[i]`` belongs to row ``i``),
    ``micro_batch_size`` rows per forward (all of them when ``None``). A prompt's samples share its prefill
    when a micro-batch holds whole groups of ``num_samples`` rows."""
    if device is None:
        device = next(model.parameters()).device
    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = pad_token_id(tokenizer)
    stops = StopStrings(tokenizer, stop)
    k = num_samples
    if micro_batch_size is not None and micro_batch_size < k:
        prompts, k = [p for p in prompts for _ in range(k)], 1  # groups split across micro-batches
    per_chunk = max(len(prompts), 1) if micro_batch_size is None else micro_batch_size // k
    results: list[GeneratedRow] = []
    with torch.inference_mode():
        for start in range(0, len(prompts), per_chunk):
            chunk = prompts[start : start + per_chunk]
            rows = slice(start * k, (start + len(chunk)) * k)
            results.extend(
                generate_batch(
                    model,
                    chunk,
                    max_new_tokens=max_new_tokens,
                    params=params,
                    generators=generators[rows] if generators is not None else None,
                    eos_ids=eos_ids,
                    pad_id=pad_id,
                    stop=stops,
                    device=device,
                    repeats=k,
                    check_cancelled=check_cancelled,
                )
            )
    return results
