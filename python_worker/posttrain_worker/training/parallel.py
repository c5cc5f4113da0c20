"""Data-parallel training on torch.distributed: the policy wrapped with DDP or sharded with FSDP2
(docs/scaling.md).

The trainer group is the worker's default process group (``dist_init``). Every rank gets a shard of the
batch; the loss denominators are all-reduced (:func:`global_norm`), so the summed gradient equals one rank's
on the whole batch. DDP and FSDP average gradients over the ranks, so each rank's loss is scaled by the world
size before backward (:attr:`Group.loss_scale`).

Collectives must be entered by every rank the same number of times: :func:`agree` turns one rank's failure
into every rank's, and :func:`micro_batch_count` makes the ranks run the same number of forwards.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.objectives.batch import LossNorm
from posttrain_worker.validation import ArgReader

STRATEGIES = ("ddp", "fsdp")
TEST_ONLY_LOCAL_NORM_ENV = "POSTTRAIN_TEST_ONLY_LOCAL_NORM"
"""Test-only: each rank normalises by its own counts (the classic data-parallel bug), so a test can show
that the parity check catches it. Never set it outside tests."""


@dataclass(frozen=True)
class ParallelConfig:
    strategy: str

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy}


def parse_parallel(method: str, raw: Any) -> ParallelConfig:
    """``{"strategy": "ddp" | "fsdp"}``."""
    reader = ArgReader(method, raw, section="parallel")
    strategy = reader.choice("strategy", STRATEGIES)
    reader.finish()
    assert strategy is not None
    return ParallelConfig(strategy)


def _local_norm() -> bool:
    return os.environ.get(TEST_ONLY_LOCAL_NORM_ENV) == "1"


def _dist() -> Any:
    import torch.distributed as dist

    return dist


@dataclass(frozen=True)
class Group:
    """This rank's place in the trainer group."""

    strategy: str
    rank: int
    world_size: int
    device: torch.device

    @property
    def loss_scale(self) -> float:
        """DDP and FSDP average the gradients over the ranks; the losses are already global sums."""
        return 1.0 if _local_norm() else float(self.world_size)

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "rank": self.rank, "worldSize": self.world_size}


def join_group(method: str, config: ParallelConfig) -> Group:
    dist = _dist()
    if not dist.is_available() or not dist.is_initialized():
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'{method}: "parallel" needs this worker in a process group (dist_init on every rank first)',
        )
    backend = str(dist.get_backend())
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    return Group(config.strategy, dist.get_rank(), dist.get_world_size(), device)


def _layers(model: Any) -> list[torch.nn.Module]:
    """The transformer blocks (Hugging Face names them in ``_no_split_modules``), each its own FSDP unit."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def wrap(model: Any, group: Group, *, bf16: bool) -> Any:
    """The module the trainer runs forward and backward on: ``DDP(model)`` or ``model`` sharded in place."""
    if group.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [group.device.index] if group.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {}
    if bf16 and group.device.type == "cuda":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in _layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


@contextlib.contextmanager
def gradient_sync(module: Any, group: Group | None, sync: bool) -> Iterator[None]:
    """Gradients are reduced over the ranks only on the last micro-batch's backward."""
    if group is None or sync:
        yield
        return
    if group.strategy == "ddp":
        with module.no_sync():
            yield
        return
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def _all_reduce(values: Sequence[float], group: Group, op: str = "sum") -> list[float]:
    dist = _dist()
    tensor = torch.tensor(list(values), dtype=torch.float64, device=group.device)
    dist.all_reduce(
        tensor, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]
    )
    return [float(v) for v in tensor.cpu()]


def global_norm(norm: LossNorm, group: Group | None) -> LossNorm:
    """The denominators of the whole batch: this rank's token and sequence counts summed over the group."""
    if group is None or _local_norm():
        return norm
    tokens, sequences = _all_reduce([norm.num_tokens, norm.num_sequences], group)
    return LossNorm(num_tokens=int(tokens), num_sequences=int(sequences))


def micro_batch_count(local: int, group: Group | None) -> int:
    """The most micro-batches any rank runs (ranks with fewer add empty ones: FSDP gathers in every
    forward)."""
    if group is None:
        return local
    return int(_all_reduce([local], group, "max")[0])


def agree(problem: WorkerFailure | None, group: Group | None, what: str, *, code: str = BAD_PAYLOAD) -> None:
    """Raises on every rank when any rank has a problem (before a collective that would leave the others
    waiting): the rank's own failure where it has one, else one that names the failing rank."""
    if group is None:
        if problem is not None:
            raise problem
        return
    flags = [0.0] * group.world_size
    flags[group.rank] = 1.0 if problem is not None else 0.0
    failed = _all_reduce(flags, group)
    if problem is not None:
        raise problem
    bad = [rank for rank, flag in enumerate(failed) if flag > 0]
    if bad:
        raise WorkerFailure(
            code,
            f"another rank ({', '.join(map(str, bad))}) of the trainer group failed {what}; "
            "nothing was applied",
            {"ranks": bad},
        )


def sum_metrics(
    total: float, summed: dict[str, torch.Tensor], group: Group | None
) -> tuple[float, dict[str, torch.Tensor]]:
    """The loss and the additive metrics summed over the ranks (each rank's share already has global
    denominators)."""
    if group is None:
        return total, summed
    keys = sorted(summed)
    values = _all_reduce([total, *(float(summed[k]) for k in keys)], group)
    return values[0], {k: torch.tensor(v, dtype=torch.float64) for k, v in zip(keys, values[1:], strict=True)}


def full_state(module: Any, group: Group) -> dict[str, torch.Tensor] | None:
    """The unsharded weights on rank 0's CPU (a collective: every rank calls it); ``None`` on the other
    ranks."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return state if group.rank == 0 else None


def broadcast_token(token: str, group: Group | None) -> str:
    """Rank 0's value of ``token`` on every rank (the checkpoint's temporary directory name)."""
    if group is None:
        return token
    objects: list[Any] = [token]
    _dist().broadcast_object_list(objects, src=0)
    return str(objects[0])


def barrier(group: Group | None) -> None:
    if group is not None:
        # a collective on the group's device (gloo's barrier, or NCCL's on this rank's GPU)
        _all_reduce([0.0], group)
