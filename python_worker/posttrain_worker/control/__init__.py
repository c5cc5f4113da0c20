"""Classic-RL control in the worker: MLP actors (categorical, tanh-normal) and critics, GAE, TorchRL's
``ClipPPOLoss`` and a PPO :class:`Agent` with checkpoints (docs/classic-rl.md). No sockets:
``methods/control.py`` serves it."""

from posttrain_worker.control.agent import Agent, Rollout
from posttrain_worker.control.checkpoint import load_agent, save_agent
from posttrain_worker.control.config import AgentConfig, read_agent_config
from posttrain_worker.control.gae import generalized_advantage_estimate, standardize_advantage
from posttrain_worker.control.ppo_loss import PPOBatch, clip_ppo_loss

__all__ = [
    "Agent",
    "AgentConfig",
    "PPOBatch",
    "Rollout",
    "clip_ppo_loss",
    "generalized_advantage_estimate",
    "load_agent",
    "read_agent_config",
    "save_agent",
    "standardize_advantage",
]
