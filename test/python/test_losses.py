"""The loss family in the worker (posttrain_worker.objectives): each formula on hand-computable cases
and against per-token reference loops written here, each aggregation and TRL lossType, masks (NaN outside
the mask stays out), DAPO's dual clip, CISPO's stop-gradient, GSPO's sequence ratio, SAPO's gate, the k3
KL, the entropy bonus, micro-batch equivalence (losses, gradients and metrics summed over micro-batches
equal the full batch, also through the tiny model), ESS, and every bad config or batch (typed error naming
the field)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.models import make_tiny_model
from posttrain_worker.objectives import (
    LossBatch,
    LossConfig,
    LossNorm,
    batch_norm,
    compute_loss,
    finalize_metrics,
    loss_mask,
    needs_entropy,
    needs_old_log_probs,
    needs_ref_log_probs,
    parse_loss_config,
)

F64 = torch.float64


# ---- helpers -------------------------------------------------------------------------------------------


def grad_of(
    config: LossConfig, batch_fields: dict[str, Any], mask: torch.Tensor
) -> tuple[float, torch.Tensor, dict[str, float]]:
    """Loss value, d loss / d log_probs and finalized metrics on one full batch."""
    batch_fields = dict(batch_fields)
    log_probs = batch_fields.pop("log_probs").detach().clone().requires_grad_(True)
    out = compute_loss(
        config, LossBatch(log_probs=log_probs, mask=mask, **batch_fields), batch_norm(config, mask)
    )
    out.loss.backward()
    assert log_probs.grad is not None
    return float(out.loss.detach()), log_probs.grad, finalize_metrics(out.metrics, batch_norm(config, mask))


def single_token(lw: float, adv: float, config: dict[str, Any]) -> tuple[float, float, dict[str, float]]:
    """A one-row batch whose only masked token has log-ratio ``lw`` (position 0 is unmasked)."""
    cfg = parse_loss_config({"entropyBonus": False, **config})
    old = torch.tensor([[0.0, -1.0]], dtype=F64)
    cur = old + torch.tensor([[0.0, lw]], dtype=F64)
    mask = torch.tensor([[False, True]])
    loss, grad, metrics = grad_of(
        cfg, {"log_probs": cur, "old_log_probs": old, "advantages": torch.tensor([[adv]], dtype=F64)}, mask
    )
    assert grad[0, 0] == 0
    return loss, float(grad[0, 1]), metrics


def random_batch(seed: int, rows: int = 5, width: int = 9, token_adv: bool = False) -> dict[str, Any]:
    """Right-padded rows of different lengths, a prompt of 1-3 tokens, NaN in the padding of every tensor."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, width + 1, (rows,), generator=g)
    lengths[0] = width
    prompts = torch.randint(1, 4, (rows,), generator=g)
    positions = torch.arange(width)
    attention = positions < lengths[:, None]
    mask = attention & (positions >= prompts[:, None])

    def tokens(scale: float, shift: float) -> torch.Tensor:
        values = -torch.rand(rows, width, generator=g, dtype=F64) * scale - shift
        return values.masked_fill(~attention, math.nan)

    old = tokens(2.0, 0.1)
    cur = old + torch.randn(rows, width, generator=g, dtype=F64) * 0.3
    cur = cur.masked_fill(~attention, math.nan)
    adv_shape = (rows, width) if token_adv else (rows, 1)
    return {
        "mask": mask,
        "log_probs": cur,
        "old_log_probs": old,
        "ref_log_probs": tokens(2.0, 0.1),
        "advantages": torch.randn(adv_shape, generator=g, dtype=F64),
        "entropy": torch.rand(rows, width, generator=g, dtype=F64) * 3,
    }


