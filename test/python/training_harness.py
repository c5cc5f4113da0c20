"""Helpers shared by the training test modules: batches from real generation, edited batches, weights."""

from __future__ import annotations

from typing import Any

import torch
from posttrain_worker.codec import TensorBatch, tensor_from_bytes
from worker_harness import Client, call, ok

GRPO: dict[str, Any] = {"type": "grpo"}
PROMPTS = ["Hello world", "a", "The quick brown fox", "2+2="]


def rollout(
    client: Client, seed: int, *, model: str = "policy", samples: int = 2, tokens: int = 8
) -> TensorBatch:
    """Real generation: ``len(PROMPTS) * samples`` rows (batch ``[B]``) with the keys a trainer reads, and
    advantages drawn from ``seed`` (one per sequence, both signs)."""
    prompts = TensorBatch((len(PROMPTS),), {"text": {"prompt": list(PROMPTS)}})
    args = {"model": model, "maxNewTokens": tokens, "seed": seed, "numSamples": samples}
    reply = call(client, "generate", args, prompts)
    ok(reply)
    out: TensorBatch = reply["batch"]
    columns: Any = out.columns
    gen = torch.Generator().manual_seed(seed)
    return TensorBatch(
        (out.rows,),
        {
            "tokens": {"prompt": columns["tokens"]["prompt"], "full": columns["tokens"]["full"]},
            "log_probs": {"full": columns["log_probs"]["full"]},
            "masks": dict(columns["masks"]),
            "advantage": torch.randn(out.rows, generator=gen),
        },
    )


def weights(client: Client, model: str) -> dict[str, torch.Tensor]:
    """The model's parameters, by name (``weights_get``)."""
    reply, frames = client.call("weights_get", {"model": model}, timeout=60)
    ok(reply)
    out: dict[str, torch.Tensor] = {}
    for descriptor, frame in zip(reply["payloads"], frames, strict=True):
        out[descriptor["name"]] = tensor_from_bytes(frame, descriptor["dtype"], descriptor["shape"]).clone()
    return out


def create(client: Client, model: str = "policy", **args: Any) -> dict[str, Any]:
    """``trainer_create`` with GRPO and Adam(lr 1e-3) unless overridden; the result."""
    full = {"model": model, "loss": GRPO, "optimizer": {"type": "adam", "lr": 1e-3}, "replace": True, **args}
    reply, _ = client.call("trainer_create", full, timeout=60)
    return ok(reply)


def step(client: Client, batch: TensorBatch, model: str = "policy", method: str = "train_step") -> Any:
    """The reply envelope of ``train_step`` (or ``compute_loss``)."""
    return call(client, method, {"model": model}, batch)


def without(batch: TensorBatch, *keys: tuple[str, ...]) -> TensorBatch:
    """``batch`` without the leaves at ``keys`` (and the nested tensordicts left empty)."""
    columns: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in batch.columns.items()}
    for key in keys:
        node = columns
        for part in key[:-1]:
            node = node[part]
        del node[key[-1]]
    return TensorBatch(batch.batch_size, {k: v for k, v in columns.items() if v != {}})


def replaced(batch: TensorBatch, key: tuple[str, ...], value: Any) -> TensorBatch:
    """``batch`` with the leaf at ``key`` set to ``value`` (added when missing)."""
    columns: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in batch.columns.items()}
    node = columns
    for part in key[:-1]:
        node = node.setdefault(part, {})
    node[key[-1]] = value
    return TensorBatch(batch.batch_size, columns)
