"""PPO learns: the control agent (in process, no worker, no TS) on Gymnasium's own CartPole-v1, 8 envs, 40
batches of 1024 steps (about 15 s on 2 cores); the mean return of finished episodes must rise from a random
policy's (~22) to over 300 (it reaches 500 here)."""

from __future__ import annotations

import time

import torch
from peers.require import require_peer
from posttrain_worker.control.agent import Agent, Rollout
from posttrain_worker.control.config import read_agent_config
from posttrain_worker.validation import ArgReader

gymnasium = require_peer("gymnasium", "gymnasium")

ENVS, STEPS, ITERATIONS = 8, 128, 40
CONFIG = {
    "observationSize": 4,
    "action": {"type": "categorical", "n": 2},
    "actor": {"hidden": [64, 64], "activation": "tanh"},
    "critic": {"hidden": [64, 64], "activation": "tanh"},
    "optimizer": {"type": "adam", "lr": 2.5e-3, "eps": 1e-8, "weightDecay": 0.0},
    "loss": {
        "clipEpsilon": 0.2,
        "entropyBonus": True,
        "entropyCoeff": 0.0,
        "criticCoeff": 1.0,
        "lossCriticType": "smooth_l1",
        "normalizeAdvantage": True,
        "clipValue": None,
    },
    "advantage": {"gamma": 0.99, "lmbda": 0.95, "averageGae": False},
    "maxGradNorm": 0.5,
    "seed": 0,
}


def make_agent() -> Agent:
    reader = ArgReader("test", CONFIG)
    config = read_agent_config(reader)
    reader.finish()
    return Agent(config)


def train(agent: Agent, iterations: int) -> list[list[float]]:
    """The returns of the episodes finished in each iteration."""
    envs = [gymnasium.make("CartPole-v1") for _ in range(ENVS)]
    obs = torch.stack([torch.as_tensor(env.reset(seed=i)[0]) for i, env in enumerate(envs)])
    running = [0.0] * ENVS
    returns: list[list[float]] = []
    for _ in range(iterations):
        shape = (ENVS, STEPS)
        observations = torch.zeros(*shape, 4)
        next_observations = torch.zeros(*shape, 4)
        actions = torch.zeros(*shape, dtype=torch.int64)
        log_probs = torch.zeros(*shape)
        rewards = torch.zeros(*shape, 1)
        dones = torch.zeros(*shape, 1, dtype=torch.bool)
        terminateds = torch.zeros(*shape, 1, dtype=torch.bool)
        finished: list[float] = []
        for t in range(STEPS):
            action, log_prob = agent.act(obs, deterministic=False)
            observations[:, t], actions[:, t], log_probs[:, t] = obs, action, log_prob
            for i, env in enumerate(envs):
                nxt, reward, terminated, truncated, _ = env.step(int(action[i]))
                next_observations[i, t] = torch.as_tensor(nxt)
                rewards[i, t, 0] = float(reward)
                dones[i, t, 0] = terminated or truncated
                terminateds[i, t, 0] = terminated
                running[i] += float(reward)
                if terminated or truncated:
                    finished.append(running[i])
                    running[i] = 0.0
                    nxt, _ = env.reset()
                obs[i] = torch.as_tensor(nxt)
        rows = ENVS * STEPS
        rollout = Rollout(
            observation=observations.reshape(rows, 4),
            action=actions.reshape(rows),
            action_log_prob=log_probs.reshape(rows),
            next_observation=next_observations.reshape(rows, 4),
            reward=rewards.reshape(rows, 1),
            done=dones.reshape(rows, 1),
            terminated=terminateds.reshape(rows, 1),
        )
        agent.update(rollout, num_envs=ENVS, epochs=4, mini_batch_size=256)
        returns.append(finished)
    for env in envs:
        env.close()
    return returns


def test_ppo_learns_cartpole() -> None:
    start = time.monotonic()
    returns = train(make_agent(), ITERATIONS)
    elapsed = time.monotonic() - start
    # An iteration where no episode ended (all ran past its 128 steps) has no mean: None.
    means = [sum(r) / len(r) if r else None for r in returns]
    print(f"CartPole PPO: mean returns per iteration {means} in {elapsed:.1f} s")
    assert returns[0] and sum(returns[0]) / len(returns[0]) < 40, means
    # The last 5 iterations span 5 * 128 = 640 steps per env, more than CartPole-v1's 500-step limit, so every
    # env ends at least one episode there whatever the policy: pooled, they are never empty.
    recent = [r for finished in returns[-5:] for r in finished]
    assert len(recent) >= ENVS, means
    assert sum(recent) / len(recent) > 300, means
