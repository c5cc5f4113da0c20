"""Methods that run *inside* vLLM's worker process, reached with ``LLM.collective_rpc(name, args=...)``.

vLLM mixes the class named by the engine argument ``worker_extension_cls`` into its worker class, so these
methods see the worker's ``model_runner`` and its ``model`` (vLLM's own module, whose ``load_weights`` takes
Hugging Face parameter names and handles vLLM's fused layouts). Keep this module free of imports from the
rest of the worker: vLLM imports it by qualified name in its engine process.

Weight updates take one of two paths, chosen by looking at the model, not at the device:

- **plain** (GPU): ``model.load_weights`` copies the tensors into vLLM's parameters in place.
- **reload** (CPU): vLLM's CPU backend packs every linear layer's weight into a oneDNN (or sgl) GEMM handle
  after loading (``dispatch_cpu_unquantized_gemm``, which sets ``layer.cpu_linear``) and leaves the
  ``weight`` parameter of ``qkv_proj``, ``o_proj``, ``gate_up_proj`` and ``down_proj`` empty, so
  ``load_weights`` has nowhere to write. ``model_runner.reload_weights`` restores those parameters, loads and
  re-packs each layer. It misses one thing: a layer that keeps its weight *and* a packed copy of it but gets
  no tensor of its own, i.e. the LM head tied to the embedding. Its storage is the embedding's (so it holds
  the new values) while its GEMM handle still holds the old ones; :func:`refresh_kept_weights` re-packs it.
"""

from __future__ import annotations

from typing import Any

import torch

WORKER_EXTENSION = "posttrain_worker.models.vllm_worker.PosttrainWorkerExtension"
"""The qualified name passed to ``vllm.LLM(worker_extension_cls=...)``."""

PACKED_ATTRIBUTE = "cpu_linear"
"""Set by vLLM's CPU backend on every layer whose GEMM it packed after loading."""


def repacks_weights(model: torch.nn.Module) -> bool:
    """Whether vLLM packed this model's linear layers after loading (its CPU backend does, CUDA does not)."""
    return any(hasattr(module, PACKED_ATTRIBUTE) for module in model.modules())


def refresh_kept_weights(model: torch.nn.Module) -> int:
    """Re-packs every packed layer that kept a 2-D weight (embeddings, the LM head) from that weight, as
    vLLM did after the first load; returns how many. Layers whose weight vLLM removed are left alone."""
    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        if not hasattr(module, PACKED_ATTRIBUTE) or method is None or not isinstance(weight, torch.Tensor):
            continue
        if weight.ndim == 2 and weight.numel() > 0 and not weight.is_meta:
            method.process_weights_after_loading(module)
            count += 1
    return count


class PosttrainWorkerExtension:
    """posttrain's additions to vLLM's worker (one per tensor-parallel rank; posttrain runs one)."""

    model_runner: Any
    """Set by vLLM's worker: its model runner, holding the loaded ``model``."""

    def posttrain_load_weights(self, path: str) -> dict[str, Any]:
        """Loads the tensors of the safetensors file ``path`` (HF names) into the model: in place where the
        layers are not packed, through vLLM's reload where they are. Answers ``{"loaded", "path"}``."""
        from safetensors.torch import load_file

        pairs = list(load_file(path).items())
        model = self.model_runner.model
        if repacks_weights(model):
            self.model_runner.reload_weights(weights_iterator=pairs)
            refresh_kept_weights(model)
            return {"loaded": len(pairs), "path": "reload"}
        model.load_weights(weights=pairs)
        return {"loaded": len(pairs), "path": "plain"}

    def posttrain_model_facts(self) -> dict[str, Any]:
        """Parameter count and bytes of parameters and buffers of the model as vLLM holds it (the packed
        copies of the CPU backend are not parameters: those layers count their checkpoint shapes nowhere,
        so ``parameters`` is what vLLM keeps as parameters), and the weight-update path."""
        model = self.model_runner.model
        params = list(model.parameters())
        buffers = list(model.buffers())
        return {
            "parameters": sum(p.numel() for p in params),
            "memoryBytes": sum(t.numel() * t.element_size() for t in (*params, *buffers)),
            "weightUpdate": "reload" if repacks_weights(model) else "plain",
        }
