"""The value network: an MLP from observation to one state value (TorchRL's ``ValueOperator`` over an MLP
with ``out_features=1``, writing ``state_value``)."""

from __future__ import annotations

import torch
from torch import nn

from posttrain_worker.control.config import MLPConfig
from posttrain_worker.control.mlp import MLP


class Critic(nn.Module):
    """``observation [B, obs] -> state_value [B, 1]``.

    Usage: ``Critic(4, MLPConfig((64, 64), "tanh"))(obs)``
    """

    def __init__(self, observation_size: int, config: MLPConfig) -> None:
        super().__init__()
        self.net = MLP(observation_size, 1, config.hidden, config.activation)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation)
