"""An agent's config (``control_create``'s arguments less ``name`` and ``replace``): read from JSON with every
mistake a ``BAD_ARGUMENTS`` naming the field, and written back as the same JSON (checkpoints keep it).

Field names are TorchRL's (``ClipPPOLoss``, ``GAE``), in camelCase as the TS configs write them. Every
field is required: the TS configs hold the defaults (TorchRL's) and always send them resolved.

Usage::

    reader = ArgReader("control_create", raw)
    config = read_agent_config(reader)
    reader.finish()  # after the caller's own fields
    config.to_json()  # every field resolved: what a checkpoint keeps
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posttrain_worker.errors import render
from posttrain_worker.training.optimizer import OptimizerConfig, parse_optimizer
from posttrain_worker.validation import ArgReader

ACTIVATIONS = ("tanh", "relu", "elu")
ACTION_TYPES = ("categorical", "tanh_normal")
LOSS_CRITIC_TYPES = ("smooth_l1", "l2", "l1")
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class CategoricalAction:
    """``n`` discrete actions, sent as int64 indices (TorchRL's ``Categorical`` spec)."""

    n: int

    def to_json(self) -> dict[str, Any]:
        return {"type": "categorical", "n": self.n}


@dataclass(frozen=True)
class TanhNormalAction:
    """A ``size``-vector in ``[low, high]`` (TorchRL's ``TanhNormal`` with those bounds)."""

    size: int
    low: float
    high: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "tanh_normal", "size": self.size, "low": self.low, "high": self.high}


ActionConfig = CategoricalAction | TanhNormalAction


@dataclass(frozen=True)
class MLPConfig:
    """Hidden widths (may be empty: one linear layer) and the activation between layers."""

    hidden: tuple[int, ...]
    activation: str

    def to_json(self) -> dict[str, Any]:
        return {"hidden": list(self.hidden), "activation": self.activation}


@dataclass(frozen=True)
class LossConfig:
    """TorchRL's ``ClipPPOLoss`` options."""

    clip_epsilon: float
    entropy_bonus: bool
    entropy_coeff: float
    critic_coeff: float
    loss_critic_type: str
    normalize_advantage: bool
    clip_value: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "clipEpsilon": self.clip_epsilon,
            "entropyBonus": self.entropy_bonus,
            "entropyCoeff": self.entropy_coeff,
            "criticCoeff": self.critic_coeff,
            "lossCriticType": self.loss_critic_type,
            "normalizeAdvantage": self.normalize_advantage,
            "clipValue": self.clip_value,
        }


@dataclass(frozen=True)
class AdvantageConfig:
    """TorchRL's ``GAE`` options."""

    gamma: float
    lmbda: float
    average_gae: bool

    def to_json(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "lmbda": self.lmbda, "averageGae": self.average_gae}


@dataclass(frozen=True)
class AgentConfig:
    observation_size: int
    action: ActionConfig
    actor: MLPConfig
    critic: MLPConfig
    optimizer: OptimizerConfig
    loss: LossConfig
    advantage: AdvantageConfig
    max_grad_norm: float | None
    seed: int

    def to_json(self) -> dict[str, Any]:
        """The config as ``control_create`` takes it (camelCase)."""
        return {
            "observationSize": self.observation_size,
            "action": self.action.to_json(),
            "actor": self.actor.to_json(),
            "critic": self.critic.to_json(),
            "optimizer": self.optimizer.to_json(),
            "loss": self.loss.to_json(),
            "advantage": self.advantage.to_json(),
            "maxGradNorm": self.max_grad_norm,
            "seed": self.seed,
        }


# ---- readers -------------------------------------------------------------------------------------------


def read_action(method: str, raw: Any) -> ActionConfig:
    reader = ArgReader(method, raw, section="action")
    kind = reader.choice("type", ACTION_TYPES)
    if kind == "categorical":
        n = reader.integer("n", minimum=2)
        reader.finish()
        assert n is not None
        return CategoricalAction(n)
    size = reader.integer("size", minimum=1)
    low = reader.number("low")
    high = reader.number("high")
    reader.finish()
    assert size is not None and low is not None and high is not None
    if not high > low:
        raise reader.fail("high", f'must be > "{reader.name("low")}" ({low:g}), got {high:g}')
    return TanhNormalAction(size, low, high)


