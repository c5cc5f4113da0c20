"""Bad input to the trainer through a real worker: each is a typed error naming what is wrong, nothing is
applied, and the worker keeps serving. Plus the gradient check before the optimizer step, in process."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.codec import TensorBatch
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.models.store import ModelStore
from posttrain_worker.training.batch import read_train_batch
from posttrain_worker.training.lora import peft_available
from training_harness import GRPO, create, replaced, rollout, step, weights, without
from worker_harness import Client, error, load, ok, ragged, rows_of


@pytest.fixture(scope="module")
def client(client: Client) -> Client:
    """conftest's policy worker, with a trainer created on it."""
    create(client)
    return client


@pytest.fixture(scope="module")
def batch(client: Client) -> TensorBatch:
    return rollout(client, seed=11)


def still_serves(client: Client, batch: TensorBatch) -> None:
    """The worker answers, and a good step on a fresh trainer still works."""
    create(client)
    assert ok(step(client, batch))["step"] == 1


def trainer_error(client: Client, code: str, **args: Any) -> str:
    full = {"model": "policy", "loss": GRPO, "replace": True, **args}
    return error(client.call("trainer_create", full)[0], code)


# ---- the batch -----------------------------------------------------------------------------------------


def test_missing_keys_are_all_listed(client: Client, batch: TensorBatch) -> None:
    create(client)
    bare = without(
        batch, ("log_probs", "full"), ("advantage",), ("masks", "all_assistant_mask"), ("tokens", "prompt")
    )
    reply = step(client, bare)
    message = error(reply, "BAD_PAYLOAD")
    missing = reply["error"]["details"]["missing"]
    assert missing == [
        '("masks", "all_assistant_mask") or ("tokens", "prompt")',
        '("log_probs", "full")',
        '("advantage")',
    ]
    for key in missing:
        assert key in message
    assert (
        error(step(client, without(batch, ("tokens", "full"))), "BAD_PAYLOAD").count('("tokens", "full")')
        == 1
    )
    still_serves(client, batch)


def test_rlhf_masking_needs_the_assistant_mask(client: Client, batch: TensorBatch) -> None:
    create(client, loss={"type": "grpo", "maskingStrategy": "rlhf"})
    message = error(step(client, without(batch, ("masks", "all_assistant_mask"))), "BAD_PAYLOAD")
    assert '("masks", "all_assistant_mask")' in message and "prompt" not in message.split("present")[0]
    still_serves(client, batch)


@pytest.mark.parametrize("shape", [(8, 3), (8, 2, 1), (4,)])
def test_advantages_that_do_not_broadcast(client: Client, batch: TensorBatch, shape: tuple[int, ...]) -> None:
    create(client)
    if shape[0] != batch.rows:  # a dense column must have the batch's rows: send it as a ragged one instead
        value: Any = ragged([torch.zeros(3) for _ in range(batch.rows)], torch.float32)
    else:
        value = torch.zeros(shape)
    message = error(step(client, replaced(batch, ("advantage",), value)), "BAD_PAYLOAD")
    assert '("advantage")' in message
    assert "does not broadcast" in message or "has 3 values" in message
    still_serves(client, batch)


def test_ragged_values_must_match_the_tokens(client: Client, batch: TensorBatch) -> None:
    create(client)
    short = ragged([r[:-1] for r in rows_of(batch.columns["log_probs"]["full"])], torch.float32)  # type: ignore[index]
    message = error(step(client, replaced(batch, ("log_probs", "full"), short)), "BAD_PAYLOAD")
    assert '("log_probs", "full")' in message and "row 0" in message
    still_serves(client, batch)


def test_token_ids_outside_the_vocabulary(client: Client, batch: TensorBatch) -> None:
    create(client)
    rows = rows_of(batch.columns["tokens"]["full"])  # type: ignore[index]
    rows[1] = rows[1].clone()
    rows[1][2] = 100_000
    message = error(
        step(client, replaced(batch, ("tokens", "full"), ragged(rows, torch.int64))), "BAD_ARGUMENTS"
    )
    assert "row 1" in message and "100000" in message
    still_serves(client, batch)


