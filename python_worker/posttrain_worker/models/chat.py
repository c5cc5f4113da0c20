"""Chat templates applied by the model's own Hugging Face tokenizer (the source of truth for rendering).

A conversation is a list of message dicts as the codec decodes them (``role``, ``content`` and, when present,
``name``, ``tool_calls``, ``tool_responses``, ``is_complete``). Tool calls are handed to the template in the
OpenAI shape HF templates expect (``{"type": "function", "function": {"name", "arguments"}}``);
``tool_responses`` are not part of HF's message format and are left out (tool results are ``tool`` messages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posttrain_worker.codec.keys import key_name
from posttrain_worker.codec.types import Column, HistoryColumn
from posttrain_worker.errors import BAD_ARGUMENTS, BAD_PAYLOAD, WorkerFailure
from posttrain_worker.models.assistant_masks import (
    MaskUnavailable,
    assistant_spans,
    has_generation_markers,
    spans_to_mask,
    special_strings,
)
from posttrain_worker.models.errors import ASSISTANT_MASK_EMPTY, ASSISTANT_MASK_UNAVAILABLE
from posttrain_worker.models.store import LoadedModel


@dataclass
class RenderedChat:
    text: str
    tokens: torch.Tensor
    """int64 token ids of ``text``."""
    assistant_mask: torch.Tensor
    """bool, one per token: true on the tokens the assistant messages add (docs/history.md, "Assistant
    masks")."""


def to_hf_message(message: dict[str, Any]) -> dict[str, Any]:
    """One message in the shape HF chat templates read."""
    out: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if "name" in message:
        out["name"] = message["name"]
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "type": "function",
                "function": {"name": call.get("name"), "arguments": call.get("arguments", {})},
                **({"id": call["id"]} if "id" in call else {}),
            }
            for call in calls
        ]
    return out


def render_chat(
    tokenizer: Any,
    conversation: list[dict[str, Any]],
    *,
    add_generation_prompt: bool,
    continue_final: bool,
    masks: bool = True,
) -> RenderedChat:
    """Render one conversation with the tokenizer's chat template; an incomplete last message continues.

    The assistant mask comes from the template's ``{% generation %}`` blocks where it has them, otherwise from
    prefix renderings (``assistant_masks``; ``MaskUnavailable`` when they cannot place the turns). With
    ``masks=False`` (a generation prompt) the mask is all false and nothing but the text is rendered."""
    messages = [to_hf_message(m) for m in conversation]
    continue_final = continues(conversation, continue_final)
    options = {
        "add_generation_prompt": add_generation_prompt and not continue_final,
        "continue_final_message": continue_final,
    }
    text = tokenizer.apply_chat_template(messages, tokenize=False, **options)
    if not masks or not any(m["role"] == "assistant" for m in messages):
        # No assistant token to mark: the tokens are those of the text (HF tokenizes its rendering the same
        # way); this spares a second rendering of a prompt.
        ids = _tokens(tokenizer, text)
        mask = [0] * len(ids)
    elif not has_generation_markers(tokenizer):
        ids = _tokens(tokenizer, text)
        spans = assistant_spans(
            lambda prefix, gen: tokenizer.apply_chat_template(
                prefix, tokenize=False, add_generation_prompt=gen
            ),
            messages,
            text,
            special_strings(tokenizer),
            continued=continue_final,
        )
        mask = spans_to_mask(tokenizer, text, ids, spans)
    elif not continue_final:
        ids, mask = _with_masks(tokenizer, messages, options["add_generation_prompt"])
    else:
        # HF refuses assistant masks together with continue_final_message: take them from the closed
        # conversation, whose tokens start with the continued text's tokens.
        ids = _tokens(tokenizer, text)
        closed_ids, closed_mask = _with_masks(tokenizer, messages, False)
        mask = (
            closed_mask[: len(ids)]
            if closed_ids[: len(ids)] == ids
            else _tail_mask(tokenizer, text, messages, ids)
        )
    return RenderedChat(text, torch.tensor(ids, dtype=torch.int64), torch.tensor(mask, dtype=torch.bool))


