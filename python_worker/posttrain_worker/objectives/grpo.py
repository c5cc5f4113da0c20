"""The policy-gradient loss pipeline shared by GRPO, DAPO, CISPO, GSPO and SAPO (TorchRL's
``GRPOLoss.forward``).

On one micro-batch: the masked log-ratio ``lw = logp - logp_old``; the variant's per-token objective
(:mod:`.variants`); the entropy bonus ``-entropyCoeff * H``; the k3 KL terms to the reference and to the
behaviour policy; each term reduced with the full batch's denominators (:mod:`.aggregate`); metrics as
additive sums.
"""

from __future__ import annotations

from torch import Tensor

from posttrain_worker.objectives.aggregate import aggregate, masked, token_mean
from posttrain_worker.objectives.batch import LossBatch, LossNorm, LossOutput
from posttrain_worker.objectives.checks import check_base, require_advantages, require_tokens
from posttrain_worker.objectives.config import PolicyLossConfig
from posttrain_worker.objectives.kl import k3
from posttrain_worker.objectives.registry import POLICY_VARIANTS


def policy_loss(config: PolicyLossConfig, batch: LossBatch, norm: LossNorm) -> LossOutput:
    """The loss of one micro-batch under a policy-gradient config."""
    check_base(batch)
    mask = batch.mask
    old = require_tokens(batch, "old_log_probs")
    advantages = require_advantages(batch)
    log_probs = masked(batch.log_probs, mask)
    log_ratio = log_probs - masked(old, mask)
    surrogate = POLICY_VARIANTS[config.type].surrogate(config, log_ratio, log_probs, advantages, mask)

    def reduce(values: Tensor, how: str = config.normalization) -> Tensor:
        return aggregate(values, mask, norm, how, max_completion_length=config.max_completion_length)

    terms: dict[str, Tensor] = {"loss_objective": surrogate.per_token}
    metrics: dict[str, Tensor] = {"loss_objective": reduce(surrogate.per_token)}
    if surrogate.clipped is not None:
        metrics["clip_fraction"] = token_mean(surrogate.clipped.to(log_ratio.dtype), mask, norm)
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
            per_token_kl = per_token_kl * surrogate.ratio
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
