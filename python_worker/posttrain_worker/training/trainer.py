"""A trainer bound to one model of the worker's store: loss, backward over micro-batches, optimizer step.

``step`` runs the policy's forward with gradient on each micro-batch (``microbatch.py``), computes the loss
with denominators from the WHOLE batch (``objectives.api``), backpropagates each micro-batch's loss
(gradients accumulate, so the result equals the full-batch one), clips the gradient norm, and steps the
optimizer and the schedule. A NaN or infinite loss (checked before each backward) or gradient norm (checked
before the optimizer step) is a typed error naming the step, and leaves the parameters and the optimizer
state untouched.

The model is in train mode only inside ``step``; ``compute_loss`` runs without gradient in eval mode.

In a trainer group (``parallel``, docs/scaling.md) each rank steps on its shard of the batch: the
denominators, the loss and the metrics are summed over the ranks (``parallel.py``), DDP or FSDP reduces the
gradients on the last micro-batch's backward, and every check that can fail is agreed by all ranks before the
next collective.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.models.generation import pad_token_id
from posttrain_worker.models.store import LoadedModel
from posttrain_worker.training.batch import Needs, TrainBatch
from posttrain_worker.training.errors import NON_FINITE_GRADIENT, NON_FINITE_LOSS
from posttrain_worker.training.forward import policy_forward
from posttrain_worker.training.lora import LoraConfig, apply_lora
from posttrain_worker.training.microbatch import token_budget_slices
from posttrain_worker.training.optimizer import OptimizerConfig, build_optimizer
from posttrain_worker.training.parallel import (
    Group,
    ParallelConfig,
    agree,
    full_state,
    global_norm,
    gradient_sync,
    micro_batch_count,
    sum_metrics,
    wrap,
)
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
    parallel: ParallelConfig | None = None
    gradient_checkpointing: bool = False

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
            "parallel": self.parallel.to_json() if self.parallel is not None else None,
            "gradientCheckpointing": self.gradient_checkpointing,
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
    local_tokens: int
    local_sequences: int


class Trainer:
    def __init__(
        self, loaded: LoadedModel, config: TrainerConfig, ref: LoadedModel | None, group: Group | None = None
    ) -> None:
        self.loaded = loaded
        self.config = config
        self.ref = ref
        self.group = group
        if ref is not None:
            ref.model.requires_grad_(False)
        if config.lora is not None:
            loaded.model = apply_lora(loaded.model, config.lora)
        if config.gradient_checkpointing:
            _enable_gradient_checkpointing(loaded.model)
        self.module: Any = loaded.model
        """What forward and backward run on: the model, ``DDP(model)``, or the model sharded by FSDP."""
        if group is not None:
            # FSDP shards the model in place: rank 0 keeps a full CPU copy under the model's name, refreshed
            # after every step, for weight sync, checkpoints' model files and ``weights_get``.
            published = _cpu_copy(loaded.model) if group.strategy == "fsdp" and group.rank == 0 else None
            self.module = wrap(loaded.model, group, bf16=config.autocast == "bfloat16")
            if published is not None:
                loaded.model = published
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, config.optimizer)
        self.scheduler = build_schedule(self.optimizer, config.schedule)
        self.step_count = 0
        self.last_metrics: dict[str, float | None] = {}

    # ---- facts -----------------------------------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The model as generators and checkpoints see it (full weights; on FSDP's rank 0, the CPU copy)."""
        return self.loaded.model

    @property
    def sharded(self) -> bool:
        return self.group is not None and self.group.strategy == "fsdp"

    def publish(self) -> None:
        """FSDP: gathers the updated shards into rank 0's full copy (every rank calls it)."""
        if self.group is None or not self.sharded:
            return
        state = full_state(self.module, self.group)
        if state is not None:
            self.loaded.model.load_state_dict(state)

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
            "parallel": self.group.describe() if self.group is not None else None,
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
                    share_prefix=self.group is None,
                )
                padded[start:stop, : out.log_probs.shape[1]] = out.log_probs.float().cpu()
        return batch.with_ref(padded)

    # ---- loss over micro-batches ----------------------------------------------------------------------

    def _run(self, batch: TrainBatch, *, backward: bool, check_cancelled: Callable[[], None]) -> StepTotals:
        from posttrain_worker.objectives import api

        loss_config = self.config.loss
        device = self.loaded.device
        group = self.group
        local = api.batch_norm(loss_config, batch.mask)
        norm = global_norm(local, group)
        want_entropy = api.needs_entropy(loss_config)
        pad_id = pad_token_id(self.loaded.tokenizer)
        lengths = batch.lengths
        slices = token_budget_slices(lengths, self.config.micro_batch_tokens)
        count = micro_batch_count(len(slices), group)
        scale = group.loss_scale if group is not None else None
        summed: dict[str, torch.Tensor] = {}
        total = 0.0
        for index in range(count):
            check_cancelled()
            # a rank with fewer micro-batches runs empty ones (one row, no loss): the same collectives
            real = index < len(slices)
            start, stop = slices[index] if real else (0, 1)
            width = max(lengths[start:stop])
            cut = _RowCut(start, stop, width, device)
            mask = cut(batch.mask) if real else torch.zeros((1, width), dtype=torch.bool, device=device)
            with gradient_sync(self.module, group, sync=index == count - 1):
                out = policy_forward(
                    self.module,
                    batch.rows[start:stop],
                    pad_id=pad_id,
                    device=device,
                    want_entropy=want_entropy,
                    autocast=self.config.autocast,
                    loss_mask=mask,
                    share_prefix=group is None,
                )
                problem, result = None, None
                if real:
                    problem = self._check_model_outputs(out.log_probs, out.entropy, mask, index, start, stop)
                if real and problem is None:
                    loss_batch = api.LossBatch(
                        log_probs=out.log_probs,
                        mask=mask,
                        old_log_probs=cut.optional(batch.old_log_probs),
                        ref_log_probs=cut.optional(batch.ref_log_probs),
                        advantages=cut.optional(batch.advantages),
                        entropy=out.entropy,
                    )
                    result = api.compute_loss(loss_config, loss_batch, norm)
                    problem = self._check_loss(float(result.loss.detach()), index, start, stop)
                agree(problem, group, f"micro-batch {index} of step {self.step_count + 1}")
                loss = result.loss if result is not None else (out.log_probs * 0.0).sum()
                if backward:
                    (loss * scale if scale is not None else loss).backward()
            if result is None:
                continue
            total += float(result.loss.detach())
            for key, metric in result.metrics.items():
                summed[key] = summed[key] + metric.detach() if key in summed else metric.detach()
        total, summed = sum_metrics(total, summed, group)
        metrics = api.finalize_metrics(summed, norm)
        return StepTotals(
            total, metrics, count, norm.num_tokens, norm.num_sequences, local.num_tokens, local.num_sequences
        )

    def _check_loss(self, value: float, index: int, start: int, stop: int) -> WorkerFailure | None:
        if math.isfinite(value):
            return None
        return WorkerFailure(
            NON_FINITE_LOSS,
            f"step {self.step_count + 1}: the loss of micro-batch {index} (rows {start}..{stop - 1}) "
            f"is {value}; nothing was applied",
            {"step": self.step_count + 1, "microBatch": index, "loss": str(value)},
        )

    def _check_model_outputs(
        self,
        log_probs: torch.Tensor,
        entropy: torch.Tensor | None,
        mask: torch.Tensor,
        index: int,
        start: int,
        stop: int,
    ) -> WorkerFailure | None:
        """Log-probs (and entropy) the model computed must be finite where the loss reads them: NaN or Inf
        there comes from the weights or activations, not from the request, so it is ``NON_FINITE_LOSS``."""
        for name, value in (("log-probs", log_probs), ("entropy", entropy)):
            if value is not None and not bool(value.detach()[mask].isfinite().all()):
                return WorkerFailure(
                    NON_FINITE_LOSS,
                    f"step {self.step_count + 1}: the model's {name} on micro-batch {index} "
                    f"(rows {start}..{stop - 1}) are not finite (NaN or Inf in the weights or activations); "
                    "nothing was applied",
                    {"step": self.step_count + 1, "microBatch": index, "loss": "nan"},
                )
        return None

    def compute_loss(self, batch: TrainBatch, check_cancelled: Callable[[], None]) -> dict[str, Any]:
        """The loss and metrics of ``batch`` under the current weights, without gradient (eval mode)."""
        batch = self.add_ref_log_probs(batch, check_cancelled)
        self.module.eval()
        with torch.no_grad():
            totals = self._run(batch, backward=False, check_cancelled=check_cancelled)
        return self._result(totals, {})

    def step(self, batch: TrainBatch, check_cancelled: Callable[[], None]) -> dict[str, Any]:
        """One optimizer step on ``batch``; on any failure the parameters and the optimizer are unchanged."""
        batch = self.add_ref_log_probs(batch, check_cancelled)
        lr = self.lr
        self.optimizer.zero_grad(set_to_none=True)
        self.module.train()
        try:
            totals = self._run(batch, backward=True, check_cancelled=check_cancelled)
            max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf
            grad_norm = _as_float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
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
            self.module.eval()
        self.publish()
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
        if self.group is not None:
            out.update(
                rank=self.group.rank,
                worldSize=self.group.world_size,
                localTokens=totals.local_tokens,
                localSequences=totals.local_sequences,
            )
        if lr is not None:
            out["lr"] = lr
        return out


def _as_float(norm: torch.Tensor) -> float:
    """A gradient norm as a float (FSDP returns it as a replicated DTensor)."""
    full = getattr(norm, "full_tensor", None)
    return float(full() if full is not None else norm)


def _enable_gradient_checkpointing(model: Any) -> None:
    """Activations are recomputed in backward instead of kept (Hugging Face's non-reentrant checkpointing)."""
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'"gradientCheckpointing": model {type(model).__name__} does not support gradient checkpointing',
        )
    enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _cpu_copy(model: Any) -> Any:
    published = copy.deepcopy(model).to("cpu")
    published.requires_grad_(False)
    published.eval()
    return published
