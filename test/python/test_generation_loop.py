"""The decoding loop of ``models.generation`` in-process, bit for bit: its shortcuts (log-probs computed a few
steps at a time, no attention mask passed when the prompts have no padding) give exactly the tokens and the
log-probs of the plain definition, one ``log_softmax`` per step with the full mask, written out here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.models import generation
from posttrain_worker.models.generation import PendingLogProbs
from posttrain_worker.models.sampling import SamplingParams, choose, draw_uniforms, make_generators
from transformers import AutoModelForCausalLM, AutoTokenizer


@pytest.fixture(scope="module")
def reference(tiny_dir: Path) -> tuple[Any, Any]:
    return AutoModelForCausalLM.from_pretrained(tiny_dir).eval(), AutoTokenizer.from_pretrained(tiny_dir)


def plain_loop(
    model: Any,
    prompts: list[torch.Tensor],
    steps: int,
    params: SamplingParams,
    seed: int,
    eos: set[int],
    pad: int,
) -> list[tuple[list[int], torch.Tensor, str]]:
    """Left-padded rows, the whole 2-D mask and one ``log_softmax`` at every step; a finished row stays in the
    batch, fed the pad token, as the loop does for caches that cannot drop rows."""
    n = len(prompts)
    width = max(p.numel() for p in prompts)
    ids = torch.full((n, width), pad, dtype=torch.int64)
    mask = torch.zeros((n, width), dtype=torch.int64)
    for i, p in enumerate(prompts):
        ids[i, width - p.numel() :], mask[i, width - p.numel() :] = p, 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    uniforms = None if params.greedy else draw_uniforms(make_generators(seed, n, 1), steps)
    tokens: list[list[int]] = [[] for _ in range(n)]
    logps: list[list[float]] = [[] for _ in range(n)]
    reasons: list[str | None] = [None] * n
    with torch.inference_mode():
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        for step in range(steps):
            logits = out.logits[:, -1, :].float()
            live = [i for i in range(n) if reasons[i] is None]
            rows = torch.tensor(live)
            u = None if uniforms is None else uniforms[rows, step]
            picked = choose(logits[rows], None, params, u)
            lp = torch.log_softmax(logits[rows], dim=-1).gather(-1, picked.unsqueeze(-1)).squeeze(-1)
            for i, t, v in zip(live, picked.tolist(), lp.tolist(), strict=True):
                tokens[i].append(t)
                logps[i].append(v)
                reasons[i] = "eos" if t in eos else "length" if step + 1 == steps else None
            if all(r is not None for r in reasons):
                break
            feed = torch.full((n,), pad, dtype=torch.int64)
            feed[rows] = picked
            mask = torch.cat([mask, torch.ones((n, 1), dtype=torch.int64)], dim=-1)
            out = model(
                input_ids=feed.unsqueeze(-1),
                attention_mask=mask,
                position_ids=positions[:, -1:] + step + 1,
                past_key_values=out.past_key_values,
                use_cache=True,
            )
    return [
        (t, torch.tensor(v, dtype=torch.float32), str(r))
        for t, v, r in zip(tokens, logps, reasons, strict=True)
    ]


@pytest.mark.parametrize("lengths", [(9, 9, 9, 9), (3, 11, 1, 7)], ids=["unpadded", "padded"])
@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, top_k=80, top_p=0.95)],
    ids=["greedy", "sampled"],
)
@pytest.mark.parametrize("budget", [1 << 22, 600], ids=["one-flush", "many-flushes"])
def test_the_loop_equals_the_plain_definition_bit_for_bit(
    reference: tuple[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    lengths: tuple[int, ...],
    params: SamplingParams,
    budget: int,
) -> None:
    model, tokenizer = reference
    g = torch.Generator().manual_seed(sum(lengths))
    prompts = [torch.randint(3, 95, (k,), generator=g) for k in lengths]
    # finished rows stay in the batch, as in the plain loop
    monkeypatch.setattr(generation, "cache_rows_copyable", lambda _cache: False)
    monkeypatch.setattr(PendingLogProbs.__init__, "__defaults__", (budget,))
    eos = generation.eos_token_ids(model, tokenizer)
    steps = 40
    rows = generation.generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=steps,
        params=params,
        generators=None if params.greedy else make_generators(7, len(prompts), 1),
    )
    expected = plain_loop(model, prompts, steps, params, 7, eos, generation.pad_token_id(tokenizer))
    for row, (tokens, logps, reason) in zip(rows, expected, strict=True):
        assert row.tokens.tolist() == tokens and row.finish_reason == reason
        assert row.log_probs.dtype == torch.float32 and torch.equal(row.log_probs, logps)


def test_pending_log_probs_equal_one_log_softmax_per_step() -> None:
    """Steps of changing row sets (rows leave as they finish) flushed at several budgets."""
    g = torch.Generator().manual_seed(0)
    steps = [(torch.randn(n, 5000, generator=g) * 4, list(range(n))) for n in (6, 6, 4, 4, 1)]
    picks = [torch.randint(0, 5000, (logits.shape[0],), generator=g) for logits, _ in steps]
    expected: list[list[float]] = [[] for _ in range(6)]
    for (logits, rows), picked in zip(steps, picks, strict=True):
        values = torch.log_softmax(logits, dim=-1).gather(-1, picked.unsqueeze(-1)).squeeze(-1)
        for r, v in zip(rows, values.tolist(), strict=True):
            expected[r].append(v)
    for budget in (1, 20_000, 1 << 22):
        out: list[list[float]] = [[] for _ in range(6)]
        pending = PendingLogProbs(out, budget)
        for (logits, rows), picked in zip(steps, picks, strict=True):
            pending.add(logits, picked, rows)
        pending.flush()
        assert out == expected, budget
