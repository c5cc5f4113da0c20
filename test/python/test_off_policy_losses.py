"""The off-policy corrections of the GRPO per-token objective (``offPolicyCorrection``: ``tis``,
``decoupled``; docs/losses.md, "Off-policy correction"): the worker's loss value and gradient against a
direct PyTorch computation written out here (random log-probs, padded masks, per-sequence and per-token
advantages, ``token_mean`` and ``prompt_mean``, with the clip, the dual clip and the cap active and not),
single tokens computed by hand, the metrics, a proximal policy given in the batch (a constant even when it
carries a gradient), micro-batches summing to the full batch, parity with TRL's vLLM importance-sampling
correction, ``none`` being bit-identical to a config without the field, and every bad config or batch (a
typed error naming the field)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from posttrain_worker.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.objectives import (
    LossBatch,
    LossConfig,
    LossOutput,
    batch_norm,
    compute_loss,
    finalize_metrics,
    parse_loss_config,
)

F64 = torch.float64
ZERO = torch.zeros((), dtype=F64)


# ---- data and the reference computation ----------------------------------------------------------------


def make_batch(seed: int, rows: int = 6, width: int = 10, token_adv: bool = False) -> dict[str, Any]:
    """Right-padded rows (NaN in the padding of every tensor), a prompt of 1-3 tokens, a behaviour policy
    ``old`` far enough from the current one that many weights exceed a cap of 1.5, and a proximal policy
    ``prox`` near the current one but far enough for its clip to bite."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, width + 1, (rows,), generator=g)
    lengths[0] = width
    prompts = torch.randint(1, 4, (rows,), generator=g)
    positions = torch.arange(width)
    attention = positions < lengths[:, None]
    mask = attention & (positions >= prompts[:, None])
    cur = -torch.rand(rows, width, generator=g, dtype=F64) * 3 - 0.05
    old = cur + torch.randn(rows, width, generator=g, dtype=F64) * 0.6
    prox = cur + torch.randn(rows, width, generator=g, dtype=F64) * 0.25
    adv_shape = (rows, width) if token_adv else (rows, 1)

    def pad(t: torch.Tensor) -> torch.Tensor:
        return t.masked_fill(~attention, math.nan)

    return {
        "mask": mask,
        "log_probs": pad(cur),
        "old_log_probs": pad(old),
        "prox_log_probs": pad(prox),
        "ref_log_probs": pad(cur + torch.randn(rows, width, generator=g, dtype=F64) * 0.3),
        "advantages": torch.randn(adv_shape, generator=g, dtype=F64),
        "entropy": pad(torch.rand(rows, width, generator=g, dtype=F64) * 3),
    }


