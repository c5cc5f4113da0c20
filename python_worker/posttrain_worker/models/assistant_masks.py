"""Assistant-token masks for chat templates without ``{% generation %}`` markers (docs/history.md, "Assistant
masks").

Hugging Face marks assistant tokens only inside a template's ``{% generation %}`` blocks; real templates have
none, so the mask is found by rendering the conversation prefix by prefix. For assistant message ``i``:

- ``before`` = the rendering of ``messages[:i]`` with the generation prompt, ``through`` = the rendering of
  ``messages[:i + 1]`` without it. The turn's tokens start where the two stop agreeing (after the generation
  prompt: the header is the prompt's, not the assistant's). When they part before the generation prompt (the
  turn changes how earlier messages render, as Mistral's system prompt), or the turn comes first, the start is
  where two renderings of the turn with probe contents part.
- The turn ends after its end-of-turn token: the first special token of the run of special tokens and
  whitespace that closes ``through`` (ChatML ``<|im_end|>``, Llama 3 ``<|eot_id|>``, Mistral ``</s>``, Gemma
  ``<end_of_turn>``, Phi-3 ``<|end|>``, not the ``<|endoftext|>`` after its last turn). Without such a token
  the whole remainder counts.
- Where the full rendering starts with ``through`` up to that end, the span is exact. Where it does not (a
  template that renders past turns differently, e.g. Qwen3 dropping ``<think>`` blocks before the last user
  message), the turn is located in the *final* text: the first occurrence of its header (the text between
  ``messages[:i]`` and the turn) after the previous assistant turn, through the next occurrence of its
  end-of-turn token. So training sees the turn as the final rendering shows it. Without a header or an
  end-of-turn token to search for, the mask is refused (:class:`MaskUnavailable`).

Character spans become token positions by tokenizing the text before each boundary: when those tokens are
a prefix of the whole text's tokens the cut is exact; otherwise (a token straddles the boundary) the tokens
whose first character lies in the span count, from the fast tokenizer's offsets, and a tokenizer without
offsets refuses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_GENERATION_TAG = re.compile(r"\{%[-+]?\s*generation\s*[-+]?%\}")

Render = Callable[[list[dict[str, Any]], bool], str]
"""``render(messages, add_generation_prompt)``: the template's text for ``messages``."""


class MaskUnavailable(Exception):
    """The template's renderings do not let the assistant tokens be located; the message says why."""


def template_text(tokenizer: Any) -> str:
    """The tokenizer's chat template (the ``"default"`` one when it holds several by name)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) else ""


def has_generation_markers(tokenizer: Any) -> bool:
    """Whether the template marks assistant text with ``{% generation %}`` (any whitespace control)."""
    return _GENERATION_TAG.search(template_text(tokenizer)) is not None


def special_strings(tokenizer: Any) -> list[str]:
    """The special tokens' texts, longest first (so ``</s>`` never shadows a longer token ending alike)."""
    found = set(getattr(tokenizer, "all_special_tokens", []) or [])
    for added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(added, "special", False):
            found.add(str(added.content))
    return sorted((s for s in found if s), key=len, reverse=True)


def turn_end(piece: str, specials: list[str]) -> tuple[int, str | None]:
    """Where an assistant turn rendered as ``piece`` ends, and its end-of-turn token (None: there is none).

    The piece ends in a run of special tokens and whitespace (``<|im_end|>\\n``; Phi-3's last turn
    ``<|end|>\\n<|endoftext|>``): the turn ends after the run's first special token. The rest closes the
    conversation or separates turns, and no generation produces it."""
    end, first = len(piece), None
    cut = len(piece)
    while cut > 0:
        if piece[cut - 1].isspace():
            cut -= 1
            continue
        special = next((s for s in specials if piece.endswith(s, 0, cut)), None)
        if special is None:
            break
        cut -= len(special)
        end, first = cut + len(special), special
    return end, first


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _render(render: Render, messages: list[dict[str, Any]], gen: bool, i: int) -> str:
    try:
        return render(messages, gen)
    except Exception as exc:  # a template may refuse a prefix (e.g. one that must start with a user turn)
        raise MaskUnavailable(
            f"the template cannot render the prefix of the conversation around assistant message {i} "
            f"({type(exc).__name__}: {exc})"
        ) from None


