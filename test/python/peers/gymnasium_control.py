"""Plays Gymnasium's own CartPole-v1 and Pendulum-v1 from chosen states, for test/ts/control-envs.test.ts.

Input (JSON on stdin): a list of scenarios ``{"env": "CartPole-v1" | "Pendulum-v1", "state": [float, ...],
"actions": [action, ...] | null, "gains": [float, ...] | null, "max_episode_steps": int | null,
"steps_after_end": int | null}``. Each scenario makes the env (its registered time limit unless
``max_episode_steps`` is given), resets it, sets ``env.unwrapped.state`` and plays until terminated or
truncated, then ``steps_after_end`` steps more (Gymnasium allows them, with a warning). It plays the listed
actions in order (CartPole: 0/1, Pendulum: a torque, sent as a float32 array of one), or, with ``gains``,
CartPole's closed-loop rule ``push right when sum(gain_i * obs_i) > 0`` on the float32 observation.
Output (JSON on stdout): ``{"gymnasium": version, "max_episode_steps": {id: steps}, "results": [...]}``, a
result being ``{"observations", "actions", "rewards", "terminated", "truncated"}`` (the chosen state's
observation first). Exits with code 3 and ``{"unavailable": reason}`` when Gymnasium cannot be imported.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

try:
    import gymnasium as gym
    import numpy as np
except Exception as err:  # any import failure means the peer cannot run
    print(json.dumps({"unavailable": f"{type(err).__name__}: {err}"}))
    sys.exit(3)

ENV_IDS = ("CartPole-v1", "Pendulum-v1")


def _action(env_id: str, scenario: dict[str, Any], obs: Any, t: int) -> Any:
    if scenario.get("gains") is not None:
        score = sum(float(g) * float(o) for g, o in zip(scenario["gains"], obs, strict=True))
        return 1 if score > 0 else 0
    action = scenario["actions"][t]
    return int(action) if env_id == "CartPole-v1" else np.array([action], dtype=np.float32)


def _play(scenario: dict[str, Any]) -> dict[str, list[Any]]:
    env_id = scenario["env"]
    limit = scenario.get("max_episode_steps")
    env = gym.make(env_id) if limit is None else gym.make(env_id, max_episode_steps=limit)
    env.reset(seed=0)
    env.unwrapped.state = np.array(scenario["state"], dtype=np.float64)
    # The observation of the chosen state, as the env's own step would emit it.
    first = env.unwrapped._get_obs() if env_id == "Pendulum-v1" else env.unwrapped.state
    obs = np.array(first, dtype=np.float32)
    out: dict[str, list[Any]] = {"observations": [obs.tolist()], "actions": []}
    out.update(rewards=[], terminated=[], truncated=[])
    t = 0
    after_end = scenario.get("steps_after_end") or 0
    while True:
        action = _action(env_id, scenario, obs, t)
        obs, reward, terminated, truncated, _ = env.step(action)
        out["actions"].append(action if isinstance(action, int) else float(action[0]))
        out["observations"].append(obs.tolist())
        out["rewards"].append(float(reward))
        out["terminated"].append(bool(terminated))
        out["truncated"].append(bool(truncated))
        t += 1
        if terminated or truncated:
            if after_end == 0:
                env.close()
                return out
            after_end -= 1


def main() -> None:
    scenarios = json.load(sys.stdin)
    warnings.simplefilter("ignore")  # stepping after the end warns; the answer is what it returns
    limits = {env_id: gym.spec(env_id).max_episode_steps for env_id in ENV_IDS}
    results = [_play(s) for s in scenarios]
    print(json.dumps({"gymnasium": gym.__version__, "max_episode_steps": limits, "results": results}))


if __name__ == "__main__":
    main()
