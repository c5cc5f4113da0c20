"""The control_* worker methods through a real worker over ZeroMQ: create, act, update, save, load, close;
shapes and dtypes; determinism (argmax; sampling by seed); save -> load in a second worker; bad arguments and
payloads answered with a typed error while the worker keeps serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.codec import TensorBatch
from posttrain_worker.control.agent import Agent
from posttrain_worker.control.config import read_agent_config
from posttrain_worker.validation import ArgReader
from worker_harness import Client, call, error, ok, worker_client

OBS = 4
CARTPOLE = {
    "observationSize": OBS,
    "action": {"type": "categorical", "n": 2},
    "actor": {"hidden": [32, 32], "activation": "tanh"},
    "critic": {"hidden": [32], "activation": "relu"},
    "optimizer": {"type": "adam", "lr": 3e-3, "eps": 1e-8, "weightDecay": 0.0},
    "loss": {
        "clipEpsilon": 0.2,
        "entropyBonus": True,
        "entropyCoeff": 0.01,
        "criticCoeff": 1.0,
        "lossCriticType": "smooth_l1",
        "normalizeAdvantage": True,
        "clipValue": None,
    },
    "advantage": {"gamma": 0.99, "lmbda": 0.95, "averageGae": False},
    "maxGradNorm": 0.5,
    "seed": 11,
    "replace": False,
}
PENDULUM = {
    **CARTPOLE,
    "observationSize": 3,
    "action": {"type": "tanh_normal", "size": 1, "low": -2.0, "high": 2.0},
    "loss": {**CARTPOLE["loss"], "clipValue": 0.2, "lossCriticType": "l2"},
}


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with worker_client() as (c, _):
        yield c


def create(client: Client, name: str, **overrides: Any) -> dict[str, Any]:
    reply, _ = client.call("control_create", {**CARTPOLE, "name": name, "replace": True, **overrides})
    return reply


def act(client: Client, name: str, observation: torch.Tensor, exploration: str = "random") -> TensorBatch:
    batch = TensorBatch((observation.shape[0],), {"observation": observation})
    reply = call(client, "control_act", {"name": name, "exploration": exploration}, batch)
    ok(reply)
    return reply["batch"]


def local_agent(config: dict[str, Any]) -> Agent:
    """The agent the worker builds for ``config`` (same seed, same weights), in this process."""
    raw = {k: v for k, v in config.items() if k not in ("name", "replace")}
    reader = ArgReader("test", raw)
    agent = read_agent_config(reader)
    reader.finish()
    return Agent(agent)


def rollout(num_envs: int, steps: int, seed: int, obs: int = OBS, size: int | None = None) -> TensorBatch:
    """A batch of ``num_envs * steps`` env-major rows with random observations, rewards and episode ends."""
    gen = torch.Generator().manual_seed(seed)
    rows = num_envs * steps
    terminated = torch.rand(rows, 1, generator=gen) < 0.05
    done = terminated | (torch.rand(rows, 1, generator=gen) < 0.05)
    if size is None:
        action = torch.randint(0, 2, (rows,), generator=gen)
    else:
        action = torch.rand(rows, size, generator=gen) * 4 - 2
    return TensorBatch(
        (rows,),
        {
            "observation": torch.randn(rows, obs, generator=gen),
            "action": action,
            "action_log_prob": -torch.rand(rows, generator=gen) - 0.2,
            "next": {
                "observation": torch.randn(rows, obs, generator=gen),
                "reward": torch.rand(rows, 1, generator=gen),
                "done": done,
                "terminated": terminated,
            },
        },
    )


def update(client: Client, name: str, batch: TensorBatch, **args: Any) -> dict[str, Any]:
    settings = {"numEnvs": 4, "epochs": 2, "miniBatchSize": 24, **args}
    return call(client, "control_update", {"name": name, **settings}, batch)


# ---- create / act --------------------------------------------------------------------------------------


def test_create_reports_parameter_counts(client: Client) -> None:
    result = ok(create(client, "counts"))
    assert result == {
        "name": "counts",
        "actorParameters": (4 * 32 + 32) + (32 * 32 + 32) + (32 * 2 + 2),
        "criticParameters": (4 * 32 + 32) + (32 + 1),
    }
    assert error(create(client, "counts", replace=False), "AGENT_EXISTS")


def test_act_categorical_shapes_dtypes_and_deterministic_argmax(client: Client) -> None:
    ok(create(client, "cat"))
    observation = torch.randn(8, OBS, generator=torch.Generator().manual_seed(0))
    out = act(client, "cat", observation)
    action, log_prob = out.columns["action"], out.columns["action_log_prob"]
    assert isinstance(action, torch.Tensor) and isinstance(log_prob, torch.Tensor)
    assert (action.dtype, tuple(action.shape)) == (torch.int64, (8,))
    assert (log_prob.dtype, tuple(log_prob.shape)) == (torch.float32, (8,))
    assert ((action == 0) | (action == 1)).all() and (log_prob <= 0).all()

    mine = local_agent({**CARTPOLE, "name": "cat"})
    with torch.no_grad():
        dist = mine.actor(observation)
        expected = dist.logits.argmax(-1)
        det = act(client, "cat", observation, "deterministic")
        torch.testing.assert_close(det.columns["action"], expected)
        torch.testing.assert_close(det.columns["action_log_prob"], dist.log_prob(expected))
        torch.testing.assert_close(log_prob, dist.log_prob(action))


def test_act_tanh_normal_is_float32_within_bounds(client: Client) -> None:
    ok(client.call("control_create", {**PENDULUM, "name": "pend", "replace": True})[0])
    observation = torch.randn(8, 3, generator=torch.Generator().manual_seed(1)) * 3
    out = act(client, "pend", observation)
    action = out.columns["action"]
    assert isinstance(action, torch.Tensor)
    assert (action.dtype, tuple(action.shape)) == (torch.float32, (8, 1))
    assert (action.abs() <= 2.0).all()
    mine = local_agent(PENDULUM)
    with torch.no_grad():
        expected = mine.actor(observation).deterministic()
    det = act(client, "pend", observation, "deterministic").columns["action"]
    torch.testing.assert_close(det, expected)


def test_sampling_is_reproducible_by_seed(client: Client) -> None:
    for name, seed in (("s1", 5), ("s2", 5), ("s3", 6)):
        ok(create(client, name, seed=seed))
    observation = torch.zeros(64, OBS)  # 64 draws from one state's policy per call
    draws = {
        name: [act(client, name, observation).columns["action"] for _ in range(3)]
        for name in ("s1", "s2", "s3")
    }
    for a, b in zip(draws["s1"], draws["s2"], strict=True):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, c) for a, c in zip(draws["s1"], draws["s3"], strict=True))
    assert any(not torch.equal(draws["s1"][0], d) for d in draws["s1"][1:]), "successive draws differ"


# ---- update --------------------------------------------------------------------------------------------


def test_update_changes_weights_and_returns_finite_metrics(client: Client) -> None:
    ok(create(client, "upd"))
    observation = torch.randn(16, OBS, generator=torch.Generator().manual_seed(2))
    before = act(client, "upd", observation, "deterministic").columns["action_log_prob"]
    result = ok(update(client, "upd", rollout(4, 30, seed=3)))  # 120 rows / 24 = 5 steps per epoch
    assert result["updates"] == 10
    metrics = result["metrics"]
    expected = {
        "loss_objective",
        "loss_critic",
        "loss_entropy",
        "entropy",
        "clip_fraction",
        "kl_approx",
        "grad_norm",
        "advantage_mean",
        "value_target_mean",
        "explained_variance",
        "value_clip_fraction",
    }
    assert set(metrics) == expected
    assert all(isinstance(v, float) and torch.isfinite(torch.tensor(v)) for v in metrics.values()), metrics
    assert metrics["loss_critic"] > 0 and metrics["entropy"] > 0 and metrics["grad_norm"] > 0
    assert metrics["value_clip_fraction"] == 0  # no clipValue
    after = act(client, "upd", observation, "deterministic").columns["action_log_prob"]
    assert not torch.equal(before, after)
    assert ok(update(client, "upd", rollout(4, 30, seed=4), miniBatchSize=50))["updates"] == 10 + 2 * 3


def test_update_of_a_tanh_normal_agent_reports_value_clipping(client: Client) -> None:
    ok(client.call("control_create", {**PENDULUM, "name": "pend_upd", "replace": True})[0])
    result = ok(update(client, "pend_upd", rollout(2, 20, seed=5, obs=3, size=1), numEnvs=2))
    assert 0 <= result["metrics"]["value_clip_fraction"] <= 1


# ---- save / load ---------------------------------------------------------------------------------------


def test_save_then_load_in_a_second_worker_continues_identically(client: Client, tmp_path: Path) -> None:
    ok(create(client, "ckpt"))
    ok(update(client, "ckpt", rollout(4, 12, seed=6)))
    saved = ok(client.call("control_save", {"name": "ckpt", "dir": str(tmp_path / "agent")})[0])
    assert saved["dir"] == str(tmp_path / "agent") and saved["bytes"] > 0
    assert sorted(p.name for p in (tmp_path / "agent").iterdir()) == ["agent.json", "weights.safetensors"]

    observation = torch.randn(8, OBS, generator=torch.Generator().manual_seed(7))
    next_batch = rollout(4, 12, seed=8)
    here_act = [act(client, "ckpt", observation).columns["action"] for _ in range(3)]
    here_update = ok(update(client, "ckpt", next_batch))
    with worker_client() as (second, _):
        assert ok(second.call("control_load", {"name": "restored", "dir": str(tmp_path / "agent")})[0]) == {
            "name": "restored",
            "updates": 4,
        }
        there_act = [act(second, "restored", observation).columns["action"] for _ in range(3)]
        there_update = ok(update(second, "restored", next_batch))
    for a, b in zip(here_act, there_act, strict=True):
        assert torch.equal(a, b)
    assert here_update == there_update

    # into an existing agent: the same config restores in place, another config is refused
    assert (
        ok(client.call("control_load", {"name": "ckpt", "dir": str(tmp_path / "agent")})[0])["updates"] == 4
    )
    ok(create(client, "other", actor={"hidden": [8], "activation": "tanh"}))
    reply, _ = client.call("control_load", {"name": "other", "dir": str(tmp_path / "agent")})
    assert "another config" in error(reply, "CHECKPOINT_MISMATCH")
    reply, _ = client.call("control_load", {"name": "x", "dir": str(tmp_path / "missing")})
    error(reply, "CHECKPOINT_NOT_FOUND")

    # saving again replaces the checkpoint; a directory that is not one is never replaced
    again = ok(client.call("control_save", {"name": "ckpt", "dir": str(tmp_path / "agent")})[0])
    assert again["dir"] == saved["dir"] and sorted(p.name for p in tmp_path.iterdir()) == ["agent"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    reply, _ = client.call("control_save", {"name": "ckpt", "dir": str(tmp_path / "other")})
    assert '"dir"' in error(reply, "BAD_ARGUMENTS")
    assert (tmp_path / "other" / "notes.txt").read_text() == "keep me"


def test_load_falls_back_to_a_killed_saves_old_copy_and_refuses_a_damaged_one(
    client: Client, tmp_path: Path
) -> None:
    ok(create(client, "crash"))
    ok(update(client, "crash", rollout(4, 12, seed=10)))
    ok(client.call("control_save", {"name": "crash", "dir": str(tmp_path / "agent")})[0])
    observation = torch.randn(8, OBS, generator=torch.Generator().manual_seed(12))
    # a save killed between its two renames leaves only the previous checkpoint, renamed aside
    (tmp_path / "agent").rename(tmp_path / "agent.old-0badf00d")
    assert (
        ok(client.call("control_load", {"name": "crash", "dir": str(tmp_path / "agent")})[0])["updates"] == 4
    )
    ok(client.call("control_save", {"name": "crash", "dir": str(tmp_path / "agent")})[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent"]  # the next save removed the stale copy

    # a damaged agent.json is CHECKPOINT_INVALID (a resume sets it aside) and leaves the agent as it was
    before = act(client, "crash", observation, "deterministic").columns["action_log_prob"]
    state = json.loads((tmp_path / "agent" / "agent.json").read_text())
    for damage in ("optimizer", "updates", "config"):
        broken = {k: v for k, v in state.items() if k != damage}
        (tmp_path / "agent" / "agent.json").write_text(json.dumps(broken))
        reply, _ = client.call("control_load", {"name": "crash", "dir": str(tmp_path / "agent")})
        error(reply, "CHECKPOINT_INVALID")
    after = act(client, "crash", observation, "deterministic").columns["action_log_prob"]
    assert torch.equal(before, after)


def test_close_forgets_the_agent(client: Client) -> None:
    ok(create(client, "bye"))
    assert ok(client.call("control_close", {"name": "bye"})[0]) == {}
    batch = TensorBatch((1,), {"observation": torch.zeros(1, OBS)})
    assert "no agent named 'bye'" in error(
        call(client, "control_act", {"name": "bye"}, batch), "AGENT_NOT_FOUND"
    )
    error(client.call("control_close", {"name": "bye"})[0], "AGENT_NOT_FOUND")


# ---- bad arguments and payloads ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"bogus": 1}, '"bogus"'),
        ({"action": {"type": "gaussian", "n": 2}}, '"action.type"'),
        ({"action": {"type": "categorical", "n": 1}}, '"action.n"'),
        ({"action": {"type": "tanh_normal", "size": 1, "low": 1.0, "high": -1.0}}, '"action.high"'),
        ({"actor": {"hidden": [8, 0], "activation": "tanh"}}, '"actor.hidden[1]"'),
        ({"critic": {"hidden": [8], "activation": "sigmoid"}}, '"critic.activation"'),
        ({"loss": {**CARTPOLE["loss"], "lossCriticType": "huber"}}, '"loss.lossCriticType"'),
        ({"loss": {**CARTPOLE["loss"], "clipEpsilonn": 0.1}}, '"loss.clipEpsilonn"'),
        ({"advantage": {**CARTPOLE["advantage"], "gamma": 1.5}}, '"advantage.gamma"'),
        ({"loss": {**CARTPOLE["loss"], "clipEpsilon": 1.0}}, '"loss.clipEpsilon"'),
        # no defaults in the worker: TS sends every field resolved
        ({"advantage": {"gamma": 0.99, "lmbda": 0.95}}, '"advantage.averageGae"'),
        ({"loss": {k: v for k, v in CARTPOLE["loss"].items() if k != "clipValue"}}, '"loss.clipValue"'),
        ({"optimizer": {"type": "adam", "lr": 0, "eps": 1e-8, "weightDecay": 0}}, '"optimizer.lr"'),
        ({"maxGradNorm": 0}, '"maxGradNorm"'),
        ({"observationSize": 0}, '"observationSize"'),
    ],
)
def test_bad_create_arguments_name_the_field(client: Client, overrides: dict[str, Any], field: str) -> None:
    message = error(create(client, "bad", **overrides), "BAD_ARGUMENTS")
    assert field in message, message
    assert ok(client.call("ping")[0]) == {}


@pytest.mark.parametrize("missing", ["loss", "advantage", "maxGradNorm", "seed", "replace"])
def test_every_create_field_is_required(client: Client, missing: str) -> None:
    args = {k: v for k, v in {**CARTPOLE, "name": "required"}.items() if k != missing}
    message = error(client.call("control_create", args)[0], "BAD_ARGUMENTS")
    assert f'"{missing}"' in message, message


def test_bad_payloads_name_the_key_and_the_worker_keeps_serving(client: Client) -> None:
    ok(create(client, "pay"))
    wide = TensorBatch((2,), {"observation": torch.zeros(2, OBS + 1)})
    message = error(call(client, "control_act", {"name": "pay"}, wide), "BAD_PAYLOAD")
    assert '("observation") must be float32 [2, 4], got float32 [2, 5]' in message
    doubles = TensorBatch((2,), {"observation": torch.zeros(2, OBS, dtype=torch.float64)})
    assert "float64" in error(call(client, "control_act", {"name": "pay"}, doubles), "BAD_PAYLOAD")
    nothing = TensorBatch((2,), {"obs": torch.zeros(2, OBS)})
    assert '("observation")' in error(call(client, "control_act", {"name": "pay"}, nothing), "BAD_PAYLOAD")
    bad_mode = call(client, "control_act", {"name": "pay", "exploration": "greedy"}, wide)
    assert '"exploration"' in error(bad_mode, "BAD_ARGUMENTS")

    full = rollout(4, 6, seed=9)
    partial = TensorBatch(full.batch_size, {k: v for k, v in full.columns.items() if k != "next"})
    message = error(update(client, "pay", partial), "BAD_PAYLOAD")
    assert '("next", "observation")' in message
    nxt = full.columns["next"]
    assert isinstance(nxt, dict)
    without = {k: v for k, v in nxt.items() if k != "terminated"}
    no_terminated = TensorBatch(full.batch_size, {**full.columns, "next": without})
    assert '("next", "terminated")' in error(update(client, "pay", no_terminated), "BAD_PAYLOAD")
    out_of_range = TensorBatch(full.batch_size, {**full.columns, "action": torch.full((24,), 2)})
    assert "[0, 2)" in error(update(client, "pay", out_of_range), "BAD_PAYLOAD")
    float_actions = TensorBatch(full.batch_size, {**full.columns, "action": torch.zeros(24)})
    assert '("action") must be int64 [24]' in error(update(client, "pay", float_actions), "BAD_PAYLOAD")
    assert '"numEnvs"' in error(update(client, "pay", full, numEnvs=5), "BAD_ARGUMENTS")
    assert '"epochs"' in error(update(client, "pay", full, epochs=0), "BAD_ARGUMENTS")
    assert "unknown argument" in error(update(client, "pay", full, gamma=0.9), "BAD_ARGUMENTS")

    nan_reward = TensorBatch(
        full.batch_size, {**full.columns, "next": {**nxt, "reward": torch.full((24, 1), float("nan"))}}
    )
    assert "update 1" in error(update(client, "pay", nan_reward), "NON_FINITE_LOSS")

    assert ok(update(client, "pay", full))["updates"] == 2
    assert act(client, "pay", torch.zeros(3, OBS)).columns["action"].shape == (3,)
