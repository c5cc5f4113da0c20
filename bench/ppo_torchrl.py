"""TorchRL's side of ``npm run bench:ppo``: Gymnasium's CartPole-v1 through TorchRL's ``GymEnv`` in a
``SerialEnv`` (or ``ParallelEnv``) of N copies, an MLP actor as a ``ProbabilisticActor`` (categorical
head) and TorchRL's single-process collector, all in this one Python process (no worker, no bridge).

    python bench/ppo_torchrl.py '{"numEnvs": 8, ...}'      # or the request on stdin
    python bench/ppo_torchrl.py --serve < lines            # the request, then commands, one per line

The request (camelCase, every field optional): ``numEnvs`` (8), ``parallel`` (false: ``SerialEnv``; true:
``ParallelEnv``, one subprocess per copy), ``framesPerBatch`` (2048), ``totalFrames`` (frames of one timed
run, a multiple of ``framesPerBatch``; default ``framesPerBatch``), ``actor`` / ``critic``
(``{"hidden": [64, 64], "activation": "tanh"|"relu"|"elu"}``), ``threads`` (torch threads, default 1),
``seed`` (0), ``reps`` / ``warmup`` (one-shot mode: timed and untimed runs, default 3 / 1), ``train``
(one-shot mode: also time the PPO loop, default false) and ``ppo``: ``{"epochs": 10, "miniBatchSize": 64,
"lr": 3e-4, "maxGradNorm": 1.0, "gamma": 0.99, "lmbda": 0.95, "clipEpsilon": 0.2, "entropyCoeff": 0.01,
"criticCoeff": 1.0, "lossCriticType": "smooth_l1"}`` (bench/ppo.ts sends every field).

- ``collect``: ``totalFrames / framesPerBatch`` batches from the collector (built once, ``total_frames=-1``,
  so a run continues the previous one's episodes, as a training run does): frames (env steps summed over
  the copies) per second of collection.
- ``train``: the same batches, each followed by TorchRL's PPO update: ``GAE`` over the batch ``[N, T]``
  (once per batch, no grad, as the SDK's worker does it), then ``epochs`` passes over shuffled mini-batches
  of ``miniBatchSize`` rows with ``ClipPPOLoss``, gradient-norm clipping and an Adam step: frames per
  second end to end.

TorchRL 0.14 names its single-process synchronous collector ``Collector`` (``SyncDataCollector`` before);
it runs the policy and the env in this process, batch after batch. The one-shot mode prints one JSON
object (medians over ``reps``). ``--serve`` prints ``{"ready": true, ...}`` and answers each line
``collect`` / ``train`` with ``{"ms": ..., "frames": ..., "episodes": ..., "returnMean": ...}`` (the time
measured in here; ``returnMean`` null when no episode ended), so that bench/ppo.ts interleaves its own runs
with these; ``quit`` ends. A failure answers ``{"error": ...}``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

ACTIVATIONS = ("tanh", "relu", "elu")


def log(message: str) -> None:
    print(f"[bench:ppo:torchrl] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class MLPSpec:
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"

    @staticmethod
    def parse(value: dict[str, Any] | None, where: str) -> MLPSpec:
        value = dict(value or {})
        unknown = set(value) - {"hidden", "activation"}
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
        hidden = tuple(int(h) for h in value.get("hidden", (64, 64)))
        activation = str(value.get("activation", "tanh"))
        if activation not in ACTIVATIONS or any(h < 1 for h in hidden):
            raise ValueError(f"{where}: expected hidden sizes >= 1 and activation in {ACTIVATIONS}")
        return MLPSpec(hidden, activation)


@dataclass(frozen=True)
class PPOSpec:
    epochs: int = 10
    mini_batch_size: int = 64
    lr: float = 3e-4
    max_grad_norm: float | None = 1.0
    gamma: float = 0.99
    lmbda: float = 0.95
    clip_epsilon: float = 0.2
    entropy_coeff: float = 0.01
    critic_coeff: float = 1.0
    loss_critic_type: str = "smooth_l1"

    @staticmethod
    def parse(value: dict[str, Any] | None) -> PPOSpec:
        names = {
            "epochs": "epochs",
            "miniBatchSize": "mini_batch_size",
            "lr": "lr",
            "maxGradNorm": "max_grad_norm",
            "gamma": "gamma",
            "lmbda": "lmbda",
            "clipEpsilon": "clip_epsilon",
            "entropyCoeff": "entropy_coeff",
            "criticCoeff": "critic_coeff",
            "lossCriticType": "loss_critic_type",
        }
        value = dict(value or {})
        unknown = set(value) - set(names)
        if unknown:
            raise ValueError(f"request.ppo: unknown fields {sorted(unknown)}")
        return PPOSpec(**{names[k]: v for k, v in value.items()})


@dataclass(frozen=True)
class Request:
    num_envs: int = 8
    parallel: bool = False
    frames_per_batch: int = 2048
    total_frames: int = 2048
    actor: MLPSpec = field(default_factory=MLPSpec)
    critic: MLPSpec = field(default_factory=MLPSpec)
    threads: int = 1
    seed: int = 0
    reps: int = 3
    warmup: int = 1
    train: bool = False
    ppo: PPOSpec = field(default_factory=PPOSpec)

    @staticmethod
    def parse(value: dict[str, Any]) -> Request:
        known = {"numEnvs", "parallel", "framesPerBatch", "totalFrames", "actor", "critic", "threads", "seed"}
        known |= {"reps", "warmup", "train", "ppo"}
        unknown = set(value) - known
        if unknown:
            raise ValueError(f"request: unknown fields {sorted(unknown)}")
        fpb = int(value.get("framesPerBatch", 2048))
        r = Request(
            num_envs=int(value.get("numEnvs", 8)),
            parallel=bool(value.get("parallel", False)),
            frames_per_batch=fpb,
            total_frames=int(value.get("totalFrames", fpb)),
            actor=MLPSpec.parse(value.get("actor"), "request.actor"),
            critic=MLPSpec.parse(value.get("critic"), "request.critic"),
            threads=int(value.get("threads", 1)),
            seed=int(value.get("seed", 0)),
            reps=int(value.get("reps", 3)),
            warmup=int(value.get("warmup", 1)),
            train=bool(value.get("train", False)),
            ppo=PPOSpec.parse(value.get("ppo")),
        )
        if r.num_envs < 1 or r.frames_per_batch % r.num_envs != 0:
            raise ValueError("request.framesPerBatch: expected a multiple of numEnvs (>= 1)")
        if r.total_frames < r.frames_per_batch or r.total_frames % r.frames_per_batch != 0:
            raise ValueError("request.totalFrames: expected a positive multiple of framesPerBatch")
        if r.threads < 1 or r.reps < 1 or r.warmup < 0:
            raise ValueError("request: expected threads >= 1, reps >= 1, warmup >= 0")
        return r


class Baseline:
    """The env, actor, critic, collector and PPO update, built once; ``run()`` times one run."""

    def __init__(self, request: Request) -> None:
        import torch
        from tensordict.nn import TensorDictModule
        from torch import nn
        from torchrl.collectors import Collector
        from torchrl.envs import GymEnv, ParallelEnv, SerialEnv
        from torchrl.modules import MLP, ProbabilisticActor, ValueOperator
        from torchrl.objectives import ClipPPOLoss
        from torchrl.objectives.value import GAE

        self.request = request
        self.torch = torch
        torch.set_num_threads(request.threads)
        torch.manual_seed(request.seed)
        acts: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}

        def make_env() -> GymEnv:
            # integer actions, as the SDK's CartPoleEnv takes them (GymEnv's default is one-hot)
            return GymEnv("CartPole-v1", categorical_action_encoding=True)

        batched = ParallelEnv if request.parallel else SerialEnv
        self.env = batched(request.num_envs, make_env)
        self.env.set_seed(request.seed)
        obs_size = int(self.env.observation_spec["observation"].shape[-1])
        n_actions = int(self.env.action_spec.space.n)

        def mlp(out: int, spec: MLPSpec) -> nn.Module:
            return MLP(
                in_features=obs_size,
                out_features=out,
                num_cells=list(spec.hidden),
                activation_class=acts[spec.activation],
            )

        logits = TensorDictModule(mlp(n_actions, request.actor), in_keys=["observation"], out_keys=["logits"])
        self.actor = ProbabilisticActor(
            logits,
            in_keys=["logits"],
            out_keys=["action"],
            spec=self.env.full_action_spec_unbatched,
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
        self.critic = ValueOperator(mlp(1, request.critic), in_keys=["observation"])
        self.actor_parameters = sum(p.numel() for p in self.actor.parameters())
        self.collector = Collector(
            self.env,
            self.actor,
            frames_per_batch=request.frames_per_batch,
            total_frames=-1,
            auto_register_policy_transforms=False,  # the MLP policy needs no transform (no recurrent state)
        )
        self.batches = iter(self.collector)
        ppo = request.ppo
        self.gae = GAE(gamma=ppo.gamma, lmbda=ppo.lmbda, value_network=self.critic, average_gae=False)
        self.loss = ClipPPOLoss(
            self.actor,
            self.critic,
            clip_epsilon=ppo.clip_epsilon,
            entropy_bonus=True,
            entropy_coeff=ppo.entropy_coeff,
            critic_coeff=ppo.critic_coeff,
            loss_critic_type=ppo.loss_critic_type,
            normalize_advantage=False,
        )
        self.optimizer = torch.optim.Adam(self.loss.parameters(), lr=ppo.lr)
        self.generator = torch.Generator().manual_seed(request.seed)
        self.returns = torch.zeros(request.num_envs)

    def _batch(self) -> Any:
        return next(self.batches)

    def _episodes(self, batch: Any, finished: list[float]) -> None:
        """Adds the batch's rewards to each copy's running return; a done step closes an episode."""
        rewards = batch["next", "reward"].reshape(self.request.num_envs, -1)
        done = batch["next", "done"].reshape(self.request.num_envs, -1)
        for t in range(rewards.shape[1]):
            self.returns += rewards[:, t]
            for i in done[:, t].nonzero().flatten().tolist():
                finished.append(float(self.returns[i]))
                self.returns[i] = 0

    def _update(self, batch: Any) -> None:
        torch = self.torch
        ppo = self.request.ppo
        with torch.no_grad():
            self.gae(batch)
        rows = batch.reshape(-1)
        for _ in range(ppo.epochs):
            for index in torch.randperm(rows.shape[0], generator=self.generator).split(ppo.mini_batch_size):
                losses = self.loss(rows[index])
                total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                self.optimizer.zero_grad()
                total.backward()
                if ppo.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(self.loss.parameters(), ppo.max_grad_norm)
                self.optimizer.step()
        self.collector.update_policy_weights_()

    def run(self, train: bool) -> dict[str, float | None]:
        """One timed run of ``totalFrames`` frames: collection only, or with a PPO update after each batch."""
        finished: list[float] = []
        frames = 0
        start = time.perf_counter()
        while frames < self.request.total_frames:
            batch = self._batch()
            frames += batch.numel()
            if train:
                self._update(batch)
            self._episodes(batch, finished)
        ms = (time.perf_counter() - start) * 1000
        mean = statistics.fmean(finished) if finished else None
        return {"ms": ms, "frames": frames, "episodes": len(finished), "returnMean": mean}

    def close(self) -> None:
        self.collector.shutdown()
        if not self.env.is_closed:
            self.env.close()


def facts(base: Baseline) -> dict[str, Any]:
    import gymnasium
    import tensordict
    import torch
    import torchrl

    return {
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "gymnasium": gymnasium.__version__,
        "env": type(base.env).__name__,
        "actorParameters": base.actor_parameters,
    }


def summarize(runs: list[dict[str, float | None]]) -> dict[str, float]:
    ms = statistics.median(float(r["ms"] or 0) for r in runs)
    frames = float(runs[0]["frames"] or 0)
    return {"medianMs": round(ms, 1), "frames": frames, "framesPerS": round(frames / (ms / 1000), 1)}


def serve(replies: Any) -> None:
    request = Request.parse(json.loads(sys.stdin.readline()))
    base = Baseline(request)
    try:
        print(json.dumps({"ready": True, **facts(base)}), file=replies, flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "quit":
                break
            if command not in ("collect", "train"):
                print(json.dumps({"error": f"unknown command {command!r}"}), file=replies, flush=True)
                continue
            print(json.dumps(base.run(train=command == "train")), file=replies, flush=True)
    finally:
        base.close()


def one_shot(request: Request) -> dict[str, Any]:
    base = Baseline(request)
    try:
        modes = ("collect", "train") if request.train else ("collect",)
        report: dict[str, Any] = {"bench": "ppo_torchrl", **facts(base)}
        for mode in modes:
            log(f"{mode}: {request.warmup} warm-up + {request.reps} runs of {request.total_frames} frames")
            for _ in range(request.warmup):
                base.run(train=mode == "train")
            runs = [base.run(train=mode == "train") for _ in range(request.reps)]
            report[mode] = summarize(runs)
        return report
    finally:
        base.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("request", nargs="?", help="the request as JSON (default: read from stdin)")
    parser.add_argument("--serve", action="store_true", help="answer collect/train lines after the request")
    args = parser.parse_args()
    # replies go to the original stdout; anything else written there (library logs, warnings) to stderr
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        if args.serve:
            serve(replies)
            return
        raw = args.request if args.request is not None else sys.stdin.read()
        print(json.dumps(one_shot(Request.parse(json.loads(raw)))), file=replies, flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), file=replies, flush=True)
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