def rows_of(t: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """The masked values of each row, as plain floats."""
    return [
        [float(v) for v, m in zip(row, mrow, strict=True) if m] for row, mrow in zip(t, mask, strict=True)
    ]


def reduce_rows(per_token: list[list[float]], how: str, horizon: int = 0) -> float:
    """Reference reductions written as loops over rows."""
    rows = len(per_token)
    if how == "token_mean":
        return sum(sum(r) for r in per_token) / sum(len(r) for r in per_token)
    if how == "prompt_mean":
        return sum(sum(r) / max(len(r), 1) for r in per_token) / rows
    if how == "fixed_horizon":
        return sum(sum(r) for r in per_token) / (rows * horizon)
    assert how == "none"
    return sum(sum(r) for r in per_token)


def grpo_token(lw: float, adv: float, low: float, high: float, dual: float | None = None) -> float:
    r = math.exp(lw)
    loss = -min(r * adv, min(max(r, 1 - low), 1 + high) * adv)
    if dual is not None and adv < 0:
        loss = min(loss, -dual * adv)
    return loss


# ---- single-token formulas -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "adv", "expected", "expected_grad"),
    [
        (1.5, 1.0, -1.2, 0.0),  # clipped above: the gradient vanishes
        (
            0.5,
            1.0,
            -0.5,
            -0.5,
        ),  # below the clip with A > 0: the unclipped term is smaller, keeps its gradient
        (1.5, -1.0, 1.5, 1.5),  # A < 0 and r large: the unclipped term, pessimistic, keeps its gradient
        (0.5, -1.0, 0.8, 0.0),  # A < 0 and r small: clipped at 1 - eps
        (1.1, 2.0, -2.2, -2.2),  # inside the trust region
    ],
)
def test_grpo_clipped_surrogate_by_hand(
    ratio: float, adv: float, expected: float, expected_grad: float
) -> None:
    loss, grad, metrics = single_token(math.log(ratio), adv, {"type": "grpo"})
    assert loss == pytest.approx(expected, abs=1e-12)
    assert grad == pytest.approx(expected_grad, abs=1e-12)
    assert metrics["clip_fraction"] == (1.0 if ratio in (1.5, 0.5) else 0.0)
    assert metrics["kl_approx"] == pytest.approx(-math.log(ratio), abs=1e-12)
    assert metrics["ESS"] == pytest.approx(1.0)  # one token


def test_asymmetric_clip_uses_each_bound() -> None:
    config = {"type": "grpo", "clipEpsilon": [0.1, 0.3]}
    assert single_token(math.log(2.0), 1.0, config)[0] == pytest.approx(-1.3)
    assert single_token(math.log(0.5), -1.0, config)[0] == pytest.approx(0.9)
    assert single_token(math.log(1.25), 1.0, config)[2]["clip_fraction"] == 0.0
    assert single_token(math.log(0.85), -1.0, config)[2]["clip_fraction"] == 1.0


def test_dual_clip_bounds_negative_advantages() -> None:
    config = {"type": "grpo", "clipEpsilon": [0.2, 0.28], "dualClip": 3.0}
    # r = 5, A = -2: plain GRPO gives 10; the dual clip caps it at 3 * 2 = 6 with no gradient.
    loss, grad, _ = single_token(math.log(5.0), -2.0, config)
    assert (loss, grad) == (pytest.approx(6.0), 0.0)
    assert single_token(math.log(5.0), -2.0, {"type": "grpo", "clipEpsilon": [0.2, 0.28]})[
        0
    ] == pytest.approx(10.0)
    # below the cap, and for A > 0, nothing changes
    loss, grad, _ = single_token(math.log(2.0), -2.0, config)
    assert (loss, grad) == (pytest.approx(4.0), pytest.approx(4.0))
    assert single_token(math.log(5.0), 2.0, config)[0] == pytest.approx(-2 * 1.28)


def test_cispo_stop_gradient_on_the_clipped_weight() -> None:
    config = {"type": "cispo", "clipEpsilon": [0.2, 0.2]}
    logp_cur = -1.0 + math.log(3.0)  # old is -1, the ratio is 3, clipped to 1.2
    loss, grad, metrics = single_token(math.log(3.0), 2.0, config)
    assert loss == pytest.approx(-1.2 * 2.0 * logp_cur)
    assert grad == pytest.approx(-1.2 * 2.0)  # the gradient survives the clip, scaled by the clipped weight
    assert metrics["clip_fraction"] == 1.0
    loss, grad, metrics = single_token(math.log(1.1), -1.0, config)
    assert grad == pytest.approx(1.1)  # unclipped: -w * A
    assert metrics["clip_fraction"] == 0.0
    # the default bounds [0, 5]: only the upper cap is active
    assert single_token(math.log(7.0), 1.0, {"type": "cispo"})[1] == pytest.approx(-5.0)
    assert single_token(math.log(0.01), 1.0, {"type": "cispo"})[1] == pytest.approx(-0.01)


