"""Weight sync through real workers: colocated (shared parameters, nothing moves), a copy within one worker,
raw frames in buckets from one worker straight to another over ZeroMQ (ipc and tcp), and a torch.distributed
broadcast over gloo. After each sync the generator's log-probs for a fixed sequence equal the trainer's
(float32, CPU, within 1e-5) where they differed before, and the policy version moves on every sync.
``weights_digest`` fingerprints a model's weights: equal weights, equal digests; one element changed,
another."""

from __future__ import annotations

import hashlib
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.codec import TensorBatch
from posttrain_worker.codec.types import TORCH_TO_DTYPE
from posttrain_worker.models import make_tiny_model
from safetensors.torch import load_file, save_file
from training_harness import create, rollout, step, weights
from worker_harness import Client, call, error, load, ok, ragged, worker_client

FIXED = ["The quick brown fox jumps over the lazy dog", "2+2=4"]


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another architecture (narrower): its weights cannot fit the tiny model."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "small", seed=0, hidden_size=32)


@pytest.fixture(scope="module")
def pair(tiny_dir: Path) -> Iterator[tuple[Client, Client]]:
    """Two workers: a trainer ("policy") and a generator ("generator"), both from the tiny model."""
    with (
        worker_client({"policy": tiny_dir}) as (trainer, _),
        worker_client({"generator": tiny_dir}) as (generator, _),
    ):
        yield trainer, generator


def log_probs(client: Client, model: str) -> torch.Tensor:
    """The model's log-probs of the fixed sequences, concatenated (float32)."""
    rows = [torch.tensor([ord(c) - 30 for c in text], dtype=torch.int64) for text in FIXED]
    batch = TensorBatch((len(rows),), {"tokens": {"full": ragged(rows, torch.int64)}})
    reply = call(client, "score", {"model": model}, batch)
    ok(reply)
    return reply["batch"].columns["log_probs"]["full"].values.clone()


def version(client: Client, model: str) -> int:
    models = ok(client.call("list_models")[0])["models"]
    return next(m["policyVersion"] for m in models if m["name"] == model)


def train(client: Client, model: str = "policy", steps: int = 2) -> None:
    create(client, model, optimizer={"type": "adam", "lr": 1e-2})
    for s in range(steps):
        ok(step(client, rollout(client, seed=s, model=model), model))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


# ---- in one worker -------------------------------------------------------------------------------------


def test_colocated_generator_shares_parameters(pair: tuple[Client, Client], tiny_dir: Path) -> None:
    trainer, _ = pair
    ok(load(trainer, "policy", tiny_dir, replace=True))
    info = ok(
        trainer.call("clone_model", {"source": "policy", "name": "colocated", "shareParameters": True})[0]
    )
    assert info["policyVersion"] == 0
    train(trainer)
    assert torch.equal(log_probs(trainer, "colocated"), log_probs(trainer, "policy"))  # the same tensors
    for expected in (1, 2):
        result = ok(trainer.call("sync_weights", {"source": "policy", "target": "colocated"})[0])
        assert result == {"policyVersion": expected, "shared": True, "bytes": 0}
        assert version(trainer, "colocated") == expected and version(trainer, "policy") == expected


def test_copy_within_one_worker(pair: tuple[Client, Client], tiny_dir: Path) -> None:
    trainer, _ = pair
    ok(load(trainer, "policy", tiny_dir, replace=True))
    ok(trainer.call("clone_model", {"source": "policy", "name": "copy", "replace": True})[0])
    train(trainer)
    assert max_diff(log_probs(trainer, "copy"), log_probs(trainer, "policy")) > 1e-4
    result = ok(trainer.call("sync_weights", {"source": "policy", "target": "copy"})[0])
    assert result["shared"] is False and result["bytes"] == sum(
        t.numel() * 4 for t in weights(trainer, "policy").values()
    )
    assert max_diff(log_probs(trainer, "copy"), log_probs(trainer, "policy")) < 1e-5
    error(trainer.call("sync_weights", {"source": "policy", "target": "policy"})[0], "BAD_ARGUMENTS")


# ---- worker to worker over ZeroMQ ----------------------------------------------------------------------


