"""Weight methods: clone_model, sync_weights (in one worker), weights_listen / weights_receive / weights_send
(worker to worker over ZeroMQ), dist_init / dist_close / weights_broadcast (torch.distributed), weights_get
(docs/training.md, "Weight sync").

Every successful sync sets the target's policy version to the source's plus one, and the source's to the same.
"""

from __future__ import annotations

import copy
import secrets
import time
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.models.store import LoadedModel, ModelStore
from posttrain_worker.protocol.args import ArgReader
from posttrain_worker.protocol.errors import WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry, RawTensor
from posttrain_worker.training import distributed, zmq_transfer
from posttrain_worker.training.errors import WEIGHT_SYNC_FAILED
from posttrain_worker.training.weight_sync import (
    check_manifest,
    incoming_targets,
    outgoing_weights,
    sync_in_worker,
)

DEFAULT_BUCKET_BYTES = 64 * 2**20
DEFAULT_TIMEOUT_MS = 120_000
TRANSPORTS = ("ipc", "tcp")
LISTENER_TTL_S = 3600.0

# ---- arguments -----------------------------------------------------------------------------------------


def _name(reader: ArgReader, key: str) -> str:
    value = reader.string(key)
    assert value is not None
    if not value:
        raise reader.fail(f'"{key}" must be a non-empty string')
    return value


def _timeout_s(reader: ArgReader) -> float:
    value = reader.integer("timeoutMs", required=False, default=DEFAULT_TIMEOUT_MS, minimum=1)
    assert value is not None
    return value / 1000.0


def _bucket_bytes(reader: ArgReader) -> int:
    value = reader.integer("bucketBytes", required=False, default=DEFAULT_BUCKET_BYTES, minimum=1)
    assert value is not None
    return value


@dataclass(frozen=True)
class CloneArgs:
    source: str
    name: str
    share: bool
    replace: bool


@dataclass(frozen=True)
class PairArgs:
    source: str
    target: str


@dataclass(frozen=True)
class ListenArgs:
    model: str
    transport: str
    host: str


@dataclass(frozen=True)
class ReceiveArgs:
    token: str
    timeout_s: float


@dataclass(frozen=True)
class SendArgs:
    model: str
    endpoints: tuple[str, ...]
    bucket_bytes: int
    timeout_s: float


@dataclass(frozen=True)
class DistInitArgs:
    backend: str
    init_method: str
    rank: int
    world_size: int
    timeout_s: float


@dataclass(frozen=True)
class BroadcastArgs:
    model: str
    src: int
    bucket_bytes: int


def parse_clone(method: str, args: dict[str, Any]) -> CloneArgs:
    reader = ArgReader(method, args)
    source, name = _name(reader, "source"), _name(reader, "name")
    share = reader.boolean("shareParameters", required=False, default=False)
    replace = reader.boolean("replace", required=False, default=False)
    reader.finish()
    assert share is not None and replace is not None
    return CloneArgs(source, name, share, replace)


def parse_pair(method: str, args: dict[str, Any]) -> PairArgs:
    reader = ArgReader(method, args)
    pair = PairArgs(_name(reader, "source"), _name(reader, "target"))
    reader.finish()
    if pair.source == pair.target:
        raise reader.fail('"source" and "target" must be different models')
    return pair


def parse_listen(method: str, args: dict[str, Any]) -> ListenArgs:
    reader = ArgReader(method, args)
    model = _name(reader, "model")
    transport = reader.choice("transport", TRANSPORTS, required=False, default="ipc")
    host = reader.string("host", required=False, default="127.0.0.1")
    reader.finish()
    assert transport is not None and host is not None
    return ListenArgs(model, transport, host)


def parse_receive(method: str, args: dict[str, Any]) -> ReceiveArgs:
    reader = ArgReader(method, args)
    token = _name(reader, "token")
    timeout_s = _timeout_s(reader)
    reader.finish()
    return ReceiveArgs(token, timeout_s)


