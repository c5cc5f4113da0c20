"""The tiny model's command line: ``python -m posttrain_worker.models.tiny DIR [--seed N] ... [--json]``
(``sdk/models/tiny.ts`` and ``posttrain make-tiny-model`` run it)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from posttrain_worker.models.tiny.build import WRITTEN_FILES, build
from posttrain_worker.models.tiny.families import DEFAULT_FAMILY, FAMILY_NAMES
from posttrain_worker.models.tiny.tokenizer import DEFAULT_CHARS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posttrain_worker.models.tiny",
        description=(
            "Write a random tiny causal LM (safetensors + config; Qwen2-style by default, or of another "
            "--family) with a character-level tokenizer into DIR; the qwen2 default gets a ChatML chat "
            "template whose assistant turns are wrapped in {% generation %}, other families the "
            "--chat-template given. "
            "Offline and deterministic given --seed. Prints the directory and the parameter count."
        ),
    )
    parser.add_argument("out_dir", metavar="DIR", help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--hidden-size", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--num-layers", type=int, default=2, help="decoder layers (default 2)")
    parser.add_argument(
        "--family",
        choices=FAMILY_NAMES,
        default=DEFAULT_FAMILY,
        help=f"model family: architecture, special tokens, stop tokens (default {DEFAULT_FAMILY})",
    )
    parser.add_argument(
        "--chat-template",
        metavar="FILE",
        default=None,
        help="store this Jinja chat template (e.g. the family's real one); default: see the description",
    )
    parser.add_argument(
        "--num-heads", type=int, default=None, help="attention heads (default: the family's, 4 for qwen2)"
    )
    parser.add_argument(
        "--num-kv-heads",
        type=int,
        default=None,
        help="key/value heads, GQA (default: the family's, 2 for qwen2)",
    )
    parser.add_argument(
        "--head-dim", type=int, default=None, help="head size (default: the family's, hidden/heads for qwen2)"
    )
    parser.add_argument("--intermediate-size", type=int, default=128, help="MLP width (default 128)")
    parser.add_argument(
        "--max-position-embeddings", type=int, default=512, help="context length (default 512)"
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help=(
            "pad the tokenizer, embedding and LM head with filler tokens up to this many tokens, as a real "
            "vocabulary (e.g. 32000, 151936); default: the character tokenizer's own 259"
        ),
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
    template = None
    if ns.chat_template is not None:
        try:
            template = Path(ns.chat_template).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            parser.error(f"--chat-template: cannot read {ns.chat_template!r}: {exc}")
    try:
        path, n_params, vocab_size = build(
            ns.out_dir,
            hidden_size=ns.hidden_size,
            num_layers=ns.num_layers,
            num_heads=ns.num_heads,
            num_kv_heads=ns.num_kv_heads,
            intermediate_size=ns.intermediate_size,
            max_position_embeddings=ns.max_position_embeddings,
            seed=ns.seed,
            vocab=DEFAULT_CHARS,
            vocab_size=ns.vocab_size,
            family=ns.family,
            head_dim=ns.head_dim,
            chat_template=template,
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
