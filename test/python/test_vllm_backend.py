"""The vLLM backend. vLLM needs a CUDA GPU and is not installed here, so the adapter
(``posttrain_worker/models/vllm_engine.py``) runs against ``fake_vllm.py``, a FAKE of vLLM's API backed by
the tiny HF model: sampling-params mapping, n > 1 grouping, per-request seeds, finish reasons, log-prob
extraction, scoring through prompt log-probs, weight loading, and a worker that serves a fake-vLLM model with
the same payload as a transformers one. ``test_vllm_real_engine`` runs the same adapter on the real engine
where vllm imports (skipped otherwise, with the reason)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fake_vllm
import pytest
import torch
from fake_vllm import FakeCompletionOutput, FakeLogprob, FakeRequestOutput, FakeSamplingParams
from posttrain_worker.codec import Ragged, TensorBatch
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.models import make_tiny_model
from posttrain_worker.models.generation import GeneratedRow
from posttrain_worker.models.generation import generate as hf_generate
from posttrain_worker.models.sampling import SamplingParams
from posttrain_worker.models.scoring import score as hf_score
from posttrain_worker.models.vllm_engine import (
    VllmEngine,
    VllmOptions,
    completion_row,
    finish_reason,
    prompt_log_probs,
    request_seed,
)
from posttrain_worker.models.vllm_import import FAKE_ENV, import_vllm
from posttrain_worker.models.vllm_worker import WORKER_EXTENSION
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from worker_harness import Client, call, error, load, ok, worker_client

TINY_SEED = 4  # conftest's tiny_dir weights
FAKE_PATH = str(Path(fake_vllm.__file__).resolve())
PROMPTS = ["Hello world", "xyz", "The quick brown fox"]
VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None


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
        "enforce_eager": defaults.enforce_eager,
        "worker_extension_cls": WORKER_EXTENSION,
        "logprobs_mode": "raw_logprobs",
    }
    model, _ = reference
    assert engine.max_model_len == model.config.max_position_embeddings
    assert engine.vocab_size == model.config.vocab_size and engine.model_type == model.config.model_type
    assert engine.parameters == sum(p.numel() for p in model.parameters())  # asked through collective_rpc
    assert engine.engine.startswith("FAKE vllm") and FAKE_PATH in engine.engine
    shorter = make_engine(tiny_dir, max_model_len=64, gpu_memory_utilization=0.5, enforce_eager=True)
    assert shorter.max_model_len == 64
    assert (
        shorter.llm.init_kwargs["gpu_memory_utilization"] == 0.5 and shorter.llm.init_kwargs["enforce_eager"]
    )


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


def test_samples_are_grouped_by_prompt_and_seeded_per_request(
    engine: VllmEngine, reference: tuple[Any, Any]
) -> None:
    model, tokenizer = reference
    prompts = encode(tokenizer, PROMPTS[:2])
    params = SamplingParams(temperature=1.0)
    rows = engine.generate(prompts, max_new_tokens=6, params=params, num_samples=3, stop=(), seed=5)
    assert len(rows) == 6
    _, sent = engine.llm.generate_calls[-1]
    assert [p.seed for p in sent] == [request_seed(5, 0), request_seed(5, 1)] and [p.n for p in sent] == [
        3,
        3,
    ]
    for i, row in enumerate(rows):  # row i belongs to prompt i // 3: its log-probs are conditioned on it
        own = teacher_forced(model, prompts[i // 3], row.tokens)
        other = teacher_forced(model, prompts[1 - i // 3], row.tokens)
        assert torch.allclose(row.log_probs, own, atol=1e-4)
        assert not torch.allclose(row.log_probs, other, atol=1e-3)
    again = engine.generate(prompts, max_new_tokens=6, params=params, num_samples=3, stop=(), seed=5)
    assert [r.tokens.tolist() for r in again] == [r.tokens.tolist() for r in rows]
    other_seed = engine.generate(prompts, max_new_tokens=6, params=params, num_samples=3, stop=(), seed=6)
    assert [r.tokens.tolist() for r in other_seed] != [r.tokens.tolist() for r in rows]
    assert len({tuple(r.tokens.tolist()) for r in rows[:3]}) > 1  # the n samples differ (seed + i)


def hf_rows(reference: tuple[Any, Any], prompts: list[torch.Tensor], **kwargs: Any) -> list[GeneratedRow]:
    model, tokenizer = reference
    return hf_generate(model, tokenizer, prompts, generators=None, **kwargs)


def test_greedy_and_stop_strings_match_the_transformers_backend(
    engine: VllmEngine, reference: tuple[Any, Any]
) -> None:
    _, tokenizer = reference
    prompts = encode(tokenizer, PROMPTS)
    greedy = SamplingParams(temperature=0.0)
    ours = engine.generate(prompts, max_new_tokens=12, params=greedy, num_samples=2, stop=(), seed=0)
    theirs = hf_rows(reference, [p for p in prompts for _ in range(2)], max_new_tokens=12, params=greedy)
    assert [r.tokens.tolist() for r in ours] == [r.tokens.tolist() for r in theirs]
    assert [r.finish_reason for r in ours] == [r.finish_reason for r in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a.log_probs.dtype == b.log_probs.dtype == torch.float32
        assert torch.allclose(a.log_probs, b.log_probs, atol=1e-4)
    assert all(p.seed is None for p in engine.llm.generate_calls[-1][1])  # greedy draws nothing
    # a stop string taken from the greedy responses cuts both backends at the same token
    stops = (tokenizer.decode(theirs[0].tokens[2:4].tolist()),)
    ours = engine.generate(prompts, max_new_tokens=12, params=greedy, num_samples=1, stop=stops, seed=0)
    theirs = hf_rows(reference, prompts, max_new_tokens=12, params=greedy, stop=stops)
    assert [r.tokens.tolist() for r in ours] == [r.tokens.tolist() for r in theirs]
    assert [r.finish_reason for r in ours] == [r.finish_reason for r in theirs]
    assert ours[0].finish_reason == "stop" and ours[0].tokens.numel() <= 4


def test_sampled_log_probs_are_the_raw_model_log_probs(
    engine: VllmEngine, reference: tuple[Any, Any]
) -> None:
    model, tokenizer = reference
    prompts = encode(tokenizer, PROMPTS)
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.2)
    rows = engine.generate(prompts, max_new_tokens=8, params=params, num_samples=2, stop=(), seed=3)
    for i, row in enumerate(rows):
        assert torch.allclose(row.log_probs, teacher_forced(model, prompts[i // 2], row.tokens), atol=1e-4)


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


def test_score_matches_the_transformers_backend(engine: VllmEngine, reference: tuple[Any, Any]) -> None:
    model, tokenizer = reference
    sequences = [*encode(tokenizer, PROMPTS), torch.tensor([7]), torch.zeros(0, dtype=torch.int64)]
    ours = engine.score(sequences)
    theirs = hf_score(model, sequences, pad_id=0)
    assert [t.shape for t in ours] == [t.shape for t in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == torch.float32 and torch.allclose(a, b, atol=1e-4)
    _, sent = engine.llm.generate_calls[-1]
    assert len(sent) == 4 and all(
        p.prompt_logprobs == 0 and p.max_tokens == 1 for p in sent
    )  # empty row skipped
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


def test_load_weights_goes_through_collective_rpc_and_resets_the_prefix_cache(
    tiny_dir: Path, tmp_path: Path, reference: tuple[Any, Any]
) -> None:
    engine = make_engine(tiny_dir)
    other_dir = make_tiny_model(tmp_path / "other", seed=99)
    other = AutoModelForCausalLM.from_pretrained(other_dir).eval()
    _, tokenizer = reference
    prompts = encode(tokenizer, PROMPTS)
    greedy = SamplingParams(temperature=0.0)
    before = engine.generate(prompts, max_new_tokens=8, params=greedy, num_samples=1, stop=(), seed=0)
    weights = list(other.state_dict().items())
    assert engine.load_weights(weights) == len(weights)
    assert engine.llm.prefix_cache_resets == 1
    after = engine.generate(prompts, max_new_tokens=8, params=greedy, num_samples=1, stop=(), seed=0)
    expected = hf_generate(other, tokenizer, prompts, max_new_tokens=8, params=greedy, generators=None)
    assert [r.tokens.tolist() for r in after] == [r.tokens.tolist() for r in expected]
    for new, old, ref in zip(after, before, expected, strict=True):  # the new weights' log-probs, not the old
        assert torch.allclose(new.log_probs, ref.log_probs, atol=1e-4)
        assert not torch.allclose(new.log_probs, old.log_probs, atol=1e-3)
    with pytest.raises(WorkerFailure) as caught:
        engine.load_weights([("model.no_such_layer.weight", torch.zeros(2))])
    assert caught.value.code == "BAD_ARGUMENTS" and "no_such_layer" in caught.value.message
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
    if not VLLM_INSTALLED:
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


def structure(columns: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Each leaf's key and kind: ragged/dense with dtype, or strings."""
    out: dict[str, str] = {}
    for key, column in columns.items():
        name = f"{prefix}{key}"
        if isinstance(column, dict):
            out.update(structure(column, f"{name}."))
        elif isinstance(column, Ragged):
            out[name] = f"ragged {column.values.dtype}"
        elif isinstance(column, torch.Tensor):
            out[name] = f"dense {column.dtype}"
        else:
            out[name] = "strings"
    return out