def reference_objective(
    lp: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    cap: float | None,
    eps: tuple[float, float],
    dual: float | None,
    how: str,
    prox: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The corrected objective written out directly: ``w = sg(min(exp(logp_prox - logp_old), C))``,
    ``r = exp(logp - logp_prox)`` with ``logp_prox = sg(logp)`` unless given, the clipped surrogate on ``r``
    (the ratio clamped, not its log), the dual clip, ``w`` times that, reduced. Returns the loss and the
    per-token values (zero outside the mask)."""
    lp_m = torch.where(mask, lp, ZERO)
    old_m = torch.where(mask, old, ZERO)
    prox_m = lp_m.detach() if prox is None else torch.where(mask, prox, ZERO).detach()
    w = torch.exp(prox_m - old_m)
    if cap is not None:
        w = torch.clamp(w, max=cap)
    w = w.detach()
    r = torch.exp(lp_m - prox_m)
    a = adv.expand(mask.shape)
    surrogate = -torch.minimum(r * a, torch.clamp(r, 1 - eps[0], 1 + eps[1]) * a)
    if dual is not None:
        surrogate = torch.where(a < 0, torch.minimum(surrogate, -dual * a), surrogate)
    per_token = torch.where(mask, w * surrogate, ZERO)
    if how == "token_mean":
        return per_token.sum() / mask.sum(), per_token
    assert how == "prompt_mean"
    return (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).mean(), per_token


def worker_loss(
    raw: dict[str, Any], fields: dict[str, Any], *, with_prox: bool
) -> tuple[LossOutput, torch.Tensor, dict[str, float]]:
    """The worker's output, d loss / d log_probs, and the finalized metrics, on one full batch."""
    fields = dict(fields)
    mask = fields.pop("mask")
    if not with_prox:
        fields.pop("prox_log_probs")
    cfg = parse_loss_config(raw)
    log_probs = fields.pop("log_probs").detach().clone().requires_grad_(True)
    norm = batch_norm(cfg, mask)
    out = compute_loss(cfg, LossBatch(log_probs=log_probs, mask=mask, **fields), norm)
    out.loss.backward()
    assert log_probs.grad is not None
    return out, log_probs.grad, finalize_metrics(out.metrics, norm)


def reference_grad(batch: dict[str, Any], **kwargs: Any) -> tuple[float, torch.Tensor, torch.Tensor]:
    lp = batch["log_probs"].detach().clone().requires_grad_(True)
    loss, per_token = reference_objective(
        lp, batch["old_log_probs"], batch["advantages"], batch["mask"], **kwargs
    )
    loss.backward()
    assert lp.grad is not None
    return float(loss.detach()), lp.grad, per_token.detach()


# ---- against the direct computation -------------------------------------------------------------------

MODES: list[tuple[str, float | None]] = [
    ("tis", None),  # the default cap, 2
    ("tis", 1.0),
    ("tis", 1.5),
    ("decoupled", None),  # uncapped
    ("decoupled", 1.5),
]


@pytest.mark.parametrize("token_adv", [False, True], ids=["seq-adv", "token-adv"])
@pytest.mark.parametrize("how", ["token_mean", "prompt_mean"])
@pytest.mark.parametrize("with_prox", [False, True], ids=["prox=sg(logp)", "prox-given"])
@pytest.mark.parametrize("dual", [None, 1.5], ids=["no-dual", "dual"])
@pytest.mark.parametrize(("mode", "cap"), MODES, ids=[f"{m}-cap={c}" for m, c in MODES])
def test_loss_and_gradient_match_the_direct_computation(
    mode: str, cap: float | None, dual: float | None, with_prox: bool, how: str, token_adv: bool
) -> None:
    batch = make_batch(21 + token_adv, token_adv=token_adv)
    eps = (0.2, 0.28)
    raw: dict[str, Any] = {
        "type": "grpo",
        "clipEpsilon": list(eps),
        "dualClip": dual,
        "aggregation": how,
        "entropyBonus": False,
        "offPolicyCorrection": mode,
    }
    if cap is not None:
        raw["isCap"] = cap
    effective_cap = cap if cap is not None or mode == "decoupled" else 2.0
    out, grad, metrics = worker_loss(raw, batch, with_prox=with_prox)
    expected, expected_grad, _ = reference_grad(
        batch,
        cap=effective_cap,
        eps=eps,
        dual=dual,
        how=how,
        prox=batch["prox_log_probs"] if with_prox else None,
    )
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-12, abs=1e-14)
    assert float((grad - expected_grad).abs().max()) < 1e-12
    assert float(expected_grad.abs().max()) > 1e-3  # a real gradient
    mask = batch["mask"]
    assert bool((grad[~mask] == 0).all()) and bool(grad.isfinite().all())
    # the data exercise what the case is about
    w = torch.exp(
        batch["prox_log_probs"] - batch["old_log_probs"]
        if with_prox
        else batch["log_probs"] - batch["old_log_probs"]
    )[mask]
    if effective_cap is not None:
        assert bool((w > effective_cap).any()) and bool((w < effective_cap).any())
        assert metrics["importance_weight_capped_fraction"] == pytest.approx(
            float((w > effective_cap).double().mean()), rel=1e-12
        )
        w = w.clamp(max=effective_cap)
    else:
        assert metrics["importance_weight_capped_fraction"] == 0.0
    assert metrics["importance_weight_mean"] == pytest.approx(float(w.mean()), rel=1e-12)
    if with_prox:  # the clip is anchored at the proximal policy, and bites
        r = torch.exp(batch["log_probs"] - batch["prox_log_probs"])[mask]
        outside = (r < 1 - eps[0]) | (r > 1 + eps[1])
        assert 0 < metrics["clip_fraction"] < 1
        assert metrics["clip_fraction"] == pytest.approx(float(outside.double().mean()), rel=1e-12)
    else:  # r_prox = 1: the clip cannot bite
        assert metrics["clip_fraction"] == 0.0


