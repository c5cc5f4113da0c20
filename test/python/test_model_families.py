"""Six model families through real workers: Qwen2.5, Qwen3, Llama 3, Mistral, Gemma 2 and Phi-3, each a tiny
random model built here (``make_tiny_model(family=...)``) with its family's real chat template
(test/fixtures/chat_templates/, verbatim; none has ``{% generation %}`` markers).

Per family: the architecture options are in the loaded config and weights (Qwen2's qkv biases, Qwen3's q/k
norms, Llama 3's rope scaling, Mistral's and Gemma 2's sliding window of 8 tokens, Gemma 2's soft-capping and
tied embeddings, Phi-3's fused projections); the tokenizer keeps the template's special tokens whole; the
worker renders the template and its assistant masks cover exactly each assistant reply and its end-of-turn
token; sampled generation (two samples a prompt) has the log-probs that scoring gives afterwards (1e-4), on
sequences several windows long, where the window changes the log-probs; an SFT step on the rendered
conversations changes the weights with a finite loss; the weights reach a model in a second worker over
ZeroMQ (equal log-probs after); a checkpoint loads back as a model and resumes to the saved weights.

Two workers serve the whole module (a trainer and a generator), each with the six models loaded. The builder
itself: the fixtures are byte for byte what was copied, ``family="qwen2"`` is the original tiny model, the
command line takes ``--family`` and ``--chat-template``, and bad arguments are refused naming the argument.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
import zmq
from chat_families import END_OF_TURN, TEMPLATES, template
from posttrain_worker.codec import HistoryColumn, TensorBatch
from posttrain_worker.models import make_tiny_model
from posttrain_worker.models.tiny import WRITTEN_FILES
from posttrain_worker.models.tiny.cli import main
from posttrain_worker.models.tiny.families import FAMILIES, SLIDING_WINDOW
from training_harness import weights
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from worker_harness import Client, call, load, ok, ragged, rows_of, start_worker, stop_worker

NAMES = tuple(FAMILIES)
CHATS: list[list[dict[str, Any]]] = [
    [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "It is 4."},
    ],
    [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue, like the sky on a clear day."},
    ],
]
PROMPTS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Count to three, please, then stop."}],
    [{"role": "user", "content": "Say hi to everyone in the room."}],
]


def expected_replies(family: str, chat: list[dict[str, Any]]) -> list[str]:
    """The text each assistant turn should add to the rendering: its reply and the end-of-turn token (Qwen3
    writes an empty think block in front of the reply after the last user message)."""
    replies = [m["content"] + END_OF_TURN[family] for m in chat if m["role"] == "assistant"]
    if family == "qwen3":
        replies[-1] = "<think>\n\n</think>\n\n" + replies[-1]
    return replies


# ---- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {
        name: make_tiny_model(root / name, family=name, seed=7, chat_template=template(name))
        for name in NAMES
    }


@pytest.fixture(scope="module")
def workers(dirs: dict[str, Path]) -> Iterator[tuple[Client, Client]]:
    """A trainer worker with each family as ``policy-<family>`` and a generator worker with each as
    ``gen-<family>``; the two start and load side by side (two cores)."""
    context = zmq.Context()
    with ThreadPoolExecutor(2) as pool:
        started = list(pool.map(lambda _: start_worker(), range(2)))
    clients = [Client(context, w.endpoint) for w in started]
    try:
        for client, prefix in zip(clients, ("policy", "gen"), strict=True):
            for name, path in dirs.items():
                client.request("load_model", {"name": f"{prefix}-{name}", "path": str(path)})
        for client in clients:
            for _ in dirs:
                ok(client.recv(timeout=120)[0])
        yield clients[0], clients[1]
    finally:
        for client, worker in zip(clients, started, strict=True):
            client.close()
            stop_worker(worker)
        context.destroy(linger=0)


# ---- helpers -------------------------------------------------------------------------------------------


def render(client: Client, model: str, chats: list[list[dict[str, Any]]]) -> TensorBatch:
    batch = TensorBatch((len(chats),), {"history": {"full": HistoryColumn(chats)}})
    reply = call(client, "apply_chat_template", {"model": model, "key": "full"}, batch)
    ok(reply)
    out: TensorBatch = reply["batch"]
    return out


def score(client: Client, model: str, rows: list[torch.Tensor]) -> list[torch.Tensor]:
    batch = TensorBatch((len(rows),), {"tokens": {"full": ragged(rows)}})
    reply = call(client, "score", {"model": model}, batch)
    ok(reply)
    return rows_of(reply["batch"].columns["log_probs"]["full"])


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def runs(mask: torch.Tensor) -> list[tuple[int, int]]:
    """The ``[start, end)`` spans of consecutive true values."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, on in enumerate([*mask.tolist(), False]):
        if on and start is None:
            start = i
        elif not on and start is not None:
            spans.append((start, i))
            start = None
    return spans


