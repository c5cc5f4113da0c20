"""A random, tiny Qwen2-style causal LM with a character-level tokenizer, built offline in a blink.

``make_tiny_model(out_dir)`` writes a directory that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load like any Hub checkpoint:

- ``config.json``, ``generation_config.json``, ``model.safetensors``: a ``Qwen2ForCausalLM`` (float32, tied
  input/output embeddings) whose weights are drawn from a ``torch.Generator`` seeded with ``seed``, so the
  same arguments give a byte-identical ``model.safetensors`` (with one torch/transformers/safetensors
  install) and the caller's global RNG state is left untouched. Linear and embedding weights are
  ``N(0, 0.02)``, biases zero, RMSNorm weights one (the transformers defaults, but drawn by us, so the result
  does not depend on how a transformers release initialises modules).
- ``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``: a character-level tokenizer built
  with the ``tokenizers`` library and saved with ``PreTrainedTokenizerFast.save_pretrained``. It is a
  byte-level BPE in exactly Qwen2's pipeline (NFC, Qwen2's split regex, ``ByteLevel``) with no merges
  between ASCII bytes, so every ASCII character is one token. Qwen2's own layout is required, not just
  convenient: for a ``model_type: qwen2`` directory transformers 5's ``AutoTokenizer`` always builds
  ``Qwen2Tokenizer``, which reads only the vocabulary and merges from tokenizer.json and puts its own
  normalizer/pre-tokenizer/decoder around them (a ``WordLevel`` character tokenizer would silently lose
  every space and newline).

Token ids: the characters of ``vocab`` come first, one token each, in their given order
(``DEFAULT_CHARS`` = ``\\t``, ``\\n``, then printable ASCII 32..126: ids 0..96); then every byte not yet
covered (ids 97..255 by default); then ``SPECIAL_TOKENS`` in order: ``<|endoftext|>`` (pad, 256),
``<|im_start|>`` (257), ``<|im_end|>`` (eos, 258). With the default vocab that is 259 tokens, and
``config.vocab_size == len(tokenizer)``, so logits are ``[B, T, 259]``. There is no unk token. Token
*strings* are byte-level symbols as in GPT-2/Qwen: ``" "`` is ``"Ġ"``, ``"\\n"`` is ``"Ċ"``, ``"\\t"`` is
``"ĉ"``; ``decode`` maps them back.

Characters outside ``vocab`` are handled explicitly by byte fallback: such a character (``é``, ``€``, emoji,
control characters such as ``\\r``) becomes one token per UTF-8 byte (ASCII ones are always single tokens), so
every NFC-normalised string round-trips through ``encode``/``decode`` and nothing maps to an unk. A
non-ASCII character listed in ``vocab`` is one token, through BPE merges of its UTF-8 bytes. Special tokens
written literally in text (``"<|im_end|>"``) are matched as single special ids, as in Qwen.

Chat template: ChatML as Qwen uses it, ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, no
default system prompt, and ``add_generation_prompt`` appending ``<|im_start|>assistant\\n``. For assistant
messages the content *and its closing* ``<|im_end|>`` sit inside ``{% generation %}...{% endgeneration %}``,
so ``apply_chat_template(..., return_dict=True, return_assistant_tokens_mask=True)`` returns
``assistant_masks`` that are 1 exactly on the tokens the policy must learn to produce (its words and its stop
token) and 0 on the ``<|im_start|>assistant\\n`` header and the ``\\n`` after ``<|im_end|>``. ``content``
may be a string, None, or a list of ``{"type": "text", "text": ...}`` parts (their texts are concatenated;
other parts dropped).

Command line: ``python -m posttrain_worker.models.tiny DIR [--seed N] [--hidden-size H] ...`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["DEFAULT_CHARS", "SPECIAL_TOKENS", "TINY_CHAT_TEMPLATE", "make_tiny_model"]

#: Every printable ASCII character (space through ``~``) plus tab and newline; one token each.
DEFAULT_CHARS: str = "\t\n" + "".join(chr(c) for c in range(32, 127))

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
#: The special tokens, in id order at the end of the vocabulary.
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)

#: Qwen2's pre-tokenizer split (transformers' ``PRETOKENIZE_REGEX``); without merges between ASCII bytes it
#: never changes which tokens come out, but keeping it makes tokenizer.json match Qwen2Tokenizer exactly.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)

# Every character of output comes from a {{ '...' }} expression and every tag strips the layout whitespace
# around it ("-"): transformers renders chat templates with trim_blocks=True, which would silently eat a
# literal newline written right after a block tag such as {% endgeneration %}.
TINY_CHAT_TEMPLATE: str = """\
{%- for message in messages %}
    {%- if message['content'] is string %}
        {%- set content = message['content'] %}
    {%- elif message['content'] is none %}
        {%- set content = '' %}
    {%- else %}
        {%- set content = message['content'] | selectattr('type', 'equalto', 'text')
            | map(attribute='text') | join('') %}
    {%- endif %}
    {%- if message['role'] == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
            {{- content + '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

#: The files ``make_tiny_model`` writes into its directory.
WRITTEN_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)

_INIT_STD = 0.02
_ROPE_THETA = 10000.0
_SIZE_FIELDS = (
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "intermediate_size",
    "max_position_embeddings",
)


def make_tiny_model(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 512,
    seed: int = 0,
    vocab: str = DEFAULT_CHARS,
) -> Path:
    """Write a random tiny ``Qwen2ForCausalLM`` + character-level tokenizer into ``out_dir``; return its path.

    ``out_dir`` is created (with parents) if missing; an existing directory is reused and the files this
    function writes are overwritten (other files in it are left alone). Raises ``ValueError`` naming the
    offending argument when ``out_dir`` is an existing non-directory, a size is not a positive int,
    ``hidden_size`` is not divisible by ``num_heads``, ``num_heads`` not by ``num_kv_heads``, the head size
    is odd (RoPE needs it even), ``seed`` is outside ``[0, 2**64)``, or ``vocab`` is empty, repeats a
    character, holds something other than single characters, or holds a character that is not NFC-stable or
    has no UTF-8 encoding.

    ``vocab`` lists the characters that get the first ids, one token each; every other character is still
    encodable, as one token per UTF-8 byte (every ASCII character is therefore always a single token).
    """
    path, _, _ = _build(
        out_dir,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        seed=seed,
        vocab=vocab,
    )
    return path


# ----------------------------------------------------------------------------------------------------------
# validation


def _check_args(out_dir: str | Path, sizes: dict[str, Any], seed: Any, vocab: Any) -> tuple[Path, str]:
    if not isinstance(out_dir, (str, Path)) or str(out_dir) == "":
        raise ValueError(f"out_dir: expected a non-empty path, got {out_dir!r}")
    path = Path(out_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"out_dir: {str(path)!r} exists and is not a directory")
    for name in _SIZE_FIELDS:
        value = sizes[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if sizes["hidden_size"] % sizes["num_heads"] != 0:
        raise ValueError(
            f"num_heads: hidden_size={sizes['hidden_size']} is not divisible by "
            f"num_heads={sizes['num_heads']}"
        )
    if sizes["num_heads"] % sizes["num_kv_heads"] != 0:
        raise ValueError(
            f"num_kv_heads: num_heads={sizes['num_heads']} is not divisible by "
            f"num_kv_heads={sizes['num_kv_heads']}"
        )
    head_dim = sizes["hidden_size"] // sizes["num_heads"]
    if head_dim % 2 != 0:
        raise ValueError(
            f"num_heads: head size hidden_size/num_heads = {head_dim} must be even (rotary embeddings)"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected an int in [0, 2**64), got {seed!r}")
    if isinstance(vocab, str):
        chars = list(vocab)
    elif isinstance(vocab, Sequence) and all(isinstance(c, str) for c in vocab):
        chars = list(vocab)
    else:
        raise ValueError(f"vocab: expected a string of characters, got {type(vocab).__name__}")
    if not chars:
        raise ValueError("vocab: must not be empty")
    bad = [c for c in chars if len(c) != 1]
    if bad:
        raise ValueError(f"vocab: every entry must be one character, got {bad[0]!r}")
    if len(set(chars)) != len(chars):
        dup = next(c for i, c in enumerate(chars) if c in chars[:i])
        raise ValueError(f"vocab: character {dup!r} appears more than once")
    for c in chars:
        try:
            c.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"vocab: character {c!r} has no UTF-8 encoding ({exc.reason})") from exc
        if unicodedata.normalize("NFC", c) != c:
            raise ValueError(f"vocab: character {c!r} is not in NFC form, which the tokenizer applies first")
    return path, "".join(chars)


# ----------------------------------------------------------------------------------------------------------
# tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-character table used by the ``ByteLevel`` pre-tokenizer and decoder."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _bpe_vocab(chars: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges: ``chars`` first (one token each), then every other byte, then merge prefixes."""
    byte_sym = _bytes_to_unicode()
    vocab: dict[str, int] = {}
    merges: list[tuple[str, str]] = []
    prefixes: list[str] = []
    for c in chars:
        syms = [byte_sym[b] for b in c.encode("utf-8")]
        vocab["".join(syms)] = len(vocab)
        # A multi-byte character becomes one token through left-to-right merges of its UTF-8 bytes. UTF-8 is
        # prefix-free (a lead byte never follows inside a character), so no merge can straddle two characters.
        acc = syms[0]
        for i, sym in enumerate(syms[1:], start=1):
            merges.append((acc, sym))
            acc += sym
            if i < len(syms) - 1:
                prefixes.append(acc)
    for b in range(256):
        vocab.setdefault(byte_sym[b], len(vocab))
    for prefix in prefixes:
        vocab.setdefault(prefix, len(vocab))
    for tok in SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
    return vocab, merges


def _build_tokenizer(chars: str, model_max_length: int) -> Any:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from transformers import PreTrainedTokenizerFast

    vocab, merges = _bpe_vocab(chars)
    backend = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    # Exactly the pipeline transformers 5's Qwen2Tokenizer rebuilds around the vocab and merges it reads from
    # tokenizer.json (it ignores the file's normalizer / pre-tokenizer / decoder for model_type "qwen2"), so
    # the file and AutoTokenizer tokenize identically.
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    # Untrimmed offsets: a lone space token keeps its character span, which assistant masks rely on.
    backend.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        additional_special_tokens=[IM_START],
        chat_template=TINY_CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def _patch_tokenizer_config(path: Path) -> None:
    """Write tokenizer_config.json the way Qwen2 checkpoints have it, loadable by transformers 4.x and 5.x.

    transformers 5 saves ``"tokenizer_class": "TokenizersBackend"`` (unknown to 4.x) and a list under
    ``extra_special_tokens`` (4.x expects a dict there). ``Qwen2Tokenizer`` is what Qwen2 checkpoints declare
    (4.x then loads ``Qwen2TokenizerFast`` straight from tokenizer.json; 5.x picks ``Qwen2Tokenizer`` for
    model_type "qwen2" whatever is declared), and both read ``additional_special_tokens``. ``unk_token`` is
    null as in Qwen2 (5.x's ``Qwen2Tokenizer`` would otherwise default it to ``<|endoftext|>``).
    """
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text("utf-8"))
    cfg.pop("backend", None)
    cfg.pop("extra_special_tokens", None)
    cfg.update(
        {
            "tokenizer_class": "Qwen2Tokenizer",
            "additional_special_tokens": [IM_START],
            "bos_token": None,
            "unk_token": None,
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,
            "errors": "replace",
        }
    )
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")


def _fix_modes(path: Path) -> None:
    """Give ``model.safetensors`` the mode the other files got from the umask.

    safetensors (0.8) writes through a private temporary file, so the weights land as 0600 while
    ``config.json`` is 0644 under the usual umask; a model directory shared with other users or containers
    should not be half-readable.
    """
    mode = (path / "config.json").stat().st_mode & 0o777
    weights = path / "model.safetensors"
    if weights.is_file():
        weights.chmod(mode)


# ----------------------------------------------------------------------------------------------------------
# model


@torch.no_grad()
def _init_weights(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    for name, param in model.named_parameters():  # tied lm_head is the embedding: listed once
        if param.dim() == 1:
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.zero_()
        else:
            param.copy_(torch.empty(param.shape, dtype=torch.float32).normal_(0.0, _INIT_STD, generator=gen))


def _build(
    out_dir: str | Path,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
    seed: int,
    vocab: str,
) -> tuple[Path, int, int]:
    sizes = {
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
    }
    path, chars = _check_args(out_dir, sizes, seed, vocab)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ValueError(f"out_dir: cannot create {str(path)!r}: {exc}") from exc

    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    tokenizer = _build_tokenizer(chars, max_position_embeddings)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        hidden_act="silu",
        max_position_embeddings=max_position_embeddings,
        initializer_range=_INIT_STD,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": _ROPE_THETA},
        use_sliding_window=False,
        attention_dropout=0.0,
        pad_token_id=pad_id,
        bos_token_id=None,
        eos_token_id=eos_id,
        dtype="float32",
        architectures=["Qwen2ForCausalLM"],
    )
    # Module construction draws from the global RNG; keep the caller's stream untouched.
    with torch.random.fork_rng(devices=[]):
        model = Qwen2ForCausalLM(config)
    model = model.to(torch.float32)
    _init_weights(model, seed)
    model.eval()
    # Stop on <|im_end|> (end of an assistant turn) or <|endoftext|>, as Qwen instruct checkpoints do.
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, pad_id],
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    progress_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # save_pretrained draws a "Writing model shards" bar on stderr
    try:
        model.save_pretrained(path)
    finally:
        if progress_was_on:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(path)
    _patch_tokenizer_config(path)
    _fix_modes(path)
    n_params = sum(p.numel() for p in model.parameters())
    return path.resolve(), n_params, config.vocab_size


# ----------------------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posttrain_worker.models.tiny",
        description=(
            "Write a random tiny Qwen2-style causal LM (safetensors + config) with a character-level "
            "tokenizer and a ChatML chat template whose assistant turns are wrapped in {% generation %}, "
            "into DIR. "
            "Offline and deterministic given --seed. Prints the directory and the parameter count."
        ),
    )
    parser.add_argument("out_dir", metavar="DIR", help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--hidden-size", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--num-layers", type=int, default=2, help="decoder layers (default 2)")
    parser.add_argument("--num-heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--num-kv-heads", type=int, default=2, help="key/value heads, GQA (default 2)")
    parser.add_argument("--intermediate-size", type=int, default=128, help="MLP width (default 128)")
    parser.add_argument(
        "--max-position-embeddings", type=int, default=512, help="context length (default 512)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=(
            'print one JSON object {"path", "parameters", "vocabSize", "bytes", "seconds"} instead of text '
            "(seconds: wall time of the build, importing transformers included)"
        ),
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        path, n_params, vocab_size = _build(
            ns.out_dir,
            hidden_size=ns.hidden_size,
            num_layers=ns.num_layers,
            num_heads=ns.num_heads,
            num_kv_heads=ns.num_kv_heads,
            intermediate_size=ns.intermediate_size,
            max_position_embeddings=ns.max_position_embeddings,
            seed=ns.seed,
            vocab=DEFAULT_CHARS,
        )
    except ValueError as exc:
        parser.error(str(exc))
    seconds = time.perf_counter() - t0
    size = sum((path / name).stat().st_size for name in WRITTEN_FILES if (path / name).is_file())
    if ns.json:
        print(
            json.dumps(
                {
                    "path": str(path),
                    "parameters": n_params,
                    "vocabSize": vocab_size,
                    "bytes": size,
                    "seconds": round(seconds, 3),
                }
            )
        )
    else:
        print(str(path))
        print(f"{n_params} parameters, vocab {vocab_size}, {size} bytes, {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
