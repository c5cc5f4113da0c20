"""Runs TorchRL's own replay-buffer transforms (MCAdvantage, TopKRewardSelector) on scenarios read from stdin.

Used by test/ts/mc-advantage.parity.test.ts: the TypeScript side writes the same trajectories to posttrain's
transforms and compares. Input (JSON on stdin): a list of scenarios, each
``{"transform": "MCAdvantage" | "TopKRewardSelector", "options": {snake_case kwargs}, "writes": [...]}``,
a write being a list of trajectories ``{"id": int, "group": str, "rewards": [step reward (nested list)]}``.
Each write becomes one TensorDict of steps (stacked, or lazily stacked when the reward shapes differ or for
TopKRewardSelector) passed to ``transform.inv``. Output (JSON on stdout): per scenario, per write ``null``
or the written rows ``{"traj": [...], "step": [...], "advantage": [[...], ...]}``, and the transform's stats.
Exits with code 3 and ``{"unavailable": reason}`` when TorchRL cannot be imported.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

try:
    import torch
    from tensordict import TensorDict, TensorDictBase, lazy_stack
    from torchrl.data.llm.topk import TopKRewardSelector
    from torchrl.objectives.llm import MCAdvantage
except Exception as err:  # any import failure means the peer cannot run
    print(json.dumps({"unavailable": f"{type(err).__name__}: {err}"}))
    sys.exit(3)


def _key(key: str | list[str]) -> str | tuple[str, ...]:
    return key if isinstance(key, str) else tuple(key)


def _write_td(write: list[dict[str, Any]], prompt_key: str | tuple[str, ...], lazy: bool) -> TensorDictBase:
    steps = []
    for traj in write:
        rewards = traj["rewards"]
        for t, reward in enumerate(rewards):
            steps.append(
                TensorDict(
                    {
                        prompt_key: traj["group"],
                        ("next", "reward"): torch.tensor(reward, dtype=torch.float32),
                        ("next", "done"): torch.tensor([t == len(rewards) - 1]),
                        "traj": torch.tensor(traj["id"]),
                        "step": torch.tensor(t),
                    },
                    batch_size=[],
                )
            )
    shapes = {step["next", "reward"].shape for step in steps}
    return torch.stack(steps) if len(shapes) == 1 and not lazy else lazy_stack(steps)


def _rows(td: TensorDictBase, key: str) -> list[list[float]]:
    value = td.get(key, as_nested_tensor=True)
    return [row.reshape(-1).tolist() for row in value.unbind(0)]


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def run(scenario: dict[str, Any]) -> dict[str, Any]:
    options = dict(scenario["options"])
    if scenario["transform"] == "MCAdvantage":
        options.setdefault("prompt_key", "query")
        options["prompt_key"] = _key(options["prompt_key"])
        if options.get("keep_return_bounds") is not None:
            options["keep_return_bounds"] = tuple(options["keep_return_bounds"])
        transform = MCAdvantage(**options)
    else:
        options.setdefault("prompt_key", ["text", "prompt"])
        options["prompt_key"] = _key(options["prompt_key"])
        transform = TopKRewardSelector(verbose=False, **options)
    outputs: list[dict[str, Any] | None] = []
    for write in scenario["writes"]:
        # TopKRewardSelector concatenates the queued trajectories with torch.cat: lazy stacks let their
        # per-token rewards differ in length (as in its docstring example).
        lazy = isinstance(transform, TopKRewardSelector)
        out = transform.inv(_write_td(write, options["prompt_key"], lazy))
        if out is None:
            outputs.append(None)
            continue
        row: dict[str, Any] = {"traj": out["traj"].tolist(), "step": out["step"].tolist()}
        if "advantage" in out.keys():
            row["advantage"] = _rows(out, "advantage")
        outputs.append(row)
    stats = transform.get_stats() if isinstance(transform, MCAdvantage) else {}
    return {"outputs": outputs, "stats": {k: _finite(v) for k, v in stats.items()}}


def main() -> None:
    scenarios = json.load(sys.stdin)
    print(json.dumps({"torchrl": __import__("torchrl").__version__, "results": [run(s) for s in scenarios]}))


if __name__ == "__main__":
    main()