def test_a_mask_that_selects_nothing(client: Client, batch: TensorBatch) -> None:
    create(client, loss={"type": "grpo", "maskingStrategy": "rlhf"})
    rows = rows_of(batch.columns["masks"]["all_assistant_mask"])  # type: ignore[index]
    empty = ragged([torch.zeros_like(r) for r in rows], torch.bool)
    message = error(step(client, replaced(batch, ("masks", "all_assistant_mask"), empty)), "BAD_PAYLOAD")
    assert "selects no token" in message
    still_serves(client, batch)


# ---- non-finite loss -----------------------------------------------------------------------------------


def test_a_non_finite_loss_names_the_step_and_changes_nothing(client: Client, batch: TensorBatch) -> None:
    """Behaviour log-probs of -1e30 (finite) make the ratio overflow; with negative advantages the clipped
    objective is +inf. Weights, step and optimizer state stay as they were; the next good step is step 2."""
    create(client)
    assert ok(step(client, batch))["step"] == 1
    before = weights(client, "policy")
    old = [torch.full_like(r, -1e30) for r in rows_of(batch.columns["log_probs"]["full"])]  # type: ignore[index]
    bad = replaced(
        replaced(batch, ("log_probs", "full"), ragged(old, torch.float32)),
        ("advantage",),
        -torch.ones(batch.rows),
    )
    reply = step(client, bad)
    message = error(reply, "NON_FINITE_LOSS")
    assert reply["error"]["details"]["step"] == 2 and "step 2" in message
    after = weights(client, "policy")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert ok(client.call("trainer_state", {"model": "policy"})[0])["step"] == 1
    assert ok(step(client, batch))["step"] == 2


def test_a_nan_loss_is_non_finite_loss(client: Client, batch: TensorBatch) -> None:
    """The same overflowing ratio with zero advantages: ``inf * 0`` makes the loss NaN (not inf), which is
    NON_FINITE_LOSS as well, reported as ``nan``; nothing is applied. (A NaN in the loss's inputs cannot get
    this far: the loss checks its inputs are finite under the mask first.)"""
    create(client)
    before = weights(client, "policy")
    old = [torch.full_like(r, -1e30) for r in rows_of(batch.columns["log_probs"]["full"])]  # type: ignore[index]
    bad = replaced(
        replaced(batch, ("log_probs", "full"), ragged(old, torch.float32)),
        ("advantage",),
        torch.zeros(batch.rows),
    )
    reply = step(client, bad)
    message = error(reply, "NON_FINITE_LOSS")
    assert reply["error"]["details"]["loss"] == "nan" and "is nan" in message
    assert reply["error"]["details"]["step"] == 1 and "step 1" in message
    after = weights(client, "policy")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert ok(client.call("trainer_state", {"model": "policy"})[0])["step"] == 0
    still_serves(client, batch)


def test_nan_weights_are_non_finite_loss_not_a_bad_payload(
    client: Client, tiny_dir: Path, batch: TensorBatch, tmp_path: Path
) -> None:
    """A model whose weights hold NaN computes NaN log-probs: NON_FINITE_LOSS naming the model's log-probs
    (the request was fine), nothing applied, and the worker goes on serving."""
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "nan-model"
    shutil.copytree(tiny_dir, broken)
    weights_file = broken / "model.safetensors"
    tensors = load_file(str(weights_file))
    name = next(k for k in tensors if k.endswith("norm.weight"))
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, str(weights_file), metadata={"format": "pt"})
    ok(load(client, "nan", broken, replace=True))
    create(client, model="nan")
    before = weights(client, "nan")
    reply = step(client, batch, model="nan")
    message = error(reply, "NON_FINITE_LOSS")
    assert "the model's log-probs" in message and "step 1" in message
    after = weights(client, "nan")
    assert all(torch.equal(before[k].nan_to_num(), after[k].nan_to_num()) for k in before)
    ok(client.call("unload_model", {"name": "nan"})[0])
    still_serves(client, batch)


