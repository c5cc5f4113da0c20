"""Control-agent methods: control_create, control_act, control_update, control_save, control_load,
control_close (docs/classic-rl.md; the agent itself lives in ``control/``).

One worker holds any number of agents by ``name``. ``control_act`` is called once per environment step for all
envs at once, so it does nothing but check the observation, run the actor without autograd and send two
columns back. A malformed payload (a missing key, a wrong dtype, shape or row count) is ``BAD_PAYLOAD`` naming
the key; a bad argument is ``BAD_ARGUMENTS`` naming the field; an unknown agent is ``AGENT_NOT_FOUND``.
Every config field (and ``replace``) is required: the TS side sends them resolved and holds the only copy
of the defaults (TorchRL's). Agents compute on the CPU whatever the worker's device: their MLPs are far
too small for a GPU to pay off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.keys import key_name, lookup, missing_key
from posttrain_worker.codec.types import TORCH_TO_DTYPE, TensorBatch
from posttrain_worker.control.agent import Agent, Rollout
from posttrain_worker.control.checkpoint import load_agent, save_agent
from posttrain_worker.control.config import AgentConfig, CategoricalAction, read_agent_config
from posttrain_worker.control.errors import AGENT_EXISTS, AGENT_NOT_FOUND
from posttrain_worker.methods.payload_keys import single_batch
from posttrain_worker.protocol.args import Arg, ArgsSchema, ParsedArgs
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry
from posttrain_worker.validation import ArgReader

# ---- arguments -----------------------------------------------------------------------------------------

NAME = Arg("name", "string", non_empty=True)
CONFIG_FIELDS = (
    Arg("observationSize", "integer", minimum=1),
    Arg("action", "object"),
    Arg("actor", "object"),
    Arg("critic", "object"),
    Arg("optimizer", "object"),
    Arg("loss", "object"),
    Arg("advantage", "object"),
    Arg("maxGradNorm", "number", nullable=True),
    Arg("seed", "integer", minimum=0),
)


@dataclass(frozen=True)
class CreateArgs:
    name: str
    config: AgentConfig
    replace: bool


@dataclass(frozen=True)
class ActArgs:
    name: str
    exploration: str


@dataclass(frozen=True)
class UpdateArgs:
    name: str
    num_envs: int
    epochs: int
    mini_batch_size: int


@dataclass(frozen=True)
class DirArgs:
    name: str
    dir: str


def _build_create(parsed: ParsedArgs) -> CreateArgs:
    """The config's nested objects, read by ``control/config.py`` (errors name ``actor.hidden[1]`` etc.)."""
    raw = {arg.name: parsed[arg.name] for arg in CONFIG_FIELDS if arg.name in parsed.given}
    reader = ArgReader(parsed.method, raw)
    config = read_agent_config(reader)
    reader.finish()
    return CreateArgs(parsed["name"], config, parsed["replace"])


CREATE_ARGS = ArgsSchema((NAME, *CONFIG_FIELDS, Arg("replace", "boolean")), build=_build_create)
ACT_ARGS = ArgsSchema(
    (NAME, Arg("exploration", "choice", choices=("random", "deterministic"), default="random")), build=ActArgs
)
UPDATE_ARGS = ArgsSchema(
    (
        NAME,
        Arg("numEnvs", "integer", minimum=1),
        Arg("epochs", "integer", minimum=1),
        Arg("miniBatchSize", "integer", minimum=1),
    ),
    build=UpdateArgs,
)
DIR_ARGS = ArgsSchema((NAME, Arg("dir", "string", non_empty=True)), build=DirArgs)
NAME_ARGS = ArgsSchema((NAME,), build=lambda parsed: parsed["name"])


# ---- payloads ------------------------------------------------------------------------------------------


def _describe(tensor: torch.Tensor) -> str:
    return f"{TORCH_TO_DTYPE.get(tensor.dtype, str(tensor.dtype))} {list(tensor.shape)}"