def test_a_worker_serves_a_fake_vllm_model_with_the_transformers_payload(
    fake_client: Client, tiny_dir: Path
) -> None:
    info = ok(fake_client.call("info")[0])
    assert "vllm" in info["capabilities"]["backends"]
    fast = ok(load(fake_client, "fast", tiny_dir, backend="vllm"))
    hf = ok(fake_client.call("list_models")[0])["models"][0]
    assert (
        fast["backend"] == "vllm"
        and fast["engine"].startswith("FAKE vllm")
        and hf["backend"] == "transformers"
    )
    for key in (
        "modelType",
        "parameters",
        "vocabSize",
        "maxPositionEmbeddings",
        "eosTokenId",
        "hasChatTemplate",
    ):
        assert fast[key] == hf[key], key
    batch = TensorBatch((3,), {"text": {"prompt": PROMPTS}})
    for extra in ({"temperature": 0}, {"numSamples": 2, "seed": 1, "stop": ["e"]}):
        args = {"maxNewTokens": 10, **extra}
        a = call(fake_client, "generate", {"model": "fast", **args}, batch)
        b = call(fake_client, "generate", {"model": "hf", **args}, batch)
        assert ok(a).keys() == ok(b).keys() == {"seed"}
        out_a, out_b = a["batch"], b["batch"]
        assert out_a.batch_size == out_b.batch_size
        assert structure(out_a.columns) == structure(out_b.columns)
        assert out_a.columns["text"]["prompt"] == out_b.columns["text"]["prompt"]
        assert set(out_a.columns["finish_reason"]) <= {"eos", "stop", "length"}
        if "temperature" in extra:  # greedy: the very same payload
            for key in ("prompt", "response", "full"):
                assert (
                    out_a.columns["tokens"][key].values.tolist()
                    == out_b.columns["tokens"][key].values.tolist()
                )
                assert out_a.columns["text"][key] == out_b.columns["text"][key]
            assert torch.allclose(
                out_a.columns["log_probs"]["full"].values,
                out_b.columns["log_probs"]["full"].values,
                atol=1e-4,
            )
            assert out_a.columns["finish_reason"] == out_b.columns["finish_reason"]
    full = TensorBatch(
        (2,), {"tokens": {"full": Ragged(torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 3, 5]))}}
    )
    scored = [call(fake_client, "score", {"model": m}, full)["batch"] for m in ("fast", "hf")]
    assert torch.allclose(
        scored[0].columns["log_probs"]["full"].values,
        scored[1].columns["log_probs"]["full"].values,
        atol=1e-4,
    )
    ok(fake_client.call("unload_model", {"name": "fast"})[0])


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


