"""Fair in-process baseline for ``npm run bench:grpo``: the GRPO step the SDK runs, with the same prompt
sharing, in one Python process, with no bridge, no worker server and no TypeScript.

    python bench/grpo_inprocess_fair.py < request + commands   (protocol: bench/grpo_common.py)

The SDK's GRPO step reaches its worker as one ``generate`` call on ``promptsPerStep x groupSize`` rows (each
prompt ``groupSize`` times in a row), which the worker runs as ``promptsPerStep`` prompts with ``groupSize``
samples each (one prefill per prompt, its KV cache copied to the group's rows), and one ``train_step`` whose
forward runs each group's prompt once (``training/shared_prefix.py``). ``grpo_inprocess.py`` does neither
(Hugging Face ``generate`` on the repeated prompts, a plain forward), so its time is not the SDK's compute.
This loop calls the worker's own compute functions directly, on the same shapes:

1. chat-template the step's ``promptsPerStep`` prompts (once each; the SDK renders every repeated row);
2. ``models.generation.generate`` with ``num_samples = groupSize`` and one seeded generator per row, seeded as
   the worker seeds them from the SDK's per-step seed (``sampleSeeds``), so that with the same weights the
   completions are the SDK's;
3. decode, the digit-sort reward (the eos text stripped where a row ended on eos, as the SDK's env does),
   group advantages ``(r - mean) / max(std, 1e-6)`` (unbiased std, ``MCAdvantage``);
4. rows ``prompt + completion``, the loss mask on the completion, the generation log-probs as the old ones;
   ``training.forward.policy_forward`` (shared prefix, entropy), the worker's loss on the SDK's loss config
   (``trainer``: its ``trainer_state``) over the same micro-batches (``microBatchTokens``), backward, gradient
   clip, the SDK's optimizer and schedule.

What is left out is what the bridge and the SDK add: TypeScript envs, rewards and advantages, the Arrow
encoding and transfer, the worker's argument and payload checks, the per-row chat templating, the weight-sync
call. ``ratios.fair`` (SDK / this) is therefore the SDK's cost over its own compute. Each reply carries the
milliseconds of the phases (``template``, ``generate``, ``reward``, ``train``).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from grpo_common import (
    Request,
    digit_sort_reward,
    log,
    protect_stdout,
    read_command,
    read_request,
    reply,
)
from posttrain_worker.models.generation import generate, pad_token_id
from posttrain_worker.models.sampling import SamplingParams, make_generators
from posttrain_worker.objectives import api
from posttrain_worker.training.forward import policy_forward
from posttrain_worker.training.microbatch import token_budget_slices
from posttrain_worker.training.optimizer import build_optimizer, parse_optimizer
from posttrain_worker.training.schedule import build_schedule, parse_schedule
from transformers import AutoModelForCausalLM, AutoTokenizer

NAME = "inprocess-fair"


class FairGRPO:
    def __init__(self, request: Request) -> None:
        if request.trainer is None or request.sample_seeds is None:
            raise SystemExit('the fair baseline needs "trainer" and "sampleSeeds" in the request')
        self.req = request
        trainer = request.trainer
        torch.manual_seed(request.seed)
        self.device = torch.device(request.device)
        # loaded as the worker's model store loads it (float32, on its device, eval mode between steps)
        self.model = AutoModelForCausalLM.from_pretrained(request.model_dir, dtype=torch.float32)
        self.model.to(self.device)
        self.model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(request.model_dir)
        self.pad_id = pad_token_id(self.tokenizer)
        eos = self.tokenizer.eos_token
        self.eos_text = str(eos) if eos is not None else ""
        self.loss = api.parse_loss_config(dict(trainer["loss"]))
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, parse_optimizer(NAME, trainer["optimizer"]))
        self.scheduler = build_schedule(self.optimizer, parse_schedule(NAME, trainer["schedule"]))
        clip = trainer.get("gradClip")
        self.grad_clip = float(clip) if clip is not None else float("inf")
        budget = trainer.get("microBatchTokens")
        self.micro_batch_tokens = int(budget) if budget is not None else None
        self.sampling = SamplingParams(
            temperature=request.temperature, top_p=request.top_p, top_k=request.top_k
        )
        self.cursor = 0
        self.step_index = 0

    def _next_prompts(self) -> tuple[list[str], list[str]]:
        n = self.req.prompts_per_step
        idx = [(self.cursor + i) % len(self.req.prompts) for i in range(n)]
        self.cursor += n
        return [self.req.prompts[i] for i in idx], [self.req.answers[i] for i in idx]

    def _render(self, prompt: str) -> torch.Tensor:
        # as the worker renders a user-only conversation: the template's text, tokenized without specials
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return torch.tensor(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.int64)

    def _completion_text(self, tokens: torch.Tensor, finish_reason: str) -> str:
        text = str(self.tokenizer.decode(tokens.tolist(), skip_special_tokens=False))
        if finish_reason == "eos" and self.eos_text and text.endswith(self.eos_text):
            text = text[: -len(self.eos_text)]
        return text

    def step(self) -> dict[str, Any]:
        req = self.req
        group = req.group_size
        sample_seeds = req.sample_seeds
        assert sample_seeds is not None
        start = time.perf_counter()
        prompts, answers = self._next_prompts()
        prompt_ids = [self._render(p) for p in prompts]
        t_template = time.perf_counter()

        seed = sample_seeds[self.step_index % len(sample_seeds)]
        self.step_index += 1
        # the worker seeds one generator per row of the call (the rows being the repeated prompts)
        generators = make_generators(seed, len(prompts) * group, 1)
        rows = generate(
            self.model,
            self.tokenizer,
            prompt_ids,
            max_new_tokens=req.max_new_tokens,
            params=self.sampling,
            generators=generators,
            num_samples=group,
            device=self.device,
        )
        t_generate = time.perf_counter()

        rewards = torch.tensor(
            [
                digit_sort_reward(self._completion_text(r.tokens, r.finish_reason), answers[i // group])
                for i, r in enumerate(rows)
            ],
            dtype=torch.float32,
        )
        grouped = rewards.view(-1, group)
        std = grouped.std(dim=1, keepdim=True).clamp_min(1e-6)
        advantages = ((grouped - grouped.mean(dim=1, keepdim=True)) / std).reshape(-1, 1)
        t_reward = time.perf_counter()

        full = [torch.cat([prompt_ids[i // group], r.tokens]) for i, r in enumerate(rows)]
        lengths = [int(f.numel()) for f in full]
        width = max(lengths)
        mask = torch.zeros((len(full), width), dtype=torch.bool)
        old = torch.zeros((len(full), width), dtype=torch.float32)
        for i, r in enumerate(rows):
            begin = int(prompt_ids[i // group].numel())
            mask[i, begin : lengths[i]] = True
            old[i, begin : lengths[i]] = r.log_probs
        loss_value, grad_norm = self._train(full, lengths, mask, old, advantages)
        end = time.perf_counter()
        return {
            "ms": (end - start) * 1000,
            "phases": {
                "template": (t_template - start) * 1000,
                "generate": (t_generate - t_template) * 1000,
                "reward": (t_reward - t_generate) * 1000,
                "train": (end - t_reward) * 1000,
            },
            "reward": float(rewards.mean()),
            "completionLength": float(sum(len(r.tokens) for r in rows) / len(rows)),
            "loss": loss_value,
            "gradNorm": grad_norm,
        }

    def _train(
        self,
        full: list[torch.Tensor],
        lengths: list[int],
        mask: torch.Tensor,
        old: torch.Tensor,
        advantages: torch.Tensor,
    ) -> tuple[float, float]:
        # the loss reads these beside the model's log-probs, on its device
        mask, old, advantages = (t.to(self.device) for t in (mask, old, advantages))
        norm = api.batch_norm(self.loss, mask)
        want_entropy = api.needs_entropy(self.loss)
        total = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        self.model.train()
        for begin, stop in token_budget_slices(lengths, self.micro_batch_tokens):
            cut = max(lengths[begin:stop])
            micro_mask = mask[begin:stop, :cut]
            out = policy_forward(
                self.model,
                full[begin:stop],
                pad_id=self.pad_id,
                device=self.device,
                want_entropy=want_entropy,
                loss_mask=micro_mask,
            )
            batch = api.LossBatch(
                log_probs=out.log_probs,
                mask=micro_mask,
                old_log_probs=old[begin:stop, :cut],
                advantages=advantages[begin:stop],
                entropy=out.entropy,
            )
            result = api.compute_loss(self.loss, batch, norm)
            result.loss.backward()
            total += float(result.loss.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return total, grad_norm


def main() -> None:
    protect_stdout()
    request = read_request()
    log(NAME, "loading the model")
    runner = FairGRPO(request)
    reply({"ready": True, "threads": torch.get_num_threads(), "torch": torch.__version__})
    while (command := read_command()) != "quit":
        if command == "step":
            reply(runner.step())
        else:
            reply({"error": f"unknown command {command!r}"})


if __name__ == "__main__":
    main()
