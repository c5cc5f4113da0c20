"""Policies: an MLP from observation to the parameters of an action distribution, and the two distributions
(categorical; tanh-normal scaled into ``[low, high]``), reimplemented from TorchRL's definitions so that
log-probabilities, entropies and samples agree with TorchRL's ``ProbabilisticActor`` on the same weights.

- Categorical: the MLP gives logits; ``torch.distributions.Categorical``'s normalisation and entropy.
- Tanh-normal: the MLP gives ``2 * size`` numbers split into ``loc`` and a raw scale, mapped as
  ``tensordict.nn.NormalParamExtractor`` maps it (``softplus(x + b) + 0.01`` with ``b`` chosen so a zero input
  gives scale 1, floored at 1e-4); the action is ``mid + half * tanh(x)``, ``x ~ Normal(loc, scale)``,
  ``mid = (high + low) / 2``, ``half = (high - low) / 2``, with tanh kept off ±1 by the float resolution as
  TorchRL's ``SafeTanhTransform`` does (TorchRL's ``TanhNormal`` defaults: no ``tanh_loc``).

A tanh-normal has no closed-form entropy. TorchRL's ``ClipPPOLoss`` then estimates it from one
reparameterised draw per row (``samples_mc_entropy=1``): ``-log p(a)`` at ``a = squash(loc + scale * eps)``,
scored at the pre-tanh value itself; :meth:`TanhNormalDistribution.entropy` does the same, drawing
``eps`` from the agent's generator (so the estimate is random, reproducible by seed, and has pathwise
gradients).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posttrain_worker.control.config import ActionConfig, CategoricalAction, MLPConfig
from posttrain_worker.control.mlp import MLP

SCALE_MIN = 0.01
"""The additive floor of the scale mapping (TorchRL's ``biased_softplus_1.0`` default ``min_val``)."""
SCALE_LB = 1e-4
"""The scale's lower clamp (``NormalParamExtractor``'s ``scale_lb``)."""
SCALE_BIAS = float(torch.tensor(1.0 - SCALE_MIN).expm1().clamp_min(1e-6).log())
"""``softplus^-1(1 - SCALE_MIN)``, in float32 as TorchRL computes it: a zero input maps to scale 1."""
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class CategoricalDistribution:
    """A categorical over the last dimension of ``logits`` (``[B, n]``); actions are int64 ``[B]``."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = F.log_softmax(logits, -1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """Exact: ``-sum p log p`` (``generator`` unused)."""
        logits = self.logits.clamp(min=torch.finfo(self.logits.dtype).min)
        return -(logits * F.softmax(self.logits, -1)).sum(-1)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """Gumbel-max: ``argmax(logits + G)``, ``G = -log(Exp(1))``, an exact draw, a third of
        ``torch.multinomial``'s time on small batches (``act`` runs once per environment step)."""
        noise = torch.empty_like(self.logits).exponential_(generator=generator)
        return (self.logits - noise.log()).argmax(-1)

    def deterministic(self) -> torch.Tensor:
        """The most probable action (argmax)."""
        return self.logits.argmax(-1)


class TanhNormalDistribution:
    """``mid + half * tanh(Normal(loc, scale))`` per dimension, independent; actions ``[B, size]``."""

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor, low: float, high: float) -> None:
        self.loc = loc
        self.scale = scale
        self.mid = (high + low) / 2
        self.half = (high - low) / 2
        self.log_half = math.log(self.half)
        self.limit = 1.0 - torch.finfo(loc.dtype).resolution

    def _normal_log_prob(self, x: torch.Tensor) -> torch.Tensor:
        var = self.scale**2
        return -((x - self.loc) ** 2) / (2 * var) - self.scale.log() - _LOG_SQRT_2PI

    def _log_det(self, x: torch.Tensor) -> torch.Tensor:
        """``log |d action / d x|`` per dimension: tanh's (in its stable form) plus the affine's."""
        return 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x)) + self.log_half

    def _squash(self, x: torch.Tensor) -> torch.Tensor:
        return self.mid + self.half * x.tanh().clamp(-self.limit, self.limit)

    def _score(self, x: torch.Tensor) -> torch.Tensor:
        return self._normal_log_prob(x).sum(-1) - self._log_det(x).sum(-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        y = (action - self.mid) / self.half
        return self._score(y.clamp(-self.limit, self.limit).atanh())

    def entropy(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One-draw estimate ``-log p`` at a reparameterised sample (TorchRL's, see the module docstring)."""
        noise = torch.empty_like(self.loc).normal_(generator=generator)
        return -self._score(self.loc + noise * self.scale)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        noise = torch.empty_like(self.loc).normal_(generator=generator)
        return self._squash(self.loc + noise * self.scale)

    def deterministic(self) -> torch.Tensor:
        """``squash(loc)``: TorchRL's ``deterministic_sample`` (the base normal's mean, pushed through)."""
        return self._squash(self.loc)


ActionDistribution = CategoricalDistribution | TanhNormalDistribution


class Actor(nn.Module):
    """``observation [B, obs]`` -> the action distribution of each row.

    Usage::

        actor = Actor(4, CategoricalAction(2), MLPConfig((64, 64), "tanh"))
        dist = actor(obs)
        action = dist.sample(generator); log_prob = dist.log_prob(action)
    """

    def __init__(self, observation_size: int, action: ActionConfig, config: MLPConfig) -> None:
        super().__init__()
        self.action = action
        out = action.n if isinstance(action, CategoricalAction) else 2 * action.size
        self.net = MLP(observation_size, out, config.hidden, config.activation)

    def forward(self, observation: torch.Tensor) -> ActionDistribution:  # type: ignore[override]
        out = self.net(observation)
        action = self.action
        if isinstance(action, CategoricalAction):
            return CategoricalDistribution(out)
        loc, raw_scale = out.chunk(2, -1)
        scale = (F.softplus(raw_scale + SCALE_BIAS) + SCALE_MIN).clamp_min(SCALE_LB)
        return TanhNormalDistribution(loc, scale, action.low, action.high)