@pytest.mark.skipif(VLLM_INSTALLED, reason="vllm is installed here: the backend is available")
def test_a_worker_without_vllm_answers_backend_unavailable(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FAKE_ENV, raising=False)
    with worker_client() as (client, _):
        assert "vllm" not in ok(client.call("info")[0])["capabilities"]["backends"]
        reply = load(client, "v", tiny_dir, backend="vllm")
        message = error(reply, "BACKEND_UNAVAILABLE")
        assert 'package "vllm"' in message
        assert ok(client.call("list_models")[0]) == {"models": []}


# ---- the real engine -----------------------------------------------------------------------------------


def test_vllm_real_engine(tmp_path: Path) -> None:
    """The adapter on the real vLLM engine (a GPU and vllm needed): the same checks as against the fake, with
    float16 tolerances."""
    try:
        import vllm
    except ImportError as exc:
        pytest.skip(f"vllm is not installed in this environment: {exc}")
    if not torch.cuda.is_available():
        pytest.skip("vllm is installed but there is no CUDA GPU here")
    # head size 64: vLLM's attention kernels do not take the default tiny model's 16
    path = make_tiny_model(tmp_path / "tiny", hidden_size=256, num_heads=4, num_kv_heads=2, seed=5)
    tokenizer = AutoTokenizer.from_pretrained(path)
    engine = VllmEngine.create(
        vllm,
        str(path),
        config=AutoConfig.from_pretrained(path),
        tokenizer=tokenizer,
        dtype="float16",
        options=VllmOptions(gpu_memory_utilization=0.3, enforce_eager=True),
    )
    try:
        prompts = encode(tokenizer, PROMPTS)
        params = SamplingParams(temperature=1.0, top_k=50)
        rows = engine.generate(prompts, max_new_tokens=8, params=params, num_samples=2, stop=(), seed=1)
        assert len(rows) == 6 and all(r.finish_reason in ("eos", "stop", "length") for r in rows)
        again = engine.generate(prompts, max_new_tokens=8, params=params, num_samples=2, stop=(), seed=1)
        assert [r.tokens.tolist() for r in again] == [r.tokens.tolist() for r in rows]
        scored = engine.score([torch.cat([prompts[i // 2], r.tokens]) for i, r in enumerate(rows)])
        reference = AutoModelForCausalLM.from_pretrained(path).eval()
        for i, (row, full) in enumerate(zip(rows, scored, strict=True)):
            tail = full[prompts[i // 2].numel() :]
            assert torch.allclose(row.log_probs, tail, atol=5e-2)  # raw log-probs, as prompt_logprobs
            assert torch.allclose(
                row.log_probs, teacher_forced(reference, prompts[i // 2], row.tokens), atol=5e-2
            )
        other_dir = make_tiny_model(tmp_path / "other", hidden_size=256, num_heads=4, num_kv_heads=2, seed=6)
        other = AutoModelForCausalLM.from_pretrained(other_dir).eval()
        weights = list(other.state_dict().items())
        assert engine.load_weights(weights) == len(weights)
        greedy = SamplingParams(temperature=0.0)
        after = engine.generate(prompts, max_new_tokens=4, params=greedy, num_samples=1, stop=(), seed=0)
        for prompt, row in zip(prompts, after, strict=True):
            assert torch.allclose(row.log_probs, teacher_forced(other, prompt, row.tokens), atol=5e-2)
    finally:
        engine.shutdown()
