"""Generalized advantage estimation over ``[..., T, 1]`` (time on dim -2), as TorchRL's
``generalized_advantage_estimate`` defines it with its ``done`` and ``terminated`` signals:

- ``delta_t = r_t + gamma * (1 - terminated_t) * V(s'_t) - V(s_t)``: the next state's value bootstraps unless
  the episode terminated (a truncation still bootstraps from ``V(s'_t)``, the real next observation);
- ``A_t = delta_t + gamma * lmbda * (1 - done_t) * A_{t+1}``: the trace restarts at every ``done`` (terminated
  or truncated), so the rows after it, the next episode, never leak into it;
- ``value_target = A + V(s)``.

``average_gae`` standardises the advantage over the whole batch (unbiased std, floored at 1e-4), as TorchRL's
``GAE(average_gae=True)``.

Usage: ``advantage, value_target = generalized_advantage_estimate(0.99, 0.95, v, v_next, r, done, term)``
"""

from __future__ import annotations

import torch


def generalized_advantage_estimate(
    gamma: float,
    lmbda: float,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantage, value_target)``, each shaped like ``state_value``; every input is ``[..., T, F]``."""
    shapes = {tuple(t.shape) for t in (state_value, next_state_value, reward, done, terminated)}
    if len(shapes) != 1:
        raise ValueError(f"GAE inputs must share one shape [..., T, F], got {sorted(shapes)}")
    dtype = state_value.dtype
    not_done = (~done).to(dtype)
    not_terminated = (~terminated).to(dtype)
    delta = reward + gamma * not_terminated * next_state_value - state_value
    discount = (lmbda * gamma) * not_done
    advantage = torch.empty_like(delta)
    running = torch.zeros_like(delta[..., 0, :])
    for t in range(delta.shape[-2] - 1, -1, -1):
        running = delta[..., t, :] + discount[..., t, :] * running
        advantage[..., t, :] = running
    return advantage, advantage + state_value


def standardize_advantage(advantage: torch.Tensor) -> torch.Tensor:
    """``(A - mean) / max(std, 1e-4)`` over every element (``GAE(average_gae=True)``)."""
    return (advantage - advantage.mean()) / advantage.std().clamp_min(1e-4)
