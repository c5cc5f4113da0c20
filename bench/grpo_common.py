"""Shared by the Python sides of ``npm run bench:grpo`` (``grpo_inprocess.py``, ``grpo_trl.py``): the run
request, the digit-sort reward, and the line protocol with ``bench/grpo.ts``.

Protocol (stdin/stdout, one JSON object or command per line): the caller writes the request as the first line;
the script answers ``{"ready": true, ...}`` once its model is loaded, then answers each ``step`` line with one
GRPO step's figures ``{"ms": ..., "reward": ..., ...}`` (``ms`` measured in here, startup excluded); ``quit``
ends. A failure is answered as ``{"error": "..."}``. Progress goes to stderr.

The request: ``{"modelDir", "prompts": [{"prompt", "answer"}, ...] (in step order), "groupSize",
"promptsPerStep", "maxNewTokens", "temperature", "topP", "topK", "lr", "weightDecay", "gradClip",
"clipEpsilon", "entropyCoeff", "seed"}``, optionally ``"device"`` (a torch device, default ``"cpu"``;
bench/gpu_check.py asks for ``"cuda"``), and for the fair baseline (``grpo_inprocess_fair.py``) the SDK's own
settings: ``"sampleSeeds"`` (the generation seed of each step, as the SDK's collector derives them) and
``"trainer"`` (the worker's ``trainer_state`` reply: the loss, optimizer and schedule configs as the worker
parsed them, and ``gradClip``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

#: Special tokens of the tiny tokenizer that may end a decoded completion.
EOS_STRINGS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")


@dataclass(frozen=True)
class Request:
    model_dir: str
    prompts: list[str]
    answers: list[str]
    group_size: int
    prompts_per_step: int
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    lr: float
    weight_decay: float
    grad_clip: float
    clip_epsilon: float
    entropy_coeff: float
    seed: int
    device: str = "cpu"
    """Where the model runs (the GPU check's ``"cuda"``)."""
    sample_seeds: list[int] | None = None
    """Per step, the generation seed the SDK used (fair baseline only)."""
    trainer: dict[str, Any] | None = None
    """The SDK worker's ``trainer_state`` (fair baseline only)."""

    @staticmethod
    def parse(value: dict[str, Any]) -> Request:
        rows = value["prompts"]
        return Request(
            model_dir=str(value["modelDir"]),
            prompts=[str(r["prompt"]) for r in rows],
            answers=[str(r["answer"]) for r in rows],
            group_size=int(value["groupSize"]),
            prompts_per_step=int(value["promptsPerStep"]),
            max_new_tokens=int(value["maxNewTokens"]),
            temperature=float(value["temperature"]),
            top_p=float(value["topP"]),
            top_k=int(value["topK"]),
            lr=float(value["lr"]),
            weight_decay=float(value["weightDecay"]),
            grad_clip=float(value["gradClip"]),
            clip_epsilon=float(value["clipEpsilon"]),
            entropy_coeff=float(value["entropyCoeff"]),
            seed=int(value["seed"]),
            device=str(value.get("device", "cpu")),
            sample_seeds=[int(v) for v in value["sampleSeeds"]] if "sampleSeeds" in value else None,
            trainer=dict(value["trainer"]) if "trainer" in value else None,
        )


def digit_sort_reward(completion: str, answer: str) -> float:
    """The digit-sort reward: the fraction of positions equal to ``answer`` when the stripped completion has
    its length, else 0."""
    text = completion
    for eos in EOS_STRINGS:
        text = text.replace(eos, "")
    text = text.strip()
    if len(text) != len(answer) or not answer:
        return 0.0
    return sum(a == b for a, b in zip(text, answer, strict=True)) / len(answer)


def log(name: str, message: str) -> None:
    print(f"[bench:grpo:{name}] {message}", file=sys.stderr, flush=True)


#: The protocol's stdout, kept aside by :func:`protect_stdout`.
_PROTOCOL_OUT = sys.stdout


def protect_stdout() -> None:
    """Send everything else printed to stdout (libraries' logs) to stderr, keeping stdout for replies."""
    sys.stdout = sys.stderr


def reply(value: dict[str, Any]) -> None:
    _PROTOCOL_OUT.write(json.dumps(value) + "\n")
    _PROTOCOL_OUT.flush()


def read_request() -> Request:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("no request on stdin")
    return Request.parse(json.loads(line))


def read_command() -> str:
    """The next command line (``step`` or ``quit``); end of input reads as ``quit``."""
    line = sys.stdin.readline()
    return line.strip() or "quit"
