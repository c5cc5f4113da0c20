"""TorchRL's ``SFTLoss`` on one micro-batch: ``sft`` and ``minor_sft``, with an optional k3 KL to the
reference.

``s_i`` is the sum of row ``i``'s masked log-probs (divided by its token count with ``normalizeBySeqLength``);
``sft`` is ``-sum_i s_i / N`` and ``minor_sft`` is ``-sum_i logsigmoid(beta * (s_i - s_ref_i)) / N``, ``N``
the full batch's row count. The KL is the token mean of k3 over the mask; ``minor_sft`` reports it without
adding it (its KL is implicit, as in TorchRL).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain_worker.objectives.aggregate import masked, token_mean
from posttrain_worker.objectives.batch import LossBatch, LossNorm, LossOutput
from posttrain_worker.objectives.checks import check_base, require_tokens
from posttrain_worker.objectives.config import SFTLossConfig
from posttrain_worker.objectives.kl import k3


def sft_loss(config: SFTLossConfig, batch: LossBatch, norm: LossNorm) -> LossOutput:
    """The SFT loss of one micro-batch."""
    check_base(batch)
    mask = batch.mask
    log_probs = masked(batch.log_probs, mask)
    summed = _sequence_sums(log_probs, mask, config.normalize_by_seq_length)
    rows = max(norm.num_sequences, 1)
    metrics: dict[str, Tensor] = {}
    ref = (
        require_tokens(batch, "ref_log_probs")
        if config.loss_function == "minor_sft" or config.uses_kl_to_ref
        else None
    )
    if config.loss_function == "minor_sft":
        assert ref is not None
        ref_summed = _sequence_sums(masked(ref, mask), mask, config.normalize_by_seq_length)
        loss_sft = -torch.nn.functional.logsigmoid(config.beta * (summed - ref_summed)).sum() / rows
    else:
        loss_sft = -summed.sum() / rows
    metrics["loss_sft"] = loss_sft
    loss = loss_sft
    if ref is not None:
        kl = token_mean(k3(log_probs, ref, mask), mask, norm)
        metrics["kl_to_ref"] = kl
        if config.uses_kl_to_ref:
            assert config.kl_to_ref_coeff is not None
            metrics["loss_kl_to_ref"] = config.kl_to_ref_coeff * kl
            loss = loss + metrics["loss_kl_to_ref"]
    return LossOutput(loss=loss, metrics={name: value.detach() for name, value in metrics.items()})


def _sequence_sums(values: Tensor, mask: Tensor, normalize: bool) -> Tensor:
    summed = values.sum(-1)
    return summed / mask.sum(-1).clamp_min(1).to(summed.dtype) if normalize else summed
