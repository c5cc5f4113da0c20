"""Next-token selection for ``generate``: logit processing, greedy choice, seeded sampling.

The processing order is the one Hugging Face's ``generate`` applies (``LogitsProcessorList`` built from a
``GenerationConfig``): repetition penalty, then temperature, then top-k, then top-p. Log-probabilities that
``generate`` reports are *not* taken from the processed distribution: they are ``log_softmax`` of the raw
logits (see :mod:`posttrain_worker.models.generation`), as TorchRL's wrappers and vLLM report them.

Sampling takes one uniform number per row and step from that row's own CPU ``torch.Generator`` (the
decoding loop draws a row's numbers for every step at once: the same numbers, fewer calls) and inverts the
row's CDF (in float64). A row's draws therefore depend only on its generator, never on which other rows
share the forward pass, and the same seed gives the same uniforms on every device.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy (argmax of the penalised logits)."""
    top_p: float = 1.0
    top_k: int = 0
    """0 turns top-k off."""
    repetition_penalty: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def row_seed(seed: int, row: int, sample: int) -> int:
    """The seed of the generator of prompt ``row``, sample ``sample``: SHA-256 of the three, 63 bits.

    Hashing (rather than ``seed + row``) keeps the streams of different ``(seed, row, sample)`` apart.
    """
    digest = hashlib.sha256(f"posttrain.generate:{seed}:{row}:{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def make_generators(seed: int, rows: int, num_samples: int) -> list[torch.Generator]:
    """One CPU generator per prompt-sample, in row-major order (samples of a prompt consecutive)."""
    return [
        torch.Generator(device="cpu").manual_seed(row_seed(seed, row, sample))
        for row in range(rows)
        for sample in range(num_samples)
    ]


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's rule on every token already in the row (prompt or response): a positive logit is
    divided by ``penalty``, a negative one multiplied by it. ``seen`` is a ``[rows, vocab]`` bool mask."""
    if penalty == 1.0:
        return logits
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def apply_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row (ties with the k-th value kept), the rest ``-inf``."""
    if top_k <= 0 or top_k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of most likely tokens whose probability reaches ``top_p``
    (always at least the most likely token); the rest ``-inf``."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1.0 - top_p)
    remove_sorted[..., -1] = False
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def process_logits(logits: torch.Tensor, seen: torch.Tensor | None, params: SamplingParams) -> torch.Tensor:
    """Repetition penalty, temperature, top-k, top-p (float32 logits ``[rows, vocab]`` in and out)."""
    if seen is not None:
        logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    if params.greedy:
        return logits
    if params.temperature != 1.0:
        logits = logits / params.temperature
    logits = apply_top_k(logits, params.top_k)
    return apply_top_p(logits, params.top_p)


def draw_uniforms(generators: Sequence[torch.Generator], steps: int) -> torch.Tensor:
    """``[rows, steps]`` float64: the first ``steps`` uniforms of each row's generator, drawn at once (the
    same numbers as ``steps`` draws of one, so a row's stream does not depend on how it is drawn)."""
    if not generators:
        return torch.zeros((0, steps), dtype=torch.float64)
    return torch.stack([torch.rand(steps, generator=g, dtype=torch.float64) for g in generators])


def sample(processed: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row from ``softmax(processed)`` by inverse CDF, with ``uniforms[i]`` (float64, drawn on
    the CPU from row ``i``'s generator, so the same on every device) for row ``i``.

    The CDF is summed in float64. The token picked always has a non-zero probability.
    """
    vocab = processed.shape[-1]
    probs = torch.softmax(processed.to(torch.float64), dim=-1)
    cdf = probs.cumsum(dim=-1)
    target = (uniforms.to(processed.device) * cdf[:, -1]).unsqueeze(-1)
    picked = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=vocab - 1)
    # u * total can round up to total itself: take the last token with a non-zero probability instead.
    zero = probs.gather(-1, picked.unsqueeze(-1)).squeeze(-1) <= 0
    if bool(zero.any()):
        rows = torch.nonzero(zero).squeeze(-1)
        from_end = (probs[rows] > 0).flip(-1).to(torch.int8).argmax(dim=-1)
        picked[rows] = vocab - 1 - from_end
    return picked


def choose(
    logits: torch.Tensor,
    seen: torch.Tensor | None,
    params: SamplingParams,
    uniforms: torch.Tensor | None,
) -> torch.Tensor:
    """The next token of each row: argmax when greedy (first index on ties), else a sample with the row's
    uniform (``uniforms[i]`` for row ``i``, see :func:`draw_uniforms`)."""
    processed = process_logits(logits, seen, params)
    if params.greedy:
        return processed.argmax(dim=-1)
    assert uniforms is not None and uniforms.shape[0] == logits.shape[0]
    return sample(processed, uniforms)