def parse_send(method: str, args: dict[str, Any]) -> SendArgs:
    reader = ArgReader(method, args)
    model = _name(reader, "model")
    endpoints = reader.strings("endpoints")
    bucket_bytes, timeout_s = _bucket_bytes(reader), _timeout_s(reader)
    reader.finish()
    assert endpoints is not None
    if not endpoints:
        raise reader.fail('"endpoints" must name at least one receiver')
    for index, endpoint in enumerate(endpoints):
        if not endpoint.startswith(("ipc://", "tcp://")):
            raise reader.fail(f'"endpoints[{index}]" must be an ipc:// or tcp:// address, got {endpoint!r}')
    return SendArgs(model, tuple(endpoints), bucket_bytes, timeout_s)


def parse_dist_init(method: str, args: dict[str, Any]) -> DistInitArgs:
    reader = ArgReader(method, args)
    backend = reader.choice("backend", distributed.BACKENDS, required=False, default="gloo")
    init_method = _name(reader, "initMethod")
    rank = reader.integer("rank", minimum=0)
    world_size = reader.integer("worldSize", minimum=1)
    timeout_s = _timeout_s(reader)
    reader.finish()
    assert backend is not None and rank is not None and world_size is not None
    if rank >= world_size:
        raise reader.fail(f'"rank" ({rank}) must be less than "worldSize" ({world_size})')
    if backend == "nccl" and not torch.cuda.is_available():
        raise reader.fail('"backend" "nccl" needs CUDA, which this worker does not have')
    return DistInitArgs(backend, init_method, rank, world_size, timeout_s)


def parse_broadcast(method: str, args: dict[str, Any]) -> BroadcastArgs:
    reader = ArgReader(method, args)
    model = _name(reader, "model")
    src = reader.integer("src", required=False, default=0, minimum=0)
    bucket_bytes = _bucket_bytes(reader)
    reader.finish()
    assert src is not None
    return BroadcastArgs(model, src, bucket_bytes)


def parse_model(method: str, args: dict[str, Any]) -> str:
    reader = ArgReader(method, args)
    model = _name(reader, "model")
    reader.finish()
    return model


# ---- handlers ------------------------------------------------------------------------------------------


def _writer(target: LoadedModel) -> tuple[dict[str, torch.Tensor], Any]:
    params = incoming_targets(target.model)

    @torch.no_grad()
    def write(name: str, tensor: torch.Tensor) -> None:
        params[name].copy_(tensor)

    return params, write


def clone_model(store: ModelStore, args: CloneArgs) -> dict[str, Any]:
    """A second name for a model: sharing its parameter tensors (colocated generation) or a frozen deep copy
    (a reference model)."""
    source = store.get(args.source)
    if args.share:
        model = source.model
    else:
        model = copy.deepcopy(source.model)
        model.requires_grad_(False)
        model.eval()
    clone = LoadedModel(
        args.name,
        source.path,
        model,
        source.tokenizer,
        dtype=source.dtype,
        device=source.device,
        policy_version=source.policy_version,
    )
    store.add(clone, replace=args.replace)
    return clone.describe()


