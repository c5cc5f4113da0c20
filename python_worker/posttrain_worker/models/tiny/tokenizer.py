"""The tiny model's tokenizer: characters first, one token each, in Qwen2's byte-level BPE pipeline, then the
family's special tokens; the default family's ChatML chat template puts assistant turns inside
``{% generation %}`` (the layout and the token ids are described in ``posttrain_worker.models.tiny``)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posttrain_worker.models.tiny.families import DEFAULT_FAMILY, FAMILIES, Family

#: Every printable ASCII character (space through ``~``) plus tab and newline; one token each.
DEFAULT_CHARS: str = "\t\n" + "".join(chr(c) for c in range(32, 127))

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
#: The default (qwen2) family's special tokens, in id order at the end of the vocabulary.
SPECIAL_TOKENS: tuple[str, ...] = FAMILIES[DEFAULT_FAMILY].specials

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


def check_vocab(vocab: Any) -> str:
    """``vocab`` as one string of distinct, NFC-stable characters, or ``ValueError`` naming ``vocab``."""
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
    return "".join(chars)


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


#: How filler token ``i`` is spelled (ASCII only, so its byte-level symbols are the same characters and it
#: decodes to exactly this text). No merge builds it, so ``encode`` never produces one: only a model can.
FILLER_FORMAT = "<filler_{}>"


def natural_vocab_size(chars: str, family: Family = FAMILIES[DEFAULT_FAMILY]) -> int:
    """How many tokens the tokenizer over ``chars`` has without fillers (the smallest allowed vocab size)."""
    vocab, _ = _bpe_vocab(chars, 0, family)
    return len(vocab)


def check_vocab_size(vocab_size: Any, chars: str, family: Family = FAMILIES[DEFAULT_FAMILY]) -> int | None:
    """``vocab_size`` (None: no fillers), or ``ValueError`` naming ``vocab_size``."""
    if vocab_size is None:
        return None
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise ValueError(f"vocab_size: expected a positive int, got {vocab_size!r}")
    least = natural_vocab_size(chars, family)
    if vocab_size < least:
        raise ValueError(
            f"vocab_size: expected at least {least} (the characters, the other bytes and the special "
            f"tokens), got {vocab_size}"
        )
    return vocab_size


def _bpe_vocab(chars: str, n_fillers: int, family: Family) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges: ``chars`` first (one token each), then every other byte, then merge prefixes,
    then ``n_fillers`` filler tokens, then the family's added tokens."""
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
    # Fillers sit before the specials, as a real vocabulary's ordinary tokens do (Qwen2's specials come last).
    for i in range(n_fillers):
        vocab[FILLER_FORMAT.format(i)] = len(vocab)
    for tok in family.tokens:
        vocab[tok.text] = len(vocab)
    return vocab, merges


def build_tokenizer(
    chars: str,
    model_max_length: int,
    vocab_size: int | None = None,
    family: Family = FAMILIES[DEFAULT_FAMILY],
    chat_template: str | None = TINY_CHAT_TEMPLATE,
) -> Any:
    """The tokenizer over ``chars`` with ``family``'s added tokens; with ``vocab_size``, padded with filler
    tokens to exactly that many."""
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

    n_fillers = 0 if vocab_size is None else vocab_size - natural_vocab_size(chars, family)
    vocab, merges = _bpe_vocab(chars, n_fillers, family)
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
    # the file and AutoTokenizer tokenize identically. Other families load the file as it is.
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    # Untrimmed offsets: a lone space token keeps its character span, which assistant masks rely on.
    byte_level = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    if family.bos_in_encode and family.bos is not None:
        # as Llama 3's tokenizer.json: encoding text (with special tokens) puts bos in front
        bos = (family.bos, vocab[family.bos])
        with_bos = processors.TemplateProcessing(
            single=f"{bos[0]}:0 $A:0", pair=f"{bos[0]}:0 $A:0 {bos[0]}:1 $B:1", special_tokens=[bos]
        )
        backend.post_processor = processors.Sequence([byte_level, with_bos])
    else:
        backend.post_processor = byte_level
    backend.add_special_tokens(
        [AddedToken(t.text, special=True, normalized=False) for t in family.tokens if t.special]
    )
    backend.add_tokens(
        [AddedToken(t.text, special=False, normalized=False) for t in family.tokens if not t.special]
    )
    named = {
        "bos_token": family.bos,
        "eos_token": family.eos,
        "pad_token": family.pad,
        "unk_token": family.unk,
    }
    extra = [t for t in family.specials if t not in named.values()]
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        **{k: v for k, v in named.items() if v is not None},
        additional_special_tokens=extra,
        chat_template=chat_template,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def patch_tokenizer_config(path: Path, family: Family = FAMILIES[DEFAULT_FAMILY]) -> None:
    """Write tokenizer_config.json the way the family's checkpoints have it, loadable by transformers 4.x and
    5.x.

    transformers 5 saves ``"tokenizer_class": "TokenizersBackend"`` (unknown to 4.x) and a list under
    ``extra_special_tokens`` (4.x expects a dict there). ``Qwen2Tokenizer`` is what Qwen2 checkpoints declare
    (4.x then loads ``Qwen2TokenizerFast`` straight from tokenizer.json; 5.x picks ``Qwen2Tokenizer`` for
    model_types "qwen2" and "qwen3" whatever is declared), and both read ``additional_special_tokens``.
    ``unk_token`` is null as in Qwen2 (5.x's ``Qwen2Tokenizer`` would otherwise default it to
    ``<|endoftext|>``). The other families declare ``PreTrainedTokenizerFast`` (as Llama 3 does), which both
    4.x and 5.x load from tokenizer.json as it is: 5.x's own classes for their model types
    (``GemmaTokenizer``, ``LlamaTokenizer``) would rebuild a SentencePiece-style pipeline around the
    byte-level vocabulary.
    ``add_bos_token`` is left out on purpose: 5.x would then replace tokenizer.json's post-processor.
    """
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text("utf-8"))
    cfg.pop("backend", None)
    cfg.pop("extra_special_tokens", None)
    cfg.pop("add_bos_token", None)
    cfg.pop("add_eos_token", None)
    named = (family.bos, family.eos, family.pad, family.unk)
    cfg.update(
        {
            "tokenizer_class": family.tokenizer_class,
            "additional_special_tokens": [t for t in family.specials if t not in named],
            "bos_token": family.bos,
            "eos_token": family.eos,
            "pad_token": family.pad,
            "unk_token": family.unk,
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,
            "errors": "replace",
        }
    )
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")