def test_the_reference_is_not_the_uncorrected_loss() -> None:
    """The cases above could not pass with the correction ignored, the weight left uncapped or not detached,
    or the clip anchored at logp_old: each of those computes something else on these data."""
    batch = make_batch(21)
    kwargs: dict[str, Any] = {"eps": (0.2, 0.28), "dual": None, "how": "token_mean"}
    loss, grad, _ = reference_grad(batch, cap=1.5, **kwargs)
    uncapped_loss, uncapped_grad, _ = reference_grad(batch, cap=None, **kwargs)
    assert abs(loss - uncapped_loss) > 1e-3 and float((grad - uncapped_grad).abs().max()) > 1e-3
    plain, plain_grad, _ = worker_loss(
        {"type": "grpo", "clipEpsilon": [0.2, 0.28], "entropyBonus": False}, batch, with_prox=False
    )
    assert abs(float(plain.loss.detach()) - loss) > 1e-3
    assert float((plain_grad - grad).abs().max()) > 1e-3
    # a weight with gradient (w = min(exp(logp - logp_old), C) not detached) has another gradient where capped
    lp = batch["log_probs"].detach().clone().requires_grad_(True)
    mask, adv = batch["mask"], batch["advantages"].expand(batch["mask"].shape)
    live_w = torch.exp(torch.where(mask, lp, ZERO) - torch.where(mask, batch["old_log_probs"], ZERO)).clamp(
        max=1.5
    )
    (torch.where(mask, -live_w * adv, ZERO).sum() / mask.sum()).backward()
    assert lp.grad is not None and float((lp.grad - grad).abs().max()) > 1e-3
    # the clip anchored at logp_old, times w: -min(sg(r), C) * min(r A, clip(r) A), r = exp(logp - logp_old)
    lp = batch["log_probs"].detach().clone().requires_grad_(True)
    r = torch.exp(torch.where(mask, lp, ZERO) - torch.where(mask, batch["old_log_probs"], ZERO))
    surrogate = -torch.minimum(r * adv, torch.clamp(r, 0.8, 1.28) * adv)
    anchored_at_old = torch.where(mask, r.detach().clamp(max=1.5) * surrogate, ZERO).sum() / mask.sum()
    anchored_at_old.backward()
    assert abs(float(anchored_at_old.detach()) - loss) > 1e-3
    assert lp.grad is not None and float((lp.grad - grad).abs().max()) > 1e-3


# ---- by hand ---------------------------------------------------------------------------------------------


def one_token(
    lw: float, adv: float, raw: dict[str, Any], prox_lw: float | None = None
) -> tuple[float, float, dict[str, float]]:
    """One masked token whose log-ratio to the behaviour policy is ``lw``; with ``prox_lw`` the batch carries
    a proximal policy whose log-ratio to the behaviour policy is ``prox_lw``."""
    old = torch.tensor([[0.0, -1.0]], dtype=F64)
    fields: dict[str, Any] = {
        "mask": torch.tensor([[False, True]]),
        "log_probs": old + torch.tensor([[0.0, lw]], dtype=F64),
        "old_log_probs": old,
        "prox_log_probs": old + torch.tensor([[0.0, prox_lw or 0.0]], dtype=F64),
        "advantages": torch.tensor([[adv]], dtype=F64),
    }
    out, grad, metrics = worker_loss({"entropyBonus": False, **raw}, fields, with_prox=prox_lw is not None)
    assert grad[0, 0] == 0
    return float(out.loss.detach()), float(grad[0, 1]), metrics


