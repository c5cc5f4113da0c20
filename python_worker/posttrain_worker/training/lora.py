"""Optional LoRA adapters through ``peft`` (docs/training.md, "LoRA").

``peft`` is an optional extra of the worker (``npx posttrain setup --extras lora``); asking for LoRA without
it is ``LORA_UNAVAILABLE``. With LoRA only the adapter weights train; the base weights stay frozen.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from posttrain_worker.errors import WorkerFailure
from posttrain_worker.training.errors import LORA_UNAVAILABLE
from posttrain_worker.validation import ArgReader


@dataclass(frozen=True)
class LoraConfig:
    r: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...] | None
    """Module names to adapt (``q_proj``, ...); ``None`` lets peft pick its default for the architecture."""

    def to_json(self) -> dict[str, Any]:
        return {
            "r": self.r,
            "alpha": self.alpha,
            "dropout": self.dropout,
            "targetModules": list(self.target_modules) if self.target_modules is not None else None,
        }


def parse_lora(method: str, raw: Any) -> LoraConfig:
    """``{r, alpha?, dropout?, targetModules?}``; ``alpha`` defaults to ``2 r``."""
    reader = ArgReader(method, raw, section="lora")
    r = reader.integer("r", minimum=1)
    assert r is not None
    alpha = reader.number("alpha", default=2.0 * r, minimum=0)
    dropout = reader.number("dropout", default=0.0, minimum=0, maximum=1)
    targets = reader.strings("targetModules", default=None)
    reader.finish()
    assert alpha is not None and dropout is not None
    if targets is not None and not targets:
        raise reader.fail("targetModules", "must not be empty (leave it out for the default)")
    return LoraConfig(r, alpha, dropout, tuple(targets) if targets is not None else None)


def peft_available() -> bool:
    return importlib.util.find_spec("peft") is not None


def apply_lora(model: Any, config: LoraConfig) -> Any:
    """``model`` wrapped by peft with fresh adapters (the base weights frozen), or ``LORA_UNAVAILABLE``."""
    if not peft_available():
        raise WorkerFailure(
            LORA_UNAVAILABLE,
            "LoRA needs the peft package, which is not installed in this worker's environment "
            "(npx posttrain setup --extras lora)",
        )
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_config = PeftLoraConfig(
        r=config.r,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=list(config.target_modules) if config.target_modules is not None else None,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_config)


def is_peft_model(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")
