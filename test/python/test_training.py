"""Training through a real worker on the tiny model: a step's metrics and effect, training log-probs equal to
scoring's bit for bit, micro-batches equal to the full batch, gradient clipping, the reference model,
token-level advantages, optimizers, and learning-rate schedules against transformers' own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.codec import TensorBatch
from posttrain_worker.models import make_tiny_model
from posttrain_worker.training.lora import peft_available
from training_harness import create, replaced, rollout, step, weights
from transformers import get_cosine_with_min_lr_schedule_with_warmup, get_linear_schedule_with_warmup
from worker_harness import Client, call, load, ok, ragged, rows_of

METRICS = (
    "loss",
    "loss_objective",
    "clip_fraction",
    "kl_approx",
    "ESS",
    "entropy",
    "loss_entropy",
    "grad_norm",
)


@pytest.fixture(scope="module")
def other_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same architecture and tokenizer, other weights (a reference model that differs from the policy)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "other", seed=5)


def scored(client: Client, model: str, batch: TensorBatch) -> Any:
    """``score``'s ("log_probs", "full") for the batch's ("tokens", "full")."""
    columns: Any = batch.columns
    tokens = TensorBatch(batch.batch_size, {"tokens": {"full": columns["tokens"]["full"]}})
    reply = call(client, "score", {"model": model}, tokens)
    ok(reply)
    return reply["batch"].columns["log_probs"]["full"]


# ---- one step ------------------------------------------------------------------------------------------


def test_a_step_reports_torchrl_metrics_and_moves_the_weights(client: Client, tiny_dir: Path) -> None:
    ok(load(client, "policy", tiny_dir, replace=True))
    created = create(client)
    assert created["step"] == 0 and created["trainableParameters"] > 0
    assert created["needs"] == {"oldLogProbs": True, "refLogProbs": False, "advantages": True}
    before = weights(client, "policy")
    batch = rollout(client, seed=1)
    result = ok(step(client, batch))
    assert result["step"] == 1 and result["lr"] == pytest.approx(1e-3)
    assert set(METRICS) <= set(result["metrics"]), result["metrics"]
    metrics = result["metrics"]
    assert 0 <= metrics["clip_fraction"] <= 1 and 0 < metrics["ESS"] <= 1 + 1e-9 and metrics["grad_norm"] > 0
    assert metrics["loss"] == pytest.approx(metrics["loss_objective"] + metrics["loss_entropy"], abs=1e-6)
    mask_tokens = sum(int(r.sum()) - 0 for r in rows_of(batch.columns["masks"]["all_assistant_mask"]))  # type: ignore[index]
    assert result["numTokens"] == mask_tokens and result["numSequences"] == batch.rows
    after = weights(client, "policy")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    state = ok(client.call("trainer_state", {"model": "policy"})[0])
    assert state["step"] == 1 and state["lastMetrics"]["grad_norm"] == metrics["grad_norm"]
    assert state["optimizer"]["type"] == "adam" and state["loss"] == {"type": "grpo"}


def test_training_log_probs_equal_scoring_bit_for_bit(client: Client, tiny_dir: Path) -> None:
    """With the behaviour log-probs taken from ``score``, the log-ratio is exactly 0 in eval mode without
    gradient (compute_loss) and in train mode with gradient (train_step): KL 0, nothing clipped, ESS 1."""
    ok(load(client, "policy", tiny_dir, replace=True))
    create(client, optimizer={"type": "sgd", "lr": 0.1})
    batch = rollout(client, seed=2)
    batch = replaced(batch, ("log_probs", "full"), scored(client, "policy", batch))
    for method in ("compute_loss", "train_step"):
        metrics = ok(step(client, batch, method=method))["metrics"]
        assert metrics["kl_approx"] == 0.0 and metrics["clip_fraction"] == 0.0 and metrics["ESS"] == 1.0, (
            method
        )


def test_compute_loss_has_no_gradient_and_no_step(client: Client, tiny_dir: Path) -> None:
    ok(load(client, "policy", tiny_dir, replace=True))
    create(client)
    before = weights(client, "policy")
    batch = rollout(client, seed=3)
    first = ok(step(client, batch, method="compute_loss"))
    again = ok(step(client, batch, method="compute_loss"))
    assert first["step"] == 0 and "grad_norm" not in first["metrics"] and "lr" not in first
    assert first["metrics"] == again["metrics"]
    trained = ok(step(client, batch))
    assert trained["metrics"]["loss"] == pytest.approx(first["metrics"]["loss"], abs=1e-6)
    assert not all(torch.equal(before[k], v) for k, v in weights(client, "policy").items())


# ---- micro-batches -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "loss", [{"type": "grpo", "klToRefCoeff": 0.1}, {"type": "grpo", "lossType": "grpo"}]
)
def test_micro_batches_give_the_full_batch_loss_and_gradient(
    client: Client, tiny_dir: Path, other_dir: Path, loss: dict[str, Any]
) -> None:
    """Two identical models, one trained on the whole batch and one in micro-batches of at most 40 padded
    tokens, SGD with lr 1 (so the weights move by exactly the gradient): same loss, metrics and weights."""
    ok(load(client, "full", tiny_dir, replace=True))
    ok(load(client, "micro", tiny_dir, replace=True))
    ok(load(client, "ref", other_dir, replace=True))
    sgd = {"type": "sgd", "lr": 1.0}
    create(client, "full", loss=loss, optimizer=sgd, gradClip=None, refModel="ref")
    create(client, "micro", loss=loss, optimizer=sgd, gradClip=None, refModel="ref", microBatchTokens=40)
    batch = rollout(client, seed=4, tokens=12)
    whole = ok(step(client, batch, "full"))
    parts = ok(step(client, batch, "micro"))
    assert whole["microBatches"] == 1 and parts["microBatches"] >= 3
    assert set(whole["metrics"]) == set(parts["metrics"])
    for key, value in whole["metrics"].items():
        assert parts["metrics"][key] == pytest.approx(value, abs=1e-6, rel=1e-6), key
    if "klToRefCoeff" in loss:
        assert whole["metrics"]["loss_kl_to_ref"] > 0
    a, b = weights(client, "full"), weights(client, "micro")
    base = weights(client, "ref")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-6
    assert any(not torch.equal(a[k], base[k]) for k in a)


# ---- gradient clipping ---------------------------------------------------------------------------------


def test_grad_clip_reports_the_norm_before_clipping_and_scales_the_update(
    client: Client, tiny_dir: Path
) -> None:
    """Two identical models, SGD with lr 1 (the weights move by exactly minus the gradient), one without
    clipping and one with ``gradClip`` a quarter of the gradient's norm: both report the norm before clipping
    (above ``gradClip``), the same loss, and the clipped update is the unclipped one times
    ``gradClip / grad_norm`` (so its norm is ``gradClip``)."""
    ok(load(client, "policy", tiny_dir, replace=True))
    ok(load(client, "free", tiny_dir, replace=True))
    ok(load(client, "clipped", tiny_dir, replace=True))
    sgd = {"type": "sgd", "lr": 1.0}
    batch = rollout(client, seed=12, tokens=12)
    base = weights(client, "free")
    create(client, "free", optimizer=sgd, gradClip=None)
    free = ok(step(client, batch, "free"))["metrics"]
    clip = free["grad_norm"] / 4
    assert create(client, "clipped", optimizer=sgd, gradClip=clip)["gradClip"] == clip
    clipped = ok(step(client, batch, "clipped"))["metrics"]
    assert clipped["grad_norm"] > clip
    assert clipped["grad_norm"] == pytest.approx(free["grad_norm"], rel=1e-6)
    assert clipped["loss"] == pytest.approx(free["loss"], abs=1e-7)
    after_free, after_clipped = weights(client, "free"), weights(client, "clipped")
    scale = clip / clipped["grad_norm"]
    update_norm_sq = 0.0
    for name, before in base.items():
        unclipped_update = after_free[name] - before
        clipped_update = after_clipped[name] - before
        error = float((clipped_update - unclipped_update * scale).abs().max())
        assert error < 1e-5, (name, error)
        update_norm_sq += float(clipped_update.double().square().sum())
    assert update_norm_sq**0.5 == pytest.approx(clip, rel=1e-3)
    assert any(not torch.equal(after_free[k], after_clipped[k]) for k in base)


# ---- the reference model -------------------------------------------------------------------------------


def test_reference_model_in_the_worker_equals_sent_ref_log_probs(
    client: Client, tiny_dir: Path, other_dir: Path
) -> None:
    ok(load(client, "policy", tiny_dir, replace=True))
    ok(load(client, "ref", other_dir, replace=True))
    loss = {"type": "grpo", "klToRefCoeff": 0.5}
    created = create(client, loss=loss, refModel="ref")
    assert created["needs"]["refLogProbs"] is False and created["refModel"] == "ref"
    batch = rollout(client, seed=5)
    in_worker = ok(step(client, batch, method="compute_loss"))["metrics"]
    sent = replaced(batch, ("ref_log_probs", "full"), scored(client, "ref", batch))
    create(client, loss=loss)  # no reference model: the batch must carry the log-probs
    from_payload = ok(step(client, sent, method="compute_loss"))["metrics"]
    assert in_worker == from_payload and in_worker["loss_kl_to_ref"] > 0


def test_clone_model_makes_a_frozen_reference_copy(client: Client, tiny_dir: Path) -> None:
    ok(load(client, "policy", tiny_dir, replace=True))
    info = ok(client.call("clone_model", {"source": "policy", "name": "frozen", "replace": True})[0])
    assert info["name"] == "frozen"
    create(client, loss={"type": "grpo", "klToRefCoeff": 1.0}, refModel="frozen")
    batch = rollout(client, seed=6)
    first = ok(step(client, batch))["metrics"]
    assert first["loss_kl_to_ref"] == 0.0  # the copy equals the policy before the first update
    second = ok(step(client, batch))["metrics"]
    assert second["loss_kl_to_ref"] > 0  # the policy moved, the frozen copy did not
    a, b = weights(client, "policy"), weights(client, "frozen")
    assert any(not torch.equal(a[k], b[k]) for k in a)


# ---- batch forms ---------------------------------------------------------------------------------------


def test_token_level_advantages_and_a_mask_from_the_prompt(client: Client, tiny_dir: Path) -> None:
    """Per-token advantages equal to the sequence's value give the sequence-level loss; without the
    assistant mask, the tokens after ("tokens", "prompt") are trained on."""
    ok(load(client, "policy", tiny_dir, replace=True))
    create(client)
    batch = rollout(client, seed=7)
    columns: Any = batch.columns
    lengths = [int(r.numel()) for r in rows_of(columns["tokens"]["full"])]
    per_token = ragged(
        [torch.full((n,), float(a)) for n, a in zip(lengths, columns["advantage"], strict=True)],
        torch.float32,
    )
    no_mask = TensorBatch(batch.batch_size, {k: v for k, v in columns.items() if k != "masks"})
    token_level = replaced(no_mask, ("advantage",), per_token)
    expected = ok(step(client, batch, method="compute_loss"))["metrics"]
    assert ok(step(client, no_mask, method="compute_loss"))["metrics"] == expected
    got = ok(step(client, token_level, method="compute_loss"))["metrics"]
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-7), key


# ---- optimizers and schedules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "optimizer",
    [
        {"type": "adamw", "lr": 1e-3, "weightDecay": 0.1, "betas": [0.8, 0.99]},
        {"type": "adam", "lr": 1e-3, "eps": 1e-6},
        {"type": "sgd", "lr": 0.5, "momentum": 0.9, "nesterov": True},
    ],
)
def test_each_optimizer_steps_and_reports_its_config(
    client: Client, tiny_dir: Path, optimizer: dict[str, Any]
) -> None:
    ok(load(client, "policy", tiny_dir, replace=True))
    state = create(client, optimizer=optimizer)
    for key, value in optimizer.items():
        assert state["optimizer"][key] == value
    before = weights(client, "policy")
    ok(step(client, rollout(client, seed=8)))
    assert any(not torch.equal(before[k], v) for k, v in weights(client, "policy").items())


def _expected_lrs(kind: str, lr: float, warmup: int, total: int, min_ratio: float, steps: int) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=lr)
    if kind == "linear":
        sched = get_linear_schedule_with_warmup(opt, warmup, total)
    else:
        sched = get_cosine_with_min_lr_schedule_with_warmup(opt, warmup, total, min_lr_rate=min_ratio)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("kind,min_ratio", [("linear", 0.0), ("cosine", 0.1)])
def test_schedules_follow_transformers(client: Client, tiny_dir: Path, kind: str, min_ratio: float) -> None:
    ok(load(client, "policy", tiny_dir, replace=True))
    schedule: dict[str, Any] = {"type": kind, "warmupSteps": 2, "totalSteps": 6}
    if kind == "cosine":
        schedule["minLrRatio"] = min_ratio
    create(client, optimizer={"type": "sgd", "lr": 0.01}, schedule=schedule)
    batch = rollout(client, seed=9, samples=1, tokens=4)
    got = [ok(step(client, batch))["lr"] for _ in range(6)]
    expected = _expected_lrs(kind, 0.01, 2, 6, min_ratio, 6)
    assert got == pytest.approx(expected, abs=1e-12)
    assert got[0] == 0.0 and max(got) == pytest.approx(0.01)


def test_bf16_autocast_is_a_no_op_on_cpu(client: Client, tiny_dir: Path) -> None:
    """autocast "bfloat16" only acts on CUDA: on this CPU worker the loss is the float32 one, bit for bit."""
    ok(load(client, "policy", tiny_dir, replace=True))
    batch = rollout(client, seed=10)
    create(client)
    plain = ok(step(client, batch, method="compute_loss"))["metrics"]
    state = create(client, autocast="bfloat16")
    assert state["autocast"] == "bfloat16"
    assert ok(step(client, batch, method="compute_loss"))["metrics"] == plain


@pytest.mark.skipif(not peft_available(), reason="peft is not installed (extra: lora)")
def test_lora_trains_only_the_adapters(client: Client, tiny_dir: Path) -> None:
    ok(load(client, "policy", tiny_dir, replace=True))
    full = create(client)["trainableParameters"]
    created = create(client, lora={"r": 4, "targetModules": ["q_proj", "v_proj"]})
    assert 0 < created["trainableParameters"] < full / 4, (created["trainableParameters"], full)
    before = weights(client, "policy")
    batch = rollout(client, seed=11)
    result = ok(step(client, batch))
    assert result["step"] == 1 and result["metrics"]["grad_norm"] > 0
    after = weights(client, "policy")
    # weights_get reports merged weights (base + B A): only the adapted projections may differ.
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed), sorted(changed)