def test_single_token_by_hand() -> None:
    # r = 3 to the behaviour policy, A = 1. Plain GRPO: clipped at 1.2, no gradient.
    assert one_token(math.log(3), 1.0, {"type": "grpo"})[:2] == (pytest.approx(-1.2), 0.0)
    # TIS (cap 2): logp_prox = sg(logp), so r_prox = 1 and the token keeps a gradient, weighted by min(3, 2).
    loss, grad, metrics = one_token(math.log(3), 1.0, {"type": "grpo", "offPolicyCorrection": "tis"})
    assert (loss, grad) == (pytest.approx(-2.0), pytest.approx(-2.0))
    assert metrics["importance_weight_mean"] == pytest.approx(2.0)
    assert metrics["importance_weight_capped_fraction"] == 1.0
    assert metrics["clip_fraction"] == 0.0
    assert metrics["kl_approx"] == pytest.approx(-math.log(3))  # still against logp_old
    # decoupled, uncapped: w = 3
    loss, grad, metrics = one_token(math.log(3), 1.0, {"type": "grpo", "offPolicyCorrection": "decoupled"})
    assert (loss, grad) == (pytest.approx(-3.0), pytest.approx(-3.0))
    assert metrics["importance_weight_capped_fraction"] == 0.0
    # decoupled with a cap of 1 and A < 0: w = min(0.5, 1) = 0.5
    loss, grad, _ = one_token(
        math.log(0.5), -2.0, {"type": "grpo", "offPolicyCorrection": "decoupled", "isCap": 1}
    )
    assert (loss, grad) == (pytest.approx(1.0), pytest.approx(1.0))


def test_single_token_with_a_given_proximal_policy() -> None:
    # logp_prox - logp_old = log 2 (w = 2); logp - logp_prox = log 1.5 (r_prox = 1.5, clipped at 1.2 if A > 0)
    raw = {"type": "grpo", "offPolicyCorrection": "decoupled"}
    loss, grad, metrics = one_token(math.log(3), 1.0, raw, prox_lw=math.log(2))
    assert (loss, grad) == (pytest.approx(-2 * 1.2), 0.0)
    assert metrics["clip_fraction"] == 1.0
    # A < 0 with r_prox = 1.5: the unclipped term, -w * r_prox * A, keeps its gradient
    loss, grad, _ = one_token(math.log(3), -1.0, raw, prox_lw=math.log(2))
    assert (loss, grad) == (pytest.approx(3.0), pytest.approx(3.0))
    # and the DAPO dual clip at c = 1.3 bounds it at -w * c * A, without gradient
    loss, grad, _ = one_token(math.log(3), -1.0, {**raw, "dualClip": 1.3}, prox_lw=math.log(2))
    assert (loss, grad) == (pytest.approx(2 * 1.3), 0.0)
    # TIS's cap of 1.5 applies to w = 2
    loss, grad, _ = one_token(
        math.log(3), -1.0, {**raw, "offPolicyCorrection": "tis", "isCap": 1.5}, prox_lw=math.log(2)
    )
    assert (loss, grad) == (pytest.approx(1.5 * 1.5), pytest.approx(1.5 * 1.5))


def test_a_given_proximal_policy_is_a_constant() -> None:
    """Even when the tensor given as ``prox_log_probs`` is computed from the current log-probs with grad."""
    batch = make_batch(5)
    mask = batch.pop("mask")
    cfg = parse_loss_config(
        {"type": "grpo", "offPolicyCorrection": "tis", "isCap": 1.5, "entropyBonus": False}
    )
    lp = batch.pop("log_probs").detach().clone().requires_grad_(True)
    delta = batch.pop("prox_log_probs") - lp.detach()
    prox = lp + delta  # carries a gradient to lp
    out = compute_loss(
        cfg, LossBatch(log_probs=lp, mask=mask, prox_log_probs=prox, **batch), batch_norm(cfg, mask)
    )
    out.loss.backward()
    assert lp.grad is not None
    _, expected_grad, _ = reference_grad(
        {**batch, "mask": mask, "log_probs": lp.detach()},
        cap=1.5,
        eps=(0.2, 0.2),
        dual=None,
        how="token_mean",
        prox=prox.detach(),
    )
    assert float((lp.grad - expected_grad).abs().max()) < 1e-12


# ---- the rest of the loss ------------------------------------------------------------------------------


def test_none_is_bit_identical_and_ignores_a_proximal_policy() -> None:
    batch = make_batch(8)
    raw = {"type": "grpo", "clipEpsilon": [0.2, 0.28], "dualClip": 3.0, "klToRefCoeff": 0.1}
    base, base_grad, base_metrics = worker_loss(raw, batch, with_prox=False)
    explicit, grad, metrics = worker_loss({**raw, "offPolicyCorrection": "none"}, batch, with_prox=True)
    assert torch.equal(base.loss, explicit.loss) and torch.equal(base_grad, grad)
    assert metrics == base_metrics
    assert not any(key.startswith("importance_weight") for key in metrics)
    assert parse_loss_config(raw) == parse_loss_config({**raw, "offPolicyCorrection": "none"})


