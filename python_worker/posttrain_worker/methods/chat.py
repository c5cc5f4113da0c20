"""``apply_chat_template``: conversations → token ids, text and assistant masks with the model's template.

Reads ``("history", key)`` (one conversation per row) and writes ``("tokens", key)``, ``("text", key)``,
``("masks", "all_attention_mask")`` and ``("masks", "all_assistant_mask")``, as TorchRL's wrappers do in
history mode; ``key`` is ``"prompt"`` (default) or ``"full"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.types import Column, HistoryColumn, TensorBatch
from posttrain_worker.methods.payload_keys import key_name, lookup, missing_key, ragged, single_batch
from posttrain_worker.models.chat import RenderedChat, render_chat
from posttrain_worker.models.store import LoadedModel, ModelStore
from posttrain_worker.protocol.args import ArgReader
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodOutcome, MethodRegistry

KEYS = ("prompt", "full")


@dataclass(frozen=True)
class ChatArgs:
    model: str
    key: str
    add_generation_prompt: bool
    continue_final_message: bool


def parse_chat(method: str, args: dict[str, Any]) -> ChatArgs:
    reader = ArgReader(method, args)
    model = reader.string("model")
    key = reader.choice("key", KEYS, required=False, default="prompt")
    add = reader.boolean("addGenerationPrompt", required=False, default=None)
    cont = reader.boolean("continueFinalMessage", required=False, default=False)
    reader.finish()
    assert model is not None and key is not None and cont is not None
    if not model:
        raise reader.fail('"model" must be a non-empty string')
    if add is None:
        add = key == "prompt"  # a prompt is followed by the generation prompt; a full conversation is not
    if add and cont:
        raise reader.fail('"addGenerationPrompt" and "continueFinalMessage" cannot both be true')
    return ChatArgs(model, key, add, cont)


def render_rows(
    method: str,
    loaded: LoadedModel,
    key: tuple[str, ...],
    column: Column,
    *,
    add_generation_prompt: bool,
    continue_final: bool,
) -> list[RenderedChat]:
    """Each row's conversation of the leaf ``key`` rendered by the model's chat template. A leaf that is not a
    history leaf is ``BAD_PAYLOAD``; a model without a template, and an empty or unrenderable conversation,
    are ``BAD_ARGUMENTS`` (naming the row)."""
    if not isinstance(column, HistoryColumn):
        raise WorkerFailure(BAD_PAYLOAD, f"{method}: {key_name(key)} must be a history leaf")
    tokenizer = loaded.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise WorkerFailure(BAD_ARGUMENTS, f"{method}: model {loaded.name!r} has no chat template")
    rendered = []
    for row, conversation in enumerate(column.rows):
        if not conversation:
            raise WorkerFailure(
                BAD_ARGUMENTS, f"{method}: row {row} holds an empty conversation", {"row": row}
            )
        try:
            rendered.append(
                render_chat(
                    tokenizer,
                    conversation,
                    add_generation_prompt=add_generation_prompt,
                    continue_final=continue_final,
                )
            )
        except (ValueError, TypeError, KeyError) as exc:  # jinja and HF raise these on bad messages
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"{method}: row {row} could not be rendered ({type(exc).__name__}: {exc})",
                {"row": row},
            ) from None
    return rendered


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
        parse_args=parse_chat,
        payloads=("tensordict",),
    )
