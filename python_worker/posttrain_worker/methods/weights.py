"""Weight methods: clone_model, sync_weights (in one worker), weights_listen / weights_receive / weights_send
(worker to worker over ZeroMQ), dist_init / dist_close / weights_broadcast (torch.distributed), weights_get,
weights_digest (docs/training.md, "Weight sync").

Every successful sync sets the target's policy version to the source's plus one, and the source's to the same.
"""

from __future__ import annotations

import copy
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.methods.models import MODEL_ARG, ONLY_MODEL_ARGS
from posttrain_worker.models.store import LoadedModel, ModelStore
from posttrain_worker.protocol.args import Arg, ArgsSchema, ParsedArgs
from posttrain_worker.protocol.errors import WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry, RawTensor
from posttrain_worker.training.errors import WEIGHT_SYNC_FAILED
from posttrain_worker.training.weight_sync import (
    IncomingWeights,
    outgoing_weights,
    spec_of,
    sync_in_worker,
)
from posttrain_worker.transfer import distributed, zmq_transfer
from posttrain_worker.transfer.buckets import buckets_of
from posttrain_worker.transfer.staged_send import copy_weights, send_in_background

DEFAULT_BUCKET_BYTES = 64 * 2**20
DEFAULT_TIMEOUT_MS = 120_000
TRANSPORTS = ("ipc", "tcp")
LISTENER_TTL_S = 3600.0

# ---- arguments -----------------------------------------------------------------------------------------


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
    background: bool


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


def _name(key: str) -> Arg:
    return Arg(key, "string", non_empty=True)


TIMEOUT_MS = Arg("timeoutMs", "integer", default=DEFAULT_TIMEOUT_MS, minimum=1)
BUCKET_BYTES = Arg("bucketBytes", "integer", default=DEFAULT_BUCKET_BYTES, minimum=1)


def build_pair(parsed: ParsedArgs) -> PairArgs:
    if parsed["source"] == parsed["target"]:
        raise parsed.fail('"source" and "target" must be different models')
    return PairArgs(parsed["source"], parsed["target"])


def build_send(parsed: ParsedArgs) -> SendArgs:
    endpoints = parsed["endpoints"]
    if not endpoints:
        raise parsed.fail('"endpoints" must name at least one receiver')
    for index, endpoint in enumerate(endpoints):
        if not endpoint.startswith(("ipc://", "tcp://")):
            raise parsed.fail(f'"endpoints[{index}]" must be an ipc:// or tcp:// address, got {endpoint!r}')
    return SendArgs(
        parsed["model"],
        tuple(endpoints),
        parsed["bucketBytes"],
        parsed["timeoutMs"] / 1000.0,
        parsed["background"],
    )


def build_dist_init(parsed: ParsedArgs) -> DistInitArgs:
    backend, rank, world_size = parsed["backend"], parsed["rank"], parsed["worldSize"]
    if rank >= world_size:
        raise parsed.fail(f'"rank" ({rank}) must be less than "worldSize" ({world_size})')
    if backend == "nccl" and not torch.cuda.is_available():
        raise parsed.fail('"backend" "nccl" needs CUDA, which this worker does not have')
    return DistInitArgs(backend, parsed["initMethod"], rank, world_size, parsed["timeoutMs"] / 1000.0)


CLONE_ARGS = ArgsSchema(
    (
        _name("source"),
        _name("name"),
        Arg("shareParameters", "boolean", default=False),
        Arg("replace", "boolean", default=False),
    ),
    build=lambda p: CloneArgs(p["source"], p["name"], p["shareParameters"], p["replace"]),
)
PAIR_ARGS = ArgsSchema((_name("source"), _name("target")), build=build_pair)
LISTEN_ARGS = ArgsSchema(
    (
        MODEL_ARG,
        Arg("transport", "choice", choices=TRANSPORTS, default="ipc"),
        Arg("host", "string", default="127.0.0.1"),
    ),
    build=ListenArgs,
)
RECEIVE_ARGS = ArgsSchema(
    (_name("token"), TIMEOUT_MS), build=lambda p: ReceiveArgs(p["token"], p["timeoutMs"] / 1000.0)
)
SEND_ARGS = ArgsSchema(
    (
        MODEL_ARG,
        Arg("endpoints", "strings"),
        BUCKET_BYTES,
        TIMEOUT_MS,
        Arg("background", "boolean", default=False),
    ),
    build=build_send,
)
DIST_INIT_ARGS = ArgsSchema(
    (
        Arg("backend", "choice", choices=distributed.BACKENDS, default="gloo"),
        _name("initMethod"),
        Arg("rank", "integer", minimum=0),
        Arg("worldSize", "integer", minimum=1),
        TIMEOUT_MS,
    ),
    build=build_dist_init,
)
BROADCAST_ARGS = ArgsSchema(
    (MODEL_ARG, Arg("src", "integer", default=0, minimum=0), BUCKET_BYTES), build=BroadcastArgs
)


# ---- handlers ------------------------------------------------------------------------------------------


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


