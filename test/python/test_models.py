"""Model hosting through a real worker: load_model / unload_model / list_models on the tiny model, and each
way a load can fail (typed error naming the path and the cause; the worker keeps serving)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import T5Config, T5ForConditionalGeneration
from worker_harness import Client, error, load, ok

TINY_SEED = 1  # conftest's tiny_dir weights


@pytest.fixture(scope="module")
def client(bare_client: Client) -> Client:
    """This module loads and unloads models itself: a worker with none loaded."""
    return bare_client


def test_load_reports_the_model_and_list_and_unload_follow(client: Client, tiny_dir: Path) -> None:
    info = ok(load(client, "policy", tiny_dir))
    model = reference_model(tiny_dir)
    assert info["name"] == "policy" and info["path"] == str(tiny_dir)
    assert info["modelType"] == "qwen2" and info["dtype"] == "float32" and info["device"] == "cpu"
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["memoryBytes"] >= 4 * info["parameters"]
    assert info["vocabSize"] > 95 and info["hasChatTemplate"] is True
    assert info["eosTokenId"] is not None and info["maxPositionEmbeddings"] == 512

    ref = ok(load(client, "ref", tiny_dir, dtype="bfloat16"))
    assert ref["dtype"] == "bfloat16" and ref["parameters"] == info["parameters"]
    assert ref["memoryBytes"] < info["memoryBytes"]  # half the bytes per parameter

    listed = ok(client.call("list_models")[0])["models"]
    assert [m["name"] for m in listed] == ["policy", "ref"]

    message = error(load(client, "ref", tiny_dir), "MODEL_ALREADY_LOADED")
    assert "ref" in message
    replaced = ok(load(client, "ref", tiny_dir, replace=True))
    assert replaced["dtype"] == "float32"

    ok(client.call("unload_model", {"name": "ref"})[0])
    ok(client.call("unload_model", {"name": "policy"})[0])
    assert ok(client.call("list_models")[0])["models"] == []
    message = error(client.call("unload_model", {"name": "policy"})[0], "MODEL_NOT_LOADED")
    assert "policy" in message


def reference_model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


def test_missing_directory(client: Client, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    message = error(load(client, "m", missing), "MODEL_NOT_FOUND")
    assert str(missing) in message and "no such directory" in message


def test_directory_without_tokenizer(client: Client, tiny_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "no-tokenizer"
    shutil.copytree(tiny_dir, copy)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json"):
        (copy / name).unlink(missing_ok=True)
    message = error(load(client, "m", copy), "MODEL_LOAD_FAILED")
    assert str(copy) in message and "tokenizer" in message


def test_not_a_causal_lm(client: Client, tmp_path: Path) -> None:
    config = T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=64)
    T5ForConditionalGeneration(config).save_pretrained(tmp_path / "t5")
    message = error(load(client, "m", tmp_path / "t5"), "MODEL_LOAD_FAILED")
    assert "t5" in message and "not a causal language model" in message


def test_directory_without_config(client: Client, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    message = error(load(client, "m", tmp_path / "empty"), "MODEL_LOAD_FAILED")
    assert "config" in message


def test_corrupted_weights(client: Client, tiny_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "corrupt"
    shutil.copytree(tiny_dir, copy)
    (copy / "model.safetensors").write_bytes(b"not safetensors at all")
    message = error(load(client, "m", copy), "MODEL_LOAD_FAILED")
    assert "weights" in message


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"path": "/x"}, "name"),
        ({"name": "m"}, "path"),
        ({"name": "m", "path": "/x", "dtype": "int8"}, "dtype"),
        ({"name": "m", "path": "/x", "device": "warp-drive"}, "device"),
        ({"name": "m", "path": "/x", "replace": "yes"}, "replace"),
        ({"name": "m", "path": "/x", "dtpye": "float32"}, "dtpye"),
    ],
)
def test_bad_arguments(client: Client, args: dict[str, object], field: str) -> None:
    message = error(client.call("load_model", args)[0], "BAD_ARGUMENTS")
    assert field in message, json.dumps(message)


def test_worker_keeps_serving_after_failures(client: Client, tiny_dir: Path) -> None:
    error(load(client, "m", "/definitely/missing"), "MODEL_NOT_FOUND")
    info = ok(load(client, "again", tiny_dir))
    assert info["name"] == "again"
    ok(client.call("unload_model", {"name": "again"})[0])
