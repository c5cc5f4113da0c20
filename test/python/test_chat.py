"""apply_chat_template through a real worker: the model's own HF template renders conversations from a
history leaf into token ids, text and assistant masks (TorchRL's history mode)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.codec import HistoryColumn, Ragged, TensorBatch, decode_batch, encode_batch
from transformers import AutoTokenizer
from worker_harness import Client, error, ok

TINY_SEED = 5  # conftest's tiny_dir weights
CHATS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "2+2?"}],
    [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello there"},
        {"role": "user", "content": "Again"},
    ],
]


def apply(client: Client, rows: list[list[dict[str, Any]]], key: str = "prompt", **args: Any) -> Any:
    batch = TensorBatch((len(rows),), {"history": {key: HistoryColumn(rows)}})
    reply, frames = client.call(
        "apply_chat_template",
        {"model": "policy", "key": key, **args},
        [{"kind": "tensordict"}],
        (bytes(encode_batch(batch)),),
    )
    return reply, frames


def rows_of(column: Ragged) -> list[list[int]]:
    bounds = column.offsets.tolist()
    return [column.values[bounds[i] : bounds[i + 1]].tolist() for i in range(len(bounds) - 1)]


def test_prompts_render_like_the_hf_tokenizer(client: Client, tiny_dir: Path) -> None:
    reply, frames = apply(client, CHATS)
    ok(reply)
    out = decode_batch(frames[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tokens = out.columns["tokens"]["prompt"]  # type: ignore[index]
    texts = out.columns["text"]["prompt"]  # type: ignore[index]
    for row, chat in enumerate(CHATS):
        want_text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert texts[row] == want_text
        assert want_text.endswith("<|im_start|>assistant\n")
        assert rows_of(tokens)[row] == tokenizer(want_text, add_special_tokens=False)["input_ids"]


def test_full_conversations_get_assistant_masks(client: Client, tiny_dir: Path) -> None:
    chat = [*CHATS[1][:3]]
    reply, frames = apply(client, [chat], key="full")
    ok(reply)
    out = decode_batch(frames[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    ids = rows_of(out.columns["tokens"]["full"])[0]  # type: ignore[index]
    mask = rows_of(out.columns["masks"]["all_assistant_mask"])[0]  # type: ignore[index]
    assert len(mask) == len(ids)
    assistant = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert assistant == "Hello there<|im_end|>"
    attention = rows_of(out.columns["masks"]["all_attention_mask"])[0]  # type: ignore[index]
    assert all(attention)
    assert not out.columns["text"]["full"][0].endswith("<|im_start|>assistant\n")  # type: ignore[index]


def test_an_incomplete_last_message_is_continued(client: Client, tiny_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    chat = [
        {"role": "user", "content": "Count"},
        {"role": "assistant", "content": "1, 2,", "is_complete": False},
    ]
    reply, frames = apply(client, [chat], key="full")
    ok(reply)
    out = decode_batch(frames[0])
    text = out.columns["text"]["full"][0]  # type: ignore[index]
    assert text.endswith("1, 2,")
    ids = rows_of(out.columns["tokens"]["full"])[0]  # type: ignore[index]
    mask = rows_of(out.columns["masks"]["all_assistant_mask"])[0]  # type: ignore[index]
    assert tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m]) == "1, 2,"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"key": "middle"}, "key"),
        ({"addGenerationPrompt": True, "continueFinalMessage": True}, "continueFinalMessage"),
        ({"addGenerationPrompt": "yes"}, "addGenerationPrompt"),
    ],
)
def test_bad_arguments(client: Client, args: dict[str, Any], field: str) -> None:
    reply, _ = apply(client, CHATS, **args)
    assert field in error(reply, "BAD_ARGUMENTS")


def test_bad_payloads_and_models(client: Client) -> None:
    message = error(apply(client, [[], *CHATS])[0], "BAD_ARGUMENTS")
    assert "row 0" in message
    batch = TensorBatch((1,), {"text": {"prompt": ["hi"]}})
    reply, _ = client.call(
        "apply_chat_template", {"model": "policy"}, [{"kind": "tensordict"}], (bytes(encode_batch(batch)),)
    )
    assert '("history", "prompt")' in error(reply, "BAD_PAYLOAD")
    reply, _ = client.call(
        "apply_chat_template", {"model": "nobody"}, [{"kind": "tensordict"}], (bytes(encode_batch(batch)),)
    )
    error(reply, "MODEL_NOT_LOADED")
    assert ok(client.call("ping")[0]) == {}


def test_tokens_feed_generation(client: Client) -> None:
    reply, frames = apply(client, CHATS)
    prompts = decode_batch(frames[0]).columns["tokens"]["prompt"]  # type: ignore[index]
    batch = TensorBatch((2,), {"tokens": {"prompt": prompts}})
    reply, frames = client.call(
        "generate",
        {"model": "policy", "maxNewTokens": 4, "seed": 0},
        [{"kind": "tensordict"}],
        (bytes(encode_batch(batch)),),
    )
    ok(reply)
    out = decode_batch(frames[0])
    assert torch.equal(out.columns["tokens"]["prompt"].values, prompts.values)  # type: ignore[index, union-attr]


def generate(client: Client, batch: TensorBatch) -> Any:
    reply, frames = client.call(
        "generate",
        {"model": "policy", "maxNewTokens": 5, "seed": 3, "numSamples": 2},
        [{"kind": "tensordict"}],
        (bytes(encode_batch(batch)),),
    )
    return reply, frames


def test_generate_renders_history_prompts_as_apply_chat_template_does(client: Client) -> None:
    reply, frames = apply(client, CHATS)
    ok(reply)
    rendered = decode_batch(frames[0]).columns
    from_tokens = generate(client, TensorBatch((2,), {"tokens": {"prompt": rendered["tokens"]["prompt"]}}))  # type: ignore[index]
    from_history = generate(client, TensorBatch((2,), {"history": {"prompt": HistoryColumn(CHATS)}}))
    ok(from_tokens[0])
    ok(from_history[0])
    a, b = decode_batch(from_tokens[1][0]).columns, decode_batch(from_history[1][0]).columns
    for key in ("prompt", "response", "full"):
        assert rows_of(a["tokens"][key]) == rows_of(b["tokens"][key])  # type: ignore[index]
    assert torch.equal(a["log_probs"]["full"].values, b["log_probs"]["full"].values)  # type: ignore[index]
    # the rendered prompt text comes back (each prompt twice: two samples)
    texts = rendered["text"]["prompt"]  # type: ignore[index]
    assert b["text"]["prompt"] == [t for t in texts for _ in range(2)]  # type: ignore[index]


def test_generate_without_a_prompt_key_names_every_accepted_one(client: Client) -> None:
    reply, _ = generate(client, TensorBatch((1,), {"history": {"full": HistoryColumn([CHATS[0]])}}))
    failure = error(reply, "BAD_PAYLOAD")
    for key in ('("tokens", "prompt")', '("text", "prompt")', '("history", "prompt")'):
        assert key in failure
    reply, _ = generate(client, TensorBatch((1,), {"history": {"prompt": HistoryColumn([[]])}}))
    assert "row 0 holds an empty conversation" in error(reply, "BAD_ARGUMENTS")
    reply, _ = generate(client, TensorBatch((1,), {"history": {"prompt": ["not a conversation"]}}))
    assert '("history", "prompt") must be a history leaf' in error(reply, "BAD_PAYLOAD")
    ok(client.call("ping", {})[0])
