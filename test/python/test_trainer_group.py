"""Trainer groups on real worker processes over gloo: N ranks on shards give one rank's update on the whole
batch, for every aggregation and both strategies; checkpoints move between rank counts; a bad shard fails
every rank and the group keeps serving (docs/scaling.md)."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import zmq
from posttrain_worker.codec import TensorBatch, encode_batch
from posttrain_worker.codec.types import Ragged
from posttrain_worker.training.parallel import TEST_ONLY_LOCAL_NORM_ENV
from training_harness import rollout, weights
from worker_harness import Client, Worker, call, error, load, ok, start_worker, stop_worker

SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9}
TOLERANCE = 1e-6


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Workers:
    """Started workers and their clients."""

    def __init__(self, count: int, env: dict[str, str] | None = None) -> None:
        self.context = zmq.Context()
        self.workers: list[Worker] = []
        self.clients: list[Client] = []
        for _ in range(count):
            worker = start_worker(env=env)
            self.workers.append(worker)
            self.clients.append(Client(self.context, worker.endpoint))

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for worker in self.workers:
            stop_worker(worker)
        self.context.destroy(linger=0)


def on_all(
    clients: Sequence[Client],
    method: str,
    args: Sequence[dict[str, Any]],
    timeout: float = 120,
    batches: Sequence[TensorBatch] | None = None,
) -> list[Any]:
    """``method`` on every client at once (with one tensordict each when ``batches``); the replies."""
    ids = [
        c.request(method, a)
        if batches is None
        else c.request(method, a, payloads=[{"kind": "tensordict"}], frames=(encode_batch(batches[i]),))
        for i, (c, a) in enumerate(zip(clients, args, strict=True))
    ]
    replies = []
    for c, request_id in zip(clients, ids, strict=True):
        reply, _ = c.recv(timeout)
        assert reply["id"] == request_id, reply
        replies.append(reply)
    return replies


def join(ranks: Sequence[Client]) -> None:
    init = f"tcp://127.0.0.1:{_free_port()}"
    args = [
        {"backend": "gloo", "initMethod": init, "rank": r, "worldSize": len(ranks)} for r in range(len(ranks))
    ]
    for reply in on_all(ranks, "dist_init", args):
        ok(reply)


@pytest.fixture(scope="module")
def pool() -> Iterator[Workers]:
    """Worker 0 trains alone; workers 1 and 2 are a trainer group of two ranks."""
    workers = Workers(3)
    try:
        join(workers.clients[1:])
        yield workers
    finally:
        workers.close()


def take(batch: TensorBatch, rows: Sequence[int]) -> TensorBatch:
    """The rows ``rows`` of ``batch`` (every leaf: ragged columns row by row, dense ones indexed)."""

    def pick(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: pick(v) for k, v in value.items()}
        if isinstance(value, Ragged):
            parts = [value.row(i) for i in rows]
            offsets = torch.tensor([0, *torch.tensor([p.numel() for p in parts]).cumsum(0).tolist()])
            return Ragged(torch.cat(parts), offsets)
        return value[list(rows)]

    return TensorBatch((len(rows),), pick(dict(batch.columns)))


def interleaved(batch: TensorBatch) -> TensorBatch:
    """The rows of ``rollout`` (two samples of each prompt in a row) with the samples of a prompt apart."""
    return take(batch, [*range(0, batch.rows, 2), *range(1, batch.rows, 2)])


def create_all(clients: Sequence[Client], model_dir: Path, **trainer: Any) -> None:
    for reply in on_all(
        clients, "load_model", [{"name": "policy", "path": str(model_dir), "replace": True}] * len(clients)
    ):
        ok(reply)
    args = {"model": "policy", "optimizer": SGD, "gradClip": None, "replace": True, **trainer}
    for reply in on_all(clients, "trainer_create", [args] * len(clients)):
        ok(reply)


def group_step(
    ranks: Sequence[Client], shards: Sequence[TensorBatch], method: str = "train_step"
) -> list[Any]:
    return on_all(ranks, method, [{"model": "policy"}] * len(ranks), batches=shards)


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def run_parity(
    workers: Workers,
    model_dir: Path,
    loss: dict[str, Any],
    strategy: str,
    *,
    global_counts: bool = True,
    **extra: Any,
) -> tuple[float, list[Any]]:
    """3 steps on one rank (whole batches) and on the group (an uneven split: rank 0 gets 3 rows, rank 1 the
    rest); the largest weight difference after them, and the group's results."""
    single, ranks = workers.clients[0], workers.clients[1:]
    create_all([single], model_dir, loss=loss, **extra)
    create_all(ranks, model_dir, loss=loss, parallel={"strategy": strategy}, **extra)
    initial = weights(single, "policy")
    results = []
    for seed in range(3):
        # no two neighbouring rows share a prompt: both sides then run the same padded forward (a lone trainer
        # would otherwise share each group's prompt forward, equal only up to rounding)
        batch = interleaved(rollout(single, seed=seed, model="policy"))
        alone = ok(call(single, "train_step", {"model": "policy"}, batch))
        shards = [take(batch, range(3)), take(batch, range(3, batch.rows))]
        replies = [ok(r) for r in group_step(ranks, shards)]
        results.append(replies)
        if not global_counts:
            continue
        assert replies[0]["metrics"] == replies[1]["metrics"]
        assert (
            replies[0]["numTokens"] == alone["numTokens"]
            and replies[0]["numSequences"] == alone["numSequences"]
        )
        assert replies[0]["localSequences"] + replies[1]["localSequences"] == alone["numSequences"]
        assert abs(replies[0]["metrics"]["loss"] - alone["metrics"]["loss"]) < 1e-5
    trained = weights(single, "policy")
    assert max_difference(initial, trained) > 1e-3  # the steps moved the weights: the parity is not vacuous
    difference = max_difference(trained, weights(ranks[0], "policy"))
    if strategy == "ddp":
        assert max_difference(weights(ranks[0], "policy"), weights(ranks[1], "policy")) == 0.0
    return difference, results


