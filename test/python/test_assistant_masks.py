"""Assistant masks for templates without ``{% generation %}`` markers (models/assistant_masks.py).

Direct calls check the prefix rendering against HF's marker masks on the tiny template (the same ChatML with
and without markers), the real templates of six model families (test/fixtures/chat_templates) and the edge
cases (a token straddling a turn's edge, templates that cannot give masks). A real worker proves the wiring:
``apply_chat_template`` on model directories whose chat_template.jinja was replaced, and the typed errors.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from chat_families import END_OF_TURN, TEMPLATES, template
from posttrain_worker.codec import HistoryColumn, TensorBatch, decode_batch, encode_batch
from posttrain_worker.models.assistant_masks import MaskUnavailable, has_generation_markers, turn_end
from posttrain_worker.models.chat import render_chat
from posttrain_worker.models.tiny.families import get_family
from posttrain_worker.models.tiny.tokenizer import DEFAULT_CHARS, TINY_CHAT_TEMPLATE, build_tokenizer
from worker_harness import Client, error, load, ok, rows_of, worker_client

#: The tiny ChatML template with its {% generation %} / {% endgeneration %} tags taken out.
PLAIN_TEMPLATE = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", TINY_CHAT_TEMPLATE)

#: Renders later assistant turns in capitals and has no header before them: the turn cannot be found in the
#: whole conversation (ASSISTANT_MASK_UNAVAILABLE).
HEADERLESS_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{{- (m.content if loop.last else m.content | upper) + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
)

#: Drops assistant messages: they add no token (ASSISTANT_MASK_EMPTY).
SILENT_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role != 'assistant' %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

CALL = {"name": "lookup", "arguments": {"q": "x"}}
CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "one turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}],
    "system, two turns": [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo"},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": "Yo yo"},
    ],
    "tool call": [
        {"role": "user", "content": "Find x"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "x=1"},
        {"role": "assistant", "content": "It is 1."},
    ],
    "empty content": [{"role": "user", "content": "Say nothing"}, {"role": "assistant", "content": ""}],
    "assistant first": [
        {"role": "assistant", "content": "How can I help?"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": " spaced  "},
    ],
    "prompt only": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
}
MODES = {
    "full": (False, False),
    "add_generation_prompt": (True, False),
    "continue_final_message": (False, True),
}


@pytest.fixture(scope="module")
def tokenizers() -> tuple[Any, Any]:
    """The tiny tokenizer with its marker template, and the same tokenizer with the plain template."""
    marked = build_tokenizer(DEFAULT_CHARS, 512)
    plain = build_tokenizer(DEFAULT_CHARS, 512)
    plain.chat_template = PLAIN_TEMPLATE
    return marked, plain


def masked_text(tokenizer: Any, chat: Any) -> str:
    return str(tokenizer.decode(chat.tokens[chat.assistant_mask].tolist()))


@pytest.mark.parametrize(
    ("name", "mode"),
    # continuing needs an assistant message last
    [(n, m) for n in CONVERSATIONS for m in MODES if n != "prompt only" or m != "continue_final_message"],
)
def test_prefix_masks_equal_the_marker_masks(tokenizers: tuple[Any, Any], name: str, mode: str) -> None:
    marked, plain = tokenizers
    assert has_generation_markers(marked) and not has_generation_markers(plain)
    conversation = CONVERSATIONS[name]
    gen, cont = MODES[mode]
    want = render_chat(marked, conversation, add_generation_prompt=gen, continue_final=cont)
    got = render_chat(plain, conversation, add_generation_prompt=gen, continue_final=cont)
    assert got.text == want.text
    assert torch.equal(got.tokens, want.tokens)
    assert got.assistant_mask.tolist() == want.assistant_mask.tolist()
    if name == "system, two turns":  # what the masks hold, so equal-but-wrong cannot pass
        closed = "Yo<|im_end|>Yo yo" + ("" if cont else "<|im_end|>")
        assert masked_text(plain, got) == closed


def test_an_incomplete_message_is_continued_with_its_mask(tokenizers: tuple[Any, Any]) -> None:
    _, plain = tokenizers
    chat = [
        {"role": "user", "content": "Count"},
        {"role": "assistant", "content": "1, 2,", "is_complete": False},
    ]
    got = render_chat(plain, chat, add_generation_prompt=False, continue_final=False)
    assert got.text.endswith("1, 2,")
    assert masked_text(plain, got) == "1, 2,"


def test_masks_off_render_only_the_text(tokenizers: tuple[Any, Any]) -> None:
    _, plain = tokenizers
    chat = render_chat(
        plain, CONVERSATIONS["one turn"], add_generation_prompt=True, continue_final=False, masks=False
    )
    assert not chat.assistant_mask.any() and chat.text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("piece", "end", "token"),
    [
        ("Hi<|im_end|>\n", 12, "<|im_end|>"),
        ("Hi<|end|>\n<|endoftext|>", 9, "<|end|>"),  # Phi-3's last turn: the conversation's eos follows
        ("Hi \n", 4, None),  # no special token: the whole piece
        ("<|im_end|>", 10, "<|im_end|>"),
    ],
)
def test_a_turn_ends_after_the_first_special_token_of_its_tail(
    piece: str, end: int, token: str | None
) -> None:
    assert turn_end(piece, ["<|endoftext|>", "<|im_end|>", "<|end|>"]) == (end, token)


# ---- the real templates of six model families ------------------------------------------------------------

TWO_TURNS = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Yo"},
    {"role": "user", "content": "Again"},
    {"role": "assistant", "content": "Yo yo"},
]
SYSTEM = {"role": "system", "content": "Be terse."}
#: Qwen3 writes an empty think block into a turn after the last user message (the one it would generate).
EMPTY_THINK = {"qwen3": "<think>\n\n</think>\n\n"}


def family_tokenizer(family: str) -> Any:
    return build_tokenizer(DEFAULT_CHARS, 4096, family=get_family(family), chat_template=template(family))


@pytest.fixture(scope="module", params=sorted(END_OF_TURN))
def family(request: pytest.FixtureRequest) -> tuple[str, Any]:
    return request.param, family_tokenizer(request.param)


def test_the_fixture_templates_are_all_here() -> None:
    assert sorted(p.stem for p in TEMPLATES.glob("*.jinja")) == sorted(END_OF_TURN)


@pytest.mark.parametrize("mode", ["full", "add_generation_prompt"])
def test_family_masks_are_the_assistant_contents_and_their_end_of_turn(
    family: tuple[str, Any], mode: str
) -> None:
    name, tokenizer = family
    assert not has_generation_markers(tokenizer)
    eot = END_OF_TURN[name]
    chats = [TWO_TURNS] if name == "gemma2" else [TWO_TURNS, [SYSTEM, *TWO_TURNS]]  # Gemma refuses systems
    for conversation in chats:
        chat = render_chat(
            tokenizer, conversation, add_generation_prompt=mode != "full", continue_final=False
        )
        assert masked_text(tokenizer, chat) == f"Yo{eot}{EMPTY_THINK.get(name, '')}Yo yo{eot}"
        # the mask is one run per turn, each ending on the end-of-turn token
        ids, mask = chat.tokens.tolist(), chat.assistant_mask.tolist()
        ends = [k for k in range(len(mask)) if mask[k] and (k + 1 == len(mask) or not mask[k + 1])]
        assert [tokenizer.decode([ids[k]]) for k in ends] == [eot, eot]


def test_family_masks_continue_a_final_message(family: tuple[str, Any]) -> None:
    name, tokenizer = family
    conversation = [*TWO_TURNS[:3], {"role": "assistant", "content": "Yo y", "is_complete": False}]
    chat = render_chat(tokenizer, conversation, add_generation_prompt=False, continue_final=False)
    assert chat.text.endswith("Yo y")
    assert masked_text(tokenizer, chat) == f"Yo{END_OF_TURN[name]}{EMPTY_THINK.get(name, '')}Yo y"


def test_qwen_tool_calls_are_the_assistants() -> None:
    for name in ("qwen2", "qwen3"):
        tokenizer = family_tokenizer(name)
        chat = render_chat(
            tokenizer, CONVERSATIONS["tool call"], add_generation_prompt=False, continue_final=False
        )
        call = '<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n</tool_call><|im_end|>'
        assert masked_text(tokenizer, chat) == f"{call}{EMPTY_THINK.get(name, '')}It is 1.<|im_end|>"


def test_qwen3_trains_on_past_turns_as_the_final_rendering_shows_them() -> None:
    """Qwen3 drops <think> blocks of turns before the last user message: the prefix rendering of turn 1 is not
    a prefix of the whole, and the mask covers the turn as the whole conversation renders it."""
    tokenizer = family_tokenizer("qwen3")
    conversation = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nYo"},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": "<think>\nagain\n</think>\n\nYo yo"},
    ]
    chat = render_chat(tokenizer, conversation, add_generation_prompt=False, continue_final=False)
    assert "hmm" not in chat.text
    assert masked_text(tokenizer, chat) == "Yo<|im_end|><think>\nagain\n</think>\n\nYo yo<|im_end|>"


def test_mistral_system_prompt_moving_to_the_last_user_turn_does_not_leak_into_the_mask() -> None:
    tokenizer = family_tokenizer("mistral")
    chat = render_chat(tokenizer, [SYSTEM, *TWO_TURNS[:3]], add_generation_prompt=True, continue_final=False)
    assert "Be terse." in chat.text
    assert masked_text(tokenizer, chat) == "Yo</s>"


# ---- tokens straddling a turn's edge ---------------------------------------------------------------------

MERGE_TEMPLATE = (
    "{%- for m in messages %}{{- ('A:' if m.role == 'assistant' else 'U:') + m.content + '<eot>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- 'A:' }}{%- endif %}"
)


def merging_tokenizer() -> Any:
    """Characters plus one merged token ``:h`` that joins a header's ``:`` to an answer's ``h``."""
    from tokenizers import AddedToken, Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate("AUhix:")}
    vocab[":h"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[(":", "h")]))
    backend.add_special_tokens([AddedToken("<eot>", special=True, normalized=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eot>", chat_template=MERGE_TEMPLATE)


class NoOffsets:
    """Stands in for a slow (Python) tokenizer, which has no ``return_offsets_mapping``: the real fast one
    otherwise."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __call__(self, text: str, **kwargs: Any) -> Any:
        if kwargs.get("return_offsets_mapping"):
            raise NotImplementedError("return_offset_mapping is not available when using Python tokenizers")
        return self._inner(text, **kwargs)