def transfer(trainer: Client, generator: Client, *targets: str, **options: Any) -> tuple[Any, list[Any]]:
    """Listen on the generator for each target; receive there and send from the trainer at once."""
    transport = options.pop("transport", "ipc")
    # Every listener first: a weights_receive holds the generator's compute thread until its sender is done.
    listens = [ok(generator.call("weights_listen", {"model": t, "transport": transport})[0]) for t in targets]
    for listen in listens:
        generator.request("weights_receive", {"token": listen["token"], "timeoutMs": 30_000})
    endpoints = [listen["endpoint"] for listen in listens]
    args = {"model": "policy", "endpoints": endpoints, **options}
    sent, _ = trainer.call("weights_send", args, timeout=60)
    return sent, [generator.recv(timeout=60)[0] for _ in targets]


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_zmq_transfer_between_workers(pair: tuple[Client, Client], tiny_dir: Path, transport: str) -> None:
    trainer, generator = pair
    ok(load(trainer, "policy", tiny_dir, replace=True))
    ok(load(generator, "generator", tiny_dir, replace=True))
    for expected in (1, 2):
        train(trainer, steps=1)
        before = log_probs(generator, "generator")
        assert max_diff(before, log_probs(trainer, "policy")) > 1e-4
        sent, replies = transfer(trainer, generator, "generator", bucketBytes=20_000, transport=transport)
        sent, received = ok(sent), ok(replies[0])
        assert sent["policyVersion"] == received["policyVersion"] == expected
        assert sent["buckets"] == received["buckets"] > 3 and sent["bytes"] == received["bytes"]
        assert max_diff(log_probs(generator, "generator"), log_probs(trainer, "policy")) < 1e-5
        assert version(generator, "generator") == expected and version(trainer, "policy") == expected


def test_zmq_transfer_to_two_receivers_with_one_version(pair: tuple[Client, Client], tiny_dir: Path) -> None:
    trainer, generator = pair
    ok(load(trainer, "policy", tiny_dir, replace=True))
    for name in ("first", "second"):
        ok(load(generator, name, tiny_dir, replace=True))
    train(trainer, steps=1)
    sent, replies = transfer(trainer, generator, "first", "second")
    assert ok(sent)["receivers"] == 2 and [ok(r)["policyVersion"] for r in replies] == [1, 1]
    expected = log_probs(trainer, "policy")
    for name in ("first", "second"):
        assert max_diff(log_probs(generator, name), expected) < 1e-5 and version(generator, name) == 1


def test_zmq_transfer_rejects_weights_that_do_not_fit(pair: tuple[Client, Client], small_dir: Path) -> None:
    trainer, generator = pair
    ok(load(generator, "small", small_dir, replace=True))
    before = weights(generator, "small")
    sent, (received,) = transfer(trainer, generator, "small")
    assert "shape" in error(received, "WEIGHT_SYNC_FAILED")
    assert "rejected" in error(sent, "WEIGHT_SYNC_FAILED")
    after = weights(generator, "small")
    assert all(torch.equal(before[k], after[k]) for k in before) and version(generator, "small") == 0


def test_zmq_receive_times_out_without_a_sender(pair: tuple[Client, Client]) -> None:
    _, generator = pair
    listen = ok(generator.call("weights_listen", {"model": "generator"})[0])
    reply, _ = generator.call("weights_receive", {"token": listen["token"], "timeoutMs": 300})
    assert "did not answer within 0.3 s" in error(reply, "WEIGHT_SYNC_FAILED")
    reply, _ = generator.call("weights_receive", {"token": listen["token"]})
    assert "no open listener" in error(reply, "WEIGHT_SYNC_FAILED")
    error(generator.call("weights_listen", {"model": "generator", "transport": "udp"})[0], "BAD_ARGUMENTS")
    error(
        generator.call("weights_send", {"model": "generator", "endpoint": "inproc://x"})[0], "BAD_ARGUMENTS"
    )


# ---- torch.distributed ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def both(
    trainer: Client,
    generator: Client,
    method: str,
    args: dict[str, Any],
    per_side: tuple[dict[str, Any], ...] = ({}, {}),
) -> tuple[Any, Any]:
    """The same collective method on both workers at once (the generator first: it waits for the trainer)."""
    generator.request(method, {**args, **per_side[1]})
    first, _ = trainer.call(method, {**args, **per_side[0]}, timeout=60)
    second, _ = generator.recv(timeout=60)
    return first, second


