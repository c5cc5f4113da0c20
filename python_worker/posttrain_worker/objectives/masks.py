"""Which tokens a policy-gradient loss trains on, by TorchRL's ``masking_strategy``.

- ``sft``: the response, i.e. attended tokens after the prompt (single-turn)
- ``rlhf``: the assistant tokens (multi-turn; needs the chat template's assistant mask)
- ``generic``: every attended token
"""

from __future__ import annotations

import torch
from torch import Tensor


def loss_mask(
    strategy: str,
    *,
    attention_mask: Tensor,
    assistant_mask: Tensor | None = None,
    prompt_lengths: Tensor | None = None,
) -> Tensor:
    """The bool ``[B, T]`` loss mask (right padding). ``sft`` needs ``prompt_lengths`` ``[B]`` and falls
    back to the assistant mask without them (as TorchRL does); ``rlhf`` needs ``assistant_mask``."""
    attention = attention_mask.bool()
    if strategy == "generic":
        return attention
    if strategy == "sft" and prompt_lengths is not None:
        positions = torch.arange(attention.shape[-1], device=attention.device)
        return attention & (positions.unsqueeze(0) >= prompt_lengths.to(attention.device).unsqueeze(-1))
    if strategy in ("sft", "rlhf"):
        if assistant_mask is None:
            raise ValueError(f'masking strategy "{strategy}" needs the assistant mask')
        return attention & assistant_mask.bool()
    raise ValueError(f"unknown masking strategy {strategy!r}")
