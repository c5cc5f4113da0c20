"""The tiny model builder (posttrain_worker.models.tiny): a random Qwen2-style model with a character-level
tokenizer and a ChatML template with {% generation %} assistant turns, written offline and loaded back
through the ordinary ``Auto*.from_pretrained`` entry points with the Hub switched off."""

from __future__ import annotations

import os

# Before transformers / huggingface_hub are imported (they read it at import): loading must never reach out.
os.environ["HF_HUB_OFFLINE"] = "1"

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from posttrain_worker.models import DEFAULT_CHARS, SPECIAL_TOKENS, make_tiny_model
from posttrain_worker.models.tiny import WRITTEN_FILES
from transformers import AutoModelForCausalLM, AutoTokenizer

ASSISTANT_HEADER = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tok(tiny_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def model(tiny_dir: Path) -> Any:
    m = AutoModelForCausalLM.from_pretrained(tiny_dir)
    m.eval()
    return m


def ids_of(tok: Any, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


# ----------------------------------------------------------------------------------------------------------
# files, sizes, speed, determinism


def test_writes_the_expected_files_small(tiny_dir: Path) -> None:
    assert tiny_dir.is_absolute() and tiny_dir.is_dir()
    assert sorted(p.name for p in tiny_dir.iterdir()) == sorted(WRITTEN_FILES)
    total = sum(p.stat().st_size for p in tiny_dir.iterdir())
    assert 100_000 < total < 2_500_000
    config = json.loads((tiny_dir / "config.json").read_text("utf-8"))
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["model_type"] == "qwen2"
    assert config["vocab_size"] == 256 + len(SPECIAL_TOKENS) == 259
    assert (config["hidden_size"], config["num_hidden_layers"]) == (64, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    # The weights file is readable like its neighbours (safetensors itself writes it 0600).
    modes = {p.name: p.stat().st_mode & 0o777 for p in tiny_dir.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"]


def test_build_is_fast(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    make_tiny_model(tmp_path / "m")
    assert time.perf_counter() - t0 < 5.0


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path) -> None:
    rng_before = torch.get_rng_state()
    a = make_tiny_model(tmp_path / "a", seed=7)
    b = make_tiny_model(tmp_path / "b", seed=7)
    c = make_tiny_model(tmp_path / "c", seed=8)
    # The caller's global RNG stream is left alone.
    assert torch.equal(torch.get_rng_state(), rng_before)
    weights = "model.safetensors"
    assert (a / weights).read_bytes() == (b / weights).read_bytes()
    assert (a / weights).read_bytes() != (c / weights).read_bytes()
    for name in WRITTEN_FILES:
        if name != weights:
            assert (a / name).read_bytes() == (c / name).read_bytes(), name
    ma = AutoModelForCausalLM.from_pretrained(a).state_dict()
    mc = AutoModelForCausalLM.from_pretrained(c).state_dict()
    emb = "model.embed_tokens.weight"
    assert not torch.equal(ma[emb], mc[emb])
    # Norms and biases are fixed (ones / zeros), not random.
    assert torch.equal(ma["model.norm.weight"], torch.ones(64))
    assert torch.equal(ma["model.layers.0.self_attn.q_proj.bias"], torch.zeros(64))


def test_rebuild_into_existing_directory(tmp_path: Path) -> None:
    out = tmp_path / "m"
    first = (make_tiny_model(out, seed=1) / "model.safetensors").read_bytes()
    (out / "notes.txt").write_text("kept", "utf-8")
    second = (make_tiny_model(str(out), seed=2) / "model.safetensors").read_bytes()
    assert first != second
    assert (out / "notes.txt").read_text("utf-8") == "kept"


def test_custom_sizes(tmp_path: Path) -> None:
    out = make_tiny_model(
        tmp_path / "m",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=48,
        max_position_embeddings=128,
    )
    m = AutoModelForCausalLM.from_pretrained(out)
    cfg = m.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (32, 1, 2)
    assert (cfg.num_key_value_heads, cfg.intermediate_size, cfg.max_position_embeddings) == (1, 48, 128)
    t = AutoTokenizer.from_pretrained(out)
    assert t.model_max_length == 128
    logits = m(torch.tensor([ids_of(t, "hi there")])).logits
    assert logits.shape == (1, 8, len(t)) == (1, 8, 259)


# ----------------------------------------------------------------------------------------------------------
# tokenizer


def test_every_printable_char_is_one_token_and_round_trips(tok: Any) -> None:
    assert len(tok) == 259
    assert ids_of(tok, DEFAULT_CHARS) == list(range(len(DEFAULT_CHARS)))
    text = DEFAULT_CHARS + "  Hello , world . don't  stop\n\tx = {'a': [1, 2]} ; ~  \n\n"
    text += DEFAULT_CHARS[::-1]
    ids = ids_of(tok, text)
    assert len(ids) == len(text)
    assert ids == [DEFAULT_CHARS.index(c) for c in text]
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.batch_decode([ids[:5], ids[5:]]) == [text[:5], text[5:]]
    # Byte-level token strings, as in GPT-2 / Qwen.
    assert tok.convert_ids_to_tokens(ids_of(tok, "a b\n\t")) == ["a", "\u0120", "b", "\u010a", "\u0109"]


def test_special_tokens_are_single_ids(tok: Any) -> None:
    expected = {"<|endoftext|>": 256, "<|im_start|>": 257, "<|im_end|>": 258}
    assert tuple(expected) == SPECIAL_TOKENS
    for token, token_id in expected.items():
        assert tok.convert_tokens_to_ids(token) == token_id
        assert ids_of(tok, token) == [token_id]
        assert tok.decode([token_id]) == token
    assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 256)
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 258)
    assert tok.bos_token is None and tok.unk_token is None
    assert set(SPECIAL_TOKENS) <= set(tok.all_special_tokens)
    assert set(tok.all_special_ids) == set(expected.values())
    ids = ids_of(tok, "<|im_start|>user\nhi<|im_end|>")
    assert ids == [257, *ids_of(tok, "user\nhi"), 258]
    assert tok.decode(ids, skip_special_tokens=True) == "user\nhi"
    # No BOS/EOS is added around plain text.
    assert tok("ab")["input_ids"] == ids_of(tok, "ab")


def test_other_chars_fall_back_to_utf8_bytes(tok: Any) -> None:
    # Not in the vocab: one token per UTF-8 byte, never an unk, and decode restores the text.
    for text, n_bytes in [("é", 2), ("€", 3), ("😀", 4), ("\r", 1), ("\x00", 1)]:
        ids = ids_of(tok, text)
        assert len(ids) == n_bytes, text
        assert all(i < 256 for i in ids)
        assert tok.decode(ids) == text
    text = "naïve café \u2013 3€ 😀\r\n"
    assert tok.decode(ids_of(tok, text)) == text


def test_file_and_auto_tokenizer_agree(tiny_dir: Path, tok: Any) -> None:
    """transformers 5 rebuilds Qwen2Tokenizer's pipeline around tokenizer.json's vocab; both must agree."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    text = DEFAULT_CHARS + " x  y\n\n z <|im_start|>assistant\nok<|im_end|>\n café 😀 it's  "
    assert raw.encode(text, add_special_tokens=False).ids == ids_of(tok, text)
    assert raw.get_vocab_size() == len(tok)


def test_custom_vocab_with_non_ascii_chars(tmp_path: Path) -> None:
    chars = DEFAULT_CHARS + "éß€😀"
    out = make_tiny_model(tmp_path / "m", vocab=chars)
    t = AutoTokenizer.from_pretrained(out)
    # 101 chars, the 159 other bytes, merge prefixes (1 for €, 2 for 😀), 3 specials
    assert len(t) == 101 + 159 + 3 + 3
    assert ids_of(t, chars) == list(range(len(chars)))
    text = "é€😀ßé a€€😀😀"
    assert ids_of(t, text) == [chars.index(c) for c in text]
    assert t.decode(ids_of(t, text)) == text
    assert t.eos_token_id == len(t) - 1
    m = AutoModelForCausalLM.from_pretrained(out)
    assert m.config.vocab_size == len(t)


def test_vocab_size_pads_with_fillers_before_the_specials(tmp_path: Path, tiny_dir: Path, tok: Any) -> None:
    # A real vocabulary's size (the benchmarks use 32000): the embedding and LM head grow, the characters
    # keep their ids and tokenization, the specials move to the last three ids.
    out = make_tiny_model(tmp_path / "m", vocab_size=1000)
    t = AutoTokenizer.from_pretrained(out)
    assert len(t) == 1000
    assert (t.pad_token_id, t.convert_tokens_to_ids("<|im_start|>"), t.eos_token_id) == (997, 998, 999)
    text = "The cat sat.\n\tx = 2 + é€"
    assert ids_of(t, text) == ids_of(tok, text)
    # A filler written literally is text, one token per character; only a model can produce the filler id.
    assert ids_of(t, "<filler_5>") == ids_of(tok, "<filler_5>")
    assert t.convert_tokens_to_ids("<filler_0>") == 259 - len(SPECIAL_TOKENS)
    assert t.decode([259, 996, 999]) == "<filler_3><filler_740><|im_end|>"
    config = json.loads((out / "config.json").read_text("utf-8"))
    assert config["vocab_size"] == 1000
    generation = json.loads((out / "generation_config.json").read_text("utf-8"))
    assert generation["eos_token_id"] == [999, 997]
    m = AutoModelForCausalLM.from_pretrained(out)
    assert m.lm_head.weight.shape == m.model.embed_tokens.weight.shape == (1000, 64)
    assert m(torch.tensor([ids_of(t, "hi")])).logits.shape == (1, 2, 1000)
    default_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_dir).parameters())
    assert sum(p.numel() for p in m.parameters()) == default_params + (1000 - 259) * 64
    # The tokenizer's own size asked for explicitly: no filler, the default files byte for byte.
    same = make_tiny_model(tmp_path / "same", vocab_size=259)
    for name in WRITTEN_FILES:
        assert (same / name).read_bytes() == (tiny_dir / name).read_bytes(), name


# ----------------------------------------------------------------------------------------------------------
# chat template and assistant masks


def expected_chat(tok: Any, pieces: list[tuple[str, int]]) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    mask: list[int] = []
    for text, m in pieces:
        piece = ids_of(tok, text)
        ids += piece
        mask += [m] * len(piece)
    return ids, mask


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "3+3?"}]},
    {"role": "assistant", "content": "It is\n6."},
]


def test_chat_template_renders_chatml(tok: Any) -> None:
    text = tok.apply_chat_template(CONVERSATION, tokenize=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\nIt is\n6.<|im_end|>\n"
    )


def test_assistant_mask_covers_content_and_im_end_exactly(tok: Any) -> None:
    out = tok.apply_chat_template(
        CONVERSATION, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = expected_chat(
        tok,
        [
            ("<|im_start|>system\nBe brief.<|im_end|>\n", 0),
            ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n", 0),
            (ASSISTANT_HEADER, 0),
            ("4<|im_end|>", 1),
            ("\n", 0),
            ("<|im_start|>user\nAnd 3+3?<|im_end|>\n", 0),
            (ASSISTANT_HEADER, 0),
            ("It is\n6.<|im_end|>", 1),
            ("\n", 0),
        ],
    )
    assert list(out["input_ids"]) == ids
    assert list(out["assistant_masks"]) == mask
    assert len(out["attention_mask"]) == len(ids)
    masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tok.decode(masked) == "4<|im_end|>It is\n6.<|im_end|>"


def test_assistant_mask_with_empty_and_none_content(tok: Any) -> None:
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": None},
        {"role": "assistant", "content": None},
    ]
    out = tok.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = expected_chat(
        tok,
        [
            ("<|im_start|>user\nx<|im_end|>\n", 0),
            (ASSISTANT_HEADER, 0),
            ("<|im_end|>", 1),
            ("\n", 0),
            ("<|im_start|>user\n<|im_end|>\n", 0),
            (ASSISTANT_HEADER, 0),
            ("<|im_end|>", 1),
            ("\n", 0),
        ],
    )
    assert list(out["input_ids"]) == ids
    assert list(out["assistant_masks"]) == mask


def test_generation_prompt(tok: Any) -> None:
    prompt = CONVERSATION[:2]
    text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_end|>\n" + ASSISTANT_HEADER)
    without = tok.apply_chat_template(prompt, tokenize=False)
    assert text == without + ASSISTANT_HEADER
    out = tok.apply_chat_template(
        prompt,
        tokenize=True,
        return_dict=True,
        add_generation_prompt=True,
        return_assistant_tokens_mask=True,
    )
    header = ids_of(tok, ASSISTANT_HEADER)
    assert list(out["input_ids"]) == ids_of(tok, text)
    assert list(out["input_ids"][-len(header) :]) == header
    assert not any(out["assistant_masks"])


# ----------------------------------------------------------------------------------------------------------
# model


def test_forward_logits_shape(model: Any, tok: Any) -> None:
    text = tok.apply_chat_template(CONVERSATION, tokenize=False)
    ids = torch.tensor([ids_of(tok, text)])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    assert model.config.vocab_size == len(tok)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    n_params = sum(p.numel() for p in model.parameters())
    assert 50_000 < n_params < 500_000


def test_generate_is_deterministic_with_a_seed(model: Any, tok: Any) -> None:
    assert list(model.generation_config.eos_token_id) == [258, 256]
    assert model.generation_config.pad_token_id == 256
    prompt = tok.apply_chat_template(
        CONVERSATION[:2], tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="pt"
    )

    def sample(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        with torch.no_grad():
            return model.generate(**prompt, do_sample=True, max_new_tokens=24, top_k=0, top_p=1.0)

    first, again, other = sample(3), sample(3), sample(4)
    n_prompt = prompt["input_ids"].shape[1]
    assert torch.equal(first, again)
    assert not torch.equal(first[:, n_prompt:], other[:, n_prompt:])
    assert torch.equal(first[:, :n_prompt], prompt["input_ids"])
    with torch.no_grad():
        greedy = model.generate(**prompt, do_sample=False, max_new_tokens=8)
        assert torch.equal(greedy, model.generate(**prompt, do_sample=False, max_new_tokens=8))


# ----------------------------------------------------------------------------------------------------------
# argument checking


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_heads": 3}, "num_heads"),
        ({"num_heads": 4, "num_kv_heads": 3}, "num_kv_heads"),
        ({"hidden_size": 24, "num_heads": 8}, "num_heads"),  # head size 3: odd, no RoPE
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_layers": -1}, "num_layers"),
        ({"intermediate_size": 1.5}, "intermediate_size"),
        ({"max_position_embeddings": True}, "max_position_embeddings"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"vocab": ""}, "vocab"),
        ({"vocab": DEFAULT_CHARS + "a"}, "vocab"),
        ({"vocab": DEFAULT_CHARS + "\u212b"}, "vocab"),  # ANGSTROM SIGN: NFC turns it into U+00C5
        ({"vocab": DEFAULT_CHARS + "\ud800"}, "vocab"),  # lone surrogate: no UTF-8
        ({"vocab": 42}, "vocab"),
        ({"vocab": ["ab", *DEFAULT_CHARS]}, "vocab"),
        ({"vocab_size": 258}, "vocab_size"),  # below the 259 tokens the tokenizer needs
        ({"vocab_size": 0}, "vocab_size"),
        ({"vocab_size": 3.2e4}, "vocab_size"),
        ({"vocab_size": True}, "vocab_size"),
    ],
)
def test_bad_arguments_name_the_field(tmp_path: Path, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        make_tiny_model(tmp_path / "m", **kwargs)
    assert not (tmp_path / "m").exists()


def test_out_dir_that_is_a_file(tmp_path: Path) -> None:
    existing = tmp_path / "file"
    existing.write_text("x", "utf-8")
    with pytest.raises(ValueError, match=r"^out_dir: .*not a directory"):
        make_tiny_model(existing)
    with pytest.raises(ValueError, match=r"^out_dir: "):
        make_tiny_model(existing / "below")
    assert existing.read_text("utf-8") == "x"


# ----------------------------------------------------------------------------------------------------------
# command line


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    # A fresh interpreter with the Hub off and an empty HF cache: the build and the load need neither.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "posttrain_worker.models.tiny", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_cli_builds_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    proc = run_cli(str(out), "--seed", "5", "--json", home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["path"] == str(out.resolve())
    assert info["vocabSize"] == 259
    assert info["bytes"] == sum(p.stat().st_size for p in out.iterdir())
    n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(out).parameters())
    assert info["parameters"] == n_params
    assert "Writing model shards" not in proc.stderr
    same = make_tiny_model(tmp_path / "api", seed=5)
    assert (same / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()

    text = run_cli(str(tmp_path / "cli2"), "--vocab-size", "300", home=tmp_path / "hf")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == str((tmp_path / "cli2").resolve())
    # 41 filler rows of width 64 in the tied embedding.
    assert f"{n_params + 41 * 64} parameters, vocab 300," in lines[1]


def test_cli_help_and_errors(tmp_path: Path) -> None:
    helped = run_cli("--help", home=tmp_path / "hf")
    assert helped.returncode == 0
    assert "--hidden-size" in helped.stdout and "--seed" in helped.stdout and "--vocab-size" in helped.stdout
    bad = run_cli(str(tmp_path / "m"), "--num-heads", "3", home=tmp_path / "hf")
    assert bad.returncode == 2
    assert "num_heads" in bad.stderr
    assert not (tmp_path / "m").exists()


def test_models_package_exports() -> None:
    import posttrain_worker.models as models

    assert models.make_tiny_model is make_tiny_model
    with pytest.raises(AttributeError):
        _ = models.not_there
