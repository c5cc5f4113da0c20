"""Parity with TRL's own GRPO loss (``GRPOTrainer._compute_loss``, trl a test-only extra) for each TRL
``loss_type`` we map (``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``, and the ``cispo`` and ``sapo`` variants),
``importance_sampling_level="sequence"`` (GSPO), two-sided clipping (``delta``, our ``dualClip``), the KL term
with and without ``use_bias_correction_kl``, and the entropy bonus: loss values and gradients within 1e-6.

The harness around TRL's code, precisely: a real ``GRPOConfig`` holds the hyper-parameters. The trainer is
``object.__new__(GRPOTrainer)`` (``__init__`` does not run: it would load models and datasets) with the
attributes ``__init__`` derives from the config copied onto it as ``__init__`` does (``beta``, ``loss_type``,
``epsilon_low``/``epsilon_high``, ``importance_sampling_level``, ``max_completion_length``, ``entropy_coef``,
...). Stubbed: ``accelerator`` (one process: ``gather``/``reduce`` return their input), ``model`` (only its
``training`` flag is read: True), ``current_gradient_accumulation_steps`` = 1, and the model forward
``_get_per_token_logps_and_entropies``, monkeypatched on the instance to return the completion's per-token
log-probs and entropies from a learnable logits tensor. Everything else, all the loss arithmetic included,
is TRL's. Our side computes log-probs and entropies from an identical copy of the logits; the gradients
compared are d loss / d logits.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from peers.require import require_peer
from posttrain_worker.objectives import LossBatch, batch_norm, compute_loss, parse_loss_config

# Skipped where trl is missing, a failure where the peers are required (CI): see peers/require.py.
# The trainer module itself, so that an installed trl that cannot import it counts as missing too.
require_peer("trl.trainer.grpo_trainer", "trl")
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

F64 = torch.float64
B, P, C, V = 4, 3, 7, 13
MAX_COMPLETION_LENGTH = 10
TOL = 1e-6


class OneProcess:
    """Stands in for accelerate's Accelerator on a single process (TRL only gathers and reduces metrics)."""

    num_processes = 1
    sync_gradients = True

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def gather_for_metrics(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return tensor


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, C, V, generator=g, dtype=F64)
    completion_ids = torch.randint(0, V, (B, C), generator=g)
    lengths = torch.tensor([C, C - 2, 3, C - 1])
    completion_mask = (torch.arange(C) < lengths[:, None]).long()
    current = torch.log_softmax(logits, -1).gather(-1, completion_ids[..., None]).squeeze(-1)
    return {
        "logits": logits,
        "prompt_ids": torch.randint(0, V, (B, P), generator=g),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "old_per_token_logps": current + torch.randn(B, C, generator=g, dtype=F64) * 0.3,
        "ref_per_token_logps": current + torch.randn(B, C, generator=g, dtype=F64) * 0.3,
        "advantages": torch.randn(B, generator=g, dtype=F64),
    }