def _tokens(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def continues(conversation: list[dict[str, Any]], continue_final: bool) -> bool:
    """Whether the rendering leaves the last message open: asked for, or the message is incomplete."""
    return continue_final or (bool(conversation) and conversation[-1].get("is_complete") is False)


def has_closed_assistant(conversation: list[dict[str, Any]], continue_final: bool) -> bool:
    """Whether the rendering closes an assistant turn (a continued last message is left open, and may
    rightly add no token yet)."""
    closed = conversation[:-1] if continues(conversation, continue_final) else conversation
    return any(m.get("role") == "assistant" for m in closed)


def _with_masks(
    tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool
) -> tuple[list[int], list[int]]:
    encoded = tokenizer.apply_chat_template(
        messages,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
        add_generation_prompt=add_generation_prompt,
    )
    ids = list(encoded["input_ids"])
    return ids, list(encoded.get("assistant_masks") or [0] * len(ids))


def _tail_mask(tokenizer: Any, text: str, messages: list[dict[str, Any]], ids: list[int]) -> list[int]:
    """Fallback when tokenization differs at the cut: mark the tokens of the continued last message."""
    content = str(messages[-1].get("content") or "").strip()
    start = text.rfind(content) if content else len(text)
    head = len(tokenizer(text[:start], add_special_tokens=False)["input_ids"])
    last_is_assistant = messages[-1].get("role") == "assistant"
    return [0] * head + [1 if last_is_assistant else 0] * (len(ids) - head)


def render_rows(
    method: str,
    loaded: LoadedModel,
    key: tuple[str, ...],
    column: Column,
    *,
    add_generation_prompt: bool,
    continue_final: bool,
    masks: bool = True,
) -> list[RenderedChat]:
    """Each row's conversation of the leaf ``key`` rendered by the model's chat template. A leaf that is not a
    history leaf is ``BAD_PAYLOAD``; a model without a template, and an empty or unrenderable conversation,
    are ``BAD_ARGUMENTS`` (naming the row). With ``masks``, a row whose assistant tokens cannot be located is
    ``ASSISTANT_MASK_UNAVAILABLE`` and a row with a closed assistant turn but an all-false mask is
    ``ASSISTANT_MASK_EMPTY`` (an assistant-only loss would skip it silently)."""
    if not isinstance(column, HistoryColumn):
        raise WorkerFailure(BAD_PAYLOAD, f"{method}: {key_name(key)} must be a history leaf")
    tokenizer = loaded.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise WorkerFailure(BAD_ARGUMENTS, f"{method}: model {loaded.name!r} has no chat template")
    rendered = []
    # a GRPO batch holds each prompt `groupSize` times in a row: render a repeated conversation once
    previous: tuple[object, RenderedChat] | None = None
    for row, conversation in enumerate(column.rows):
        if not conversation:
            raise WorkerFailure(
                BAD_ARGUMENTS, f"{method}: row {row} holds an empty conversation", {"row": row}
            )
        if previous is not None and previous[0] == conversation:
            rendered.append(previous[1])
            continue
        try:
            chat = render_chat(
                tokenizer,
                conversation,
                add_generation_prompt=add_generation_prompt,
                continue_final=continue_final,
                masks=masks,
            )
        except MaskUnavailable as exc:
            raise _mask_failure(
                ASSISTANT_MASK_UNAVAILABLE, method, loaded, row, f"cannot give assistant masks: {exc}"
            ) from None
        except (ValueError, TypeError, KeyError) as exc:  # jinja and HF raise these on bad messages
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"{method}: row {row} could not be rendered ({type(exc).__name__}: {exc})",
                {"row": row},
            ) from None
        if (
            masks
            and not bool(chat.assistant_mask.any())
            and has_closed_assistant(conversation, continue_final)
        ):
            raise _mask_failure(
                ASSISTANT_MASK_EMPTY,
                method,
                loaded,
                row,
                "marks no token of the row's assistant messages (an assistant-only loss would skip the row)",
            )
        rendered.append(chat)
        previous = (conversation, chat)
    return rendered


def _mask_failure(code: str, method: str, loaded: LoadedModel, row: int, what: str) -> WorkerFailure:
    markers = has_generation_markers(loaded.tokenizer)
    fix = (
        "check that its {% generation %} blocks hold the assistant's text"
        if markers
        else "give the model a chat template whose assistant turns sit inside "
        "{% generation %}...{% endgeneration %} (load_model's chatTemplate, or chat_template.jinja in its "
        "directory)"
    )
    return WorkerFailure(
        code,
        f"{method}: row {row}: the chat template of model {loaded.name!r} ({loaded.path}) {what}; {fix}; "
        'see docs/history.md, "Assistant masks"',
        {"row": row, "model": loaded.name, "path": loaded.path},
    )