def _column(
    method: str, batch: TensorBatch, key: tuple[str, ...], dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    """The dense leaf at ``key``, of ``dtype`` and ``shape`` (``BAD_PAYLOAD`` naming the key otherwise)."""
    column = lookup(batch, key)
    if column is None:
        raise missing_key(method, batch, [key])
    expected = f"{TORCH_TO_DTYPE[dtype]} {list(shape)}"
    if not isinstance(column, torch.Tensor) or column.dtype != dtype or tuple(column.shape) != shape:
        got = _describe(column) if isinstance(column, torch.Tensor) else type(column).__name__
        raise WorkerFailure(
            BAD_PAYLOAD,
            f"{method}: {key_name(key)} must be {expected}, got {got}",
            {"key": list(key), "expected": expected},
        )
    return column


def _observation(method: str, batch: TensorBatch, key: tuple[str, ...], agent: Agent) -> torch.Tensor:
    rows = batch.rows
    return _column(method, batch, key, torch.float32, (rows, agent.config.observation_size))


def _action(method: str, batch: TensorBatch, agent: Agent) -> torch.Tensor:
    action_config = agent.config.action
    rows = batch.rows
    if isinstance(action_config, CategoricalAction):
        action = _column(method, batch, ("action",), torch.int64, (rows,))
        if rows and (int(action.min()) < 0 or int(action.max()) >= action_config.n):
            raise WorkerFailure(
                BAD_PAYLOAD,
                f'{method}: ("action") must hold indices in [0, {action_config.n}), got values in '
                f"[{int(action.min())}, {int(action.max())}]",
                {"key": ["action"]},
            )
        return action
    return _column(method, batch, ("action",), torch.float32, (rows, action_config.size))


def _rollout(method: str, batch: TensorBatch, agent: Agent, num_envs: int) -> Rollout:
    rows = batch.rows
    if rows == 0 or rows % num_envs:
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'{method}: "numEnvs" ({num_envs}) must divide the batch\'s rows ({rows}): rows = numEnvs * T, '
            "env-major",
        )
    flag = (rows, 1)
    return Rollout(
        observation=_observation(method, batch, ("observation",), agent),
        action=_action(method, batch, agent),
        action_log_prob=_column(method, batch, ("action_log_prob",), torch.float32, (rows,)),
        next_observation=_observation(method, batch, ("next", "observation"), agent),
        reward=_column(method, batch, ("next", "reward"), torch.float32, flag),
        done=_column(method, batch, ("next", "done"), torch.bool, flag),
        terminated=_column(method, batch, ("next", "terminated"), torch.bool, flag),
    )


# ---- the agents of this worker -------------------------------------------------------------------------


class Agents:
    """The control agents of one worker, by name (used from the compute thread only)."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}

    def create(self, method: str, args: CreateArgs) -> Agent:
        if args.name in self._agents and not args.replace:
            raise WorkerFailure(
                AGENT_EXISTS,
                f"{method}: an agent named {args.name!r} exists; pass replace to start a new one",
            )
        agent = Agent(args.config)
        self._agents[args.name] = agent
        return agent

    def get(self, method: str, name: str) -> Agent:
        agent = self._agents.get(name)
        if agent is None:
            raise WorkerFailure(
                AGENT_NOT_FOUND,
                f"{method}: no agent named {name!r} (control_create first)",
                {"agents": list(self._agents)},
            )
        return agent

    def find(self, name: str) -> Agent | None:
        return self._agents.get(name)

    def put(self, name: str, agent: Agent) -> None:
        self._agents[name] = agent

    def close(self, method: str, name: str) -> None:
        self.get(method, name)
        del self._agents[name]


# ---- registration --------------------------------------------------------------------------------------


def register_control_methods(registry: MethodRegistry) -> Agents:
    agents = Agents()

    def control_create(ctx: CallContext, args: CreateArgs) -> dict[str, Any]:
        agent = agents.create(ctx.method, args)
        return {
            "name": args.name,
            "actorParameters": agent.actor_parameters,
            "criticParameters": agent.critic_parameters,
        }

    def control_act(ctx: CallContext, args: ActArgs) -> MethodOutcome:
        agent = agents.get(ctx.method, args.name)
        batch = single_batch(ctx)
        observation = _observation(ctx.method, batch, ("observation",), agent)
        action, log_prob = agent.act(observation, args.exploration == "deterministic")
        out = TensorBatch((batch.rows,), {"action": action, "action_log_prob": log_prob})
        return MethodOutcome({}, [out])

    def control_update(ctx: CallContext, args: UpdateArgs) -> dict[str, Any]:
        agent = agents.get(ctx.method, args.name)
        rollout = _rollout(ctx.method, single_batch(ctx), agent, args.num_envs)
        metrics = agent.update(rollout, args.num_envs, args.epochs, args.mini_batch_size, ctx.check_cancelled)
        return {"metrics": metrics, "updates": agent.updates}

    def control_save(ctx: CallContext, args: DirArgs) -> dict[str, Any]:
        return save_agent(ctx.method, agents.get(ctx.method, args.name), args.dir)

    def control_load(ctx: CallContext, args: DirArgs) -> dict[str, Any]:
        """Restores into the agent of that name when one exists (same config required), else creates it."""
        agent = load_agent(ctx.method, args.dir, agents.find(args.name))
        agents.put(args.name, agent)
        return {"name": args.name, "updates": agent.updates}

    def control_close(ctx: CallContext, name: str) -> dict[str, Any]:
        agents.close(ctx.method, name)
        return {}

    batch = ("tensordict",)
    registry.add("control_create", control_create, thread="compute", args=CREATE_ARGS)
    # Inline: one small CPU MLP forward per env step under its own inference_mode, no autocast or CUDA stream;
    # run on the I/O thread when the compute thread is idle, +15% collected frames/s (docs/classic-rl.md).
    registry.add("control_act", control_act, thread="compute", args=ACT_ARGS, payloads=batch, inline=True)
    registry.add("control_update", control_update, thread="compute", args=UPDATE_ARGS, payloads=batch)
    registry.add("control_save", control_save, thread="compute", args=DIR_ARGS)
    registry.add("control_load", control_load, thread="compute", args=DIR_ARGS)
    registry.add("control_close", control_close, thread="compute", args=NAME_ARGS)
    return agents
