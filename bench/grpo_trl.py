"""TRL baseline (c) for ``npm run bench:grpo``: TRL's own ``GRPOTrainer`` on the bench's configuration,
offline on the CPU, in this process.

    python bench/grpo_trl.py < request + commands   (protocol: bench/grpo_common.py)

Configuration: the local model directory and its tokenizer, a ``datasets.Dataset.from_list`` of the request's
prompts as chat messages (in order: ``shuffle_dataset=False``), the digit-sort reward as a Python function,
``num_generations`` = group size, ``per_device_train_batch_size`` = prompts per step x group size with one
gradient-accumulation step (so one generation batch per optimizer step, and the old log-probs are the
current ones, as on-policy GRPO has them), ``max_completion_length``, the sampling options, ``learning_rate``
with a constant schedule, AdamW with the same weight decay, ``max_grad_norm``, ``beta=0`` (no KL, no
reference model), ``epsilon``, ``loss_type="bnpo"`` (a token mean over the batch, the SDK's ``token_mean``),
``entropy_coef``, float32, on the CPU unless the request's ``device`` is a GPU, no gradient checkpointing,
``use_vllm=False``, ``report_to="none"``, no saving.

Interleaving: a ``TrainerCallback`` blocks in ``on_step_begin`` until the caller writes ``step``, starts the
clock, and stops it in ``on_log`` (after generation, scoring, loss, backward, clipping, the optimizer step and
TRL's logging), where it answers with the step's time and TRL's logged reward. ``quit`` (or end of input)
raises out of the trainer at the next step boundary.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import torch
from datasets import Dataset
from grpo_common import (
    Request,
    digit_sort_reward,
    log,
    protect_stdout,
    read_command,
    read_request,
    reply,
)
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

NAME = "trl"


def completion_text(completion: Any) -> str:
    """A TRL completion: a string (standard format) or a list of messages (conversational format)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))


def make_reward(answers_key: str = "answer") -> Any:
    def digit_sort(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        answers = columns[answers_key]
        return [
            digit_sort_reward(completion_text(c), str(a)) for c, a in zip(completions, answers, strict=True)
        ]

    return digit_sort


class Quit(Exception):
    """The caller asked to stop: raised out of ``trainer.train()`` at a step boundary."""


class StepClock(TrainerCallback):  # type: ignore[misc]
    """Gates each optimizer step on a ``step`` command and answers with its time and reward."""

    def __init__(self) -> None:
        self.start: float | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        command = read_command()
        if command != "step":
            raise Quit(command)
        self.start = time.perf_counter()
        return control

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        if self.start is None or logs is None or "reward" not in logs:
            return control
        ms = (time.perf_counter() - self.start) * 1000
        self.start = None
        reply(
            {
                "ms": ms,
                "reward": float(logs["reward"]),
                "completionLength": float(logs.get("completions/mean_length", float("nan"))),
                "loss": float(logs.get("loss", float("nan"))),
                "gradNorm": float(logs.get("grad_norm", float("nan"))),
                "trlStepTimeS": float(logs.get("step_time", float("nan"))),
            }
        )
        return control


def build_trainer(request: Request, output_dir: str, clock: StepClock, max_steps: int) -> Any:
    model = AutoModelForCausalLM.from_pretrained(request.model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(request.model_dir)
    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": p}], "answer": a}
            for p, a in zip(request.prompts, request.answers, strict=True)
        ]
    )
    config = GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=request.prompts_per_step * request.group_size,
        gradient_accumulation_steps=1,
        num_generations=request.group_size,
        max_completion_length=request.max_new_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        learning_rate=request.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=request.weight_decay,
        optim="adamw_torch",
        max_grad_norm=request.grad_clip,
        beta=0.0,
        epsilon=request.clip_epsilon,
        loss_type="bnpo",
        scale_rewards="group",
        entropy_coef=request.entropy_coeff,
        max_steps=max_steps,
        shuffle_dataset=False,
        seed=request.seed,
        use_cpu=request.device == "cpu",
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_vllm=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=make_reward(),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )


def main() -> None:
    protect_stdout()
    request = read_request()
    log(NAME, "building TRL's GRPOTrainer")
    clock = StepClock()
    steps = len(request.prompts) // request.prompts_per_step
    with tempfile.TemporaryDirectory(prefix="posttrain-bench-trl-") as output_dir:
        trainer = build_trainer(request, output_dir, clock, max_steps=steps)
        reply({"ready": True, "threads": torch.get_num_threads(), "torch": torch.__version__})
        try:
            trainer.train()
        except Quit:
            return
        while read_command() != "quit":  # the caller asked for more steps than there are prompts
            reply({"error": f"TRL ran its {steps} steps"})


if __name__ == "__main__":
    main()
