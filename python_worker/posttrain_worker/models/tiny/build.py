"""``make_tiny_model``: the tiny model's directory, tokenizer and weights written the way a Hub checkpoint
is, loadable with ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posttrain_worker.models.tiny.families import DEFAULT_FAMILY, Family, get_family
from posttrain_worker.models.tiny.tokenizer import (
    DEFAULT_CHARS,
    TINY_CHAT_TEMPLATE,
    build_tokenizer,
    check_vocab,
    check_vocab_size,
    patch_tokenizer_config,
)
from posttrain_worker.models.tiny.weights import check_seed, check_sizes, random_model, resolve_head_dim

#: The files ``make_tiny_model`` writes into its directory.
WRITTEN_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


def make_tiny_model(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    intermediate_size: int = 128,
    max_position_embeddings: int = 512,
    seed: int = 0,
    vocab: str = DEFAULT_CHARS,
    vocab_size: int | None = None,
    family: str = DEFAULT_FAMILY,
    head_dim: int | None = None,
    chat_template: str | None = None,
) -> Path:
    """Write a random tiny causal LM of ``family`` + character-level tokenizer into ``out_dir``; return its
    path.

    ``out_dir`` is created (with parents) if missing; an existing directory is reused and the files this
    function writes are overwritten (other files in it are left alone). Raises ``ValueError`` naming the
    offending argument when ``out_dir`` is an existing non-directory, a size is not a positive int,
    ``hidden_size`` is not divisible by ``num_heads``, ``num_heads`` not by ``num_kv_heads``, the head size
    is odd (RoPE needs it even), ``seed`` is outside ``[0, 2**64)``, or ``vocab`` is empty, repeats a
    character, holds something other than single characters, or holds a character that is not NFC-stable or
    has no UTF-8 encoding, or ``vocab_size`` is not a positive int or is below the tokenizer's own size (259
    with the default ``vocab``).

    ``vocab`` lists the characters that get the first ids, one token each; every other character is still
    encodable, as one token per UTF-8 byte (every ASCII character is therefore always a single token).

    ``vocab_size`` (default None: no fillers) gives the tokenizer, the embedding and the LM head exactly that
    many tokens, as a real vocabulary has (32000, 151936): filler tokens ``<filler_0>``, ``<filler_1>``, ...
    come after the character, byte and prefix tokens and before the special tokens (which move to the last
    three ids). ``encode`` never produces a filler; a model may sample one, and it decodes to its own name.

    ``family`` (default ``"qwen2"``, the original tiny model, byte for byte) picks the architecture, special
    tokens and stop tokens of a model family: ``"qwen2"``, ``"qwen3"``, ``"llama3"``, ``"mistral"``,
    ``"gemma2"``, ``"phi3"`` (``families.py``; anything else is ``ValueError`` naming ``family``).
    ``num_heads`` / ``num_kv_heads`` / ``head_dim`` default to the family's (4 / 2 / 16 for qwen2; a head size
    of 32 elsewhere, which vLLM accepts). ``chat_template`` is the template text to store (a family's real
    one, for instance); None gives qwen2 the tiny ChatML template with ``{% generation %}`` markers and the
    other families no template at all.
    """
    path, _, _ = build(
        out_dir,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        seed=seed,
        vocab=vocab,
        vocab_size=vocab_size,
        family=family,
        head_dim=head_dim,
        chat_template=chat_template,
    )
    return path


def _check_out_dir(out_dir: Any) -> Path:
    if not isinstance(out_dir, (str, Path)) or str(out_dir) == "":
        raise ValueError(f"out_dir: expected a non-empty path, got {out_dir!r}")
    path = Path(out_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"out_dir: {str(path)!r} exists and is not a directory")
    return path


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


def _check_template(chat_template: Any, family: Family) -> str | None:
    if chat_template is None:
        return TINY_CHAT_TEMPLATE if family.name == DEFAULT_FAMILY else None
    if not isinstance(chat_template, str) or not chat_template.strip():
        raise ValueError(f"chat_template: expected the template's text (non-empty), got {chat_template!r}")
    return chat_template


def build(
    out_dir: str | Path,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int | None,
    num_kv_heads: int | None,
    intermediate_size: int,
    max_position_embeddings: int,
    seed: int,
    vocab: str,
    vocab_size: int | None = None,
    family: str = DEFAULT_FAMILY,
    head_dim: int | None = None,
    chat_template: str | None = None,
) -> tuple[Path, int, int]:
    """``make_tiny_model``'s work: returns the resolved directory, the parameter count and the vocab size."""
    spec = get_family(family)
    sizes: dict[str, Any] = {
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": spec.heads[0] if num_heads is None else num_heads,
        "num_kv_heads": spec.heads[1] if num_kv_heads is None else num_kv_heads,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
    }
    path = _check_out_dir(out_dir)
    check_sizes(sizes)
    sizes["head_dim"] = resolve_head_dim(spec, sizes, head_dim)
    check_seed(seed)
    chars = check_vocab(vocab)
    n_tokens = check_vocab_size(vocab_size, chars, spec)
    template = _check_template(chat_template, spec)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ValueError(f"out_dir: cannot create {str(path)!r}: {exc}") from exc

    from transformers.utils import logging as hf_logging

    tokenizer = build_tokenizer(chars, max_position_embeddings, n_tokens, spec, template)

    def token_id(text: str | None) -> int | None:
        return None if text is None else int(tokenizer.convert_tokens_to_ids(text))

    model = random_model(
        sizes,
        seed,
        vocab_size=len(tokenizer),
        pad_id=token_id(spec.pad),
        eos_id=int(tokenizer.convert_tokens_to_ids(spec.eos)),
        bos_id=token_id(spec.bos),
        stop_ids=[int(tokenizer.convert_tokens_to_ids(t)) for t in spec.stop],
        family=spec,
    )
    progress_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # save_pretrained draws a "Writing model shards" bar on stderr
    try:
        model.save_pretrained(path)
    finally:
        if progress_was_on:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(path)
    patch_tokenizer_config(path, spec)
    if template is None:
        # a directory reused from a build with a template must not keep it
        (path / "chat_template.jinja").unlink(missing_ok=True)
    _fix_modes(path)
    n_params = sum(p.numel() for p in model.parameters())
    return path.resolve(), n_params, model.config.vocab_size
