"""``ClipPPOLoss`` of ``posttrain_worker.control.ppo_loss`` against TorchRL's own ``ClipPPOLoss``, built on
the same weights (ours copied into TorchRL's ``ProbabilisticActor``/``ValueOperator`` over its ``MLP``), on
the same batch: every loss term, ``entropy``, ``clip_fraction``, ``kl_approx``, ``explained_variance``, value
clipping's fraction, and the gradients of every parameter, for each option.

The tanh-normal entropy is a one-draw Monte-Carlo estimate on both sides; seeding TorchRL's global RNG and our
generator with the same seed makes them draw the same noise, so it is compared too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from peers.require import require_peer
from posttrain_worker.control.actors import Actor
from posttrain_worker.control.config import (
    ActionConfig,
    CategoricalAction,
    LossConfig,
    MLPConfig,
    TanhNormalAction,
)
from posttrain_worker.control.critic import Critic
from posttrain_worker.control.ppo_loss import PPOBatch, clip_ppo_loss

tensordict = require_peer("tensordict", "tensordict")
torchrl_modules = require_peer("torchrl.modules", "torchrl")
torchrl_objectives = require_peer("torchrl.objectives", "torchrl")
from tensordict.nn import NormalParamExtractor, TensorDictModule  # noqa: E402

OBS, ROWS, SEED = 5, 48, 7
ACTOR = MLPConfig((16, 16), "tanh")
CRITIC = MLPConfig((16,), "elu")
CATEGORICAL = CategoricalAction(3)
TANH_NORMAL = TanhNormalAction(2, -2.0, 2.0)
ATOL = {torch.float32: 1e-6, torch.float64: 1e-9}


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _ours(action: ActionConfig, dtype: torch.dtype) -> tuple[Actor, Critic]:
    torch.manual_seed(SEED)
    return Actor(OBS, action, ACTOR).to(dtype), Critic(OBS, CRITIC).to(dtype)


def _theirs(action: ActionConfig, actor: Actor, critic: Critic, dtype: torch.dtype) -> tuple[Any, Any]:
    """TorchRL's actor and critic over its own ``MLP``, holding copies of our weights."""
    activation = {"tanh": torch.nn.Tanh, "elu": torch.nn.ELU, "relu": torch.nn.ReLU}
    out = action.n if isinstance(action, CategoricalAction) else 2 * action.size
    policy_mlp = torchrl_modules.MLP(
        in_features=OBS, out_features=out, num_cells=list(ACTOR.hidden), activation_class=activation["tanh"]
    ).to(dtype)
    policy_mlp.load_state_dict(actor.net.state_dict())
    value_mlp = torchrl_modules.MLP(
        in_features=OBS, out_features=1, num_cells=list(CRITIC.hidden), activation_class=activation["elu"]
    ).to(dtype)
    value_mlp.load_state_dict(critic.net.state_dict())
    if isinstance(action, CategoricalAction):
        module = TensorDictModule(policy_mlp, in_keys=["observation"], out_keys=["logits"])
        policy = torchrl_modules.ProbabilisticActor(
            module,
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
    else:
        module = TensorDictModule(
            torch.nn.Sequential(policy_mlp, NormalParamExtractor()),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        )
        policy = torchrl_modules.ProbabilisticActor(
            module,
            in_keys=["loc", "scale"],
            distribution_class=torchrl_modules.TanhNormal,
            distribution_kwargs={"low": action.low, "high": action.high},
            return_log_prob=True,
        )
    value = torchrl_modules.ValueOperator(value_mlp, in_keys=["observation"])
    return policy, value


def _batch(action: ActionConfig, actor: Actor, critic: Critic, dtype: torch.dtype) -> PPOBatch:
    """A batch whose old log-probs are the current ones perturbed (ratios spread across the clip range)."""
    gen = torch.Generator().manual_seed(SEED + 1)
    observation = torch.randn(ROWS, OBS, generator=gen, dtype=dtype)
    with torch.no_grad():
        dist = actor(observation)
        taken = dist.sample(gen)
        old = dist.log_prob(taken) + 0.4 * torch.randn(ROWS, generator=gen, dtype=dtype)
        state_value = critic(observation) + 0.3 * torch.randn(ROWS, 1, generator=gen, dtype=dtype)
    return PPOBatch(
        observation=observation,
        action=taken,
        action_log_prob=old,
        advantage=torch.randn(ROWS, 1, generator=gen, dtype=dtype) * 2 + 0.5,
        value_target=state_value + torch.randn(ROWS, 1, generator=gen, dtype=dtype),
        state_value=state_value,
    )


def _torchrl_loss(config: LossConfig, policy: Any, value: Any) -> Any:
    loss = torchrl_objectives.ClipPPOLoss(
        policy,
        value,
        clip_epsilon=config.clip_epsilon,
        entropy_bonus=config.entropy_bonus,
        entropy_coeff=config.entropy_coeff,
        critic_coeff=config.critic_coeff,
        loss_critic_type=config.loss_critic_type,
        normalize_advantage=config.normalize_advantage,
        clip_value=config.clip_value,
    )
    loss.set_keys(
        sample_log_prob="action_log_prob",
        value="state_value",
        advantage="advantage",
        value_target="value_target",
    )
    return loss


def _loss(**overrides: Any) -> LossConfig:
    """TorchRL's ``ClipPPOLoss`` defaults (the worker has none: TS sends every field), with ``overrides``."""
    defaults: dict[str, Any] = {
        "clip_epsilon": 0.2,
        "entropy_bonus": True,
        "entropy_coeff": 0.01,
        "critic_coeff": 1.0,
        "loss_critic_type": "smooth_l1",
        "normalize_advantage": False,
        "clip_value": None,
    }
    return LossConfig(**{**defaults, **overrides})


CONFIGS = {
    "defaults": _loss(),
    "normalize_advantage": _loss(normalize_advantage=True),
    "clip_value": _loss(clip_value=0.1),
    "clip_value_l2": _loss(clip_value=0.25, loss_critic_type="l2"),
    "l2": _loss(loss_critic_type="l2"),
    "l1": _loss(loss_critic_type="l1", critic_coeff=0.5),
    "no_entropy": _loss(entropy_bonus=False),
    "critic_coeff_0": _loss(critic_coeff=0.0),
    "wide_clip_big_entropy": _loss(clip_epsilon=0.5, entropy_coeff=0.2, critic_coeff=2.0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("action", [CATEGORICAL, TANH_NORMAL], ids=["categorical", "tanh_normal"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_torchrl_clip_ppo_loss(name: str, action: ActionConfig, dtype: torch.dtype) -> None:
    config = CONFIGS[name]
    actor, critic = _ours(action, dtype)
    policy, value = _theirs(action, actor, critic, dtype)
    batch = _batch(action, actor, critic, dtype)
    atol = ATOL[dtype]

    ours = clip_ppo_loss(config, actor, critic, batch, torch.Generator().manual_seed(123))
    ours.total.backward()

    td = tensordict.TensorDict(
        {
            "observation": batch.observation,
            "action": batch.action,
            "action_log_prob": batch.action_log_prob,
            "advantage": batch.advantage,
            "value_target": batch.value_target,
            "state_value": batch.state_value,
        },
        batch_size=[ROWS],
    )
    # TorchRL makes its coefficients (clip bounds) and TanhNormal's bounds in the default dtype: a float64 run
    # is TorchRL's with float64 as the default
    with _default_dtype(dtype):
        loss = _torchrl_loss(config, policy, value)
        torch.manual_seed(123)  # the tanh-normal entropy's draw: the same noise as our generator's
        out = loss(td)
    total = out["loss_objective"] + out.get("loss_entropy", 0.0) + out.get("loss_critic", 0.0)
    total.backward()

    def close(mine: torch.Tensor, ref: torch.Tensor) -> None:
        torch.testing.assert_close(mine.detach(), ref.detach().reshape(mine.shape), atol=atol, rtol=0)

    close(ours.loss_objective, out["loss_objective"])
    close(ours.clip_fraction, out["clip_fraction"])
    close(ours.kl_approx, out["kl_approx"])
    assert 0 < float(ours.clip_fraction) < 1, "the batch must exercise both sides of the clip"
    if config.entropy_bonus:
        close(ours.loss_entropy, out["loss_entropy"])
        close(ours.entropy, out["entropy"])
    else:
        assert "loss_entropy" not in out.keys() and float(ours.loss_entropy) == 0
    if config.critic_coeff > 0:
        close(ours.loss_critic, out["loss_critic"])
        close(ours.explained_variance, out["explained_variance"])
    else:
        assert "loss_critic" not in out.keys() and float(ours.loss_critic) == 0
    if config.clip_value is not None:
        assert ours.value_clip_fraction is not None
        close(ours.value_clip_fraction, out["value_clip_fraction"])
        assert 0 < float(ours.value_clip_fraction) < 1

    theirs_params = [*policy.parameters(), *value.parameters()]
    ours_params = [*actor.parameters(), *critic.parameters()]
    assert len(theirs_params) == len(ours_params)
    for mine, ref in zip(ours_params, theirs_params, strict=True):
        if config.critic_coeff == 0 and any(mine is p for p in critic.parameters()):
            assert mine.grad is None and ref.grad is None
            continue
        assert mine.grad is not None and ref.grad is not None
        torch.testing.assert_close(mine.grad, ref.grad, atol=atol, rtol=0)


@pytest.mark.parametrize("action", [CATEGORICAL, TANH_NORMAL], ids=["categorical", "tanh_normal"])
def test_log_prob_and_deterministic_action_match_torchrl(action: ActionConfig) -> None:
    """The actor's log-prob of given actions and its deterministic action equal TorchRL's actor's."""
    actor, critic = _ours(action, torch.float32)
    policy, _ = _theirs(action, actor, critic, torch.float32)
    batch = _batch(action, actor, critic, torch.float32)
    td = tensordict.TensorDict({"observation": batch.observation}, batch_size=[ROWS])
    with torch.no_grad():
        dist_theirs = policy.get_dist(td)
        dist_ours = actor(batch.observation)
        torch.testing.assert_close(
            dist_ours.log_prob(batch.action), dist_theirs.log_prob(batch.action), atol=1e-6, rtol=0
        )
        deterministic = (
            dist_theirs.mode if isinstance(action, CategoricalAction) else dist_theirs.deterministic_sample
        )
        torch.testing.assert_close(dist_ours.deterministic(), deterministic, atol=1e-6, rtol=0)


def test_categorical_samples_follow_the_policy() -> None:
    actor, _ = _ours(CATEGORICAL, torch.float32)
    observation = torch.randn(3, OBS, generator=torch.Generator().manual_seed(3)).repeat_interleave(20_000, 0)
    with torch.no_grad():
        dist = actor(observation)
        draws = dist.sample(torch.Generator().manual_seed(4)).view(3, 20_000)
        probs = dist.logits.exp().view(3, 20_000, 3)[:, 0]
    frequencies = torch.stack([(draws == k).float().mean(1) for k in range(3)], 1)
    torch.testing.assert_close(frequencies, probs, atol=0.015, rtol=0)


def test_tanh_normal_samples_equal_torchrl_draws_from_the_same_seed() -> None:
    actor, critic = _ours(TANH_NORMAL, torch.float32)
    policy, _ = _theirs(TANH_NORMAL, actor, critic, torch.float32)
    observation = torch.randn(ROWS, OBS, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours = actor(observation).sample(torch.Generator().manual_seed(6))
        torch.manual_seed(6)
        theirs = policy.get_dist(tensordict.TensorDict({"observation": observation}, [ROWS])).sample()
    assert ours.shape == (ROWS, 2) and (ours.abs() <= 2).all()
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
