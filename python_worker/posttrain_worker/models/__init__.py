"""Model builders and model-side helpers of the worker.

``make_tiny_model`` writes a random, tiny Qwen2-style causal LM with a character-level tokenizer and a ChatML
template (assistant turns wrapped in ``{% generation %}``) into a directory, offline and in well under a
second once torch/transformers are imported. Tests, examples and the demo load it with
``AutoModelForCausalLM.from_pretrained(dir)`` / ``AutoTokenizer.from_pretrained(dir)``; nothing downloads a
model. Command line: ``python -m posttrain_worker.models.tiny DIR``.

The names are resolved lazily, so importing this package stays cheap (no torch/transformers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posttrain_worker.models.tiny import (
        DEFAULT_CHARS,
        SPECIAL_TOKENS,
        TINY_CHAT_TEMPLATE,
        make_tiny_model,
    )

__all__ = ["DEFAULT_CHARS", "SPECIAL_TOKENS", "TINY_CHAT_TEMPLATE", "make_tiny_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from posttrain_worker.models import tiny

        return getattr(tiny, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
