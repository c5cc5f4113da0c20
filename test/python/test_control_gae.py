"""GAE of ``posttrain_worker.control.gae`` against TorchRL's own: the functional
``generalized_advantage_estimate`` and the ``GAE`` module (vectorised and not, ``average_gae`` on and off), on
random rewards and values over several envs, with truncations and terminations in mid-trajectory."""

from __future__ import annotations

import pytest
import torch
from peers.require import require_peer
from posttrain_worker.control.gae import generalized_advantage_estimate, standardize_advantage

tensordict = require_peer("tensordict", "tensordict")
functional = require_peer("torchrl.objectives.value.functional", "torchrl")
advantages = require_peer("torchrl.objectives.value", "torchrl")

ENVS, STEPS = 5, 37


def _episode_ends(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(done, terminated)`` [ENVS, STEPS, 1]: ~8% terminations, ~6% truncations (done, not terminated)."""
    gen = torch.Generator().manual_seed(seed)
    terminated = torch.rand(ENVS, STEPS, 1, generator=gen) < 0.08
    truncated = (torch.rand(ENVS, STEPS, 1, generator=gen) < 0.06) & ~terminated
    return terminated | truncated, terminated


def _inputs(seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    done, terminated = _episode_ends(seed)
    assert terminated.any() and (done & ~terminated).any(), "the draw must hold both kinds of episode end"
    return {
        "value": torch.randn(ENVS, STEPS, 1, generator=gen, dtype=dtype),
        "next_value": torch.randn(ENVS, STEPS, 1, generator=gen, dtype=dtype),
        "reward": torch.randn(ENVS, STEPS, 1, generator=gen, dtype=dtype),
        "done": done,
        "terminated": terminated,
    }


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("gamma", "lmbda"), [(0.99, 0.95), (0.9, 0.5), (1.0, 1.0)])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_torchrl_functional(dtype: torch.dtype, gamma: float, lmbda: float, seed: int) -> None:
    x = _inputs(seed, dtype)
    ours = generalized_advantage_estimate(
        gamma, lmbda, x["value"], x["next_value"], x["reward"], x["done"], x["terminated"]
    )
    # TorchRL forms ``gamma * (~terminated).int()`` in the default dtype: float64 runs it with float64 as the
    # default, else its coefficients alone are rounded to float32 (1e-8 relative, 1e-6 over a long trace)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        theirs = functional.generalized_advantage_estimate(
            gamma, lmbda, x["value"], x["next_value"], x["reward"], x["done"], x["terminated"]
        )
    finally:
        torch.set_default_dtype(previous)
    for mine, ref in zip(ours, theirs, strict=True):
        assert mine.dtype == dtype
        torch.testing.assert_close(mine, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("average_gae", [False, True])
@pytest.mark.parametrize("vectorized", [True, False])
def test_matches_torchrl_gae_module(average_gae: bool, vectorized: bool) -> None:
    """TorchRL's ``GAE`` module reading ``state_value`` and ``("next", "state_value")`` from a tensordict of
    batch ``[envs, T]`` (time last), as a collector lays it out."""
    x = _inputs(2, torch.float64)
    td = tensordict.TensorDict(
        {
            "state_value": x["value"],
            "next": {
                "state_value": x["next_value"],
                "reward": x["reward"],
                "done": x["done"],
                "terminated": x["terminated"],
            },
        },
        batch_size=[ENVS, STEPS],
    )
    module = advantages.GAE(
        gamma=0.99, lmbda=0.95, value_network=None, average_gae=average_gae, vectorized=vectorized
    )
    module(td)
    advantage, value_target = generalized_advantage_estimate(
        0.99, 0.95, x["value"], x["next_value"], x["reward"], x["done"], x["terminated"]
    )
    if average_gae:
        advantage = standardize_advantage(advantage)
    torch.testing.assert_close(advantage, td["advantage"], atol=1e-6, rtol=0)
    torch.testing.assert_close(value_target, td["value_target"], atol=1e-6, rtol=0)


def test_done_cuts_the_trace_and_truncation_bootstraps() -> None:
    """Hand-checked on one env of 3 steps: a truncation at t=1 bootstraps from V(s'_1) and stops the trace;
    a termination at t=2 does not bootstrap."""
    value = torch.tensor([[[1.0], [2.0], [3.0]]], dtype=torch.float64)
    next_value = torch.tensor([[[10.0], [20.0], [30.0]]], dtype=torch.float64)
    reward = torch.ones(1, 3, 1, dtype=torch.float64)
    done = torch.tensor([[[False], [True], [True]]])
    terminated = torch.tensor([[[False], [False], [True]]])
    g, lam = 0.5, 0.5
    advantage, _ = generalized_advantage_estimate(g, lam, value, next_value, reward, done, terminated)
    a2 = 1 - 3  # terminated: no bootstrap
    a1 = 1 + g * 20 - 2  # truncated: bootstrap, trace cut
    a0 = (1 + g * 10 - 1) + g * lam * a1
    torch.testing.assert_close(advantage.flatten(), torch.tensor([a0, a1, a2], dtype=torch.float64))