LOSSES = [
    pytest.param({"type": "grpo", "aggregation": "token_mean"}, id="token_mean"),
    pytest.param({"type": "grpo", "aggregation": "prompt_mean"}, id="prompt_mean"),
    pytest.param({"type": "grpo", "aggregation": "seq_mean_token_sum"}, id="seq_mean_token_sum"),
    pytest.param({"type": "grpo", "lossType": "grpo"}, id="trl-grpo"),
    pytest.param({"type": "grpo", "lossType": "bnpo"}, id="trl-bnpo"),
    pytest.param({"type": "grpo", "lossType": "dapo"}, id="trl-dapo"),
    pytest.param({"type": "grpo", "lossType": "dr_grpo", "maxCompletionLength": 8}, id="trl-dr_grpo"),
]


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_on_shards_equal_one_rank_on_the_batch(
    pool: Workers, tiny_dir: Path, loss: dict[str, Any], strategy: str
) -> None:
    difference, _ = run_parity(pool, tiny_dir, loss, strategy)
    assert difference < TOLERANCE, difference


def test_micro_batches_and_gradient_checkpointing_keep_the_parity(pool: Workers, tiny_dir: Path) -> None:
    # rank 0's 3 rows and rank 1's 5 rows make different numbers of micro-batches: the ranks still run the
    # same collectives (the shorter one adds empty micro-batches)
    for strategy in ("ddp", "fsdp"):
        difference, results = run_parity(
            pool, tiny_dir, {"type": "grpo"}, strategy, microBatchTokens=40, gradientCheckpointing=True
        )
        assert difference < TOLERANCE, (strategy, difference)
        assert results[0][0]["microBatches"] > 1


def test_normalising_per_rank_fails_the_parity(tiny_dir: Path) -> None:
    workers = Workers(3, env={TEST_ONLY_LOCAL_NORM_ENV: "1"})
    try:
        join(workers.clients[1:])
        token_mean = {"type": "grpo", "aggregation": "token_mean"}
        difference, _ = run_parity(workers, tiny_dir, token_mean, "ddp", global_counts=False)
    finally:
        workers.close()
    assert difference > 100 * TOLERANCE, difference


