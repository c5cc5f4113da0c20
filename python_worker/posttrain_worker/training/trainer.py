"""A trainer bound to one model of the worker's store: loss, backward over micro-batches, optimizer step.

``step`` runs the policy's forward with gradient on each micro-batch (``microbatch.py``), computes the loss
with denominators from the WHOLE batch (``objectives.api``), backpropagates each micro-batch's loss
(gradients accumulate, so the result equals the full-batch one), clips the gradient norm, and steps the
optimizer and the schedule. A NaN or infinite loss (checked before each backward) or gradient norm (checked
before the optimizer step) is a typed error naming the step, and leaves the parameters and the optimizer
state untouched.

The model is in train mode only inside ``step``; ``compute_loss`` runs without gradient in eval mode.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from posttrain_worker.errors import WorkerFailure
from posttrain_worker.models.generation import pad_token_id
from posttrain_worker.models.store import LoadedModel
from posttrain_worker.training.batch import Needs, TrainBatch
from posttrain_worker.training.errors import NON_FINITE_GRADIENT, NON_FINITE_LOSS
from posttrain_worker.training.forward import policy_forward
from posttrain_worker.training.lora import LoraConfig, apply_lora
from posttrain_worker.training.microbatch import token_budget_slices
from posttrain_worker.training.optimizer import OptimizerConfig, build_optimizer
from posttrain_worker.training.schedule import ScheduleConfig, build_schedule

if TYPE_CHECKING:
    from posttrain_worker.objectives.api import LossConfig


@dataclass(frozen=True)
class TrainerConfig:
    loss_wire: dict[str, Any]
    """The loss config as it came from TypeScript (kept for ``state`` and checkpoints)."""
    loss: LossConfig
    optimizer: OptimizerConfig
    schedule: ScheduleConfig
    grad_clip: float | None
    micro_batch_tokens: int | None
    ref_model: str | None
    autocast: str | None
    lora: LoraConfig | None

    def to_json(self) -> dict[str, Any]:
        return {
            "loss": self.loss_wire,
            "optimizer": self.optimizer.to_json(),
            "schedule": self.schedule.to_json(),
            "gradClip": self.grad_clip,
            "microBatchTokens": self.micro_batch_tokens,
            "refModel": self.ref_model,
            "autocast": self.autocast,
            "lora": self.lora.to_json() if self.lora is not None else None,
        }


@dataclass(frozen=True)
class _RowCut:
    """Rows ``start..stop`` of a padded ``[B, T]`` (or ``[B, 1]``) tensor, cut to the micro-batch's width."""

    start: int
    stop: int
    width: int
    device: torch.device

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return t[self.start : self.stop, : min(self.width, t.shape[1])].to(self.device)

    def optional(self, t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else self(t)


@dataclass
class StepTotals:
    loss: float
    metrics: dict[str, float]
    micro_batches: int
    num_tokens: int
    num_sequences: int


class Trainer:
    def __init__(self, loaded: LoadedModel, config: TrainerConfig, ref: LoadedModel | None) -> None:
        self.loaded = loaded
        self.config = config
        self.ref = ref
        if ref is not None:
            ref.model.requires_grad_(False)
        if config.lora is not None:
            loaded.model = apply_lora(loaded.model, config.lora)
        self.params = [p for p in loaded.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, config.optimizer)
        self.scheduler = build_schedule(self.optimizer, config.schedule)
        self.step_count = 0
        self.last_metrics: dict[str, float | None] = {}

    # ---- facts -----------------------------------------------------------------------------------------

    @property
    def model(self) -> Any:
        return self.loaded.model

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def needs(self) -> Needs:
        from posttrain_worker.objectives import api

        loss = self.config.loss
        return Needs(
            masking=getattr(loss, "masking_strategy", "sft_loss"),
            old_log_probs=api.needs_old_log_probs(loss),
            ref_log_probs=api.needs_ref_log_probs(loss) and self.ref is None,
            advantages=api.needs_advantages(loss),
        )

    def state(self) -> dict[str, Any]:
        return {
            "model": self.loaded.name,
            "step": self.step_count,
            "policyVersion": self.loaded.policy_version,
            "lr": self.lr,
            "trainableParameters": sum(p.numel() for p in self.params),
            "lastMetrics": dict(self.last_metrics),
            **self.config.to_json(),
        }

    # ---- the batch ------------------------------------------------------------------------------------

    def add_ref_log_probs(self, batch: TrainBatch, check_cancelled: Callable[[], None]) -> TrainBatch:
        """Scores the batch with the reference model when the loss needs it and the payload lacks it."""
        from posttrain_worker.objectives import api

        if (
            batch.ref_log_probs is not None
            or self.ref is None
            or not api.needs_ref_log_probs(self.config.loss)
        ):
            return batch
        ref = self.ref
        width = max(batch.lengths)
        padded = torch.zeros((len(batch.rows), width), dtype=torch.float32)
        pad_id = pad_token_id(ref.tokenizer)
        # The policy's own forward code and micro-batches (shared prompts included), so that a reference that
        # equals the policy gives exactly its log-probs. Columns the loss does not read stay 0.
        with torch.inference_mode():
            for start, stop in token_budget_slices(batch.lengths, self.config.micro_batch_tokens):
                check_cancelled()
                cut = _RowCut(start, stop, max(batch.lengths[start:stop]), ref.device)
                out = policy_forward(
                    ref.model,
                    batch.rows[start:stop],
                    pad_id=pad_id,
                    device=ref.device,
                    want_entropy=False,
                    autocast=self.config.autocast,
                    loss_mask=cut(batch.mask),
                )
                padded[start:stop, : out.log_probs.shape[1]] = out.log_probs.float().cpu()
        return batch.with_ref(padded)

    # ---- loss over micro-batches ----------------------------------------------------------------------

    def _run(self, batch: TrainBatch, *, backward: bool, check_cancelled: Callable[[], None]) -> StepTotals:
        from posttrain_worker.objectives import api

        loss_config = self.config.loss
        device = self.loaded.device
        norm = api.batch_norm(loss_config, batch.mask)
        want_entropy = api.needs_entropy(loss_config)
        pad_id = pad_token_id(self.loaded.tokenizer)
        lengths = batch.lengths
        slices = token_budget_slices(lengths, self.config.micro_batch_tokens)
        summed: dict[str, torch.Tensor] = {}
        total = 0.0
        for index, (start, stop) in enumerate(slices):
            check_cancelled()
            width = max(lengths[start:stop])
            cut = _RowCut(start, stop, width, device)
            mask = cut(batch.mask)
            out = policy_forward(
                self.model,
                batch.rows[start:stop],
                pad_id=pad_id,
                device=device,
                want_entropy=want_entropy,
                autocast=self.config.autocast,
                loss_mask=mask,
            )
            self._check_model_outputs(out.log_probs, out.entropy, mask, index, start, stop)
            loss_batch = api.LossBatch(
                log_probs=out.log_probs,
                mask=mask,
                old_log_probs=cut.optional(batch.old_log_probs),
                ref_log_probs=cut.optional(batch.ref_log_probs),
                advantages=cut.optional(batch.advantages),
                entropy=out.entropy,
            )
            result = api.compute_loss(loss_config, loss_batch, norm)
            value = float(result.loss.detach())
            if not math.isfinite(value):
                raise WorkerFailure(
                    NON_FINITE_LOSS,
                    f"step {self.step_count + 1}: the loss of micro-batch {index} (rows {start}..{stop - 1}) "
                    f"is {value}; nothing was applied",
                    {"step": self.step_count + 1, "microBatch": index, "loss": str(value)},
                )
            if backward:
                result.loss.backward()
            total += value
            for key, metric in result.metrics.items():
                summed[key] = summed[key] + metric.detach() if key in summed else metric.detach()
        metrics = api.finalize_metrics(summed, norm)
        return StepTotals(total, metrics, len(slices), norm.num_tokens, norm.num_sequences)

    def _check_model_outputs(
        self,
        log_probs: torch.Tensor,
        entropy: torch.Tensor | None,
        mask: torch.Tensor,
        index: int,
        start: int,
        stop: int,
    ) -> None:
        """Log-probs (and entropy) the model computed must be finite where the loss reads them: NaN or Inf
        there comes from the weights or activations, not from the request, so it is ``NON_FINITE_LOSS``."""
        for name, value in (("log-probs", log_probs), ("entropy", entropy)):
            if value is not None and not bool(value.detach()[mask].isfinite().all()):
                raise WorkerFailure(
                    NON_FINITE_LOSS,
                    f"step {self.step_count + 1}: the model's {name} on micro-batch {index} "
                    f"(rows {start}..{stop - 1}) are not finite (NaN or Inf in the weights or activations); "
                    "nothing was applied",
                    {"step": self.step_count + 1, "microBatch": index, "loss": "nan"},
                )

    def compute_loss(self, batch: TrainBatch, check_cancelled: Callable[[], None]) -> dict[str, Any]:
        """The loss and metrics of ``batch`` under the current weights, without gradient (eval mode)."""
        batch = self.add_ref_log_probs(batch, check_cancelled)
        self.model.eval()
        with torch.no_grad():
            totals = self._run(batch, backward=False, check_cancelled=check_cancelled)
        return self._result(totals, {})

    def step(self, batch: TrainBatch, check_cancelled: Callable[[], None]) -> dict[str, Any]:
        """One optimizer step on ``batch``; on any failure the parameters and the optimizer are unchanged."""
        batch = self.add_ref_log_probs(batch, check_cancelled)
        lr = self.lr
        self.optimizer.zero_grad(set_to_none=True)
        self.model.train()
        try:
            totals = self._run(batch, backward=True, check_cancelled=check_cancelled)
            max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
            if not math.isfinite(grad_norm):
                raise WorkerFailure(
                    NON_FINITE_GRADIENT,
                    f"step {self.step_count + 1}: the gradient norm is {grad_norm}; "
                    "the optimizer did not step",
                    {"step": self.step_count + 1, "gradNorm": str(grad_norm)},
                )
            self.optimizer.step()
            self.scheduler.step()
            self.step_count += 1
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.model.eval()
        result = self._result(totals, {"grad_norm": grad_norm}, lr=lr)
        self.last_metrics = dict(result["metrics"])
        return result

    def _result(self, totals: StepTotals, extra: dict[str, float], lr: float | None = None) -> dict[str, Any]:
        # JSON has no NaN/Infinity: a metric that is not finite (ESS of overflowing weights) goes as null.
        metrics = {
            key: value if math.isfinite(value) else None
            for key, value in {"loss": totals.loss, **totals.metrics, **extra}.items()
        }
        out: dict[str, Any] = {
            "step": self.step_count,
            "metrics": metrics,
            "numTokens": totals.num_tokens,
            "numSequences": totals.num_sequences,
            "microBatches": totals.micro_batches,
            "policyVersion": self.loaded.policy_version,
        }
        if lr is not None:
            out["lr"] = lr
        return out