def test_gloo_broadcast_between_workers(pair: tuple[Client, Client], tiny_dir: Path) -> None:
    trainer, generator = pair
    ok(load(trainer, "policy", tiny_dir, replace=True))
    ok(load(generator, "generator", tiny_dir, replace=True))
    init = {
        "backend": "gloo",
        "initMethod": f"tcp://127.0.0.1:{free_port()}",
        "worldSize": 2,
        "timeoutMs": 30_000,
    }
    a, b = both(trainer, generator, "dist_init", init, ({"rank": 0}, {"rank": 1}))
    assert ok(a) == {"rank": 0, "worldSize": 2, "backend": "gloo"} and ok(b)["rank"] == 1
    try:
        for expected in (1, 2):
            train(trainer, steps=1)
            assert max_diff(log_probs(generator, "generator"), log_probs(trainer, "policy")) > 1e-4
            a, b = both(
                trainer,
                generator,
                "weights_broadcast",
                {"src": 0, "bucketBytes": 50_000},
                ({"model": "policy"}, {"model": "generator"}),
            )
            assert ok(a)["policyVersion"] == ok(b)["policyVersion"] == expected
            assert ok(a)["bytes"] == ok(b)["bytes"] > 0 and ok(a)["buckets"] > 3
            assert max_diff(log_probs(generator, "generator"), log_probs(trainer, "policy")) < 1e-5
        again = trainer.call("dist_init", {**init, "rank": 0})[0]
        assert "already in a process group" in error(again, "DISTRIBUTED_ERROR")
    finally:
        a, b = both(trainer, generator, "dist_close", {})
    assert ok(a) == ok(b) == {"closed": True}
    reply = trainer.call("weights_broadcast", {"model": "policy"})[0]
    assert "no process group" in error(reply, "DISTRIBUTED_ERROR")


# ---- weights_digest ------------------------------------------------------------------------------------


def digest(client: Client, model: str) -> dict[str, Any]:
    return ok(client.call("weights_digest", {"model": model}, timeout=60)[0])


def expected_digest(tensors: dict[str, torch.Tensor]) -> str:
    """The documented encoding, from ``weights_get``'s tensors: per tensor in name order, ``name NUL dtype NUL
    [shape] NUL`` then its raw bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}\0{TORCH_TO_DTYPE[t.dtype]}\0{list(t.shape)}\0".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_weights_digest_fingerprints_the_weights(
    pair: tuple[Client, Client], tiny_dir: Path, tmp_path: Path
) -> None:
    trainer, generator = pair
    ok(load(trainer, "policy", tiny_dir, replace=True))
    ok(load(generator, "generator", tiny_dir, replace=True))
    first, second = digest(trainer, "policy"), digest(generator, "generator")
    assert first == second  # the same checkpoint in two workers
    tensors = weights(trainer, "policy")
    assert first == {
        "policyVersion": 0,
        "digest": expected_digest(tensors),
        "tensors": len(tensors),
        "bytes": sum(t.numel() * t.element_size() for t in tensors.values()),
    }

    # one element of one tensor changed: another digest, the same count and size
    edited = tmp_path / "edited"
    shutil.copytree(tiny_dir, edited)
    state = load_file(edited / "model.safetensors")
    name = sorted(state)[-1]
    state[name].view(-1)[0] += 1.0
    save_file(state, edited / "model.safetensors", metadata={"format": "pt"})
    ok(load(generator, "edited", edited, replace=True))
    changed = digest(generator, "edited")
    assert changed["digest"] != first["digest"]
    assert (changed["tensors"], changed["bytes"]) == (first["tensors"], first["bytes"])

    # a sync makes them equal again, at the new version
    train(trainer, steps=1)
    assert digest(trainer, "policy")["digest"] != first["digest"]
    sent, (received,) = transfer(trainer, generator, "edited")
    assert ok(sent)["policyVersion"] == ok(received)["policyVersion"] == 1
    synced = digest(trainer, "policy")
    assert synced["policyVersion"] == 1 and digest(generator, "edited") == synced

    reply = generator.call("weights_digest", {"model": "missing"})[0]
    assert "missing" in error(reply, "MODEL_NOT_LOADED")
    error(generator.call("weights_digest", {})[0], "BAD_ARGUMENTS")
