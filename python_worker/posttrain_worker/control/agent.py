"""A PPO agent: actor, critic, optimizer and its own sampling generator, living in one worker.

``act`` answers a batch of observations (all envs of a step at once); ``update`` takes a collected batch of
``num_envs * T`` rows in env-major order, computes GAE once (critic values without gradients), then runs
``epochs`` passes over shuffled mini-batches with :func:`clip_ppo_loss`, gradient clipping and an optimizer
step each. Every random draw (weight initialisation aside, which seeds torch's global RNG in a fork) comes
from the agent's generator, seeded at creation and saved in checkpoints: a run is reproducible.

Usage::

    agent = Agent(config)
    action, log_prob = agent.act(observation, deterministic=False)
    metrics = agent.update(rollout, num_envs=8, epochs=4, mini_batch_size=64)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from posttrain_worker.control.actors import Actor
from posttrain_worker.control.config import AgentConfig
from posttrain_worker.control.critic import Critic
from posttrain_worker.control.gae import generalized_advantage_estimate, standardize_advantage
from posttrain_worker.control.ppo_loss import PPOBatch, clip_ppo_loss
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.training.errors import NON_FINITE_GRADIENT, NON_FINITE_LOSS
from posttrain_worker.training.optimizer import build_optimizer


@dataclass(frozen=True)
class Rollout:
    """A collected batch, ``rows = num_envs * T`` in env-major order (row ``env * T + t``).

    ``observation``/``next_observation`` ``[rows, obs]``; ``action`` int64 ``[rows]`` or float ``[rows,
    size]``; ``action_log_prob`` ``[rows]``; ``reward``, ``done``, ``terminated`` ``[rows, 1]`` (bool flags).
    """

    observation: torch.Tensor
    action: torch.Tensor
    action_log_prob: torch.Tensor
    next_observation: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor
    terminated: torch.Tensor


METRICS = (
    "loss_objective",
    "loss_critic",
    "loss_entropy",
    "entropy",
    "clip_fraction",
    "kl_approx",
    "grad_norm",
    "explained_variance",
)


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch's intra-op pool at one thread, restored after: these MLPs are far too small to gain from more,
    and on a busy machine the pool's synchronisation costs dearly (measured on 2 loaded cores: an ``act`` of
    8 rows 170 us on one thread, 2.8 ms on two; an update 0.1 s against 5.8 s)."""
    previous = torch.get_num_threads()
    if previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.actor = Actor(config.observation_size, config.action, config.actor)
            self.critic = Critic(config.observation_size, config.critic)
        self.parameters = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = build_optimizer(self.parameters, config.optimizer)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.updates = 0
        """Optimizer steps taken so far."""

    @property
    def actor_parameters(self) -> int:
        return sum(p.numel() for p in self.actor.parameters())

    @property
    def critic_parameters(self) -> int:
        return sum(p.numel() for p in self.critic.parameters())

    def act(self, observation: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action, action_log_prob)`` for each row: sampled from the agent's generator, or the
        deterministic action (argmax; ``squash(loc)``), with its log-probability under the current policy."""
        with one_thread(), torch.inference_mode():
            dist = self.actor(observation)
            action = dist.deterministic() if deterministic else dist.sample(self.generator)
            return action, dist.log_prob(action)

    def update(
        self,
        rollout: Rollout,
        num_envs: int,
        epochs: int,
        mini_batch_size: int,
        check_cancelled: Callable[[], None] = lambda: None,
    ) -> dict[str, float]:
        """PPO on ``rollout`` (see the module docstring); the metrics are means over the optimizer steps.

        ``NON_FINITE_LOSS`` or ``NON_FINITE_GRADIENT`` (that mini-batch not applied, the steps before it kept)
        when a loss or the gradient norm is NaN or infinite; every metric answered is finite."""
        with one_thread():
            return self._update(rollout, num_envs, epochs, mini_batch_size, check_cancelled)

    def _update(
        self,
        rollout: Rollout,
        num_envs: int,
        epochs: int,
        mini_batch_size: int,
        check_cancelled: Callable[[], None],
    ) -> dict[str, float]:
        config = self.config
        rows = rollout.observation.shape[0]
        if rows == 0 or rows % num_envs:
            raise ValueError(f"the rollout's {rows} rows are not num_envs ({num_envs}) x T")
        steps_per_env = rows // num_envs
        with torch.no_grad():
            value = self.critic(rollout.observation)
            next_value = self.critic(rollout.next_observation)
            shape = (num_envs, steps_per_env, 1)
            advantage, value_target = generalized_advantage_estimate(
                config.advantage.gamma,
                config.advantage.lmbda,
                value.view(shape),
                next_value.view(shape),
                rollout.reward.view(shape).to(value.dtype),
                rollout.done.view(shape),
                rollout.terminated.view(shape),
            )
            advantage_mean = float(advantage.mean())
            if config.advantage.average_gae:
                advantage = standardize_advantage(advantage)
            advantage = advantage.reshape(rows, 1)
            value_target = value_target.reshape(rows, 1)

        sums = dict.fromkeys(METRICS, 0.0)
        value_clip = 0.0
        steps = 0
        for _ in range(epochs):
            order = torch.randperm(rows, generator=self.generator)
            for start in range(0, rows, mini_batch_size):
                check_cancelled()
                index = order[start : start + mini_batch_size]
                batch = PPOBatch(
                    observation=rollout.observation[index],
                    action=rollout.action[index],
                    action_log_prob=rollout.action_log_prob[index],
                    advantage=advantage[index],
                    value_target=value_target[index],
                    state_value=value[index],
                )
                out = clip_ppo_loss(config.loss, self.actor, self.critic, batch, self.generator)
                total = out.total
                if not torch.isfinite(total):
                    raise WorkerFailure(
                        NON_FINITE_LOSS,
                        f"the PPO loss of a mini-batch is {float(total)} (update {self.updates + 1})",
                        {"step": self.updates + 1},
                    )
                self.optimizer.zero_grad(set_to_none=True)
                total.backward()
                grad_norm = self._clip_gradients()
                if not torch.isfinite(grad_norm):
                    raise WorkerFailure(
                        NON_FINITE_GRADIENT,
                        f"the gradient norm of a mini-batch is {float(grad_norm)} "
                        f"(update {self.updates + 1}); the optimizer did not step",
                        {"step": self.updates + 1},
                    )
                self.optimizer.step()
                self.updates += 1
                steps += 1
                for name, tensor in (
                    ("loss_objective", out.loss_objective),
                    ("loss_critic", out.loss_critic),
                    ("loss_entropy", out.loss_entropy),
                    ("entropy", out.entropy),
                    ("clip_fraction", out.clip_fraction),
                    ("kl_approx", out.kl_approx),
                    ("grad_norm", grad_norm),
                    ("explained_variance", out.explained_variance),
                ):
                    sums[name] += float(tensor.detach())
                if out.value_clip_fraction is not None:
                    value_clip += float(out.value_clip_fraction)

        metrics = {name: total / steps for name, total in sums.items()}
        metrics["advantage_mean"] = advantage_mean
        metrics["value_target_mean"] = float(value_target.mean())
        metrics["value_clip_fraction"] = value_clip / steps  # 0 without clipValue
        return metrics

    def _clip_gradients(self) -> torch.Tensor:
        """The gradients' total norm before clipping (clipped to ``max_grad_norm`` when set)."""
        max_norm = self.config.max_grad_norm
        if max_norm is not None:
            return torch.nn.utils.clip_grad_norm_(self.parameters, max_norm)
        grads = [p.grad for p in self.parameters if p.grad is not None]
        return torch.nn.utils.get_total_norm(grads)