class Listeners:
    """Receiving ends opened by ``weights_listen``, waiting for their ``weights_receive``."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[zmq_transfer.Listener, str]] = {}

    def open(self, model: str, transport: str, host: str) -> dict[str, Any]:
        self._expire()
        listener = zmq_transfer.Listener(transport, host)
        token = secrets.token_hex(8)
        self._open[token] = (listener, model)
        return {"token": token, "endpoint": listener.endpoint}

    def take(self, method: str, token: str) -> tuple[zmq_transfer.Listener, str]:
        entry = self._open.pop(token, None)
        if entry is None:
            raise WorkerFailure(
                WEIGHT_SYNC_FAILED, f"{method}: no open listener {token!r} (weights_listen first)"
            )
        return entry

    def _expire(self) -> None:
        now = time.monotonic()
        for token, (listener, _) in list(self._open.items()):
            if now - listener.created > LISTENER_TTL_S:
                listener.close()
                del self._open[token]


def register_weight_methods(registry: MethodRegistry, store: ModelStore) -> None:
    listeners = Listeners()

    def clone(_ctx: CallContext, args: CloneArgs) -> dict[str, Any]:
        return clone_model(store, args)

    def sync_weights(_ctx: CallContext, args: PairArgs) -> dict[str, Any]:
        return sync_in_worker(store.get(args.source), store.get(args.target))

    def weights_listen(_ctx: CallContext, args: ListenArgs) -> dict[str, Any]:
        incoming_targets(store.get(args.model).model)  # fail now for a model that cannot receive
        return listeners.open(args.model, args.transport, args.host)

    def weights_receive(ctx: CallContext, args: ReceiveArgs) -> dict[str, Any]:
        listener, name = listeners.take(ctx.method, args.token)
        try:
            target = store.get(name)
            params, write = _writer(target)
            deadline = zmq_transfer.Deadline(args.timeout_s, ctx.check_cancelled, ctx.method)
            version, stats = listener.receive(
                lambda specs: check_manifest(name, specs, params), write, deadline
            )
        finally:
            listener.close()
        target.policy_version = version
        return {"policyVersion": version, **stats.to_json()}

    def weights_send(ctx: CallContext, args: SendArgs) -> dict[str, Any]:
        source = store.get(args.model)
        version = source.policy_version + 1
        deadline = zmq_transfer.Deadline(args.timeout_s, ctx.check_cancelled, ctx.method)
        with outgoing_weights(source.model) as pairs:
            # One receiver after the other, all with the same version (each confirms before the next starts).
            stats = [
                zmq_transfer.send(e, pairs, version, args.bucket_bytes, deadline) for e in args.endpoints
            ]
        source.policy_version = version
        first = stats[0]
        return {
            "policyVersion": version,
            **first.to_json(),
            "receivers": len(stats),
            "seconds": sum(s.seconds for s in stats),
        }

    def dist_init(_ctx: CallContext, args: DistInitArgs) -> dict[str, Any]:
        return distributed.init_group(
            args.backend, args.init_method, args.rank, args.world_size, args.timeout_s
        )

    def dist_close(_ctx: CallContext, _args: None) -> dict[str, Any]:
        return {"closed": distributed.close_group()}

    def weights_broadcast(_ctx: CallContext, args: BroadcastArgs) -> dict[str, Any]:
        loaded = store.get(args.model)
        info = distributed.group_info()
        started = time.monotonic()
        if info is not None and info["rank"] == args.src:
            version = loaded.policy_version + 1
            with outgoing_weights(loaded.model) as pairs:
                _, moved, buckets = distributed.broadcast_weights(
                    args.src, pairs, version, lambda _specs: None, lambda _n, _t: None, args.bucket_bytes
                )
        else:
            params, write = _writer(loaded)
            version, moved, buckets = distributed.broadcast_weights(
                args.src,
                None,
                None,
                lambda specs: check_manifest(args.model, specs, params),
                write,
                args.bucket_bytes,
            )
        loaded.policy_version = version
        seconds = time.monotonic() - started
        return {"policyVersion": version, "bytes": moved, "buckets": buckets, "seconds": seconds}

    def weights_get(_ctx: CallContext, model: str) -> MethodOutcome:
        loaded = store.get(model)
        with outgoing_weights(loaded.model) as pairs:
            tensors = [RawTensor(t.detach().to("cpu").clone(), name) for name, t in pairs]
        return MethodOutcome({"policyVersion": loaded.policy_version}, tensors)

    registry.add("clone_model", clone, thread="compute", parse_args=parse_clone)
    registry.add("sync_weights", sync_weights, thread="compute", parse_args=parse_pair)
    registry.add("weights_listen", weights_listen, thread="compute", parse_args=parse_listen)
    registry.add("weights_receive", weights_receive, thread="compute", parse_args=parse_receive)
    registry.add("weights_send", weights_send, thread="compute", parse_args=parse_send)
    registry.add("dist_init", dist_init, thread="compute", parse_args=parse_dist_init)
    registry.add("dist_close", dist_close, thread="compute")
    registry.add("weights_broadcast", weights_broadcast, thread="compute", parse_args=parse_broadcast)
    registry.add("weights_get", weights_get, thread="compute", parse_args=parse_model)