@pytest.mark.parametrize(("ratio", "adv"), [(1.5, 1.0), (0.7, 1.0), (1.3, -0.5), (0.2, -2.0), (1.0, 0.0)])
def test_sapo_gate_value_and_gradient(ratio: float, adv: float) -> None:
    loss, grad, metrics = single_token(
        math.log(ratio), adv, {"type": "sapo", "temperaturePos": 1.0, "temperatureNeg": 2.0}
    )
    tau = 1.0 if adv > 0 else 2.0
    sig = 1 / (1 + math.exp(-tau * (ratio - 1)))
    assert loss == pytest.approx(-(4 / tau) * sig * adv, abs=1e-12)
    # d/dlw of -(4/tau) sigmoid(tau (r - 1)) A = -4 sigmoid' r A
    assert grad == pytest.approx(-4 * sig * (1 - sig) * ratio * adv, abs=1e-12)
    assert "clip_fraction" not in metrics


def test_gspo_uses_the_sequence_ratio() -> None:
    cfg = parse_loss_config({"type": "gspo", "clipEpsilon": 0.5, "entropyBonus": False})
    old = torch.tensor([[0.0, -1.0, -2.0, -3.0], [0.0, -1.0, -1.0, 9.0]], dtype=F64)
    lw = torch.tensor([[0.0, 0.3, -0.1, 0.4], [0.0, 0.2, 2.0, 0.0]], dtype=F64)
    mask = torch.tensor([[False, True, True, True], [False, True, True, False]])
    adv = torch.tensor([[1.0], [1.0]], dtype=F64)
    loss, grad, metrics = grad_of(cfg, {"log_probs": old + lw, "old_log_probs": old, "advantages": adv}, mask)
    s0, s1 = math.exp(0.6 / 3), math.exp(2.2 / 2)  # row 1: exp(1.1) = 3.0 is clipped to 1.5
    assert s1 > 1.5
    assert loss == pytest.approx((-s0 - 1.5) / 2)  # prompt_mean by default
    # row 0 unclipped: d(-s)/d lw_t = -s / n for each of its n tokens; row 1 clipped: no gradient
    assert grad[0, 1:].tolist() == pytest.approx([-s0 / 3 / 2] * 3)
    assert grad[1].abs().sum() == 0
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)  # the tokens of the clipped row


def test_k3_kl_to_reference_value_and_gradient() -> None:
    cfg = parse_loss_config({"type": "grpo", "klToRefCoeff": 0.5, "entropyBonus": False})
    cur = torch.tensor([[0.0, -1.0, -2.0]], dtype=F64)
    ref = torch.tensor([[0.0, -1.5, -1.0]], dtype=F64)
    mask = torch.tensor([[False, True, True]])
    fields = {"log_probs": cur, "old_log_probs": cur.clone(), "ref_log_probs": ref}
    loss, grad, metrics = grad_of(cfg, {**fields, "advantages": torch.zeros(1, 1, dtype=F64)}, mask)
    d = [-0.5, 1.0]
    k3 = [math.exp(x) - x - 1 for x in d]
    assert metrics["kl_to_ref"] == pytest.approx(sum(k3) / 2)
    assert metrics["loss_kl_to_ref"] == pytest.approx(0.5 * sum(k3) / 2)
    assert loss == pytest.approx(0.5 * sum(k3) / 2)  # A = 0: only the KL term
    assert grad[0, 1:].tolist() == pytest.approx([0.5 * (1 - math.exp(x)) / 2 for x in d])
    assert all(v >= 0 for v in k3)


def test_kl_bias_correction_weights_k3_by_the_ratio() -> None:
    base = {"type": "grpo", "klToRefCoeff": 1.0, "entropyBonus": False}
    cur = torch.tensor([[0.0, -1.0]], dtype=F64)
    old = torch.tensor([[0.0, -1.4]], dtype=F64)
    ref = torch.tensor([[0.0, -0.2]], dtype=F64)
    mask = torch.tensor([[False, True]])
    fields = {
        "log_probs": cur,
        "old_log_probs": old,
        "ref_log_probs": ref,
        "advantages": torch.zeros(1, 1, dtype=F64),
    }
    _, _, plain = grad_of(parse_loss_config(base), dict(fields), mask)
    _, grad, corrected = grad_of(parse_loss_config({**base, "klBiasCorrection": True}), dict(fields), mask)
    r, d = math.exp(0.4), 0.8
    assert corrected["kl_to_ref"] == pytest.approx(plain["kl_to_ref"] * r)
    # d/dlogp [r * k3] = r * k3 + r * (1 - e^d)
    assert float(grad[0, 1]) == pytest.approx(r * (math.exp(d) - d - 1) + r * (1 - math.exp(d)))


