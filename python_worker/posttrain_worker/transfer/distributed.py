"""Weight broadcast over torch.distributed (gloo between CPU workers, NCCL between GPU workers).

Every worker of the group calls ``init_group`` once (rank 0 hosts the TCP store at ``init_method``), then each
sync is a ``broadcast_weights`` on every rank at once: the source rank broadcasts a manifest (names, dtypes,
shapes, version), every rank checks it against its own model and the group agrees (an all-reduce of the
verdicts) before any weight moves, so a mismatch fails every rank instead of leaving one waiting. Weights then
travel as byte buckets of at most ``bucket_bytes``.

Collectives cannot be cancelled: a rank that never joins leaves the others blocked until the group's timeout.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence
from typing import Any

import torch

from posttrain_worker.codec.types import DTYPE_TO_TORCH
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.training.errors import WEIGHT_SYNC_FAILED
from posttrain_worker.training.weight_sync import TensorSpec, spec_of
from posttrain_worker.transfer.buckets import buckets_of
from posttrain_worker.transfer.errors import DISTRIBUTED_ERROR

BACKENDS = ("gloo", "nccl")


def _dist() -> Any:
    import torch.distributed as dist

    if not dist.is_available():
        raise WorkerFailure(DISTRIBUTED_ERROR, "this torch build has no torch.distributed")
    return dist


def group_info() -> dict[str, Any] | None:
    dist = _dist()
    if not dist.is_initialized():
        return None
    return {"rank": dist.get_rank(), "worldSize": dist.get_world_size(), "backend": str(dist.get_backend())}


def init_group(
    backend: str, init_method: str, rank: int, world_size: int, timeout_s: float
) -> dict[str, Any]:
    dist = _dist()
    if dist.is_initialized():
        raise WorkerFailure(
            DISTRIBUTED_ERROR,
            f"this worker is already in a process group ({group_info()}); close it first",
        )
    try:
        dist.init_process_group(
            backend=backend,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    except (RuntimeError, ValueError) as exc:
        raise WorkerFailure(DISTRIBUTED_ERROR, f"init_process_group failed: {exc}") from None
    info = group_info()
    assert info is not None
    return info


def close_group() -> bool:
    dist = _dist()
    if not dist.is_initialized():
        return False
    dist.destroy_process_group()
    return True


def _require_group() -> Any:
    dist = _dist()
    if not dist.is_initialized():
        raise WorkerFailure(DISTRIBUTED_ERROR, "this worker is in no process group (dist_init first)")
    return dist


def _comm_device(dist: Any) -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )


def _broadcast_bytes(dist: Any, payload: bytes | None, src: int, device: torch.device) -> bytes:
    size = torch.tensor([len(payload) if payload is not None else 0], dtype=torch.int64, device=device)
    dist.broadcast(size, src)
    buf = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    if payload is not None:
        buf.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(buf, src)
    return bytes(buf.cpu().numpy().tobytes())


def broadcast_weights(
    src: int,
    pairs: Sequence[tuple[str, torch.Tensor]] | None,
    version: int | None,
    check: Callable[[list[TensorSpec]], None],
    write: Callable[[str, torch.Tensor], None],
    bucket_bytes: int,
) -> tuple[int, int, int]:
    """One sync on this rank: the source passes ``pairs`` and ``version``, the others ``None``. Returns
    ``(version, bytes, buckets)``."""
    dist = _require_group()
    device = _comm_device(dist)
    is_src = dist.get_rank() == src
    if is_src and (pairs is None or version is None):
        raise WorkerFailure(
            DISTRIBUTED_ERROR, f"rank {src} is the source of this broadcast but has no weights"
        )
    manifest = None
    if is_src:
        assert pairs is not None
        manifest = json.dumps(
            {"version": version, "tensors": [spec_of(n, t).to_json() for n, t in pairs]}
        ).encode()
    decoded = json.loads(_broadcast_bytes(dist, manifest, src, device))
    specs = [TensorSpec(t["name"], t["dtype"], tuple(t["shape"])) for t in decoded["tensors"]]
    problem: WorkerFailure | None = None
    if not is_src:
        try:
            check(specs)
        except WorkerFailure as failure:
            problem = failure
    verdict = torch.tensor([0 if problem is not None else 1], dtype=torch.int64, device=device)
    dist.all_reduce(verdict, op=dist.ReduceOp.MIN)
    if problem is not None:
        raise problem
    if int(verdict.item()) == 0:
        raise WorkerFailure(
            WEIGHT_SYNC_FAILED, "another rank rejected the weights' manifest; nothing was sent"
        )
    sizes = [s.nbytes for s in specs]
    groups = buckets_of(sizes, bucket_bytes)
    total = 0
    for group in groups:
        nbytes = sum(sizes[i] for i in group)
        if is_src:
            assert pairs is not None
            flat = torch.cat([pairs[i][1].detach().reshape(-1).view(torch.uint8).to(device) for i in group])
        else:
            flat = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dist.broadcast(flat, src)
        if not is_src:
            offset = 0
            for i in group:
                spec = specs[i]
                dtype = DTYPE_TO_TORCH[spec.dtype]
                chunk = flat[offset : offset + sizes[i]]
                if offset % dtype.itemsize != 0:
                    chunk = chunk.clone()  # a view as a wider dtype needs an aligned start
                write(spec.name, chunk.view(dtype).reshape(spec.shape))
                offset += sizes[i]
        total += nbytes
    return int(decoded["version"]), total, len(groups)
