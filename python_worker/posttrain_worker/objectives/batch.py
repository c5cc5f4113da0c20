"""The data the losses exchange with the trainer: a micro-batch, the full batch's denominators, the result."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass(frozen=True)
class LossBatch:
    """One micro-batch, padded to ``[B, T]`` (right padding), on the model's device.

    ``log_probs`` follows TorchRL's convention: position ``t`` holds ``log p(tok_t | tok_<t)`` and position
    0 is 0. Values outside ``mask`` are never read (they may be anything, NaN included).
    """

    log_probs: Tensor
    """Current policy per-token log-probs, with grad, ``[B, T]``."""
    mask: Tensor
    """bool ``[B, T]``: the tokens the loss is computed on (see :func:`~.masks.loss_mask`)."""
    old_log_probs: Tensor | None = None
    """Behaviour-policy log-probs from generation, ``[B, T]`` (required by the policy-gradient losses)."""
    ref_log_probs: Tensor | None = None
    """Frozen reference-model log-probs, ``[B, T]`` (when :func:`needs_ref_log_probs`)."""
    advantages: Tensor | None = None
    """``[B]``, ``[B, 1]`` (one per sequence) or ``[B, T]`` (per token); required by the policy-gradient
    losses."""
    entropy: Tensor | None = None
    """Per-token entropy of the current policy, ``[B, T]``, with grad (when :func:`needs_entropy`): entry
    ``t`` is the entropy of the distribution that ``log_probs[:, t]`` was taken from."""
    prox_log_probs: Tensor | None = None
    """The proximal policy's log-probs ``logp_prox``, ``[B, T]`` (optional; read only by an
    ``offPolicyCorrection``): when absent, ``logp_prox = sg(log_probs)``, the trainer's weights before this
    step's update, computed on the same forward."""


@dataclass(frozen=True)
class LossNorm:
    """Denominators of the WHOLE batch, so that micro-batch losses sum to the full-batch loss."""

    num_tokens: int
    """``mask.sum()`` over the full batch (``token_mean``, and every per-token metric)."""
    num_sequences: int
    """Rows of the full batch (``prompt_mean``, ``dr_grpo``, SFT's mean over sequences)."""


@dataclass
class LossOutput:
    """The result on one micro-batch."""

    loss: Tensor
    """Scalar to backpropagate; summed over micro-batches it equals the full-batch loss."""
    metrics: dict[str, Tensor]
    """Detached scalars, each additive over micro-batches given the same :class:`LossNorm`: ``loss_objective``
    (``loss_sft`` for SFT), ``clip_fraction``, ``kl_approx``, ``entropy``, ``loss_entropy``, ``kl_to_ref``,
    ``loss_kl_to_ref``, ``kl_to_inference``, ``loss_kl_to_inference``, ``importance_weight_mean``,
    ``importance_weight_capped_fraction`` (those that apply), and the ESS moments
    ``ess_sum_w`` / ``ess_sum_w2`` that :func:`finalize_metrics` turns into ``ESS``."""
    per_token: dict[str, Tensor] = field(default_factory=dict)
    """With ``aggregation: "none"``: each loss term per token, ``[B, T]``, zero outside the mask (TorchRL's
    unreduced output). Empty otherwise."""


ESS_MOMENTS = ("ess_sum_w", "ess_sum_w2")
