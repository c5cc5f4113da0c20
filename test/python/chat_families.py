"""The model families' real chat templates (test/fixtures/chat_templates, see its README) and the token that
ends an assistant turn in each, shared by test_model_families.py and test_assistant_masks.py."""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "fixtures" / "chat_templates"

END_OF_TURN = {
    "qwen2": "<|im_end|>",
    "qwen3": "<|im_end|>",
    "llama3": "<|eot_id|>",
    "mistral": "</s>",
    "gemma2": "<end_of_turn>",
    "phi3": "<|end|>",
}
"""The family's end-of-turn token: the last token of an assistant turn's mask."""


def template(family: str) -> str:
    """The family's chat template, verbatim."""
    return (TEMPLATES / f"{family}.jinja").read_text("utf-8")