def read_mlp(method: str, raw: Any, section: str) -> MLPConfig:
    reader = ArgReader(method, raw, section=section)
    hidden = reader.json("hidden")
    if not isinstance(hidden, list):
        raise reader.fail("hidden", f"must be an array of integers >= 1 (may be empty), got {render(hidden)}")
    for index, width in enumerate(hidden):
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise reader.failure(
                f"{reader.name('hidden')}[{index}]", f"must be an integer >= 1, got {render(width)}"
            )
    activation = reader.choice("activation", ACTIVATIONS)
    reader.finish()
    assert activation is not None
    return MLPConfig(tuple(hidden), activation)


def read_optimizer(method: str, raw: Any) -> OptimizerConfig:
    """The trainers' optimizer config (``training/optimizer.py``), with a learning rate > 0."""
    config = parse_optimizer(method, raw)
    if config.lr <= 0:
        raise ArgReader(method, {}).failure("optimizer.lr", f"must be > 0, got {config.lr:g}")
    return config


def read_loss(method: str, raw: Any) -> LossConfig:
    reader = ArgReader(method, raw, section="loss")
    clip_epsilon = reader.number("clipEpsilon", greater_than=0)
    entropy_bonus = reader.boolean("entropyBonus")
    entropy_coeff = reader.number("entropyCoeff", minimum=0)
    critic_coeff = reader.number("criticCoeff", minimum=0)
    loss_critic_type = reader.choice("lossCriticType", LOSS_CRITIC_TYPES)
    normalize = reader.boolean("normalizeAdvantage")
    clip_value = reader.number("clipValue", greater_than=0, nullable=True)
    reader.finish()
    assert clip_epsilon is not None and entropy_coeff is not None and critic_coeff is not None
    if clip_epsilon >= 1:  # the TS schema's bound (0 < clipEpsilon < 1)
        raise reader.fail("clipEpsilon", f"must be < 1, got {render(clip_epsilon)}")
    assert entropy_bonus is not None and normalize is not None and loss_critic_type is not None
    return LossConfig(
        clip_epsilon=clip_epsilon,
        entropy_bonus=entropy_bonus,
        entropy_coeff=entropy_coeff,
        critic_coeff=critic_coeff,
        loss_critic_type=loss_critic_type,
        normalize_advantage=normalize,
        clip_value=clip_value,
    )


def read_advantage(method: str, raw: Any) -> AdvantageConfig:
    reader = ArgReader(method, raw, section="advantage")
    gamma = reader.number("gamma", minimum=0, maximum=1)
    lmbda = reader.number("lmbda", minimum=0, maximum=1)
    average_gae = reader.boolean("averageGae")
    reader.finish()
    assert gamma is not None and lmbda is not None and average_gae is not None
    return AdvantageConfig(gamma, lmbda, average_gae)


def read_agent_config(reader: ArgReader) -> AgentConfig:
    """The config's fields from ``reader`` (the method's top-level arguments, or a checkpoint's saved config);
    the caller reads its other fields (``name``, ``replace``) and calls ``reader.finish()``."""
    method = reader.method
    observation_size = reader.integer("observationSize", minimum=1)
    action = read_action(method, reader.object("action"))
    actor = read_mlp(method, reader.object("actor"), "actor")
    critic = read_mlp(method, reader.object("critic"), "critic")
    optimizer = read_optimizer(method, reader.object("optimizer"))
    loss = read_loss(method, reader.object("loss"))
    advantage = read_advantage(method, reader.object("advantage"))
    max_grad_norm = reader.number("maxGradNorm", greater_than=0, nullable=True)
    seed = reader.integer("seed", minimum=0, maximum=MAX_SEED)
    assert observation_size is not None and seed is not None
    return AgentConfig(
        observation_size, action, actor, critic, optimizer, loss, advantage, max_grad_norm, seed
    )
