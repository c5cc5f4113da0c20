"""The tiny model's architecture and weights: a float32 ``Qwen2ForCausalLM`` with tied embeddings, whose
weights are drawn from a generator seeded by the caller (the caller's global RNG is left untouched)."""

from __future__ import annotations

from typing import Any

import torch

_INIT_STD = 0.02
_ROPE_THETA = 10000.0
SIZE_FIELDS = (
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "intermediate_size",
    "max_position_embeddings",
)


def check_sizes(sizes: dict[str, Any]) -> None:
    """Every size a positive int, heads dividing the width and each other, an even head size; or
    ``ValueError`` naming the argument."""
    for name in SIZE_FIELDS:
        value = sizes[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if sizes["hidden_size"] % sizes["num_heads"] != 0:
        raise ValueError(
            f"num_heads: hidden_size={sizes['hidden_size']} is not divisible by "
            f"num_heads={sizes['num_heads']}"
        )
    if sizes["num_heads"] % sizes["num_kv_heads"] != 0:
        raise ValueError(
            f"num_kv_heads: num_heads={sizes['num_heads']} is not divisible by "
            f"num_kv_heads={sizes['num_kv_heads']}"
        )
    head_dim = sizes["hidden_size"] // sizes["num_heads"]
    if head_dim % 2 != 0:
        raise ValueError(
            f"num_heads: head size hidden_size/num_heads = {head_dim} must be even (rotary embeddings)"
        )


def check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected an int in [0, 2**64), got {seed!r}")


@torch.no_grad()
def init_weights(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    for name, param in model.named_parameters():  # tied lm_head is the embedding: listed once
        if param.dim() == 1:
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.zero_()
        else:
            param.copy_(torch.empty(param.shape, dtype=torch.float32).normal_(0.0, _INIT_STD, generator=gen))


def random_model(sizes: dict[str, int], seed: int, *, vocab_size: int, pad_id: int, eos_id: int) -> Any:
    """A ``Qwen2ForCausalLM`` of ``sizes`` with weights seeded by ``seed``, in eval mode, stopping on
    ``eos_id`` or ``pad_id``."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=sizes["hidden_size"],
        intermediate_size=sizes["intermediate_size"],
        num_hidden_layers=sizes["num_layers"],
        num_attention_heads=sizes["num_heads"],
        num_key_value_heads=sizes["num_kv_heads"],
        hidden_act="silu",
        max_position_embeddings=sizes["max_position_embeddings"],
        initializer_range=_INIT_STD,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": _ROPE_THETA},
        use_sliding_window=False,
        attention_dropout=0.0,
        pad_token_id=pad_id,
        bos_token_id=None,
        eos_token_id=eos_id,
        dtype="float32",
        architectures=["Qwen2ForCausalLM"],
    )
    # Module construction draws from the global RNG; keep the caller's stream untouched.
    with torch.random.fork_rng(devices=[]):
        model = Qwen2ForCausalLM(config)
    model = model.to(torch.float32)
    init_weights(model, seed)
    model.eval()
    # Stop on <|im_end|> (end of an assistant turn) or <|endoftext|>, as Qwen instruct checkpoints do.
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, pad_id],
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    return model
