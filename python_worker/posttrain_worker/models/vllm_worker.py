"""Methods that run *inside* vLLM's GPU worker, reached with ``LLM.collective_rpc(name, args=...)``.

vLLM mixes the class named by the engine argument ``worker_extension_cls`` into its worker class, so these
methods see the worker's ``model_runner`` and its ``model`` (vLLM's own module, whose ``load_weights`` takes
Hugging Face parameter names and handles vLLM's fused layouts). Keep this module free of imports from the
rest of the worker: vLLM imports it by qualified name in its engine process.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

WORKER_EXTENSION = "posttrain_worker.models.vllm_worker.PosttrainWorkerExtension"
"""The qualified name passed to ``vllm.LLM(worker_extension_cls=...)``."""


class PosttrainWorkerExtension:
    """posttrain's additions to vLLM's worker (one per tensor-parallel rank; posttrain runs one)."""

    model_runner: Any
    """Set by vLLM's worker: its ``GPUModelRunner``, holding the loaded ``model``."""

    def posttrain_load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copies ``(hf_name, tensor)`` pairs into the model in place; returns how many were given."""
        pairs = list(weights)
        self.model_runner.model.load_weights(weights=pairs)
        return len(pairs)

    def posttrain_model_facts(self) -> dict[str, int]:
        """Parameter count and bytes of parameters and buffers of the model as vLLM holds it."""
        model = self.model_runner.model
        params = list(model.parameters())
        buffers = list(model.buffers())
        return {
            "parameters": sum(p.numel() for p in params),
            "memoryBytes": sum(t.numel() * t.element_size() for t in (*params, *buffers)),
        }