def test_kl_to_inference_uses_the_behaviour_log_probs() -> None:
    cfg = parse_loss_config({"type": "grpo", "klToInferenceCoeff": 2.0, "entropyBonus": False})
    batch = random_batch(3)
    mask = batch.pop("mask")
    _, _, metrics = grad_of(cfg, batch, mask)
    d = rows_of(batch["old_log_probs"] - batch["log_probs"], mask)
    k3 = [[math.exp(x) - x - 1 for x in row] for row in d]
    assert metrics["kl_to_inference"] == pytest.approx(reduce_rows(k3, "token_mean"))
    assert metrics["loss_kl_to_inference"] == pytest.approx(2 * metrics["kl_to_inference"])


def test_entropy_bonus() -> None:
    cfg = parse_loss_config({"type": "grpo", "entropyCoeff": 0.1})
    assert needs_entropy(cfg)
    batch = random_batch(4)
    mask = batch.pop("mask")
    entropy = batch.pop("entropy").requires_grad_(True)
    log_probs = batch.pop("log_probs").requires_grad_(True)
    out = compute_loss(
        cfg, LossBatch(log_probs=log_probs, mask=mask, entropy=entropy, **batch), batch_norm(cfg, mask)
    )
    out.loss.backward()
    assert entropy.grad is not None
    n = int(mask.sum())
    h = reduce_rows(rows_of(entropy.detach(), mask), "token_mean")
    assert float(out.metrics["entropy"]) == pytest.approx(h)
    assert float(out.metrics["loss_entropy"]) == pytest.approx(-0.1 * h)
    assert float(out.loss.detach()) == pytest.approx(float(out.metrics["loss_objective"]) - 0.1 * h)
    assert torch.allclose(entropy.grad, torch.where(mask, -0.1 / n, 0.0).to(F64))
    without = parse_loss_config({"type": "grpo", "entropyBonus": False})
    assert not needs_entropy(without)
    assert (
        "entropy"
        not in compute_loss(
            without, LossBatch(log_probs=log_probs, mask=mask, **batch), batch_norm(cfg, mask)
        ).metrics
    )


# ---- aggregations and TRL normalisations ---------------------------------------------------------------


@pytest.mark.parametrize("token_adv", [False, True])
@pytest.mark.parametrize(
    ("config", "how"),
    [
        ({"aggregation": "token_mean"}, "token_mean"),
        ({"aggregation": "prompt_mean"}, "prompt_mean"),
        ({"aggregation": "none"}, "none"),
        ({"lossType": "grpo"}, "prompt_mean"),
        ({"lossType": "bnpo"}, "token_mean"),
        ({"lossType": "dapo"}, "token_mean"),
        ({"lossType": "dr_grpo", "maxCompletionLength": 12}, "fixed_horizon"),
    ],
)
def test_grpo_aggregations_against_reference_loops(config: dict[str, Any], how: str, token_adv: bool) -> None:
    cfg = parse_loss_config({"type": "grpo", "clipEpsilon": [0.1, 0.25], "entropyCoeff": 0.05, **config})
    batch = random_batch(7, token_adv=token_adv)
    mask = batch.pop("mask")
    loss, _, metrics = grad_of(cfg, dict(batch), mask)
    lw = rows_of(batch["log_probs"] - batch["old_log_probs"], mask)
    adv = batch["advantages"].expand(mask.shape)
    adv_rows = rows_of(adv, mask)
    per_token = [
        [grpo_token(x, a, 0.1, 0.25) for x, a in zip(r, ar, strict=True)]
        for r, ar in zip(lw, adv_rows, strict=True)
    ]
    objective = reduce_rows(per_token, how, horizon=12)
    entropy_how = how if "aggregation" in config else "token_mean"  # TRL's bonus is always a token mean
    entropy = reduce_rows(rows_of(batch["entropy"], mask), entropy_how)
    assert metrics["loss_objective"] == pytest.approx(objective, rel=1e-12)
    assert metrics["loss_entropy"] == pytest.approx(-0.05 * entropy, rel=1e-12)
    assert loss == pytest.approx(objective - 0.05 * entropy, rel=1e-12)
    clipped = [[float(not (math.log(0.9) <= x <= math.log(1.25))) for x in r] for r in lw]
    assert metrics["clip_fraction"] == pytest.approx(reduce_rows(clipped, "token_mean"))