def test_checkpoints_move_between_rank_counts(pool: Workers, tiny_dir: Path, tmp_path: Path) -> None:
    single, ranks = pool.clients[0], pool.clients[1:]
    create_all([single], tiny_dir, loss={"type": "grpo"})
    batches = [rollout(single, seed=s) for s in range(3)]
    halves = [[take(b, range(4)), take(b, range(4, b.rows))] for b in batches]
    adam = {"type": "adamw", "lr": 1e-3}
    for strategy in ("fsdp", "ddp"):
        saved_on_two = tmp_path / f"two-{strategy}"
        # the uninterrupted run on the group, saving after step 1
        create_all(ranks, tiny_dir, loss={"type": "grpo"}, optimizer=adam, parallel={"strategy": strategy})
        for reply in group_step(ranks, halves[0]):
            ok(reply)
        saves = on_all(
            ranks,
            "save_checkpoint",
            [{"model": "policy", "dir": str(saved_on_two), "dataPosition": {"i": 1}}] * 2,
        )
        assert [ok(r)["worldSize"] for r in saves] == [2, 2]
        for batch in halves[1:]:
            for reply in group_step(ranks, batch):
                ok(reply)
        uninterrupted = weights(ranks[0], "policy")
        # resumed on one rank: the same next steps on whole batches
        create_all([single], tiny_dir, loss={"type": "grpo"}, optimizer=adam)
        restored = ok(
            single.call("load_checkpoint", {"model": "policy", "dir": str(saved_on_two)}, timeout=60)[0]
        )
        assert restored["step"] == 1 and restored["dataPosition"] == {"i": 1}
        for batch in batches[1:]:
            ok(call(single, "train_step", {"model": "policy"}, batch))
        assert max_difference(uninterrupted, weights(single, "policy")) < 1e-5, strategy

    # and the reverse: saved on one rank after step 1, resumed on two
    saved_on_one = tmp_path / "one"
    create_all([single], tiny_dir, loss={"type": "grpo"}, optimizer=adam)
    ok(call(single, "train_step", {"model": "policy"}, batches[0]))
    ok(single.call("save_checkpoint", {"model": "policy", "dir": str(saved_on_one)}, timeout=60)[0])
    for batch in batches[1:]:
        ok(call(single, "train_step", {"model": "policy"}, batch))
    uninterrupted = weights(single, "policy")
    create_all(ranks, tiny_dir, loss={"type": "grpo"}, optimizer=adam, parallel={"strategy": "fsdp"})
    for reply in on_all(ranks, "load_checkpoint", [{"model": "policy", "dir": str(saved_on_one)}] * 2):
        assert ok(reply)["step"] == 1
    for batch in halves[1:]:
        for reply in group_step(ranks, batch):
            ok(reply)
    assert max_difference(uninterrupted, weights(ranks[0], "policy")) < 1e-5


def test_a_bad_shard_fails_every_rank_and_the_group_keeps_serving(pool: Workers, tiny_dir: Path) -> None:
    single, ranks = pool.clients[0], pool.clients[1:]
    create_all([single], tiny_dir, loss={"type": "grpo"})
    create_all(ranks, tiny_dir, loss={"type": "grpo"}, parallel={"strategy": "ddp"})
    batch = rollout(single, seed=7)
    good = [take(batch, range(4)), take(batch, range(4, batch.rows))]
    columns = dict(good[1].columns)
    columns.pop("advantage")
    bad = TensorBatch(good[1].batch_size, columns)
    replies = group_step(ranks, [good[0], bad])
    assert "another rank (1)" in error(replies[0], "BAD_PAYLOAD")
    assert "advantage" in error(replies[1], "BAD_PAYLOAD")
    assert [ok(r)["step"] for r in group_step(ranks, good)] == [1, 1]
    # a rank failing trainer_create's checks (its reference is not loaded) fails every rank at once, before
    # the collective model wrapping could leave the other waiting
    ok(ranks[0].call("clone_model", {"source": "policy", "name": "ref", "replace": True}, timeout=60)[0])
    args = {"model": "policy", "loss": {"type": "grpo"}, "refModel": "ref", "replace": True}
    replies = on_all(ranks, "trainer_create", [{**args, "parallel": {"strategy": "ddp"}}] * 2, timeout=20)
    assert "another rank (1)" in error(replies[0], "BAD_ARGUMENTS")
    error(replies[1], "MODEL_NOT_LOADED")
    # without a process group, "parallel" is refused and names the field
    message = error(
        single.call(
            "trainer_create",
            {"model": "policy", "loss": {"type": "grpo"}, "parallel": {"strategy": "ddp"}, "replace": True},
        )[0],
        "BAD_ARGUMENTS",
    )
    assert '"parallel"' in message and "dist_init" in message
    assert "strategy" in error(
        ranks[0].call(
            "trainer_create",
            {"model": "policy", "loss": {"type": "grpo"}, "parallel": {"strategy": "zero3"}, "replace": True},
        )[0],
        "BAD_ARGUMENTS",
    )


def test_a_sharded_model_needs_a_fresh_load_for_a_new_trainer(pool: Workers, tiny_dir: Path) -> None:
    ranks = pool.clients[1:]
    create_all(ranks, tiny_dir, loss={"type": "grpo"}, parallel={"strategy": "fsdp"})
    args = {"model": "policy", "loss": {"type": "grpo"}, "parallel": {"strategy": "fsdp"}, "replace": True}
    for reply in on_all(ranks, "trainer_create", [args, args]):
        assert "load it again" in error(reply, "BAD_ARGUMENTS")
    assert ok(load(ranks[0], "policy", tiny_dir, replace=True))["name"] == "policy"
