"""The shared starting point of ``npm run bench:grpo``: a short supervised warm-up of the tiny model on
the digit-sort task, so that the three systems start from a policy whose reward is neither 0 nor 1, and their
rewards after N GRPO steps say something.

    python bench/grpo_warmup.py MODEL_DIR OUT_DIR [--steps 100] [--batch 16] [--lr 3e-3] [--seed 1]

Examples are drawn from their own seeded stream (``sort 4 digits: 3817`` -> ``1378``); the loss is the
mean negative log-likelihood of the answer and its ``<|im_end|>`` given the chat-templated prompt; AdamW.
Writes the model to OUT_DIR (``save_pretrained``) with the tokenizer files copied over, and prints
``{"seconds", "loss"}`` on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

import torch
from grpo_common import log
from transformers import AutoModelForCausalLM, AutoTokenizer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def example(rng: random.Random, digits: int) -> tuple[str, str]:
    text = "".join(str(rng.randrange(10)) for _ in range(digits))
    return f"sort {digits} digits: {text}", "".join(sorted(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--digits", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    start = time.perf_counter()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    eos = int(tokenizer.eos_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model.train()
    loss = torch.zeros(())
    for step in range(args.steps):
        rows: list[list[int]] = []
        targets: list[list[int]] = []
        for _ in range(args.batch):
            prompt, answer = example(rng, args.digits)
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            answer_ids = [*tokenizer(answer, add_special_tokens=False)["input_ids"], eos]
            rows.append(prompt_ids + answer_ids)
            targets.append([-100] * len(prompt_ids) + answer_ids)
        width = max(len(r) for r in rows)
        input_ids = torch.tensor([r + [eos] * (width - len(r)) for r in rows])
        labels = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
        attention = (labels != -100) | (torch.arange(width) < torch.tensor([len(r) for r in rows])[:, None])
        loss = model(input_ids=input_ids, attention_mask=attention.long(), labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if (step + 1) % 25 == 0:
            log("warmup", f"SFT step {step + 1}/{args.steps}: loss {loss.item():.3f}")
    model.save_pretrained(args.out_dir)
    for name in TOKENIZER_FILES:  # the builder's own files, byte for byte
        source = Path(args.model_dir) / name
        if source.exists():
            shutil.copyfile(source, Path(args.out_dir) / name)
    print(json.dumps({"seconds": time.perf_counter() - start, "loss": float(loss)}))


if __name__ == "__main__":
    main()