def test_aggregation_none_returns_per_token_terms() -> None:
    cfg = parse_loss_config({"type": "grpo", "aggregation": "none", "klToRefCoeff": 0.1})
    batch = random_batch(8)
    mask = batch.pop("mask")
    out = compute_loss(cfg, LossBatch(**batch, mask=mask), batch_norm(cfg, mask))
    assert set(out.per_token) == {"loss_objective", "loss_entropy", "loss_kl_to_ref"}
    for name, values in out.per_token.items():
        assert values.shape == mask.shape
        assert bool((values[~mask] == 0).all())
        assert float(values.sum()) == pytest.approx(float(out.metrics[name]))
    summed = parse_loss_config({"type": "grpo", "klToRefCoeff": 0.1})
    assert compute_loss(summed, LossBatch(**batch, mask=mask), batch_norm(cfg, mask)).per_token == {}


def test_nan_outside_the_mask_stays_out() -> None:
    cfg = parse_loss_config({"type": "grpo", "klToRefCoeff": 0.1, "klToInferenceCoeff": 0.1})
    batch = random_batch(9)
    mask = batch.pop("mask")
    assert bool(batch["log_probs"].isnan().any())
    loss, grad, metrics = grad_of(cfg, batch, mask)
    assert math.isfinite(loss) and all(math.isfinite(v) for v in metrics.values())
    assert bool(grad.isfinite().all()) and bool((grad[~mask] == 0).all())


# ---- micro-batches -------------------------------------------------------------------------------------

MICRO_CONFIGS: list[dict[str, Any]] = [
    {"type": "grpo", "klToRefCoeff": 0.2, "klToInferenceCoeff": 0.1},
    {"type": "grpo", "aggregation": "prompt_mean", "klToRefCoeff": 0.2, "klBiasCorrection": True},
    {"type": "grpo", "aggregation": "none"},
    {"type": "grpo", "clipEpsilon": [0.2, 0.28], "dualClip": 3.0, "lossType": "dapo"},
    {"type": "grpo", "lossType": "grpo", "klToRefCoeff": 0.04},
    {"type": "grpo", "lossType": "dr_grpo", "maxCompletionLength": 16},
    {"type": "cispo"},
    {"type": "gspo", "clipEpsilon": 0.05},
    {"type": "sapo", "aggregation": "prompt_mean"},
    {"type": "sft"},
    {"type": "sft", "normalizeBySeqLength": False, "klToRefCoeff": 0.3},
    {"type": "sft", "lossFunction": "minor_sft", "beta": 0.5},
]


