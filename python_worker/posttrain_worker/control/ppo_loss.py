"""TorchRL's ``ClipPPOLoss`` on one mini-batch, reimplemented from its definition:

- ``log_weight = log pi(a|s) - log pi_old(a|s)``; ``loss_objective = mean(-min(w * A, clip(w) * A))`` with
  ``log clip(w) = clamp(log_weight, log(1 - eps), log(1 + eps))``; ``clip_fraction`` the share of rows whose
  log-weight was clamped; ``kl_approx = mean(log pi_old - log pi)``;
- ``normalizeAdvantage``: ``A`` standardised over the mini-batch (unbiased std floored at the float32
  resolution, 1e-6), when it has more than one element;
- ``entropyBonus``: ``entropy`` (its mean, a metric) and ``loss_entropy = mean(-entropyCoeff * entropy)``;
  a tanh-normal's entropy is the one-draw estimate of ``actors.py``;
- ``loss_critic = criticCoeff * mean(d(value_target, V(s)))``, ``d`` smooth-L1, L2 (squared error) or L1;
  with ``clipValue``, ``V`` is also clipped to ``V_old ± clipValue`` and the larger loss kept per row
  (``value_clip_fraction``); ``criticCoeff`` 0 drops the critic loss, as TorchRL does;
- ``explained_variance = 1 - Var(target - V) / (Var(target) + eps)`` (population variances).

Usage::

    out = clip_ppo_loss(agent_config.loss, actor, critic, batch, generator)
    (out.loss_objective + out.loss_entropy + out.loss_critic).backward()
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posttrain_worker.control.actors import Actor
from posttrain_worker.control.config import LossConfig
from posttrain_worker.control.critic import Critic


@dataclass(frozen=True)
class PPOBatch:
    """One mini-batch of ``B`` rows; ``advantage``, ``value_target`` and ``state_value`` are ``[B, 1]``."""

    observation: torch.Tensor
    action: torch.Tensor
    action_log_prob: torch.Tensor
    advantage: torch.Tensor
    value_target: torch.Tensor
    state_value: torch.Tensor
    """The critic's value when the batch was collected (value clipping's ``V_old``)."""


@dataclass(frozen=True)
class PPOLossOutput:
    """The loss terms (scalars with gradients; zero when switched off) and the metrics (detached)."""

    loss_objective: torch.Tensor
    loss_entropy: torch.Tensor
    loss_critic: torch.Tensor
    entropy: torch.Tensor
    clip_fraction: torch.Tensor
    kl_approx: torch.Tensor
    explained_variance: torch.Tensor
    value_clip_fraction: torch.Tensor | None

    @property
    def total(self) -> torch.Tensor:
        return self.loss_objective + self.loss_entropy + self.loss_critic


def distance_loss(target: torch.Tensor, value: torch.Tensor, kind: str) -> torch.Tensor:
    """Per element: ``smooth_l1``, ``l2`` (squared error) or ``l1``."""
    if kind == "l2":
        return F.mse_loss(target, value, reduction="none")
    if kind == "l1":
        return F.l1_loss(target, value, reduction="none")
    return F.smooth_l1_loss(target, value, reduction="none")


def clip_ppo_loss(
    config: LossConfig,
    actor: Actor,
    critic: Critic,
    batch: PPOBatch,
    generator: torch.Generator | None = None,
) -> PPOLossOutput:
    """The loss of ``batch`` (see the module docstring); ``generator`` feeds a sampled entropy estimate."""
    advantage = batch.advantage
    if config.normalize_advantage and advantage.numel() > 1:
        eps = torch.finfo(torch.float).resolution
        advantage = (advantage - advantage.mean()) / advantage.std().clamp_min(eps)

    dist = actor(batch.observation)
    log_prob = dist.log_prob(batch.action)
    log_weight = (log_prob - batch.action_log_prob).unsqueeze(-1)
    kl_approx = (batch.action_log_prob - log_prob).unsqueeze(-1).detach().mean()

    gain = log_weight.exp() * advantage
    bound = config.clip_epsilon
    clipped = log_weight.clamp(math.log1p(-bound), math.log1p(bound))
    clip_fraction = (clipped != log_weight).to(log_weight.dtype).mean().detach()
    gain_clipped = clipped.exp() * advantage
    loss_objective = -torch.minimum(gain, gain_clipped).mean()

    zero = loss_objective.new_zeros(())
    entropy_metric = zero
    loss_entropy = zero
    if config.entropy_bonus:
        entropy = dist.entropy(generator)
        entropy_metric = entropy.detach().mean()
        loss_entropy = (-config.entropy_coeff * entropy).mean()

    has_critic = config.critic_coeff > 0
    with contextlib.nullcontext() if has_critic else torch.no_grad():
        value = critic(batch.observation)
        target = batch.value_target
        loss_value = distance_loss(target, value, config.loss_critic_type)
        value_clip_fraction = None
        if config.clip_value is not None:
            pre = value - batch.state_value
            clamped = pre.clamp(-config.clip_value, config.clip_value)
            value_clip_fraction = (pre != clamped).to(value.dtype).mean().detach()
            loss_clipped = distance_loss(target, batch.state_value + clamped, config.loss_critic_type)
            loss_value = torch.maximum(loss_value, loss_clipped)
        loss_critic = (config.critic_coeff * loss_value).mean() if has_critic else zero
    with torch.no_grad():
        residual = torch.var(target - value, correction=0, dim=0)
        total = torch.var(target, correction=0, dim=0)
        explained_variance = (1.0 - residual / (total + torch.finfo(target.dtype).eps)).mean()

    return PPOLossOutput(
        loss_objective=loss_objective,
        loss_entropy=loss_entropy,
        loss_critic=loss_critic,
        entropy=entropy_metric,
        clip_fraction=clip_fraction,
        kl_approx=kl_approx,
        explained_variance=explained_variance,
        value_clip_fraction=value_clip_fraction,
    )