def weights_digest(loaded: LoadedModel) -> dict[str, Any]:
    """A fingerprint of the weights a sync would send: sha256 over each tensor's name, dtype, shape and raw
    bytes, in name order. Equal digests mean bit-identical weights (a check that a sync reached every
    generator), whatever device each model is on."""
    digest = hashlib.sha256()
    total = 0
    with outgoing_weights(loaded.model) as pairs:
        for name, tensor in sorted(pairs, key=lambda pair: pair[0]):
            spec = spec_of(name, tensor)
            digest.update(f"{spec.name}\0{spec.dtype}\0{list(spec.shape)}\0".encode())
            # raw bytes through a uint8 view: works for every dtype (bfloat16 has no numpy equivalent)
            raw = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            digest.update(raw.numpy())
            total += spec.nbytes
        count = len(pairs)
    return {
        "policyVersion": loaded.policy_version,
        "digest": digest.hexdigest(),
        "tensors": count,
        "bytes": total,
    }


class Listeners:
    """Receiving ends opened by ``weights_listen``, waiting for their ``weights_receive``."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[zmq_transfer.Listener, str]] = {}
        self._lock = threading.Lock()  # opened on the I/O thread, taken on the compute thread

    def open(self, model: str, transport: str, host: str) -> dict[str, Any]:
        listener = zmq_transfer.Listener(transport, host)
        token = secrets.token_hex(8)
        with self._lock:
            self._expire()
            self._open[token] = (listener, model)
        return {"token": token, "endpoint": listener.endpoint}

    def take(self, method: str, token: str) -> tuple[zmq_transfer.Listener, str]:
        with self._lock:
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
        IncomingWeights(store.get(args.model))  # fail now for a model that cannot receive
        return listeners.open(args.model, args.transport, args.host)

    def weights_receive(ctx: CallContext, args: ReceiveArgs) -> dict[str, Any]:
        listener, name = listeners.take(ctx.method, args.token)
        try:
            target = store.get(name)
            incoming = IncomingWeights(target)
            deadline = zmq_transfer.Deadline(args.timeout_s, ctx.check_cancelled, ctx.method)
            version, stats = listener.receive(incoming.check, incoming.write, deadline)
        finally:
            listener.close()
        incoming.finish()
        target.policy_version = version
        return {"policyVersion": version, **stats.to_json()}

    def weights_send(ctx: CallContext, args: SendArgs) -> dict[str, Any]:
        source = store.get(args.model)
        version = source.policy_version + 1
        if args.background:
            with outgoing_weights(source.model) as pairs:
                copied = copy_weights(pairs)
            send_in_background(args.endpoints, copied, version, args.bucket_bytes, args.timeout_s, ctx.method)
            source.policy_version = version
            sizes = [t.numel() * t.element_size() for _, t in copied]
            return {
                "policyVersion": version,
                "bytes": sum(sizes),
                "tensors": len(copied),
                "buckets": len(buckets_of(sizes, args.bucket_bytes)),
                "receivers": len(args.endpoints),
                "seconds": 0.0,
                "background": True,
            }
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
            incoming = IncomingWeights(loaded)
            version, moved, buckets = distributed.broadcast_weights(
                args.src, None, None, incoming.check, incoming.write, args.bucket_bytes
            )
            incoming.finish()
        loaded.policy_version = version
        seconds = time.monotonic() - started
        return {"policyVersion": version, "bytes": moved, "buckets": buckets, "seconds": seconds}

    def weights_get(_ctx: CallContext, model: str) -> MethodOutcome:
        loaded = store.get(model)
        with outgoing_weights(loaded.model) as pairs:
            tensors = [RawTensor(t.detach().to("cpu").clone(), name) for name, t in pairs]
        return MethodOutcome({"policyVersion": loaded.policy_version}, tensors)

    def digest(_ctx: CallContext, model: str) -> dict[str, Any]:
        return weights_digest(store.get(model))

    registry.add("clone_model", clone, thread="compute", args=CLONE_ARGS)
    registry.add("sync_weights", sync_weights, thread="compute", args=PAIR_ARGS)
    # on the I/O thread: a generator busy generating still opens its receiving end at once, so the sender can
    # hand over its copy (background send) and go on training; the receive itself queues behind the generation
    registry.add("weights_listen", weights_listen, thread="io", args=LISTEN_ARGS)
    registry.add("weights_receive", weights_receive, thread="compute", args=RECEIVE_ARGS)
    registry.add("weights_send", weights_send, thread="compute", args=SEND_ARGS)
    registry.add("dist_init", dist_init, thread="compute", args=DIST_INIT_ARGS)
    registry.add("dist_close", dist_close, thread="compute")
    registry.add("weights_broadcast", weights_broadcast, thread="compute", args=BROADCAST_ARGS)
    registry.add("weights_get", weights_get, thread="compute", args=ONLY_MODEL_ARGS)
    registry.add("weights_digest", digest, thread="compute", args=ONLY_MODEL_ARGS)