def _micro_batches(
    cfg: LossConfig,
    batch: dict[str, Any],
    logits: torch.Tensor,
    tokens: torch.Tensor,
    splits: list[list[int]],
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """Sum of losses, metrics and d/d logits over micro-batches, each trimmed to its own longest row."""
    mask = batch["mask"]
    norm = batch_norm(cfg, mask)
    total = torch.zeros((), dtype=F64)
    sums: dict[str, torch.Tensor] = {}
    for rows in splits:
        index = torch.tensor(rows)
        width = int(mask[index].nonzero()[:, 1].max()) + 1  # each micro-batch has its own padding
        lp = torch.log_softmax(logits[index, :width], -1).gather(-1, tokens[index, :width, None]).squeeze(-1)
        probs = torch.softmax(logits[index, :width], -1)
        entropy = -(probs * probs.log()).sum(-1)
        fields = {
            k: v[index, :width] if v.shape[-1] > 1 else v[index] for k, v in batch.items() if k != "mask"
        }
        fields.update(log_probs=lp, entropy=entropy)
        out = compute_loss(cfg, LossBatch(mask=mask[index, :width], **fields), norm)
        out.loss.backward()
        total = total + out.loss.detach()
        for key, value in out.metrics.items():
            sums[key] = sums.get(key, torch.zeros((), dtype=value.dtype)) + value
    assert logits.grad is not None
    grad = logits.grad.clone()
    logits.grad = None
    return total, sums, grad


@pytest.mark.parametrize("raw", MICRO_CONFIGS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_micro_batches_sum_to_the_full_batch(raw: dict[str, Any]) -> None:
    cfg = parse_loss_config(raw)
    batch = random_batch(11, rows=6, width=10)
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 10, 7, generator=g, dtype=F64).requires_grad_(True)
    tokens = torch.randint(0, 7, (6, 10), generator=g)
    del batch["log_probs"], batch["entropy"]  # computed from the logits, with grad
    full_loss, full_metrics, full_grad = _micro_batches(cfg, batch, logits, tokens, [list(range(6))])
    for splits in ([[0, 1], [2, 3, 4], [5]], [[i] for i in range(6)], [[4, 1], [5, 0, 3], [2]]):
        loss, metrics, grad = _micro_batches(cfg, batch, logits, tokens, splits)
        assert abs(float(loss - full_loss)) < 1e-6
        assert float((grad - full_grad).abs().max()) < 1e-6
        assert metrics.keys() == full_metrics.keys()
        for key in metrics:
            assert abs(float(metrics[key] - full_metrics[key])) < 1e-6 * max(
                1.0, abs(float(full_metrics[key]))
            )
        norm = batch_norm(cfg, batch["mask"])
        final, full_final = finalize_metrics(metrics, norm), finalize_metrics(full_metrics, norm)
        assert final == pytest.approx(full_final, rel=1e-9, abs=1e-9)
    assert float(full_grad.abs().sum()) > 0


def test_micro_batches_through_the_tiny_model(tmp_path: Path) -> None:
    """Real model, real padding: parameter gradients of micro-batches equal the full batch's."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(make_tiny_model(tmp_path / "tiny", seed=0)).double().eval()
    g = torch.Generator().manual_seed(0)
    lengths = [12, 7, 9, 5]
    sequences = [torch.randint(3, 250, (n,), generator=g) for n in lengths]
    cfg = parse_loss_config(
        {"type": "grpo", "klToRefCoeff": 0.1, "clipEpsilon": [0.2, 0.28], "dualClip": 3.0}
    )

    def forward(rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(lengths[r] for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.int64)
        attention = torch.zeros(len(rows), width, dtype=torch.int64)
        for i, r in enumerate(rows):
            ids[i, : lengths[r]] = sequences[r]
            attention[i, : lengths[r]] = 1
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        logp = torch.log_softmax(logits, -1)
        picked = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
        zeros = torch.zeros(len(rows), 1, dtype=F64)
        log_probs = torch.cat([zeros, picked], -1)
        entropy = torch.cat([zeros, -(logp.exp() * logp).sum(-1)], -1)
        prompt = torch.tensor([[3], [2], [4], [1]])[rows]
        mask = loss_mask("sft", attention_mask=attention, prompt_lengths=prompt.squeeze(-1))
        return log_probs, entropy, mask

    with torch.no_grad():
        base, _, full_mask = forward([0, 1, 2, 3])
    noise = torch.randn(base.shape, generator=g, dtype=F64) * 0.2
    old, ref = base + noise, base - noise
    adv = torch.tensor([[1.0], [-0.5], [0.3], [-1.2]], dtype=F64)
    norm = batch_norm(cfg, full_mask)

    def run(splits: list[list[int]]) -> tuple[float, list[torch.Tensor]]:
        model.zero_grad()
        total = 0.0
        for rows in splits:
            log_probs, entropy, mask = forward(rows)
            width = mask.shape[1]
            batch = LossBatch(
                log_probs=log_probs,
                mask=mask,
                old_log_probs=old[rows, :width],
                ref_log_probs=ref[rows, :width],
                advantages=adv[rows],
                entropy=entropy,
            )
            out = compute_loss(cfg, batch, norm)
            out.loss.backward()
            total += float(out.loss.detach())
        return total, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    full_loss, full_grads = run([[0, 1, 2, 3]])
    loss, grads = run([[1, 3], [0], [2]])
    assert abs(loss - full_loss) < 1e-6
    assert len(grads) == len(full_grads) > 0
    assert max(float((a - b).abs().max()) for a, b in zip(grads, full_grads, strict=True)) < 1e-6
    assert max(float(b.abs().max()) for b in full_grads) > 1e-4


def test_ess_matches_torchrl_formula() -> None:
    cfg = parse_loss_config({"type": "grpo", "entropyBonus": False})
    batch = random_batch(12)
    mask = batch.pop("mask")
    _, _, metrics = grad_of(cfg, batch, mask)
    lw = (batch["log_probs"] - batch["old_log_probs"])[mask]
    expected = float((2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / mask.sum())
    assert metrics["ESS"] == pytest.approx(expected, rel=1e-12)
    assert 0 < metrics["ESS"] <= 1


# ---- SFT -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalize", [True, False])
def test_sft_and_minor_sft_by_hand(normalize: bool) -> None:
    lp = torch.tensor([[0.0, -1.0, -2.0, 5.0], [0.0, -0.5, 7.0, 7.0]], dtype=F64)
    ref = torch.tensor([[0.0, -1.5, -1.0, 0.0], [0.0, -0.25, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[False, True, True, False], [False, True, False, False]])
    s = [-3.0 / (2 if normalize else 1), -0.5]
    s_ref = [-2.5 / (2 if normalize else 1), -0.25]
    sft = parse_loss_config({"type": "sft", "normalizeBySeqLength": normalize})
    loss, grad, metrics = grad_of(sft, {"log_probs": lp}, mask)
    assert loss == pytest.approx(-sum(s) / 2)
    assert metrics == {"loss_sft": pytest.approx(-sum(s) / 2)}
    n0 = 2 if normalize else 1
    assert grad.tolist() == [[0.0, -1 / (2 * n0), -1 / (2 * n0), 0.0], [0.0, -0.5, 0.0, 0.0]]
    beta = 0.7
    minor = parse_loss_config(
        {"type": "sft", "lossFunction": "minor_sft", "beta": beta, "normalizeBySeqLength": normalize}
    )
    assert needs_ref_log_probs(minor) and not needs_ref_log_probs(sft)
    loss, _, metrics = grad_of(minor, {"log_probs": lp, "ref_log_probs": ref}, mask)
    expected = sum(math.log1p(math.exp(-beta * (a - b))) for a, b in zip(s, s_ref, strict=True)) / 2
    assert loss == pytest.approx(expected)
    d = [-0.5, 1.0, 0.25]
    kl = sum(math.exp(x) - x - 1 for x in d) / 3
    assert metrics["kl_to_ref"] == pytest.approx(kl)  # reported, not added (minor_sft's KL is implicit)
    assert "loss_kl_to_ref" not in metrics


def test_sft_kl_to_reference_is_added() -> None:
    lp = torch.tensor([[0.0, -1.0, -2.0]], dtype=F64)
    ref = torch.tensor([[0.0, -1.5, -1.0]], dtype=F64)
    mask = torch.tensor([[False, True, True]])
    cfg = parse_loss_config({"type": "sft", "klToRefCoeff": 0.5})
    loss, grad, metrics = grad_of(cfg, {"log_probs": lp, "ref_log_probs": ref}, mask)
    kl = ((math.exp(-0.5) + 0.5 - 1) + (math.exp(1.0) - 1.0 - 1)) / 2
    assert metrics["kl_to_ref"] == pytest.approx(kl)
    assert loss == pytest.approx(1.5 + 0.5 * kl)
    assert float(grad[0, 1]) == pytest.approx(-0.5 + 0.5 * (1 - math.exp(-0.5)) / 2)


# ---- masks ---------------------------------------------------------------------------------------------


def test_loss_mask_strategies() -> None:
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    assistant = torch.tensor([[0, 1, 0, 1, 1], [0, 0, 1, 0, 0]]).bool()
    sft = loss_mask("sft", attention_mask=attention, prompt_lengths=torch.tensor([2, 1]))
    assert sft.tolist() == [[False, False, True, True, False], [False, True, True, False, False]]
    rlhf = loss_mask("rlhf", attention_mask=attention, assistant_mask=assistant)
    assert rlhf.tolist() == [[False, True, False, True, False], [False, False, True, False, False]]
    assert loss_mask("sft", attention_mask=attention, assistant_mask=assistant).tolist() == rlhf.tolist()
    assert loss_mask("generic", attention_mask=attention).tolist() == attention.bool().tolist()
    with pytest.raises(ValueError, match="assistant mask"):
        loss_mask("rlhf", attention_mask=attention)


# ---- configs -------------------------------------------------------------------------------------------


def test_defaults_follow_torchrl() -> None:
    cfg = parse_loss_config({"type": "grpo"})
    assert (cfg.clip_epsilon_low, cfg.clip_epsilon_high) == (0.2, 0.2)  # type: ignore[union-attr]
    assert cfg.entropy_bonus and cfg.entropy_coeff == 0.01  # type: ignore[union-attr]
    assert cfg.aggregation == "token_mean" and cfg.masking_strategy == "sft"  # type: ignore[union-attr]
    assert cfg.kl_to_ref_coeff is None and not needs_ref_log_probs(cfg)
    assert needs_old_log_probs(cfg) and not needs_old_log_probs(parse_loss_config({"type": "sft"}))
    sft = parse_loss_config({"type": "sft"})
    assert (sft.loss_function, sft.normalize_by_seq_length, sft.beta) == ("sft", True, 0.1)  # type: ignore[union-attr]


BAD_CONFIGS: list[tuple[Any, str]] = [
    ([], "loss"),
    ({}, "loss.type"),
    ({"type": "ppo"}, "loss.type"),
    ({"type": "grpo", "clipEpsilon": -0.1}, "loss.clipEpsilon"),
    ({"type": "grpo", "clipEpsilon": 1.0}, "loss.clipEpsilon"),
    ({"type": "grpo", "clipEpsilon": [0.2]}, "loss.clipEpsilon"),
    ({"type": "grpo", "clipEpsilon": "0.2"}, "loss.clipEpsilon"),
    ({"type": "grpo", "clipEpsilon": [0.2, 0.28], "dualClip": 1.2}, "loss.dualClip"),
    ({"type": "grpo", "klToRefCoeff": -1}, "loss.klToRefCoeff"),
    ({"type": "grpo", "klToInferenceCoeff": "x"}, "loss.klToInferenceCoeff"),
    ({"type": "grpo", "entropyBonus": 1}, "loss.entropyBonus"),
    ({"type": "grpo", "entropyCoeff": -0.5}, "loss.entropyCoeff"),
    ({"type": "grpo", "aggregation": "mean"}, "loss.aggregation"),
    ({"type": "grpo", "lossType": "ppo"}, "loss.lossType"),
    ({"type": "grpo", "lossType": "grpo", "aggregation": "token_mean"}, "loss.aggregation"),
    ({"type": "grpo", "lossType": "dr_grpo"}, "loss.maxCompletionLength"),
    ({"type": "grpo", "lossType": "dr_grpo", "maxCompletionLength": 0}, "loss.maxCompletionLength"),
    ({"type": "grpo", "maxCompletionLength": 10}, "loss.maxCompletionLength"),
    ({"type": "grpo", "maskingStrategy": "all"}, "loss.maskingStrategy"),
    ({"type": "grpo", "clip_epsilon": 0.2}, "loss.clip_epsilon"),
    ({"type": "cispo", "dualClip": 3.0}, "loss.dualClip"),
    ({"type": "cispo", "clipEpsilon": [1.5, 4.0]}, "loss.clipEpsilon"),
    ({"type": "gspo", "clipEpsilon": math.inf}, "loss.clipEpsilon"),
    ({"type": "sapo", "clipEpsilon": 0.2}, "loss.clipEpsilon"),
    ({"type": "sapo", "temperaturePos": 0}, "loss.temperaturePos"),
    ({"type": "sapo", "temperatureNeg": -1}, "loss.temperatureNeg"),
    ({"type": "sft", "lossFunction": "dpo"}, "loss.lossFunction"),
    ({"type": "sft", "lossFunction": "minor_sft", "klToRefCoeff": 0.1}, "loss.klToRefCoeff"),
    ({"type": "sft", "beta": 0}, "loss.beta"),
    ({"type": "sft", "normalizeBySeqLength": "yes"}, "loss.normalizeBySeqLength"),
    ({"type": "sft", "entropyCoeff": 0.1}, "loss.entropyCoeff"),
]


@pytest.mark.parametrize(("raw", "field"), BAD_CONFIGS, ids=[f for _, f in BAD_CONFIGS])
def test_bad_configs_name_the_field(raw: Any, field: str) -> None:
    with pytest.raises(WorkerFailure) as info:
        parse_loss_config(raw)
    assert info.value.code == BAD_ARGUMENTS
    assert info.value.details["field"] == field
    assert field in info.value.message


def _bad_batch(**changes: Any) -> Callable[[], object]:
    cfg = parse_loss_config({"type": "grpo", "klToRefCoeff": 0.1})
    batch = random_batch(13)
    batch.update(changes)
    mask = batch.pop("mask")
    norm = LossNorm(num_tokens=int(mask.sum()), num_sequences=mask.shape[0])
    return lambda: compute_loss(cfg, LossBatch(mask=mask, **batch), norm)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"old_log_probs": None}, "old_log_probs"),
        ({"ref_log_probs": None}, "ref_log_probs"),
        ({"advantages": None}, "advantages"),
        ({"entropy": None}, "entropy"),
        ({"advantages": torch.zeros(5, 2, dtype=F64)}, "advantages"),
        ({"advantages": torch.full((5,), math.nan, dtype=F64)}, "advantages"),
        ({"old_log_probs": torch.zeros(5, 8, dtype=F64)}, "old_log_probs"),
        ({"ref_log_probs": torch.full((5, 9), math.inf, dtype=F64)}, "ref_log_probs"),
        ({"log_probs": torch.zeros(5, 9, 1, dtype=F64)}, "log_probs"),
        ({"mask": torch.ones(5, 9)}, "mask"),
    ],
)
def test_bad_batches_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(WorkerFailure) as info:
        _bad_batch(**changes)()
    assert info.value.code == BAD_PAYLOAD
    assert info.value.details["field"] == field
    assert field in info.value.message
