"""Profiling aid of ``npm run bench:grpo -- --worker-timing``: runs ``python -m posttrain_worker`` with timers
around the worker-side parts of a GRPO step, so that the SDK's time over the fair baseline can be split into
the TypeScript side, the transport, the worker's own glue, and the compute both share.

    python bench/grpo_timed_worker.py -m posttrain_worker ARGS...   (POSTTRAIN_BENCH_TIMINGS=FILE)

Each timed call appends one JSON line ``{"part": ..., "method": ..., "ms": ...}`` to ``FILE``:

- ``call``: ``server.executor.run_call`` (decode the payload, run the method, encode the reply), by method;
- ``prompts``: rendering and tokenizing the generate call's prompt rows (``generation_prompts``);
- ``generation``: the decoding loop (``models.generation.generate``), the fair baseline's ``generate`` phase;
- ``outcome``: building the generate reply's columns (``_generate_outcome``);
- ``batch``: reading the training batch out of the payload (``read_train_batch``);
- ``step``: the trainer's step (forward, loss, backward, clip, optimizer): the fair baseline's ``train``.

The timers wrap module attributes where their callers look them up; they change no result. For benchmarks
only: the wrapped names are the worker's internals of today, and a rename there is an error at start.
"""

from __future__ import annotations

import functools
import json
import os
import runpy
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from posttrain_worker.methods import generation as generation_methods
from posttrain_worker.methods import training as training_methods
from posttrain_worker.server import executor, loop
from posttrain_worker.training.trainer import Trainer

_LOCK = threading.Lock()
# one file, open as long as the worker lives, line-buffered so that a killed worker leaves its lines
_OUT = open(os.environ["POSTTRAIN_BENCH_TIMINGS"], "a", buffering=1, encoding="utf-8")


def _record(part: str, method: str, ms: float) -> None:
    with _LOCK:
        _OUT.write(json.dumps({"part": part, "method": method, "ms": ms}) + "\n")


def _timed(part: str, fn: Callable[..., Any], method: Callable[..., str] | None = None) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            name = method(*args, **kwargs) if method is not None else part
            _record(part, name, (time.perf_counter() - start) * 1000)

    return wrapper


def install() -> None:
    """Wraps the timed functions where their callers look them up."""
    # run_call runs on the compute thread (executor) or, for short methods, on the I/O thread (loop)
    timed_call = _timed("call", executor.run_call, lambda spec, *a, **k: str(spec.name))
    executor.run_call = timed_call
    loop.run_call = timed_call
    generation_methods.generation_prompts = _timed("prompts", generation_methods.generation_prompts)
    generation_methods.run_generation = _timed("generation", generation_methods.run_generation)
    generation_methods._generate_outcome = _timed("outcome", generation_methods._generate_outcome)
    training_methods.read_train_batch = _timed("batch", training_methods.read_train_batch)
    Trainer.step = _timed("step", Trainer.step)  # type: ignore[method-assign]


def main() -> None:
    args = sys.argv[1:]
    if args[:2] != ["-m", "posttrain_worker"]:
        raise SystemExit("usage: grpo_timed_worker.py -m posttrain_worker ARGS...")
    install()
    sys.argv = ["posttrain_worker", *args[2:]]
    runpy.run_module("posttrain_worker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
