"""generate and score through a real worker on the tiny model: output keys and shapes (tokens and text
input, numSamples), greedy decoding against reference loops computed here (our own and Hugging Face's
generate), seeds and micro-batching, score against generation's log-probs and against teacher forcing, stop
strings, eos, length, truncation, cancellation, and each bad input (typed error, the worker keeps serving)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.codec import Ragged, TensorBatch, encode_batch
from transformers import AutoModelForCausalLM, AutoTokenizer
from worker_harness import Client, call, error, load, ok, ragged, rows_of

PROMPTS = ["Hello world", "a", "The quick brown fox jumps"]
MAX_POSITIONS = 512
EOS, PAD = 258, 256


# ---- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(tiny_dir: Path) -> tuple[Any, Any]:
    """The same model and tokenizer, in this process."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_dir)


# ---- helpers -------------------------------------------------------------------------------------------


def token_batch(rows: list[list[int]] | list[torch.Tensor], key: str = "prompt") -> TensorBatch:
    return TensorBatch((len(rows),), {"tokens": {key: ragged(rows)}})


def text_batch(texts: list[str]) -> TensorBatch:
    return TensorBatch((len(texts),), {"text": {"prompt": list(texts)}})


def run(client: Client, batch: TensorBatch, **args: Any) -> TensorBatch:
    reply = call(client, "generate", {"model": "policy", **args}, batch)
    ok(reply)
    return reply["batch"]


def tokens(client_batch: TensorBatch, key: str = "response") -> list[list[int]]:
    return [r.tolist() for r in rows_of(client_batch.columns["tokens"][key])]


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_ids(reference: tuple[Any, Any]) -> list[list[int]]:
    return [encode(reference[1], p) for p in PROMPTS]