def _turn_start(render: Render, messages: list[dict[str, Any]], i: int, through: str) -> tuple[int, int]:
    """``(where the turn's header starts, where the assistant's own text starts)`` in ``through``."""
    header_at = 0
    if i > 0:  # HF renders no empty conversation: a first message is found by probes alone
        before = _render(render, messages[:i], True, i)
        context = _render(render, messages[:i], False, i)
        header_at = _common_prefix(context, through)
        start = _common_prefix(before, through)
        if start >= _common_prefix(context, before):  # past where the generation prompt starts
            return min(header_at, start), start
    # The turn changes how earlier messages render (Mistral puts the system prompt into the last user message
    # only), or it comes first: the assistant's text starts where two probe contents first differ.
    probes = [
        _render(render, [*messages[:i], {"role": "assistant", "content": text}], False, i)
        for text in ("a", "b")
    ]
    start = _common_prefix(*probes)
    if through[:start] != probes[0][:start]:
        raise MaskUnavailable(f"assistant message {i}'s header renders unlike an assistant turn's")
    return min(header_at, start), start


def assistant_spans(
    render: Render, messages: list[dict[str, Any]], text: str, specials: list[str], *, continued: bool
) -> list[tuple[int, int]]:
    """Character spans of ``text`` (the whole conversation's rendering) that the assistant messages add; with
    ``continued`` the last message is left open and its span runs to the end of ``text``."""
    spans: list[tuple[int, int]] = []
    cursor = 0  # the end of the previous assistant span in ``text``
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        open_turn = continued and i == last
        through = text if open_turn else _render(render, messages[: i + 1], False, i)
        header_at, start = _turn_start(render, messages, i, through)
        if open_turn:
            end, terminator = len(through), None
        else:
            length, terminator = turn_end(through[start:], specials)
            end = start + length
        if start >= cursor and text[:end] == through[:end]:
            span = (start, end)
        else:
            span = _locate(text, through[header_at:start], i, terminator, cursor, open_turn)
        spans.append(span)
        cursor = span[1]
    return spans


def _locate(
    text: str, header: str, i: int, terminator: str | None, cursor: int, open_turn: bool
) -> tuple[int, int]:
    """Assistant message ``i``'s span in the final ``text`` when the template renders it differently there
    than as the last turn: its header's first occurrence after ``cursor``, through its end-of-turn token."""
    why = f"assistant message {i} renders differently in the whole conversation than as its last turn"
    if not header:
        raise MaskUnavailable(f"{why}, and its turn has no header to find it by")
    found = text.find(header, cursor)
    if found < 0:
        raise MaskUnavailable(f"{why}, and its header {header!r} is not in the whole conversation")
    begin = found + len(header)
    if open_turn:
        return begin, len(text)
    if terminator is None:
        raise MaskUnavailable(f"{why}, and its turn ends with no special token to find its end by")
    close = text.find(terminator, begin)
    if close < 0:
        raise MaskUnavailable(f"{why}, and its end-of-turn token {terminator!r} is not after its header")
    return begin, close + len(terminator)


def spans_to_mask(tokenizer: Any, text: str, ids: list[int], spans: list[tuple[int, int]]) -> list[int]:
    """One 0/1 per token of ``text`` (``ids``): 1 on the tokens of the character ``spans``."""
    mask = [0] * len(ids)
    offsets: list[tuple[int, int]] | None = None
    for start, end in spans:
        if start >= end:
            continue
        cut = [_prefix_tokens(tokenizer, text, ids, at) for at in (start, end)]
        if cut[0] is not None and cut[1] is not None:
            mask[cut[0] : cut[1]] = [1] * (cut[1] - cut[0])
            continue
        if offsets is None:
            offsets = _offsets(tokenizer, text, len(ids))
        for k, (first, _) in enumerate(offsets):
            if start <= first < end:
                mask[k] = 1
    return mask


def _prefix_tokens(tokenizer: Any, text: str, ids: list[int], at: int) -> int | None:
    """How many of ``ids`` make up ``text[:at]``, or None when its tokens are not a prefix of ``ids``."""
    if at >= len(text):
        return len(ids)
    head = list(tokenizer(text[:at], add_special_tokens=False)["input_ids"])
    return len(head) if ids[: len(head)] == head else None


def _offsets(tokenizer: Any, text: str, count: int) -> list[tuple[int, int]]:
    try:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError:  # slow (Python) tokenizers have no offsets
        encoded = None
    if encoded is None or len(encoded["offset_mapping"]) != count:
        raise MaskUnavailable(
            "a token straddles the edge of an assistant turn and the tokenizer gives no character offsets "
            "to place it (use a fast tokenizer: tokenizer.json)"
        )
    return [(int(a), int(b)) for a, b in encoded["offset_mapping"]]