@pytest.mark.parametrize("mode", ["tis", "decoupled"])
def test_entropy_and_kl_terms_are_unchanged(mode: str) -> None:
    """The correction touches the objective only: the entropy bonus, the KL terms (the bias correction still
    weights by the full ratio exp(logp - logp_old)), kl_approx and the ESS are the uncorrected loss's."""
    batch = make_batch(9)
    raw = {
        "type": "grpo",
        "klToRefCoeff": 0.2,
        "klToInferenceCoeff": 0.1,
        "klBiasCorrection": True,
        "entropyCoeff": 0.05,
        "aggregation": "prompt_mean",
    }
    plain, plain_grad, plain_metrics = worker_loss(raw, batch, with_prox=True)
    out, grad, metrics = worker_loss(
        {**raw, "offPolicyCorrection": mode, "isCap": 1.5}, batch, with_prox=True
    )
    for key in (
        "kl_to_ref",
        "loss_kl_to_ref",
        "kl_to_inference",
        "loss_kl_to_inference",
        "entropy",
        "loss_entropy",
        "kl_approx",
        "ESS",
    ):
        assert metrics[key] == pytest.approx(plain_metrics[key], rel=1e-12), key
    _, objective_grad, _ = reference_grad(
        batch, cap=1.5, eps=(0.2, 0.2), dual=None, how="prompt_mean", prox=batch["prox_log_probs"]
    )
    objective_only = {"type": "grpo", "entropyBonus": False, "aggregation": "prompt_mean"}
    _, plain_objective_grad, _ = worker_loss(objective_only, batch, with_prox=False)
    # d(loss)/d(logp) = d(objective) + d(the rest), the rest being the uncorrected loss's
    assert float((grad - objective_grad - (plain_grad - plain_objective_grad)).abs().max()) < 1e-12
    assert float(out.loss.detach()) == pytest.approx(
        metrics["loss_objective"] + (float(plain.loss.detach()) - plain_metrics["loss_objective"]), rel=1e-12
    )


def test_aggregation_none_returns_the_weighted_per_token_objective() -> None:
    batch = make_batch(10)
    out, _, _ = worker_loss(
        {
            "type": "grpo",
            "offPolicyCorrection": "tis",
            "isCap": 1.5,
            "aggregation": "none",
            "entropyBonus": False,
        },
        batch,
        with_prox=True,
    )
    _, _, per_token = reference_grad(
        batch, cap=1.5, eps=(0.2, 0.2), dual=None, how="token_mean", prox=batch["prox_log_probs"]
    )
    assert float((out.per_token["loss_objective"].detach() - per_token).abs().max()) < 1e-12
    assert float(out.metrics["loss_objective"]) == pytest.approx(float(per_token.sum()), rel=1e-12)


MICRO_CONFIGS: list[dict[str, Any]] = [
    {"type": "grpo", "offPolicyCorrection": "tis", "isCap": 1.5, "klToRefCoeff": 0.1},
    {
        "type": "grpo",
        "offPolicyCorrection": "decoupled",
        "aggregation": "prompt_mean",
        "klBiasCorrection": True,
        "klToRefCoeff": 0.1,
    },
    {
        "type": "grpo",
        "clipEpsilon": [0.2, 0.28],
        "dualClip": 3.0,
        "offPolicyCorrection": "decoupled",
        "isCap": 2.5,
        "lossType": "dr_grpo",
        "maxCompletionLength": 12,
    },
]


