"""The policy-gradient loss pipeline shared by GRPO, DAPO, CISPO, GSPO and SAPO (TorchRL's
``GRPOLoss.forward``).

On one micro-batch: the masked log-ratio ``lw = logp - logp_old``; the variant's per-token objective
(:mod:`.variants`), under an off-policy correction if the config has one (GRPO only: the objective is
anchored at the proximal policy and weighted by ``w = sg(exp(logp_prox - logp_old))``, capped, see
:func:`_off_policy`); the entropy bonus ``-entropyCoeff * H``; the k3 KL terms to the reference and to the
behaviour policy; each term reduced with the full batch's denominators (:mod:`.aggregate`); metrics as
additive sums.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from posttrain_worker.objectives.aggregate import aggregate, masked, token_mean
from posttrain_worker.objectives.batch import LossBatch, LossNorm, LossOutput
from posttrain_worker.objectives.checks import check_base, require_advantages, require_tokens
from posttrain_worker.objectives.clipping import Surrogate
from posttrain_worker.objectives.config import PolicyLossConfig
from posttrain_worker.objectives.kl import k3
from posttrain_worker.objectives.registry import POLICY_VARIANTS


@dataclass(frozen=True)
class _Objective:
    """The variant's per-token objective as the loss uses it, after any off-policy correction."""

    per_token: Tensor
    surrogate: Surrogate
    """The variant's own output (its ``clipped`` feeds ``clip_fraction``)."""
    ratio: Tensor
    """``exp(logp - logp_old)`` with grad, for the KL bias correction."""
    metrics: dict[str, Tensor]


def _off_policy(
    config: PolicyLossConfig,
    batch: LossBatch,
    norm: LossNorm,
    log_probs: Tensor,
    log_old: Tensor,
    advantages: Tensor,
) -> _Objective:
    """The per-token objective with the config's off-policy correction (docs/losses.md, "Off-policy
    correction").

    ``logp_prox`` is ``batch.prox_log_probs`` when given, else ``sg(logp)`` (one optimizer step per batch:
    the weights before the update are the ones of this forward). Both corrections anchor the variant's
    objective (its clip and dual clip) at ``logp_prox`` and multiply it by the detached behaviour weight
    ``w = exp(logp_prox - logp_old)``, capped at ``isCap`` when there is one (``tis`` always has one)."""
    mask = batch.mask
    variant = POLICY_VARIANTS[config.type]
    if batch.prox_log_probs is not None:
        log_prox = masked(require_tokens(batch, "prox_log_probs"), mask).detach()
    else:
        log_prox = log_probs.detach()
    weight = (log_prox - log_old.detach()).exp()  # w = exp(logp_prox - logp_old), a constant
    capped = weight.new_zeros(())
    if config.is_cap is not None:
        capped = token_mean((weight > config.is_cap).to(weight.dtype), mask, norm)
        weight = weight.clamp(max=config.is_cap)
    metrics = {
        "importance_weight_mean": token_mean(weight, mask, norm),
        "importance_weight_capped_fraction": capped,
    }
    surrogate = variant.surrogate(config, log_probs - log_prox, log_probs, advantages, mask)
    ratio = (log_probs - log_old).exp()  # the full ratio to the behaviour policy (KL bias correction)
    return _Objective(
        per_token=weight * surrogate.per_token, surrogate=surrogate, ratio=ratio, metrics=metrics
    )


def policy_loss(config: PolicyLossConfig, batch: LossBatch, norm: LossNorm) -> LossOutput:
    """The loss of one micro-batch under a policy-gradient config."""
    check_base(batch)
    mask = batch.mask
    old = require_tokens(batch, "old_log_probs")
    advantages = require_advantages(batch)
    log_probs = masked(batch.log_probs, mask)
    log_old = masked(old, mask)
    log_ratio = log_probs - log_old
    if config.off_policy_correction == "none":
        surrogate = POLICY_VARIANTS[config.type].surrogate(config, log_ratio, log_probs, advantages, mask)
        objective = _Objective(surrogate.per_token, surrogate, surrogate.ratio, {})
    else:
        objective = _off_policy(config, batch, norm, log_probs, log_old, advantages)
        surrogate = objective.surrogate

    def reduce(values: Tensor, how: str = config.normalization) -> Tensor:
        return aggregate(values, mask, norm, how, max_completion_length=config.max_completion_length)

    terms: dict[str, Tensor] = {"loss_objective": objective.per_token}
    metrics: dict[str, Tensor] = {"loss_objective": reduce(objective.per_token)}
    if surrogate.clipped is not None:
        metrics["clip_fraction"] = token_mean(surrogate.clipped.to(log_ratio.dtype), mask, norm)
    metrics.update(objective.metrics)
    metrics["kl_approx"] = token_mean(-log_ratio.detach(), mask, norm)
    weights = log_ratio.detach()[mask].double()
    metrics["ess_sum_w"] = weights.exp().sum()
    metrics["ess_sum_w2"] = (2 * weights).exp().sum()

    if config.entropy_bonus:
        entropy = require_tokens(batch, "entropy")
        metrics["entropy"] = token_mean(entropy.detach(), mask, norm)
        terms["loss_entropy"] = -config.entropy_coeff * entropy
        metrics["loss_entropy"] = reduce(terms["loss_entropy"], config.entropy_normalization)
    kl_terms: list[tuple[str, float, Tensor]] = []
    if config.uses_kl_to_ref and config.kl_to_ref_coeff is not None:
        kl_terms.append(("kl_to_ref", config.kl_to_ref_coeff, require_tokens(batch, "ref_log_probs")))
    if config.uses_kl_to_inference and config.kl_to_inference_coeff is not None:
        kl_terms.append(("kl_to_inference", config.kl_to_inference_coeff, old))
    for name, coeff, other in kl_terms:
        per_token_kl = k3(log_probs, other, mask)
        if config.kl_bias_correction:
            per_token_kl = per_token_kl * objective.ratio
        terms[f"loss_{name}"] = coeff * per_token_kl
        metrics[name] = reduce(per_token_kl)
        metrics[f"loss_{name}"] = coeff * metrics[name]

    loss = sum((metrics[name] for name in terms), start=log_ratio.new_zeros(()))
    per_token = (
        {name: masked(value, mask) for name, value in terms.items()} if config.aggregation == "none" else {}
    )
    return LossOutput(
        loss=loss,
        metrics={name: value.detach() for name, value in metrics.items()},
        per_token=per_token,
    )
