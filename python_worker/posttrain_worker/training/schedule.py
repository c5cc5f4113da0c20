"""Learning-rate schedules: constant, linear and cosine, each with an optional linear warmup
(docs/training.md).

The factor multiplying the optimizer's ``lr`` at step ``s`` (the number of optimizer steps already taken):

- warmup (``s < warmupSteps``): ``s / warmupSteps`` (so the first step of a warmup runs at lr 0, as in
  Hugging Face's ``get_*_schedule_with_warmup``);
- then ``constant``: 1; ``linear``: from 1 down to ``minLrRatio`` at ``totalSteps``; ``cosine``: half a cosine
  from 1 down to ``minLrRatio`` at ``totalSteps``. Past ``totalSteps`` the factor stays at ``minLrRatio``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.validation import ArgReader

SCHEDULES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class ScheduleConfig:
    type: str = "constant"
    warmup_steps: int = 0
    total_steps: int | None = None
    min_lr_ratio: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "warmupSteps": self.warmup_steps}
        if self.type != "constant":
            out.update(totalSteps=self.total_steps, minLrRatio=self.min_lr_ratio)
        return out


def parse_schedule(method: str, raw: Any) -> ScheduleConfig:
    """``{type: "constant", warmupSteps?}`` or ``{type: "linear" | "cosine", totalSteps, warmupSteps?,
    minLrRatio?}``."""
    reader = ArgReader(method, raw, section="schedule")
    kind = reader.choice("type", SCHEDULES)
    warmup = reader.integer("warmupSteps", default=0, minimum=0)
    assert kind is not None and warmup is not None
    if kind == "constant":
        reader.finish()
        return ScheduleConfig(kind, warmup)
    total = reader.integer("totalSteps", minimum=1)
    min_ratio = reader.number("minLrRatio", default=0.0, minimum=0, maximum=1)
    reader.finish()
    assert total is not None and min_ratio is not None
    if warmup >= total:
        raise reader.fail(
            "warmupSteps", f'({warmup}) must be less than "{reader.name("totalSteps")}" ({total})'
        )
    return ScheduleConfig(kind, warmup, total, min_ratio)


def lr_factor(config: ScheduleConfig) -> Callable[[int], float]:
    """The multiplier of the base lr as a function of the number of steps taken."""
    warmup = config.warmup_steps

    def factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        if config.type == "constant" or config.total_steps is None:
            return 1.0
        progress = min(1.0, (step - warmup) / (config.total_steps - warmup))
        decay = 1.0 - progress if config.type == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * decay

    return factor


def build_schedule(
    optimizer: torch.optim.Optimizer, config: ScheduleConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` stepped once after every optimizer step (its state is saved in checkpoints)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config))
