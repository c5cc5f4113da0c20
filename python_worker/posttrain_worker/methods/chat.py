"""``apply_chat_template``: conversations → token ids, text and assistant masks with the model's template.

Reads ``("history", key)`` (one conversation per row) and writes ``("tokens", key)``, ``("text", key)``,
``("masks", "all_attention_mask")`` and ``("masks", "all_assistant_mask")``, as TorchRL's wrappers do in
history mode; ``key`` is ``"prompt"`` (default) or ``"full"``. The assistant mask comes from the template's
``{% generation %}`` blocks or, without them, from prefix renderings (docs/history.md, "Assistant masks");
a row whose assistant tokens cannot be placed, or that has an assistant turn but no assistant token, is
``ASSISTANT_MASK_UNAVAILABLE`` / ``ASSISTANT_MASK_EMPTY``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.keys import lookup, missing_key
from posttrain_worker.codec.types import TensorBatch
from posttrain_worker.methods.models import MODEL_ARG
from posttrain_worker.methods.payload_keys import ragged, single_batch
from posttrain_worker.models.chat import render_rows
from posttrain_worker.models.store import ModelStore
from posttrain_worker.protocol.args import Arg, ArgsSchema, ParsedArgs
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry

KEYS = ("prompt", "full")


@dataclass(frozen=True)
class ChatArgs:
    model: str
    key: str
    add_generation_prompt: bool
    continue_final_message: bool


def build_chat(parsed: ParsedArgs) -> ChatArgs:
    """``addGenerationPrompt`` defaults to ``key == "prompt"`` and excludes ``continueFinalMessage``."""
    model, key = parsed["model"], parsed["key"]
    add, cont = parsed["addGenerationPrompt"], parsed["continueFinalMessage"]
    if add is None:
        add = key == "prompt"  # a prompt is followed by the generation prompt; a full conversation is not
    if add and cont:
        raise parsed.fail('"addGenerationPrompt" and "continueFinalMessage" cannot both be true')
    return ChatArgs(model, key, add, cont)


CHAT_ARGS = ArgsSchema(
    (
        MODEL_ARG,
        Arg("key", "choice", choices=KEYS, default="prompt"),
        Arg("addGenerationPrompt", "boolean", default=None),
        Arg("continueFinalMessage", "boolean", default=False),
    ),
    build=build_chat,
)


def register_chat_methods(registry: MethodRegistry, store: ModelStore) -> None:
    def apply_chat_template(ctx: CallContext, args: ChatArgs) -> MethodOutcome:
        loaded = store.get(args.model)
        batch = single_batch(ctx)
        key = ("history", args.key)
        column = lookup(batch, key)
        if column is None:
            raise missing_key(ctx.method, batch, [key])
        rendered = render_rows(
            ctx.method,
            loaded,
            key,
            column,
            add_generation_prompt=args.add_generation_prompt,
            continue_final=args.continue_final_message,
        )
        tokens = ragged([r.tokens for r in rendered], torch.int64)
        assistant = ragged([r.assistant_mask for r in rendered], torch.bool)
        attention = ragged([torch.ones(r.tokens.numel(), dtype=torch.bool) for r in rendered], torch.bool)
        columns: dict[str, Any] = {
            "tokens": {args.key: tokens},
            "text": {args.key: [r.text for r in rendered]},
            "masks": {"all_attention_mask": attention, "all_assistant_mask": assistant},
        }
        return MethodOutcome({}, [TensorBatch(batch.batch_size, columns)])

    registry.add(
        "apply_chat_template",
        apply_chat_template,
        thread="compute",
        args=CHAT_ARGS,
        payloads=("tensordict",),
    )