@pytest.mark.parametrize("with_prox", [False, True], ids=["prox=sg(logp)", "prox-given"])
@pytest.mark.parametrize(
    "raw",
    MICRO_CONFIGS,
    ids=lambda c: f"{c['offPolicyCorrection']}-{c.get('aggregation', c.get('lossType'))}",
)
def test_micro_batches_sum_to_the_full_batch(raw: dict[str, Any], with_prox: bool) -> None:
    batch = make_batch(12)
    mask = batch["mask"]
    cfg: LossConfig = parse_loss_config(raw)
    norm = batch_norm(cfg, mask)
    lp = batch["log_probs"].detach().clone().requires_grad_(True)

    def run(splits: list[list[int]]) -> tuple[float, torch.Tensor, dict[str, torch.Tensor]]:
        lp.grad = None
        total = 0.0
        sums: dict[str, torch.Tensor] = {}
        for rows in splits:
            index = torch.tensor(rows)
            width = int(mask[index].nonzero()[:, 1].max()) + 1  # each micro-batch has its own padding
            fields = {
                k: (v[index, :width] if v.shape[-1] > 1 else v[index])
                for k, v in batch.items()
                if k not in ("mask", "log_probs") and (with_prox or k != "prox_log_probs")
            }
            out = compute_loss(
                cfg, LossBatch(log_probs=lp[index, :width], mask=mask[index, :width], **fields), norm
            )
            out.loss.backward()
            total += float(out.loss.detach())
            for key, value in out.metrics.items():
                sums[key] = sums.get(key, torch.zeros((), dtype=value.dtype)) + value
        assert lp.grad is not None
        return total, lp.grad.clone(), sums

    full_loss, full_grad, full_metrics = run([list(range(6))])
    assert {"importance_weight_mean", "importance_weight_capped_fraction"} <= full_metrics.keys()
    for splits in ([[0, 1], [2, 3, 4], [5]], [[i] for i in range(6)], [[4, 1], [5, 0, 3], [2]]):
        loss, grad, metrics = run(splits)
        assert abs(loss - full_loss) < 1e-9
        assert float((grad - full_grad).abs().max()) < 1e-9
        assert metrics.keys() == full_metrics.keys()
        assert finalize_metrics(metrics, norm) == pytest.approx(
            finalize_metrics(full_metrics, norm), rel=1e-9, abs=1e-12
        )


# ---- parity with TRL's vLLM importance-sampling correction ----------------------------------------------


@pytest.mark.parametrize(
    "trl_config",
    [
        {"loss_type": "dapo"},
        {"loss_type": "grpo", "epsilon_high": 0.28},
        {"loss_type": "bnpo", "delta": 1.5, "beta": 0.04, "use_bias_correction_kl": False},
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_tis_matches_trls_importance_sampling_correction(trl_config: dict[str, Any], tmp_path: Any) -> None:
    """TRL's ``vllm_importance_sampling_correction`` (``token_truncate``): TRL anchors its ratio at
    ``old_per_token_logps``, the trainer's own log-probs before the update (our ``logp_prox``), and multiplies
    the per-token loss by ``min(exp(old_per_token_logps - sampling_per_token_logps), cap)`` (our ``w``, with
    ``logp_old`` the sampler's log-probs). ``_compute_loss`` reads that ratio from its inputs; it is built
    here as TRL's ``_generate_and_score_completions`` builds it."""
    from test_loss_parity_trl import B, C, make_inputs, ours_for, trl_loss  # skips where trl is missing

    cap = 1.4
    inputs = make_inputs(31)
    g = torch.Generator().manual_seed(7)
    sampling = inputs["old_per_token_logps"] + torch.randn(B, C, generator=g, dtype=F64) * 0.4
    prox = inputs["old_per_token_logps"]
    is_ratio = torch.exp(prox - sampling).clamp(max=cap)
    assert bool((is_ratio == cap).any()) and bool((is_ratio < cap).any())
    trl_inputs = {**inputs, "sampling_per_token_logps": sampling, "importance_sampling_ratio": is_ratio}
    expected, expected_grad, _ = trl_loss(
        {**trl_config, "use_vllm": True, "vllm_importance_sampling_correction": True},
        trl_inputs,
        str(tmp_path),
    )

    raw = {**ours_for(trl_config), "offPolicyCorrection": "tis", "isCap": cap}
    logits = inputs["logits"].clone().requires_grad_(True)
    logp = torch.log_softmax(logits, -1)
    mask = inputs["completion_mask"].bool()
    cfg = parse_loss_config(raw)
    batch = LossBatch(
        log_probs=logp.gather(-1, inputs["completion_ids"][..., None]).squeeze(-1),
        mask=mask,
        old_log_probs=sampling,
        prox_log_probs=prox,
        ref_log_probs=inputs["ref_per_token_logps"],
        advantages=inputs["advantages"],
        entropy=-(logp.exp() * logp).sum(-1),
    )
    out = compute_loss(cfg, batch, batch_norm(cfg, mask))
    out.loss.backward()
    assert logits.grad is not None
    assert abs(float(out.loss.detach() - expected)) <= 1e-6
    assert float((logits.grad - expected_grad).abs().max()) <= 1e-6
    assert float(expected_grad.abs().max()) > 1e-3


# ---- bad configs and batches ---------------------------------------------------------------------------

BAD_CONFIGS: list[tuple[dict[str, Any], str]] = [
    ({"type": "grpo", "offPolicyCorrection": "is"}, "loss.offPolicyCorrection"),
    ({"type": "grpo", "offPolicyCorrection": None}, "loss.offPolicyCorrection"),
    ({"type": "grpo", "offPolicyCorrection": True}, "loss.offPolicyCorrection"),
    ({"type": "grpo", "offPolicyCorrection": "tis", "isCap": 0}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "tis", "isCap": -1.0}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "tis", "isCap": math.inf}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "tis", "isCap": math.nan}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "tis", "isCap": "2"}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "tis", "isCap": True}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "tis", "isCap": None}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "decoupled", "isCap": 0.0}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "decoupled", "isCap": -math.inf}, "loss.isCap"),
    ({"type": "grpo", "isCap": 2.0}, "loss.isCap"),
    ({"type": "grpo", "offPolicyCorrection": "none", "isCap": None}, "loss.isCap"),
    ({"type": "cispo", "offPolicyCorrection": "tis"}, "loss.offPolicyCorrection"),
    ({"type": "gspo", "offPolicyCorrection": "decoupled"}, "loss.offPolicyCorrection"),
    ({"type": "sapo", "offPolicyCorrection": "tis", "isCap": 2.0}, "loss.offPolicyCorrection"),
    ({"type": "sapo", "isCap": 2.0}, "loss.isCap"),
    ({"type": "sft", "offPolicyCorrection": "tis"}, "loss.offPolicyCorrection"),
]