def test_a_token_across_the_turn_edge_counts_where_it_starts() -> None:
    tokenizer = merging_tokenizer()
    conversation = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "hi"}]
    chat = render_chat(tokenizer, conversation, add_generation_prompt=False, continue_final=False)
    pieces = [tokenizer.decode([t]) for t in chat.tokens.tolist()]
    assert pieces == ["U", ":", "x", "<eot>", "A", ":h", "i", "<eot>"]  # ":h" straddles "A:" | "hi"
    assert chat.assistant_mask.tolist() == [False] * 6 + [True, True]
    with pytest.raises(MaskUnavailable, match="no character offsets"):
        render_chat(NoOffsets(tokenizer), conversation, add_generation_prompt=False, continue_final=False)


# ---- through a real worker -------------------------------------------------------------------------------


def with_template(source: Path, out: Path, text: str) -> Path:
    shutil.copytree(source, out)
    (out / "chat_template.jinja").write_text(text, "utf-8")
    return out


@pytest.fixture(scope="module")
def masks_client(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """One worker with the tiny model under four templates: its own (markers), plain, headerless, silent."""
    root = tmp_path_factory.mktemp("templates")
    models = {
        "marked": tiny_dir,
        "plain": with_template(tiny_dir, root / "plain", PLAIN_TEMPLATE),
        "headerless": with_template(tiny_dir, root / "headerless", HEADERLESS_TEMPLATE),
        "silent": with_template(tiny_dir, root / "silent", SILENT_TEMPLATE),
    }
    with worker_client(models) as (client, _):
        yield client


def apply(client: Client, model: str, rows: list[list[dict[str, Any]]], **args: Any) -> Any:
    batch = TensorBatch((len(rows),), {"history": {"full": HistoryColumn(rows)}})
    return client.call(
        "apply_chat_template",
        {"model": model, "key": "full", **args},
        [{"kind": "tensordict"}],
        (bytes(encode_batch(batch)),),
    )


def test_the_worker_gives_plain_templates_the_marker_masks(masks_client: Client) -> None:
    rows = list(CONVERSATIONS.values())
    outs = []
    for model in ("marked", "plain"):
        reply, frames = apply(masks_client, model, rows)
        ok(reply)
        out = decode_batch(frames[0])
        outs.append([r.tolist() for r in rows_of(out.columns["masks"]["all_assistant_mask"])])  # type: ignore[index]
    assert outs[0] == outs[1]
    assert sum(outs[1][0]) == len("Hello there") + 1  # its characters and <|im_end|>


def test_a_template_that_cannot_place_a_turn_is_a_typed_error(masks_client: Client) -> None:
    rows = [CONVERSATIONS["one turn"], CONVERSATIONS["system, two turns"]]
    message = error(apply(masks_client, "headerless", rows)[0], "ASSISTANT_MASK_UNAVAILABLE")
    assert "row 1" in message and "'headerless'" in message and "{% generation %}" in message
    assert "assistant message 2 renders differently" in message


def test_an_assistant_turn_without_tokens_is_a_typed_error(masks_client: Client) -> None:
    rows = [CONVERSATIONS["prompt only"], CONVERSATIONS["one turn"]]
    message = error(apply(masks_client, "silent", rows)[0], "ASSISTANT_MASK_EMPTY")
    assert "row 1" in message and "'silent'" in message
    # a prompt with no assistant message has nothing to mark: no error
    ok(apply(masks_client, "silent", rows[:1])[0])
    assert ok(masks_client.call("ping")[0]) == {}


def test_a_chat_template_given_at_load_replaces_the_directory_s(masks_client: Client, tiny_dir: Path) -> None:
    # the silent template gives no mask; loading it with the marker template as `chatTemplate` fixes that
    silent_dir = next(
        m["path"] for m in ok(masks_client.call("list_models")[0])["models"] if m["name"] == "silent"
    )
    ok(load(masks_client, "fixed", silent_dir, chatTemplate=TINY_CHAT_TEMPLATE))
    rows = [CONVERSATIONS["one turn"]]
    reply, frames = apply(masks_client, "fixed", rows)
    ok(reply)
    mask = rows_of(decode_batch(frames[0]).columns["masks"]["all_assistant_mask"])[0]  # type: ignore[index]
    assert int(mask.sum()) == len("Hello there") + 1
    # a template that does not render is refused before anything loads, naming the field; the worker serves on
    broken = error(
        load(masks_client, "broken", tiny_dir, chatTemplate="{% for m in messages %}"), "BAD_ARGUMENTS"
    )
    assert '"chatTemplate"' in broken
    names = [m["name"] for m in ok(masks_client.call("list_models")[0])["models"]]
    assert "broken" not in names and "fixed" in names
    ok(masks_client.call("unload_model", {"name": "fixed"})[0])
