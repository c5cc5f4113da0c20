"""The tiny model's architecture and weights: a float32 causal LM of the chosen family (by default a
``Qwen2ForCausalLM`` with tied embeddings), whose weights are drawn from a generator seeded by the caller (the
caller's global RNG is left untouched)."""

from __future__ import annotations

from typing import Any

import torch

from posttrain_worker.models.tiny.families import DEFAULT_FAMILY, FAMILIES, Family

_INIT_STD = 0.02
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


def resolve_head_dim(family: Family, sizes: dict[str, Any], head_dim: Any) -> int:
    """The head size: ``head_dim`` when given, else the family's default, else ``hidden_size // num_heads``;
    or ``ValueError`` naming ``head_dim`` (not a positive even int, or a family whose architecture derives it
    from the width and it differs)."""
    derived = sizes["hidden_size"] // sizes["num_heads"]
    if head_dim is None:
        return family.head_dim or derived
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2 != 0:
        raise ValueError(f"head_dim: expected a positive even int, got {head_dim!r}")
    if family.head_dim is None and head_dim != derived:
        raise ValueError(
            f"head_dim: family {family.name!r} takes hidden_size/num_heads = {derived}, got {head_dim}"
        )
    return head_dim


def check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected an int in [0, 2**64), got {seed!r}")


@torch.no_grad()
def init_weights(model: torch.nn.Module, seed: int, norm_init: float = 1.0) -> None:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    for name, param in model.named_parameters():  # tied lm_head is the embedding: listed once
        if param.dim() == 1:
            if name.endswith("norm.weight"):
                param.fill_(norm_init)
            else:
                param.zero_()
        else:
            param.copy_(torch.empty(param.shape, dtype=torch.float32).normal_(0.0, _INIT_STD, generator=gen))


def random_model(
    sizes: dict[str, int],
    seed: int,
    *,
    vocab_size: int,
    pad_id: int | None,
    eos_id: int,
    bos_id: int | None = None,
    stop_ids: list[int] | None = None,
    family: Family = FAMILIES[DEFAULT_FAMILY],
) -> Any:
    """A causal LM of ``family`` and ``sizes`` with weights seeded by ``seed``, in eval mode, stopping on
    ``stop_ids`` (default: ``eos_id`` then ``pad_id``)."""
    import transformers
    from transformers import GenerationConfig

    ids = {"vocab_size": vocab_size, "pad_token_id": pad_id, "bos_token_id": bos_id, "eos_token_id": eos_id}
    config = family.config(sizes, ids)
    # Module construction draws from the global RNG; keep the caller's stream untouched.
    with torch.random.fork_rng(devices=[]):
        model = getattr(transformers, family.architecture)(config)
    model = model.to(torch.float32)
    init_weights(model, seed, family.norm_init)
    model.eval()
    # Stop where the family's instruct checkpoints stop (Qwen: <|im_end|> or <|endoftext|>).
    model.generation_config = GenerationConfig(
        eos_token_id=stop_ids if stop_ids is not None else [eos_id, pad_id],
        pad_token_id=pad_id,
        bos_token_id=bos_id,
    )
    return model