@pytest.mark.parametrize(("raw", "field"), BAD_CONFIGS, ids=[f"{r}" for r, _ in BAD_CONFIGS])
def test_bad_configs_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(WorkerFailure) as info:
        parse_loss_config(raw)
    assert info.value.code == BAD_ARGUMENTS
    assert info.value.details["field"] == field
    assert info.value.message.startswith(field)


def test_unsupported_variants_say_which_accept_it() -> None:
    with pytest.raises(WorkerFailure, match=r'only supported by loss\.type "grpo"'):
        parse_loss_config({"type": "cispo", "offPolicyCorrection": "decoupled"})
    # "none" is every policy variant's default, so it may be spelt out
    assert parse_loss_config({"type": "sapo", "offPolicyCorrection": "none"}).off_policy_correction == "none"  # type: ignore[union-attr]


def test_defaults_and_edges() -> None:
    assert parse_loss_config({"type": "grpo"}).off_policy_correction == "none"  # type: ignore[union-attr]
    tis = parse_loss_config({"type": "grpo", "offPolicyCorrection": "tis"})
    assert (tis.off_policy_correction, tis.is_cap) == ("tis", 2.0)  # type: ignore[union-attr]
    decoupled = parse_loss_config({"type": "grpo", "offPolicyCorrection": "decoupled"})
    assert decoupled.is_cap is None  # type: ignore[union-attr]
    assert (
        parse_loss_config({"type": "grpo", "offPolicyCorrection": "decoupled", "isCap": None}).is_cap is None
    )  # type: ignore[union-attr]
    assert parse_loss_config({"type": "grpo", "offPolicyCorrection": "tis", "isCap": 1}).is_cap == 1.0  # type: ignore[union-attr]
    assert parse_loss_config({"type": "grpo", "offPolicyCorrection": "tis", "isCap": 0.5}).is_cap == 0.5  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("prox", "message"),
    [
        (torch.zeros(6, 9, dtype=F64), "must have shape"),
        (torch.full((6, 10), math.nan, dtype=F64), "non-finite"),
    ],
    ids=["shape", "nan"],
)
def test_bad_proximal_log_probs_name_the_field(prox: torch.Tensor, message: str) -> None:
    batch = make_batch(13)
    batch["prox_log_probs"] = prox
    with pytest.raises(WorkerFailure, match=message) as info:
        worker_loss({"type": "grpo", "offPolicyCorrection": "decoupled"}, batch, with_prox=True)
    assert info.value.code == BAD_PAYLOAD
    assert info.value.details["field"] == "prox_log_probs"
