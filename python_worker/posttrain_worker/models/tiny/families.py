"""The model families the tiny builder can imitate: per family its architecture (config class and the options
that family needs), its special tokens and which of them are bos / eos / pad, its stop tokens and how
transformers should load its tokenizer. The default, ``qwen2``, is the original tiny model.

A family spec knows nothing of chat templates: a family's real template is data the caller passes in (the
tests keep verbatim copies under test/fixtures/chat_templates/), so no third-party template ships here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_INIT_STD = 0.02

#: Sizes every family shares unless the caller overrides them.
COMMON_SIZES: dict[str, int] = {
    "hidden_size": 64,
    "num_layers": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
}

#: The window of the sliding-window families: small, so test sequences of a few dozen tokens cross it.
SLIDING_WINDOW = 8


@dataclass(frozen=True)
class Token:
    """A token added to the vocabulary after the byte tokens: ``special`` ones are skipped by
    ``decode(skip_special_tokens=True)``; plain added ones (Qwen3's ``<think>``) are not."""

    text: str
    special: bool = True


@dataclass(frozen=True)
class Family:
    """How one model family is built (see the module docstring)."""

    name: str
    architecture: str
    tokens: tuple[Token, ...]
    """Added tokens in id order; they take the last ids of the vocabulary."""
    eos: str
    bos: str | None
    pad: str | None
    unk: str | None
    stop: tuple[str, ...]
    """``generation_config.eos_token_id``: the tokens generation stops on."""
    tokenizer_class: str
    """What tokenizer_config.json declares."""
    bos_in_encode: bool
    """The tokenizer itself puts bos in front of encoded text (its post-processor), as Llama / Mistral /
    Gemma tokenizers do; chat templates then write ``{{ bos_token }}`` and are encoded without it."""
    heads: tuple[int, int]
    """Default (attention heads, key/value heads)."""
    head_dim: int | None
    """Default head size; None: ``hidden_size // num_heads`` (the only choice of Qwen2 and Phi-3)."""
    norm_init: float
    """RMSNorm weights at init: 1, or 0 for Gemma's ``(1 + weight)`` norms (both: the identity scale)."""
    config: Callable[[dict[str, int], dict[str, Any]], Any] = field(repr=False)
    """``(sizes, common config kwargs) -> PretrainedConfig``."""

    @property
    def specials(self) -> tuple[str, ...]:
        return tuple(t.text for t in self.tokens if t.special)


def _common(sizes: dict[str, int], ids: dict[str, Any]) -> dict[str, Any]:
    return {
        "vocab_size": ids["vocab_size"],
        "hidden_size": sizes["hidden_size"],
        "intermediate_size": sizes["intermediate_size"],
        "num_hidden_layers": sizes["num_layers"],
        "num_attention_heads": sizes["num_heads"],
        "num_key_value_heads": sizes["num_kv_heads"],
        "max_position_embeddings": sizes["max_position_embeddings"],
        "initializer_range": _INIT_STD,
        "attention_dropout": 0.0,
        "pad_token_id": ids["pad_token_id"],
        "bos_token_id": ids["bos_token_id"],
        "eos_token_id": ids["eos_token_id"],
        "dtype": "float32",
    }


def _qwen2(sizes: dict[str, int], ids: dict[str, Any]) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        **_common(sizes, ids),
        hidden_act="silu",
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        use_sliding_window=False,
        architectures=["Qwen2ForCausalLM"],
    )


def _qwen3(sizes: dict[str, int], ids: dict[str, Any]) -> Any:
    from transformers import Qwen3Config

    # Qwen3-0.6B's choices: q/k RMSNorm (always on in Qwen3), no qkv bias, an explicit head_dim, tied
    # embeddings.
    return Qwen3Config(
        **_common(sizes, ids),
        head_dim=sizes["head_dim"],
        hidden_act="silu",
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
        architectures=["Qwen3ForCausalLM"],
    )


def _llama3(sizes: dict[str, int], ids: dict[str, Any]) -> Any:
    from transformers import LlamaConfig

    # Llama 3.1's rope: "llama3" frequency scaling, theta 500000; an untied LM head as in the 8B model.
    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        # below the context, so the scaling bends the low frequencies of a 512-token model as of a long one
        "original_max_position_embeddings": max(1, sizes["max_position_embeddings"] // 4),
    }
    return LlamaConfig(
        **_common(sizes, ids),
        head_dim=sizes["head_dim"],
        hidden_act="silu",
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        rope_parameters=rope,
        architectures=["LlamaForCausalLM"],
    )


def _mistral(sizes: dict[str, int], ids: dict[str, Any]) -> Any:
    from transformers import MistralConfig

    return MistralConfig(
        **_common(sizes, ids),
        head_dim=sizes["head_dim"],
        hidden_act="silu",
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        sliding_window=SLIDING_WINDOW,
        architectures=["MistralForCausalLM"],
    )


def _gemma2(sizes: dict[str, int], ids: dict[str, Any]) -> Any:
    from transformers import Gemma2Config

    # gemma-2-2b-it's choices, scaled down: tied embeddings, logit soft-capping in attention and on the final
    # logits, sliding-window and full attention alternating by layer, query scaling by query_pre_attn_scalar.
    return Gemma2Config(
        **_common(sizes, ids),
        head_dim=sizes["head_dim"],
        hidden_activation="gelu_pytorch_tanh",
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        query_pre_attn_scalar=sizes["head_dim"],
        sliding_window=SLIDING_WINDOW,
        layer_types=[
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(sizes["num_layers"])
        ],
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        architectures=["Gemma2ForCausalLM"],
    )