def teacher_forced(model: Any, ids: list[int]) -> torch.Tensor:
    """log p(tok_t | tok_<t) for t >= 1, with 0 in front (TorchRL's convention), in this process."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    picked = (
        torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
    )
    return torch.cat([torch.zeros(1), picked])


def greedy_reference(model: Any, ids: list[int], steps: int) -> list[int]:
    """Greedy decoding without a cache: a full forward per step, argmax of the last logits."""
    seq = list(ids)
    with torch.no_grad():
        for _ in range(steps):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(ids) :]


# ---- keys, shapes, conventions -------------------------------------------------------------------------


def check_conventions(out: TensorBatch, tokenizer: Any) -> None:
    """Every invariant of a generate output that holds whatever was sampled."""
    c = out.columns
    assert set(c) == {"tokens", "text", "log_probs", "masks", "finish_reason", "policy_version"}
    assert set(c["tokens"]) == {"prompt", "response", "full"}
    assert set(c["text"]) == {"prompt", "response", "full"}
    assert set(c["log_probs"]) == {"response", "full"}
    assert set(c["masks"]) == {"all_attention_mask", "all_assistant_mask"}
    rows = out.rows
    prompt, response, full = (rows_of(c["tokens"][k]) for k in ("prompt", "response", "full"))
    lp_response, lp_full = rows_of(c["log_probs"]["response"]), rows_of(c["log_probs"]["full"])
    attention = rows_of(c["masks"]["all_attention_mask"])
    assistant = rows_of(c["masks"]["all_assistant_mask"])
    assert len(prompt) == len(response) == len(full) == len(c["finish_reason"]) == rows
    version = c["policy_version"]
    assert isinstance(version, torch.Tensor) and version.dtype == torch.int64 and version.numel() == rows
    for i in range(rows):
        assert prompt[i].dtype == response[i].dtype == full[i].dtype == torch.int64
        assert lp_response[i].dtype == lp_full[i].dtype == torch.float32
        assert attention[i].dtype == assistant[i].dtype == torch.bool
        assert torch.equal(full[i], torch.cat([prompt[i], response[i]]))
        assert lp_response[i].numel() == response[i].numel() >= 1
        assert bool((lp_response[i] <= 0).all())
        assert torch.equal(lp_full[i], torch.cat([torch.zeros(prompt[i].numel()), lp_response[i]]))
        assert bool(attention[i].all()) and attention[i].numel() == full[i].numel()
        assert assistant[i].tolist() == [False] * prompt[i].numel() + [True] * response[i].numel()
        assert c["text"]["response"][i] == tokenizer.decode(response[i].tolist(), skip_special_tokens=False)
        assert c["text"]["full"][i] == c["text"]["prompt"][i] + c["text"]["response"][i]
        assert c["finish_reason"][i] in ("eos", "stop", "length")
        assert (c["finish_reason"][i] == "eos") == (int(response[i][-1]) in (EOS, PAD))


def test_generate_from_tokens(client: Client, reference: tuple[Any, Any]) -> None:
    ids = prompt_ids(reference)
    reply = call(client, "generate", {"model": "policy", "maxNewTokens": 6, "seed": 0}, token_batch(ids))
    assert ok(reply) == {"seed": 0}
    out: TensorBatch = reply["batch"]
    assert out.batch_size == (3,)
    check_conventions(out, reference[1])
    assert tokens(out, "prompt") == ids
    assert out.columns["text"]["prompt"] == PROMPTS


def test_generate_from_text(client: Client, reference: tuple[Any, Any]) -> None:
    out = run(client, text_batch(PROMPTS), maxNewTokens=5, temperature=0.7, topK=20, topP=0.9, seed=3)
    assert out.batch_size == (3,)
    check_conventions(out, reference[1])
    assert tokens(out, "prompt") == prompt_ids(reference)  # tokenized with no special tokens added
    assert out.columns["text"]["prompt"] == PROMPTS


def test_num_samples_adds_a_batch_dimension(client: Client, reference: tuple[Any, Any]) -> None:
    ids = prompt_ids(reference)[:2]
    out = run(client, token_batch(ids), maxNewTokens=8, numSamples=3, seed=5)
    assert out.batch_size == (2, 3)
    check_conventions(out, reference[1])
    assert tokens(out, "prompt") == [ids[0]] * 3 + [ids[1]] * 3  # row-major: the samples of a prompt in a row
    assert out.columns["text"]["prompt"] == [PROMPTS[0]] * 3 + [PROMPTS[1]] * 3
    responses = tokens(out)
    assert len({tuple(r) for r in responses[:3]}) == 3  # the samples of one prompt differ


def test_repeated_prompt_rows_share_their_prefill_and_keep_their_own_samples(
    client: Client, reference: tuple[Any, Any]
) -> None:
    # a GRPO batch: each prompt 3 times in a row, one sample per row. The rows of a prompt share its prefill
    # (as numSamples does); each row keeps its own generator, so the tokens equal generating the rows one at a
    # time (microBatchSize 1 runs every row's own prefill) and differ within a group
    ids = prompt_ids(reference)[:2]
    batch = token_batch([ids[0]] * 3 + [ids[1]] * 3)
    sampling = {"maxNewTokens": 10, "temperature": 1.0, "seed": 4}
    shared = run(client, batch, **sampling)
    one_by_one = run(client, batch, microBatchSize=1, **sampling)
    assert shared.batch_size == (6,)
    assert tokens(shared, "prompt") == [ids[0]] * 3 + [ids[1]] * 3
    assert tokens(shared) == tokens(one_by_one)
    assert len({tuple(r) for r in tokens(shared)[:3]}) > 1
    for x, y in zip(
        rows_of(shared.columns["log_probs"]["response"]),
        rows_of(one_by_one.columns["log_probs"]["response"]),
        strict=True,
    ):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
    # rows that are not runs of equal prompts generate as before
    mixed = run(client, token_batch([ids[0], ids[1], ids[0]]), **sampling)
    assert tokens(mixed, "prompt") == [ids[0], ids[1], ids[0]]


def test_a_seed_is_reported_when_none_is_given(client: Client, reference: tuple[Any, Any]) -> None:
    reply = call(client, "generate", {"model": "policy", "maxNewTokens": 3, "seed": None}, text_batch(["x"]))
    seed = ok(reply)["seed"]
    assert isinstance(seed, int) and 0 <= seed < 2**53
    again = run(client, text_batch(["x"]), maxNewTokens=3, seed=seed)
    assert tokens(again) == tokens(reply["batch"])


def test_an_empty_batch_gives_an_empty_batch(client: Client) -> None:
    out = run(client, token_batch([]), maxNewTokens=3, numSamples=2)
    assert out.batch_size == (0, 2) and tokens(out) == [] and out.columns["finish_reason"] == []
    assert run(client, text_batch([]), maxNewTokens=3).batch_size == (0,)
    reply = call(client, "score", {"model": "policy"}, token_batch([], key="full"))
    assert ok(reply) == {} and reply["batch"].batch_size == (0,)


# ---- greedy, seeds, micro-batching ---------------------------------------------------------------------


def test_greedy_is_deterministic_and_matches_a_reference_loop(
    client: Client, reference: tuple[Any, Any]
) -> None:
    model, tokenizer = reference
    ids = prompt_ids(reference)
    first = run(client, token_batch(ids), maxNewTokens=10, temperature=0)
    second = run(client, token_batch(ids), maxNewTokens=10, temperature=0, microBatchSize=1)
    assert tokens(first) == tokens(second)
    assert tokens(first) == [greedy_reference(model, p, 10) for p in ids]
    assert first.columns["finish_reason"] == ["length"] * 3
    check_conventions(first, tokenizer)


def test_greedy_with_repetition_penalty_matches_hugging_face_generate(
    client: Client, reference: tuple[Any, Any]
) -> None:
    model, _ = reference
    ids = prompt_ids(reference)
    out = run(client, token_batch(ids), maxNewTokens=12, temperature=0, repetitionPenalty=1.3)
    for prompt, response in zip(ids, tokens(out), strict=True):
        with torch.no_grad():
            hf = model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                do_sample=False,
                max_new_tokens=12,
                repetition_penalty=1.3,
            )[0, len(prompt) :].tolist()
        assert response == hf[: len(response)]
    assert len({tuple(r) for r in tokens(out)}) == 3


def test_seeds(client: Client, reference: tuple[Any, Any]) -> None:
    batch = token_batch(prompt_ids(reference))
    sampling = {"maxNewTokens": 12, "numSamples": 2, "temperature": 0.9, "topK": 100, "topP": 0.95}
    a = run(client, batch, seed=11, **sampling)
    b = run(client, batch, seed=11, **sampling)
    c = run(client, batch, seed=12, **sampling)
    # microBatchSize 1 splits each group of samples (every row runs its own prefill); the default and 4 keep
    # groups whole, so each prompt's prefill is run once and shared by its samples: the same rows either way
    one_by_one = run(client, batch, seed=11, microBatchSize=1, **sampling)
    pairs = run(client, batch, seed=11, microBatchSize=4, **sampling)
    assert tokens(a) == tokens(b) == tokens(one_by_one) == tokens(pairs)
    assert tokens(a) != tokens(c)
    for other in (one_by_one, pairs):
        for x, y in zip(
            rows_of(a.columns["log_probs"]["response"]),
            rows_of(other.columns["log_probs"]["response"]),
            strict=True,
        ):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


# ---- score ---------------------------------------------------------------------------------------------


def test_score_reproduces_generation_log_probs(client: Client, reference: tuple[Any, Any]) -> None:
    model, _ = reference
    out = run(client, token_batch(prompt_ids(reference)), maxNewTokens=10, numSamples=2, seed=4)
    full = rows_of(out.columns["tokens"]["full"])
    prompts = rows_of(out.columns["tokens"]["prompt"])
    generated = rows_of(out.columns["log_probs"]["response"])
    scored_batch = TensorBatch(out.batch_size, {"tokens": {"full": out.columns["tokens"]["full"]}})
    for micro in (None, 1):
        reply = call(client, "score", {"model": "policy", "microBatchSize": micro}, scored_batch)
        ok(reply)
        scored: TensorBatch = reply["batch"]
        assert scored.batch_size == (3, 2) and list(scored.columns) == ["log_probs"]
        values = rows_of(scored.columns["log_probs"]["full"])
        for i, row in enumerate(values):
            n = prompts[i].numel()
            assert row.dtype == torch.float32 and row.numel() == full[i].numel() and row[0] == 0
            torch.testing.assert_close(row[n:], generated[i], atol=1e-4, rtol=0)
            torch.testing.assert_close(
                row[:n], teacher_forced(model, full[i].tolist())[:n], atol=1e-5, rtol=0
            )


def test_score_of_short_and_empty_rows(client: Client, reference: tuple[Any, Any]) -> None:
    model, _ = reference
    reply = call(client, "score", {"model": "policy"}, token_batch([[5, 6, 7], [9], []], key="full"))
    assert ok(reply) == {}
    values = rows_of(reply["batch"].columns["log_probs"]["full"])
    assert [v.numel() for v in values] == [3, 1, 0]
    assert values[1].tolist() == [0.0]
    torch.testing.assert_close(values[0], teacher_forced(model, [5, 6, 7]), atol=1e-5, rtol=0)


# ---- finish reasons, truncation, cancellation ----------------------------------------------------------


def test_stop_strings_cut_the_response(client: Client, reference: tuple[Any, Any]) -> None:
    _, tokenizer = reference
    batch = token_batch(prompt_ids(reference))
    free = tokens(run(client, batch, maxNewTokens=30, seed=21))
    # For each row, the first printable ASCII token after the first two becomes a stop string.
    cuts = [next(j for j, t in enumerate(row) if j >= 2 and 33 <= t <= 96) for row in free]
    stops = sorted({tokenizer.decode([free[i][j]]) for i, j in enumerate(cuts)})
    out = run(client, batch, maxNewTokens=30, seed=21, stop=stops)
    for i, response in enumerate(tokens(out)):
        text = out.columns["text"]["response"][i]
        first = min(
            j for j in range(len(free[i])) if any(s in tokenizer.decode(free[i][: j + 1]) for s in stops)
        )
        assert response == free[i][: first + 1]  # the same draws up to the token completing the stop string
        assert out.columns["finish_reason"][i] == "stop"
        assert any(text.endswith(s) for s in stops)
    check_conventions(out, tokenizer)


def test_max_new_tokens_gives_length(client: Client, reference: tuple[Any, Any]) -> None:
    out = run(client, token_batch(prompt_ids(reference)), maxNewTokens=7, temperature=0)
    assert [len(r) for r in tokens(out)] == [7, 7, 7]
    assert out.columns["finish_reason"] == ["length"] * 3


def test_eos_ends_the_response_and_is_kept(
    client: Client, reference: tuple[Any, Any], tiny_dir: Path, tmp_path: Path
) -> None:
    # A copy whose eos embedding (tied to the output head) is twice the embedding of the greedy first token of
    # the prompt: greedy decoding then picks eos first.
    model, tokenizer = reference
    prompt = encode(tokenizer, "Hello world")
    first = greedy_reference(model, prompt, 1)[0]
    eosy = AutoModelForCausalLM.from_pretrained(tiny_dir)
    with torch.no_grad():
        eosy.get_input_embeddings().weight[EOS] = 2 * eosy.get_input_embeddings().weight[first]
    assert greedy_reference(eosy, prompt, 1) == [EOS]
    eosy.save_pretrained(tmp_path / "eosy")
    tokenizer.save_pretrained(tmp_path / "eosy")
    ok(load(client, "eosy", tmp_path / "eosy"))
    try:
        reply = call(
            client,
            "generate",
            {"model": "eosy", "maxNewTokens": 5, "temperature": 0},
            text_batch(["Hello world"]),
        )
        ok(reply)
        out: TensorBatch = reply["batch"]
        assert tokens(out) == [[EOS]]
        assert out.columns["finish_reason"] == ["eos"]
        assert out.columns["text"]["response"] == ["<|im_end|>"]
        check_conventions(out, tokenizer)
    finally:
        ok(client.call("unload_model", {"name": "eosy"})[0])


def test_long_prompts_error_or_are_left_truncated(client: Client) -> None:
    long = [(i % 90) + 3 for i in range(MAX_POSITIONS - 2)]  # 510 tokens; with 4 new tokens the limit is 508
    batch = token_batch([[5, 6], long])
    message = error(call(client, "generate", {"model": "policy", "maxNewTokens": 4}, batch), "BAD_ARGUMENTS")
    assert "row 1" in message and "510" in message and "508" in message and "truncate" in message
    out = run(client, batch, maxNewTokens=4, truncate="left", temperature=0)
    assert tokens(out, "prompt") == [[5, 6], long[-508:]]
    assert [len(r) for r in tokens(out, "full")] == [6, 512]
    message = error(
        call(client, "generate", {"model": "policy", "maxNewTokens": 512}, batch), "BAD_ARGUMENTS"
    )
    assert "maxNewTokens" in message and "512" in message


def test_cancel_stops_a_running_generation(client: Client) -> None:
    batch = text_batch(["a"] * 8)
    request_id = client.request(
        "generate",
        {"model": "policy", "maxNewTokens": 400, "numSamples": 16, "seed": 0},
        payloads=[{"kind": "tensordict"}],
        frames=(encode_batch(batch),),
    )
    assert client.wait_busy()["busy"]
    client.send({"v": 1, "type": "cancel", "id": request_id})
    reply, _ = client.recv(timeout=30)
    assert reply["id"] == request_id
    error(reply, "CANCELLED")
    assert run(client, text_batch(["a"]), maxNewTokens=1)  # still serving


# ---- bad inputs ----------------------------------------------------------------------------------------


def test_model_not_loaded(client: Client) -> None:
    reply = call(client, "generate", {"model": "nope", "maxNewTokens": 2}, text_batch(["x"]))
    assert "nope" in error(reply, "MODEL_NOT_LOADED")
    assert "nope" in error(
        call(client, "score", {"model": "nope"}, token_batch([[1]], "full")), "MODEL_NOT_LOADED"
    )


def test_missing_input_keys(client: Client) -> None:
    batch = TensorBatch((1,), {"tokens": {"full": ragged([[1, 2]])}, "reward": torch.zeros(1)})
    message = error(call(client, "generate", {"model": "policy", "maxNewTokens": 2}, batch), "BAD_PAYLOAD")
    assert '("tokens", "prompt")' in message and '("text", "prompt")' in message
    assert '("tokens", "full")' in message and '("reward")' in message
    message = error(call(client, "score", {"model": "policy"}, token_batch([[1, 2]])), "BAD_PAYLOAD")
    assert '("tokens", "full")' in message and '("tokens", "prompt")' in message


def test_bad_token_ids_and_empty_prompts(client: Client) -> None:
    reply = call(client, "generate", {"model": "policy", "maxNewTokens": 2}, token_batch([[1, 2], [3, 259]]))
    message = error(reply, "BAD_ARGUMENTS")
    assert "row 1" in message and "259" in message
    message = error(call(client, "score", {"model": "policy"}, token_batch([[-1]], "full")), "BAD_ARGUMENTS")
    assert "row 0" in message and "-1" in message
    message = error(
        call(client, "generate", {"model": "policy", "maxNewTokens": 2}, text_batch(["x", ""])),
        "BAD_ARGUMENTS",
    )
    assert "row 1" in message and "empty" in message
    floats = TensorBatch((1,), {"tokens": {"prompt": Ragged(torch.tensor([1.0]), torch.tensor([0, 1]))}})
    assert "integer" in error(
        call(client, "generate", {"model": "policy", "maxNewTokens": 2}, floats), "BAD_PAYLOAD"
    )


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"maxNewTokens": 0}, "maxNewTokens"),
        ({"maxNewTokens": 2.5}, "maxNewTokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"topP": 0}, "topP"),
        ({"topP": 1.5}, "topP"),
        ({"topK": -1}, "topK"),
        ({"repetitionPenalty": 0}, "repetitionPenalty"),
        ({"stop": "x"}, "stop"),
        ({"stop": ["x", 3]}, "stop[1]"),
        ({"stop": [""]}, "stop[0]"),
        ({"seed": "x"}, "seed"),
        ({"seed": -1}, "seed"),
        ({"numSamples": 0}, "numSamples"),
        ({"microBatchSize": 0}, "microBatchSize"),
        ({"truncate": "right"}, "truncate"),
        ({"max_new_tokens": 3}, "max_new_tokens"),
    ],
)
def test_bad_sampling_arguments(client: Client, extra: dict[str, Any], field: str) -> None:
    args = {"model": "policy", "maxNewTokens": 2, **extra}
    assert field in error(call(client, "generate", args, text_batch(["x"])), "BAD_ARGUMENTS")


def test_worker_keeps_serving_after_failures(client: Client) -> None:
    error(
        call(client, "generate", {"model": "policy", "maxNewTokens": 0}, text_batch(["x"])), "BAD_ARGUMENTS"
    )
    error(call(client, "score", {"model": "policy"}, token_batch([[1]])), "BAD_PAYLOAD")
    out = run(client, text_batch(["ok"]), maxNewTokens=2, temperature=0)
    assert out.columns["finish_reason"] == ["length"]


# ---- in-process checks of the pieces -------------------------------------------------------------------


def test_logit_processing_matches_hugging_face_warpers() -> None:
    from posttrain_worker.models.sampling import SamplingParams, process_logits
    from transformers import (
        LogitsProcessorList,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=generator) * 3
    input_ids = torch.randint(0, 50, (4, 7), generator=generator)
    seen = torch.zeros(4, 50, dtype=torch.bool).scatter_(1, input_ids, True)
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.3)
    hf = LogitsProcessorList(
        [
            RepetitionPenaltyLogitsProcessor(1.3),
            TemperatureLogitsWarper(0.7),
            TopKLogitsWarper(20),
            TopPLogitsWarper(0.8),
        ]
    )
    torch.testing.assert_close(process_logits(logits, seen, params), hf(input_ids, logits.clone()))


def test_generation_without_cache_pruning_matches(
    reference: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Caches that cannot drop finished rows keep them (fed padding): same tokens, same log-probs."""
    from posttrain_worker.models import generation
    from posttrain_worker.models.sampling import SamplingParams, make_generators

    model, tokenizer = reference
    prompts = [torch.tensor(p) for p in prompt_ids(reference)]
    params = SamplingParams(temperature=0.8, top_k=60, repetition_penalty=1.2)

    def go() -> list[generation.GeneratedRow]:
        return generation.generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=20,
            params=params,
            generators=make_generators(3, len(prompts), 1),
            stop=["!", "A", "b"],
        )

    pruned = go()
    monkeypatch.setattr(generation, "cache_rows_copyable", lambda _cache: False)
    kept = go()
    assert len({len(r.tokens) for r in pruned}) > 1  # rows finished at different steps
    for a, b in zip(pruned, kept, strict=True):
        assert a.tokens.tolist() == b.tokens.tolist() and a.finish_reason == b.finish_reason
        torch.testing.assert_close(a.log_probs, b.log_probs, atol=1e-5, rtol=0)