def test_non_finite_gradients_stop_the_optimizer_in_process(tiny_dir: Path, batch: TensorBatch) -> None:
    """A gradient hook turns one gradient into inf: the step fails with NON_FINITE_GRADIENT before the
    optimizer runs, and the parameters are unchanged (the trainer in this process, the same code)."""
    from posttrain_worker.methods.training import CREATE_ARGS, Trainers

    store = ModelStore()
    store.load("policy", str(tiny_dir), "float32", torch.device("cpu"))
    trainers = Trainers(store)
    args = CREATE_ARGS.parse("trainer_create", {"model": "policy", "loss": GRPO})
    trainer = trainers.create("trainer_create", args)
    needs = trainer.needs()
    train_batch = read_train_batch("train_step", batch, needs, vocab_size=259, max_positions=512)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    param = next(iter(trainer.model.parameters()))
    handle = param.register_hook(lambda g: torch.full_like(g, float("inf")))
    with pytest.raises(WorkerFailure) as caught:
        trainer.step(train_batch, lambda: None)
    handle.remove()
    assert caught.value.code == "NON_FINITE_GRADIENT" and caught.value.details["step"] == 1
    assert all(torch.equal(before[k], v) for k, v in trainer.model.named_parameters())
    assert trainer.step_count == 0 and all(p.grad is None for p in trainer.model.parameters())
    assert trainer.step(train_batch, lambda: None)["step"] == 1


# ---- configuration -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,field",
    [
        (
            {"optimizer": {"type": "lamb", "lr": 1e-3}},
            '"optimizer.type" must be one of "adamw", "adam", "sgd"',
        ),
        ({"optimizer": {"type": "adam", "lr": -1}}, '"optimizer.lr" must be >= 0'),
        ({"optimizer": {"type": "adam"}}, 'missing argument "optimizer.lr"'),
        ({"optimizer": {"type": "sgd", "lr": 0.1, "betas": [0.9, 0.99]}}, '"optimizer.betas"'),
        (
            {"optimizer": {"type": "adamw", "lr": 0.1, "betas": [0.9, 1.5]}},
            '"optimizer.betas" must be two numbers',
        ),
        ({"optimizer": "adam"}, '"optimizer" must be a JSON object'),
        ({"schedule": {"type": "cosine", "warmupSteps": 2}}, 'missing argument "schedule.totalSteps"'),
        (
            {"schedule": {"type": "linear", "warmupSteps": 5, "totalSteps": 5}},
            '"schedule.warmupSteps" (5) must be less',
        ),
        ({"schedule": {"type": "step"}}, '"schedule.type" must be one of'),
        ({"loss": {"type": "grpo", "clipEpsilon": -1}}, "loss.clipEpsilon"),
        ({"loss": {"type": "ppo"}}, "loss.type"),
        ({"gradClip": 0}, '"gradClip" must be > 0'),
        ({"microBatchTokens": 0}, '"microBatchTokens" must be >= 1'),
        ({"autocast": "float8"}, '"autocast" must be one of "bfloat16"'),
        ({"lora": {"r": 0}}, '"lora.r" must be >= 1'),
        ({"momentum": 0.9}, 'unknown argument(s) "momentum"'),
    ],
)
def test_bad_trainer_configs_name_the_field(
    client: Client, batch: TensorBatch, args: dict[str, Any], field: str
) -> None:
    assert field in trainer_error(client, "BAD_ARGUMENTS", **args)


def test_trainer_lookups(client: Client, batch: TensorBatch, tiny_dir: Path) -> None:
    assert "no trainer is bound" in error(step(client, batch, model="nobody"), "TRAINER_NOT_FOUND")
    create(client)
    full = {"model": "policy", "loss": GRPO}
    assert "already bound" in error(client.call("trainer_create", full)[0], "TRAINER_EXISTS")
    assert "itself" in trainer_error(client, "BAD_ARGUMENTS", refModel="policy")
    trainer_error(client, "MODEL_NOT_LOADED", refModel="nothing")
    ok(load(client, "temp", tiny_dir))
    create(client, "temp")
    ok(client.call("unload_model", {"name": "temp"})[0])
    error(step(client, batch, model="temp"), "TRAINER_NOT_FOUND")
    ok(client.call("trainer_close", {"model": "policy"})[0])
    error(client.call("trainer_state", {"model": "policy"})[0], "TRAINER_NOT_FOUND")
    still_serves(client, batch)


@pytest.mark.skipif(peft_available(), reason="peft is installed: LoRA is available")
def test_lora_without_peft_is_a_typed_error(client: Client, batch: TensorBatch) -> None:
    message = trainer_error(client, "LORA_UNAVAILABLE", lora={"r": 4})
    assert "peft" in message
    still_serves(client, batch)