def _phi3(sizes: dict[str, int], ids: dict[str, Any]) -> Any:
    from transformers import Phi3Config

    # Phi-3's fused qkv_proj and gate_up_proj come with the architecture; no sliding window (as Phi-3.5).
    return Phi3Config(
        **_common(sizes, ids),
        hidden_act="silu",
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        original_max_position_embeddings=sizes["max_position_embeddings"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        sliding_window=None,
        architectures=["Phi3ForCausalLM"],
    )


_QWEN_TOKENS = (Token("<|endoftext|>"), Token("<|im_start|>"), Token("<|im_end|>"))
_QWEN_TOOLS = (Token("<tool_call>", False), Token("</tool_call>", False))

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="qwen2",
            architecture="Qwen2ForCausalLM",
            tokens=_QWEN_TOKENS,
            eos="<|im_end|>",
            bos=None,
            pad="<|endoftext|>",
            unk=None,
            stop=("<|im_end|>", "<|endoftext|>"),
            tokenizer_class="Qwen2Tokenizer",
            bos_in_encode=False,
            heads=(4, 2),
            head_dim=None,
            norm_init=1.0,
            config=_qwen2,
        ),
        Family(
            name="qwen3",
            architecture="Qwen3ForCausalLM",
            tokens=(
                *_QWEN_TOKENS,
                *_QWEN_TOOLS,
                Token("<tool_response>", False),
                Token("</tool_response>", False),
                Token("<think>", False),
                Token("</think>", False),
            ),
            eos="<|im_end|>",
            bos=None,
            pad="<|endoftext|>",
            unk=None,
            stop=("<|im_end|>", "<|endoftext|>"),
            tokenizer_class="Qwen2Tokenizer",
            bos_in_encode=False,
            heads=(4, 2),
            head_dim=32,
            norm_init=1.0,
            config=_qwen3,
        ),
        Family(
            name="llama3",
            architecture="LlamaForCausalLM",
            tokens=tuple(
                Token(t)
                for t in (
                    "<|begin_of_text|>",
                    "<|end_of_text|>",
                    "<|start_header_id|>",
                    "<|end_header_id|>",
                    "<|eom_id|>",
                    "<|eot_id|>",
                    "<|python_tag|>",
                )
            ),
            eos="<|eot_id|>",
            bos="<|begin_of_text|>",
            pad=None,
            unk=None,
            stop=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
            tokenizer_class="PreTrainedTokenizerFast",
            bos_in_encode=True,
            heads=(4, 2),
            head_dim=32,
            norm_init=1.0,
            config=_llama3,
        ),
        Family(
            name="mistral",
            architecture="MistralForCausalLM",
            tokens=tuple(
                Token(t)
                for t in (
                    "<unk>",
                    "<s>",
                    "</s>",
                    "[INST]",
                    "[/INST]",
                    "[TOOL_CALLS]",
                    "[AVAILABLE_TOOLS]",
                    "[/AVAILABLE_TOOLS]",
                    "[TOOL_RESULTS]",
                    "[/TOOL_RESULTS]",
                )
            ),
            eos="</s>",
            bos="<s>",
            pad=None,
            unk="<unk>",
            stop=("</s>",),
            tokenizer_class="PreTrainedTokenizerFast",
            bos_in_encode=True,
            heads=(4, 2),
            head_dim=32,
            norm_init=1.0,
            config=_mistral,
        ),
        Family(
            name="gemma2",
            architecture="Gemma2ForCausalLM",
            tokens=tuple(
                Token(t) for t in ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")
            ),
            eos="<eos>",
            bos="<bos>",
            pad="<pad>",
            unk="<unk>",
            stop=("<eos>", "<end_of_turn>"),
            tokenizer_class="PreTrainedTokenizerFast",
            bos_in_encode=True,
            heads=(4, 2),
            head_dim=32,
            norm_init=0.0,
            config=_gemma2,
        ),
        Family(
            name="phi3",
            architecture="Phi3ForCausalLM",
            tokens=tuple(
                Token(t)
                for t in (
                    "<unk>",
                    "<s>",
                    "</s>",
                    "<|endoftext|>",
                    "<|assistant|>",
                    "<|system|>",
                    "<|end|>",
                    "<|user|>",
                )
            ),
            eos="<|endoftext|>",
            bos="<s>",
            pad="<|endoftext|>",
            unk="<unk>",
            stop=("<|end|>", "<|assistant|>", "<|endoftext|>"),
            tokenizer_class="PreTrainedTokenizerFast",
            bos_in_encode=False,
            heads=(2, 1),
            head_dim=None,
            norm_init=1.0,
            config=_phi3,
        ),
    )
}

#: The family names ``make_tiny_model(family=...)`` accepts.
FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES)
DEFAULT_FAMILY = "qwen2"


def get_family(name: Any) -> Family:
    """The family called ``name``, or ``ValueError`` naming ``family`` and the known ones."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise ValueError(f"family: expected one of {', '.join(FAMILY_NAMES)}, got {name!r}")
    return FAMILIES[name]
