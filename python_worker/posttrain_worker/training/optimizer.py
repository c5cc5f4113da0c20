"""The optimizer of a trainer: AdamW, Adam or SGD from a validated JSON config (docs/training.md).

Defaults are torch's own (AdamW ``weightDecay`` 0.01, Adam and SGD 0; ``betas`` (0.9, 0.999); ``eps`` 1e-8),
so a config means what it means in PyTorch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.validation import ArgReader

OPTIMIZERS = ("adamw", "adam", "sgd")
_DEFAULT_DECAY = {"adamw": 0.01, "adam": 0.0, "sgd": 0.0}


@dataclass(frozen=True)
class OptimizerConfig:
    type: str
    lr: float
    weight_decay: float
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    momentum: float = 0.0
    nesterov: bool = False

    def to_json(self) -> dict[str, Any]:
        """The config as the TS side writes it (camelCase)."""
        out: dict[str, Any] = {"type": self.type, "lr": self.lr, "weightDecay": self.weight_decay}
        if self.type == "sgd":
            out.update(momentum=self.momentum, nesterov=self.nesterov)
        else:
            out.update(betas=list(self.betas), eps=self.eps)
        return out


def parse_optimizer(method: str, raw: Any) -> OptimizerConfig:
    """``{type, lr, weightDecay?, betas?, eps?}`` (Adam family) or ``{type: "sgd", lr, weightDecay?,
    momentum?, nesterov?}``; fields of the other family are rejected as unknown."""
    reader = ArgReader(method, raw, section="optimizer")
    kind = reader.choice("type", OPTIMIZERS)
    assert kind is not None
    lr = reader.number("lr", minimum=0)
    decay = reader.number("weightDecay", default=_DEFAULT_DECAY[kind], minimum=0)
    assert lr is not None and decay is not None
    if kind == "sgd":
        momentum = reader.number("momentum", default=0.0, minimum=0, maximum=1)
        nesterov = reader.boolean("nesterov", default=False)
        reader.finish()
        assert momentum is not None and nesterov is not None
        if nesterov and momentum == 0:
            raise reader.fail("nesterov", f'needs "{reader.name("momentum")}" > 0')
        return OptimizerConfig(kind, lr, decay, momentum=momentum, nesterov=nesterov)
    betas = reader.pair("betas", default=(0.9, 0.999), within=(0, 1))
    eps = reader.number("eps", default=1e-8, greater_than=0)
    reader.finish()
    assert eps is not None
    return OptimizerConfig(kind, lr, decay, betas=betas, eps=eps)


def build_optimizer(params: Iterable[torch.nn.Parameter], config: OptimizerConfig) -> torch.optim.Optimizer:
    """The torch optimizer over ``params`` (only those that require grad should be passed)."""
    plist = list(params)
    if config.type == "adamw":
        return torch.optim.AdamW(
            plist, lr=config.lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay
        )
    if config.type == "adam":
        return torch.optim.Adam(
            plist, lr=config.lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay
        )
    return torch.optim.SGD(
        plist,
        lr=config.lr,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
    )