def teacher_forced(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model(ids.unsqueeze(0)).logits[0].float()
    picked = torch.log_softmax(logits[:-1], -1).gather(-1, ids[1:].unsqueeze(-1)).squeeze(-1)
    return torch.cat([torch.zeros(1), picked])


def transfer(trainer: Client, generator: Client, source: str, target: str) -> tuple[Any, Any]:
    listen = ok(generator.call("weights_listen", {"model": target})[0])
    generator.request("weights_receive", {"token": listen["token"], "timeoutMs": 30_000})
    sent, _ = trainer.call("weights_send", {"model": source, "endpoints": [listen["endpoint"]]}, timeout=60)
    return ok(sent), ok(generator.recv(timeout=60)[0])


# ---- per family ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", NAMES)
def test_architecture_options_and_tokenizer(family: str, dirs: dict[str, Path], workers: Any) -> None:
    trainer, _ = workers
    config = AutoConfig.from_pretrained(dirs[family])
    assert config.architectures == [FAMILIES[family].architecture]
    names = set(weights(trainer, f"policy-{family}"))
    tied = "lm_head.weight" not in names
    assert tied == bool(config.tie_word_embeddings) == (family in ("qwen2", "qwen3", "gemma2"))
    if family == "qwen2":
        assert "model.layers.0.self_attn.q_proj.bias" in names
    if family == "qwen3":
        assert {"model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight"} <= names
        assert "model.layers.0.self_attn.q_proj.bias" not in names
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert head_dim == (16 if family == "qwen2" else 32)  # 32: vLLM's CPU backend accepts it
    if family == "llama3":
        assert config.rope_parameters["rope_type"] == "llama3"
    if family in ("mistral", "gemma2"):
        assert config.sliding_window == SLIDING_WINDOW
    if family == "gemma2":
        assert config.attn_logit_softcapping == 50.0 and config.final_logit_softcapping == 30.0
        assert config.layer_types == ["sliding_attention", "full_attention"]
        assert config.query_pre_attn_scalar == 32
    if family == "phi3":
        assert {"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"} <= names
        assert "model.layers.0.self_attn.q_proj.weight" not in names

    tokenizer = AutoTokenizer.from_pretrained(dirs[family])
    assert tokenizer.chat_template == template(family)
    text = "Hello, world!\n\tsee  you ~ 2+2=4"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tokenizer.decode(ids) == text
    spec = FAMILIES[family]
    for token in [t.text for t in spec.tokens]:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tokenizer.decode(ids) == token, token
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (spec.bos, spec.eos, spec.pad)
    described = ok(load(trainer, f"probe-{family}", dirs[family]))
    assert described["eosTokens"] == sorted({*spec.stop, spec.eos})
    assert described["modelType"] == config.model_type and described["hasChatTemplate"] is True
    ok(trainer.call("unload_model", {"name": f"probe-{family}"})[0])


@pytest.mark.parametrize("family", NAMES)
def test_chat_template_and_assistant_masks(family: str, dirs: dict[str, Path], workers: Any) -> None:
    trainer, _ = workers
    tokenizer = AutoTokenizer.from_pretrained(dirs[family])
    out = render(trainer, f"policy-{family}", CHATS)
    columns: Any = out.columns
    tokens = rows_of(columns["tokens"]["full"])
    masks = rows_of(columns["masks"]["all_assistant_mask"])
    for row, chat in enumerate(CHATS):
        text = tokenizer.apply_chat_template(chat, tokenize=False)
        assert columns["text"]["full"][row] == text
        assert tokens[row].tolist() == tokenizer(text, add_special_tokens=False)["input_ids"]
        if FAMILIES[family].bos is not None and FAMILIES[family].bos_in_encode:
            assert text.startswith(tokenizer.bos_token) and text.count(tokenizer.bos_token) == 1
        marked = [tokenizer.decode(tokens[row][a:b].tolist()) for a, b in runs(masks[row])]
        assert marked == expected_replies(family, chat), (family, row, marked)


@pytest.mark.parametrize("family", NAMES)
def test_generation_log_probs_equal_scoring(family: str, dirs: dict[str, Path], workers: Any) -> None:
    trainer, _ = workers
    model = f"policy-{family}"
    batch = TensorBatch((len(PROMPTS),), {"history": {"prompt": HistoryColumn(PROMPTS)}})
    args = {"model": model, "maxNewTokens": 12, "numSamples": 2, "temperature": 1.0, "seed": 11}
    reply = call(trainer, "generate", args, batch)
    ok(reply)
    out: Any = reply["batch"]
    assert out.batch_size == (2, 2)
    full = rows_of(out.columns["tokens"]["full"])
    prompt = rows_of(out.columns["tokens"]["prompt"])
    generated = rows_of(out.columns["log_probs"]["full"])
    assert len({tuple(r.tolist()) for r in full[:2]}) == 2  # the two samples of a prompt differ
    tokenizer = AutoTokenizer.from_pretrained(dirs[family])
    stops = {*FAMILIES[family].stop, FAMILIES[family].eos}
    for row, reason in zip(full, out.columns["finish_reason"], strict=True):
        assert (reason == "eos") == (tokenizer.decode(row[-1:].tolist()) in stops), reason
    scored = score(trainer, model, full)
    for row in range(len(full)):
        n = prompt[row].numel()
        assert full[row].numel() > n
        torch.testing.assert_close(scored[row][n:], generated[row][n:], atol=1e-4, rtol=0)
    # Every sequence spans several sliding windows; in the windowed families the window is applied by the
    # worker (its scores are the windowed model's) and changes the log-probs past the first window.
    assert min(r.numel() for r in full) > 3 * SLIDING_WINDOW
    reference = AutoModelForCausalLM.from_pretrained(dirs[family]).eval()
    windowed = [teacher_forced(reference, r) for r in full]
    assert max_diff(windowed, scored) < 1e-4
    if family in ("mistral", "gemma2"):
        config = AutoConfig.from_pretrained(dirs[family])
        config.sliding_window = 4096
        wide = AutoModelForCausalLM.from_config(config).eval()
        wide.load_state_dict(reference.state_dict())
        unwindowed = [teacher_forced(wide, r) for r in full]
        first = SLIDING_WINDOW + 1  # up to here no token has more than the window to look back on
        assert max_diff([u[:first] for u in unwindowed], [s[:first] for s in scored]) < 1e-4
        assert max_diff(unwindowed, scored) > 1e-3


@pytest.mark.parametrize("family", NAMES)
def test_train_step_weight_sync_and_checkpoint(
    family: str, dirs: dict[str, Path], workers: Any, tmp_path: Path
) -> None:
    trainer, generator = workers
    policy, gen = f"policy-{family}", f"gen-{family}"
    rendered = render(trainer, policy, CHATS)
    columns: Any = rendered.columns
    batch = TensorBatch(
        rendered.batch_size,
        {"tokens": {"full": columns["tokens"]["full"]}, "masks": dict(columns["masks"])},
    )
    sequences = rows_of(columns["tokens"]["full"])
    create = {"model": policy, "loss": {"type": "sft"}, "optimizer": {"type": "adam", "lr": 1e-2}}
    ok(trainer.call("trainer_create", {**create, "replace": True}, timeout=60)[0])
    before = weights(trainer, policy)
    result = ok(call(trainer, "train_step", {"model": policy}, batch))
    assert math.isfinite(result["metrics"]["loss"])
    after = weights(trainer, policy)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any("embed" in k for k in changed) and any("layers.1." in k for k in changed), changed

    # weight sync into the generator worker's copy
    trained = score(trainer, policy, sequences)
    assert max_diff(score(generator, gen, sequences), trained) > 1e-4
    sent, received = transfer(trainer, generator, policy, gen)
    assert sent["policyVersion"] == received["policyVersion"]
    assert max_diff(score(generator, gen, sequences), trained) < 1e-5

    # checkpoint: a loadable model with the saved weights, and a resume back to them
    directory = tmp_path / "ckpt"
    ok(trainer.call("save_checkpoint", {"model": policy, "dir": str(directory)}, timeout=60)[0])
    ok(load(generator, f"ckpt-{family}", directory, replace=True))
    assert max_diff(score(generator, f"ckpt-{family}", sequences), trained) < 1e-6
    assert AutoTokenizer.from_pretrained(directory).chat_template == template(family)
    ok(call(trainer, "train_step", {"model": policy}, batch))
    assert max_diff(score(trainer, policy, sequences), trained) > 1e-4
    ok(trainer.call("load_checkpoint", {"model": policy, "dir": str(directory)}, timeout=60)[0])
    assert max_diff(score(trainer, policy, sequences), trained) < 1e-6
    ok(generator.call("unload_model", {"name": f"ckpt-{family}"})[0])


# ---- the builder ---------------------------------------------------------------------------------------


#: git blob ids of the fixtures as copied (test/fixtures/chat_templates/README.md): they stay verbatim.
BLOBS = {
    "qwen2": "bdf7919a96cfe43d50914a007b9c0877bd0ec27e",
    "qwen3": "699ff8df401fe4788525e9c1f9b86a99eadd6230",
    "llama3": "33089ace1be88f22a10fe861ad49718d5d886090",
    "mistral": "9c21a3f13ebf55994c64c93c9ae5361580570651",
    "gemma2": "923ec253c8dbefbb41cf084db7251df41d000f6d",
    "phi3": "d1533d1526b2e42fccd99477a7274dc20b7a189b",
}


def test_the_template_fixtures_are_verbatim() -> None:
    for family, blob in BLOBS.items():
        data = (TEMPLATES / f"{family}.jinja").read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, family
        assert "{% generation" not in data.decode() and "{%- generation" not in data.decode()


def test_the_default_family_is_the_original_tiny_model(tiny_dir: Path, tmp_path: Path) -> None:
    same = make_tiny_model(tmp_path / "qwen2", family="qwen2")
    for name in WRITTEN_FILES:
        assert (same / name).read_bytes() == (tiny_dir / name).read_bytes(), name


def test_the_command_line_takes_a_family_and_a_template(tmp_path: Path, capsys: Any) -> None:
    args = [str(tmp_path / "m"), "--family", "llama3", "--chat-template", str(TEMPLATES / "llama3.jinja")]
    assert main([*args, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["vocabSize"] == 263
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model_type"] == "llama"
    assert (tmp_path / "m" / "chat_template.jinja").read_text("utf-8") == template("llama3")
    # without a template, a family other than qwen2 gets none (and a reused directory loses its old one)
    assert main([str(tmp_path / "m"), "--family", "llama3"]) == 0
    assert not (tmp_path / "m" / "chat_template.jinja").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"family": "gpt2"},
            "family: expected one of qwen2, qwen3, llama3, mistral, gemma2, phi3, got 'gpt2'",
        ),
        (
            {"family": "phi3", "head_dim": 16},
            "head_dim: family 'phi3' takes hidden_size/num_heads = 32, got 16",
        ),
        ({"family": "qwen3", "head_dim": 15}, "head_dim: expected a positive even int, got 15"),
        ({"family": "llama3", "chat_template": " "}, "chat_template: expected the template's text"),
    ],
)
def test_bad_builder_arguments_name_the_argument(
    kwargs: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make_tiny_model(tmp_path / "m", **kwargs)
    assert not (tmp_path / "m").exists()  # refused before anything is written
