"""GRPO groups share the forward of their prompt in training (``training/shared_prefix.py``), through a real
worker: the same rows with their groups split apart (so nothing is shared) give the same loss, metrics and
update; and the sharing really happens on the grouped order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.codec import Ragged, TensorBatch
from posttrain_worker.training.batch import Needs, read_train_batch
from posttrain_worker.training.shared_prefix import find_groups
from training_harness import create, step, weights
from worker_harness import Client, call, load, ok, ragged, rows_of

PROMPTS = ["Hello world", "The quick brown fox", "2+2="]
SAMPLES = 4
LOSSES: list[dict[str, Any]] = [
    {"type": "grpo"},
    {"type": "grpo", "aggregation": "prompt_mean", "entropyCoeff": 0.05},
    {"type": "gspo"},
]


@pytest.fixture(scope="module")
def grouped(client: Client) -> TensorBatch:
    """``len(PROMPTS) * SAMPLES`` rows from real generation, each prompt's samples consecutive."""
    prompts = TensorBatch((len(PROMPTS),), {"text": {"prompt": list(PROMPTS)}})
    args = {"model": "policy", "maxNewTokens": 8, "seed": 2, "numSamples": SAMPLES}
    reply = call(client, "generate", args, prompts)
    ok(reply)
    columns: Any = reply["batch"].columns
    rows = len(PROMPTS) * SAMPLES
    return TensorBatch(
        (rows,),
        {
            "tokens": {"prompt": columns["tokens"]["prompt"], "full": columns["tokens"]["full"]},
            "log_probs": {"full": columns["log_probs"]["full"]},
            "advantage": torch.randn(rows, generator=torch.Generator().manual_seed(3)),
        },
    )


def permuted(batch: TensorBatch, order: list[int]) -> TensorBatch:
    """The rows of ``batch`` in ``order``."""
    columns: Any = batch.columns

    def take(column: Ragged) -> Ragged:
        rows = rows_of(column)
        return ragged([rows[i] for i in order], column.values.dtype)

    return TensorBatch(
        batch.batch_size,
        {
            "tokens": {"prompt": take(columns["tokens"]["prompt"]), "full": take(columns["tokens"]["full"])},
            "log_probs": {"full": take(columns["log_probs"]["full"])},
            "advantage": columns["advantage"][order],
        },
    )


# Samples of one prompt never next to each other: no two consecutive rows share a prefix.
SPLIT = [p * SAMPLES + s for s in range(SAMPLES) for p in range(len(PROMPTS))]


def test_the_grouped_order_shares_and_the_split_order_does_not(grouped: TensorBatch) -> None:
    needs = Needs(masking="sft", old_log_probs=True, ref_log_probs=False, advantages=True)
    for batch, expected in ((grouped, len(PROMPTS)), (permuted(grouped, SPLIT), None)):
        train = read_train_batch("t", batch, needs, vocab_size=259, max_positions=None)
        groups = find_groups(train.rows, train.mask)
        assert (None if groups is None else len(groups.starts)) == expected


@pytest.mark.parametrize("loss", LOSSES, ids=lambda loss: "-".join(str(v) for v in loss.values()))
def test_shared_prompts_give_the_loss_metrics_and_update_of_separate_ones(
    client: Client, tiny_dir: Path, grouped: TensorBatch, loss: dict[str, Any]
) -> None:
    """Two identical models, SGD with lr 1 (the weights move by exactly minus the gradient): one trained on
    the grouped rows (prompts shared), one on the same rows split apart (every row runs its own prompt)."""
    for name in ("shared", "separate"):
        ok(load(client, name, tiny_dir, replace=True))
        create(client, name, loss=loss, optimizer={"type": "sgd", "lr": 1.0}, gradClip=None)
    before = weights(client, "shared")
    a = ok(step(client, grouped, "shared"))
    b = ok(step(client, permuted(grouped, SPLIT), "separate"))
    assert set(a["metrics"]) == set(b["metrics"])
    for key, value in a["metrics"].items():
        assert b["metrics"][key] == pytest.approx(value, abs=1e-6, rel=1e-5), key
    wa, wb = weights(client, "shared"), weights(client, "separate")
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-6
    assert any(not torch.equal(wa[k], before[k]) for k in wa)
