"""In-process baseline (b) for ``npm run bench:grpo``: one GRPO step done by a plain PyTorch loop in this
process, with no worker, no bridge and no TypeScript.

    python bench/grpo_inprocess.py < request + commands   (protocol: bench/grpo_common.py)

A step, on the next ``promptsPerStep`` prompts of the request:

1. chat-template the prompts, left-pad them, repeat each ``groupSize`` times;
2. Hugging Face ``model.generate`` with sampling (temperature / top-p / top-k), keeping the raw logits of each
   step (``output_logits``): the behaviour log-probs come from them, as the SDK's generation reports them;
3. decode, score each completion with the digit-sort reward, group advantages
   ``(r - mean) / max(std, 1e-6)`` (unbiased std, as ``MCAdvantage``);
4. one forward with gradient over prompt + completion (logits kept for the completion only), per-token
   log-probs and entropy, the clipped GRPO objective ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` minus
   ``entropyCoeff * H``, averaged over the completion tokens (``token_mean``), backward, gradient-norm clip,
   AdamW step.

The completion of a row is its tokens up to and including the first eos. Everything above is timed, and each
reply also carries the milliseconds of the four phases (``phases``: template, generate, reward, train).
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
from transformers import AutoModelForCausalLM, AutoTokenizer

NAME = "inprocess"


class InProcessGRPO:
    def __init__(self, request: Request) -> None:
        self.req = request
        torch.manual_seed(request.seed)
        self.model = AutoModelForCausalLM.from_pretrained(request.model_dir, dtype=torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(request.model_dir)
        self.eos_id = int(self.tokenizer.eos_token_id)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_id
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=request.lr, weight_decay=request.weight_decay
        )
        self.cursor = 0

    def _next_prompts(self) -> tuple[list[str], list[str]]:
        n = self.req.prompts_per_step
        idx = [(self.cursor + i) % len(self.req.prompts) for i in range(n)]
        self.cursor += n
        return [self.req.prompts[i] for i in idx], [self.req.answers[i] for i in idx]

    def step(self) -> dict[str, Any]:
        req = self.req
        start = time.perf_counter()
        prompts, answers = self._next_prompts()
        texts = [
            self.tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        enc = self.tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        )
        prompt_ids = enc["input_ids"].repeat_interleave(req.group_size, dim=0)
        prompt_mask = enc["attention_mask"].repeat_interleave(req.group_size, dim=0)
        t_template = time.perf_counter()

        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=prompt_ids,
                attention_mask=prompt_mask,
                do_sample=True,
                temperature=req.temperature,
                top_p=req.top_p,
                top_k=req.top_k if req.top_k > 0 else None,
                max_new_tokens=req.max_new_tokens,
                eos_token_id=self.eos_id,
                pad_token_id=self.pad_id,
                return_dict_in_generate=True,
                output_logits=True,
            )
        completion = out.sequences[:, prompt_ids.shape[1] :]
        is_eos = (completion == self.eos_id).int()
        completion_mask = (is_eos.cumsum(dim=1) - is_eos) == 0  # up to and including the first eos
        raw_logits = torch.stack(out.logits, dim=1).float()
        old_log_probs = torch.log_softmax(raw_logits, dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        t_generate = time.perf_counter()

        decoded = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        rewards = torch.tensor(
            [digit_sort_reward(text, answers[i // req.group_size]) for i, text in enumerate(decoded)],
            dtype=torch.float32,
        )
        grouped = rewards.view(-1, req.group_size)
        std = grouped.std(dim=1, keepdim=True).clamp_min(1e-6)
        advantages = ((grouped - grouped.mean(dim=1, keepdim=True)) / std).reshape(-1, 1)
        t_reward = time.perf_counter()

        self.model.train()
        input_ids = torch.cat([prompt_ids, completion], dim=1)
        attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        width = completion.shape[1]
        logits = (
            self.model(
                input_ids=input_ids,
                attention_mask=attention,
                position_ids=positions,
                logits_to_keep=width + 1,
            )
            .logits[:, :-1, :]
            .float()
        )
        log_p = torch.log_softmax(logits, dim=-1)
        log_probs = log_p.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_p.exp() * log_p).sum(dim=-1)
        ratio = torch.exp(log_probs - old_log_probs)
        clipped = torch.clamp(ratio, 1 - req.clip_epsilon, 1 + req.clip_epsilon)
        objective = -torch.minimum(ratio * advantages, clipped * advantages)
        per_token = objective - req.entropy_coeff * entropy
        mask = completion_mask.float()
        loss = (per_token * mask).sum() / mask.sum().clamp_min(1)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), req.grad_clip)
        self.optimizer.step()
        self.model.eval()
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
            "completionLength": float(mask.sum(dim=1).mean()),
            "loss": float(loss.detach()),
            "gradNorm": float(grad_norm),
        }


def main() -> None:
    protect_stdout()
    request = read_request()
    log(NAME, "loading the model")
    runner = InProcessGRPO(request)
    reply({"ready": True, "threads": torch.get_num_threads(), "torch": torch.__version__})
    while (command := read_command()) != "quit":
        if command == "step":
            reply(runner.step())
        else:
            reply({"error": f"unknown command {command!r}"})


if __name__ == "__main__":
    main()