def trl_loss(
    config: dict[str, Any], inputs: dict[str, torch.Tensor], tmp: str
) -> tuple[torch.Tensor, Any, Any]:
    """TRL's loss, d loss / d logits, and the metrics it logged."""
    args = GRPOConfig(
        output_dir=tmp, report_to="none", use_cpu=True, max_completion_length=MAX_COMPLETION_LENGTH, **config
    )
    trainer = object.__new__(GRPOTrainer)
    # What GRPOTrainer.__init__ sets from the config, for the attributes _compute_loss reads.
    trainer.args = args
    trainer.beta = args.beta
    trainer.loss_type = args.loss_type
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.importance_sampling_level = args.importance_sampling_level
    trainer.top_entropy_quantile = args.top_entropy_quantile
    trainer.off_policy_mask_threshold = args.off_policy_mask_threshold
    trainer.max_completion_length = args.max_completion_length
    trainer.use_vllm = args.use_vllm
    trainer.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    trainer.entropy_coef = args.entropy_coef
    trainer.use_adaptive_entropy = args.use_adaptive_entropy
    trainer._entropy_bonus_enabled = args.entropy_coef != 0.0 or args.use_adaptive_entropy
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer.aux_loss_enabled = False
    # Stubs: one process, one micro-batch per optimizer step, a model in train mode.
    trainer.accelerator = OneProcess()
    trainer.current_gradient_accumulation_steps = 1
    trainer.model = SimpleNamespace(training=True)
    logits = inputs["logits"].clone().requires_grad_(True)

    def per_token_logps_and_entropies(
        model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        assert logits_to_keep == C and input_ids.shape == (B, P + C)
        logp = torch.log_softmax(logits, -1)
        picked = logp.gather(-1, input_ids[:, -logits_to_keep:, None]).squeeze(-1)
        return picked, -(logp.exp() * logp).sum(-1), None

    trainer._get_per_token_logps_and_entropies = per_token_logps_and_entropies
    batch = {k: v for k, v in inputs.items() if k != "logits"}
    batch["num_items_in_batch"] = inputs["completion_mask"].sum()
    loss = trainer._compute_loss(None, batch)
    loss.backward()
    assert logits.grad is not None
    return loss.detach(), logits.grad, trainer._metrics["train"]


def our_loss(raw: dict[str, Any], inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, Any]:
    logits = inputs["logits"].clone().requires_grad_(True)
    logp = torch.log_softmax(logits, -1)
    mask = inputs["completion_mask"].bool()
    cfg = parse_loss_config(raw)
    batch = LossBatch(
        log_probs=logp.gather(-1, inputs["completion_ids"][..., None]).squeeze(-1),
        mask=mask,
        old_log_probs=inputs["old_per_token_logps"],
        ref_log_probs=inputs["ref_per_token_logps"],
        advantages=inputs["advantages"],
        entropy=-(logp.exp() * logp).sum(-1),
    )
    out = compute_loss(cfg, batch, batch_norm(cfg, mask))
    out.loss.backward()
    assert logits.grad is not None
    return out.loss.detach(), logits.grad, out.metrics


def ours_for(trl_config: dict[str, Any]) -> dict[str, Any]:
    """Our config for a TRL config (the mapping docs/losses.md gives users)."""
    loss_type = trl_config.get("loss_type", "dapo")
    beta = trl_config.get("beta", 0.0)
    coef = trl_config.get("entropy_coef", 0.0)
    eps = trl_config.get("epsilon", 0.2)
    eps_high = trl_config.get("epsilon_high") or eps
    raw: dict[str, Any] = {
        "klToRefCoeff": beta,
        "klBiasCorrection": trl_config.get("use_bias_correction_kl", True),
        "entropyBonus": coef != 0,
        "entropyCoeff": coef,
    }
    if loss_type == "cispo":  # TRL caps the ratio at epsilon_high; no lower bound
        return {**raw, "type": "cispo", "clipEpsilon": [1.0, eps_high - 1], "lossType": "dapo"}
    if loss_type == "sapo":
        return {**raw, "type": "sapo", "lossType": "grpo"}
    raw["type"] = "gspo" if trl_config.get("importance_sampling_level") == "sequence" else "grpo"
    raw["clipEpsilon"] = [eps, eps_high]
    raw["lossType"] = loss_type
    if loss_type == "dr_grpo":
        raw["maxCompletionLength"] = MAX_COMPLETION_LENGTH
    if trl_config.get("delta") is not None:
        raw["dualClip"] = trl_config["delta"]
    return raw


CASES: list[dict[str, Any]] = [
    *({"loss_type": lt} for lt in ("grpo", "bnpo", "dr_grpo", "dapo")),
    *({"loss_type": lt, "epsilon_high": 0.28, "beta": 0.04} for lt in ("grpo", "bnpo", "dr_grpo", "dapo")),
    *(
        {"loss_type": lt, "beta": 0.1, "use_bias_correction_kl": False, "entropy_coef": 0.01}
        for lt in ("grpo", "bnpo", "dr_grpo", "dapo")
    ),
    {"loss_type": "dapo", "epsilon_high": 0.28, "delta": 1.5},
    {"loss_type": "grpo", "delta": 1.3, "beta": 0.05},
    {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 0.05, "epsilon_high": 0.08},
    {"loss_type": "dapo", "importance_sampling_level": "sequence", "epsilon": 0.1, "beta": 0.02},
    {"loss_type": "cispo", "epsilon_high": 1.2},
    {"loss_type": "cispo", "epsilon_high": 5.0, "beta": 0.04, "entropy_coef": 0.02},
    {"loss_type": "sapo"},
    {"loss_type": "sapo", "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05, "beta": 0.03},
]


def _case_id(case: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


@pytest.mark.parametrize("trl_config", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_trl(trl_config: dict[str, Any], tmp_path: Any) -> None:
    inputs = make_inputs(CASES.index(trl_config))
    raw = ours_for(trl_config)
    if "sapo_temperature_pos" in trl_config:
        raw["temperaturePos"] = trl_config["sapo_temperature_pos"]
        raw["temperatureNeg"] = trl_config["sapo_temperature_neg"]
    expected, expected_grad, trl_metrics = trl_loss(trl_config, inputs, str(tmp_path))
    loss, grad, metrics = our_loss(raw, inputs)
    assert abs(float(loss - expected)) <= TOL, (float(loss), float(expected))
    assert float((grad - expected_grad).abs().max()) <= TOL
    assert float(expected_grad.abs().max()) > 1e-3  # a real gradient, not two zeros
    if "entropy" in metrics:
        assert float(metrics["entropy"]) == pytest.approx(trl_metrics["entropy"][-1], abs=TOL)
    if trl_config.get("beta") and trl_config.get("loss_type") in ("bnpo", "dapo", "cispo"):
        # TRL logs the KL as a token mean; with token-mean normalisation ours is the same number
        assert float(metrics["kl_to_ref"]) == pytest.approx(trl_metrics["kl"][-1], abs=TOL)


def test_clip_bites_in_the_inputs(tmp_path: Any) -> None:
    """The inputs exercise the clip (the parity above is not only about the unclipped branch)."""
    inputs = make_inputs(3)
    _, _, metrics = our_loss({"type": "grpo", "clipEpsilon": [0.2, 0.28], "entropyBonus": False}, inputs)
    assert 0 < float(metrics["clip_fraction"]) < 1
    _, _, trl_metrics = trl_loss({"loss_type": "dapo", "epsilon_high": 0.28}, inputs, str(tmp_path))
    assert trl_metrics["clip_ratio/region_mean"][-1] > 0
