"""Reads one split of a dataset through the ``datasets`` library and writes it as an Arrow IPC stream, for the
TypeScript loader (sdk/envs/data/hub.ts), which maps its columns exactly as it maps a local ``.arrow`` file.

The dataset is a Hub id (``openai/gsm8k``: ``load_dataset`` with ``config``, ``split``, ``revision`` and
``streaming``; the library itself honours ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` and falls back to its
cache), a local directory ``load_dataset`` understands, or a ``save_to_disk`` copy (``--disk``, or ``--hub``
naming such a directory: ``load_from_disk``). ``--limit`` keeps the first rows of the split (with
``--streaming``, only those rows are read).

Run as a program (the TypeScript side spawns it)::

    python -m posttrain_worker.data.hub_dataset --hub openai/gsm8k --config main --split train --out r.arrows

Its last stdout line is one JSON object: ``{"ok": true, "rows": n, "columns": [...]}``, or
``{"ok": false, "code", "message", "details"}`` with a code of ``data/errors.py`` (exit status 1). Anything
the libraries print goes to stderr, so stdout holds only that line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain_worker.data.errors import (
    DATASET_FORMAT,
    DATASET_NOT_CACHED,
    DATASET_NOT_FOUND,
    DATASETS_NOT_INSTALLED,
)
from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure

BATCH_ROWS = 1024
"""Rows per Arrow record batch written (and read from a stream) at a time."""


@dataclass(frozen=True)
class DatasetSource:
    """Which split to read: a Hub id (or local directory) ``hub``, or a ``save_to_disk`` copy ``disk``."""

    hub: str | None = None
    disk: str | None = None
    config: str | None = None
    split: str | None = None
    revision: str | None = None
    streaming: bool = False
    limit: int | None = None

    def describe(self) -> str:
        """``openai/gsm8k (config "main", split "train")``: how messages name the dataset."""
        name = self.hub if self.hub is not None else self.disk
        parts = [
            f'config "{self.config}"' if self.config is not None else "",
            f'split "{self.split}"' if self.split else "",
        ]
        shown = ", ".join(p for p in parts if p)
        return f"{name} ({shown})" if shown else str(name)


def import_datasets() -> Any:
    """The ``datasets`` module, or ``DATASETS_NOT_INSTALLED`` naming the extra that installs it."""
    try:
        import datasets
    except ImportError:
        raise WorkerFailure(
            DATASETS_NOT_INSTALLED,
            f"the worker's Python ({sys.executable}) cannot import the `datasets` library, which loads "
            'datasets by Hub id and save_to_disk copies: install the "datasets" extra '
            "(npx posttrain setup --extras datasets; in a checkout of posttrain: "
            ".venv/bin/pip install -e '.[datasets]')",
            {"package": "datasets", "extra": "datasets", "python": sys.executable},
        ) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def not_found(source: DatasetSource, field: str, why: str) -> WorkerFailure:
    """``DATASET_NOT_FOUND`` for ``field`` (``hub``, ``disk``, ``config`` or ``split``) of ``source``."""
    return WorkerFailure(DATASET_NOT_FOUND, f"{source.describe()}: {why}", {"field": field, "reason": why})


def not_cached(source: DatasetSource, datasets: Any, why: str, note: str = "") -> WorkerFailure:
    """``DATASET_NOT_CACHED``: names the id, config, split and the cache, and says how to fill it."""
    cache = str(datasets.config.HF_DATASETS_CACHE)
    config = f'"{source.config}"' if source.config is not None else "(default)"
    args = ", ".join(
        [f'"{source.hub}"', *([f'"{source.config}"'] if source.config else []), f'split="{source.split}"']
    )
    return WorkerFailure(
        DATASET_NOT_CACHED,
        f'{source.hub} (config {config}, split "{source.split}"): {why}, and this dataset config is not in '
        f"the datasets cache at {cache} (HF_DATASETS_CACHE, else $HF_HOME/datasets). Load it once on a "
        f"machine that is online (datasets.load_dataset({args})) and copy that cache directory over, or save "
        f"the split with Dataset.save_to_disk and pass its directory as `disk`{note}",
        {"hub": source.hub, "config": source.config, "split": source.split, "cacheDir": cache},
    )


def _is_saved_copy(path: Path) -> bool:
    """Whether ``path`` is a ``save_to_disk`` directory (``state.json`` or ``dataset_dict.json``)."""
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _from_disk(datasets: Any, source: DatasetSource, path: str, field: str) -> Any:
    if source.config is not None:
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'{source.describe()}: "config" does not apply to a save_to_disk copy',
            {"field": "config"},
        )
    try:
        loaded = datasets.load_from_disk(path)
    except FileNotFoundError as exc:
        raise not_found(source, field, f"not a save_to_disk directory ({exc})") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = sorted(loaded.keys())
        if source.split is None:
            raise not_found(source, "split", f"the copy holds the splits {splits}: choose one with `split`")
        if source.split not in loaded:
            raise not_found(source, "split", f'no split "{source.split}" in the copy; it holds {splits}')
        return loaded[source.split]
    saved = loaded.split
    if source.split is not None and saved is not None and str(saved) != source.split:
        raise not_found(source, "split", f'the copy is the split "{saved}", not "{source.split}"')
    return loaded


def _unreachable(datasets: Any) -> str:
    """Why the hub was not asked: offline mode (which the library reads), or no connection."""
    if datasets.config.HF_HUB_OFFLINE:
        return "the hub is offline (HF_HUB_OFFLINE=1 or HF_DATASETS_OFFLINE=1)"
    return "the hub could not be reached"


def network_errors() -> tuple[type[BaseException], ...]:
    """What the libraries raise when the hub cannot be asked: the builtin ``ConnectionError`` (``datasets``
    wraps its own cases in it; ``huggingface_hub``'s ``OfflineModeIsEnabled`` is one) and ``TimeoutError``,
    ``huggingface_hub``'s ``LocalEntryNotFoundError`` (a file neither cached nor downloadable), and the
    transport errors of ``httpx`` and ``requests`` (the HTTP clients of the hub library's releases)."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    with contextlib.suppress(ImportError):
        from huggingface_hub.errors import LocalEntryNotFoundError

        found.append(LocalEntryNotFoundError)
    with contextlib.suppress(ImportError):
        import httpx

        found.append(httpx.TransportError)
    with contextlib.suppress(ImportError):
        import requests

        found.append(requests.ConnectionError)
        found.append(requests.Timeout)
    return tuple(found)


def _from_hub(datasets: Any, source: DatasetSource) -> Any:
    if source.split is None:
        raise WorkerFailure(
            BAD_ARGUMENTS, f"{source.describe()}: a Hub dataset needs a `split`", {"field": "split"}
        )
    try:
        return datasets.load_dataset(
            source.hub,
            source.config,
            split=source.split,
            revision=source.revision,
            streaming=source.streaming,
        )
    except network_errors():
        raise not_cached(source, datasets, _unreachable(datasets)) from None
    except datasets.exceptions.DatasetNotFoundError as exc:
        raise not_found(source, "hub", f"no such dataset ({exc})") from None
    except FileNotFoundError as exc:
        raise not_found(source, "hub", f"no such dataset ({exc})") from None
    except ValueError as exc:
        text = str(exc)
        if text.startswith("Unknown split"):
            raise not_found(source, "split", text) from None
        if text.startswith("Couldn't find cache for"):
            # Offline, the id is cached but not this config: the library's message lists the cached ones.
            raise not_cached(source, datasets, _unreachable(datasets), f". {text.splitlines()[-1]}") from None
        if "BuilderConfig" in text and "not found" in text:
            raise not_found(source, "config", text) from None
        raise WorkerFailure(DATASET_FORMAT, f"{source.describe()}: {text}") from None


def open_split(source: DatasetSource) -> Any:
    """The split ``source`` names, as a ``datasets.Dataset`` (an ``IterableDataset`` when streaming), cut to
    ``limit`` rows. Raises :class:`WorkerFailure` with a code of ``data/errors.py``."""
    datasets = import_datasets()
    if source.disk is not None:
        split = _from_disk(datasets, source, source.disk, "disk")
    elif source.hub is not None and _is_saved_copy(Path(source.hub)):
        split = _from_disk(datasets, source, source.hub, "hub")
    else:
        split = _from_hub(datasets, source)
    if source.limit is None:
        return split
    if isinstance(split, datasets.IterableDataset):
        return split.take(source.limit)
    return split.select(range(min(source.limit, len(split))))


def arrow_batches(split: Any) -> Iterator[Any]:
    """The rows of ``split`` as ``pyarrow.Table`` batches of at most :data:`BATCH_ROWS` rows."""
    import datasets

    if isinstance(split, datasets.IterableDataset):
        yield from split.with_format("arrow").iter(batch_size=BATCH_ROWS)
        return
    table = split.with_format("arrow")
    for start in range(0, len(split), BATCH_ROWS):
        yield table[start : start + BATCH_ROWS]


def write_stream(split: Any, out: Path) -> tuple[int, list[str]]:
    """Writes ``split`` to ``out`` as one Arrow IPC stream; returns the row count and the column names."""
    import pyarrow as pa

    rows = 0
    writer = None
    schema = None
    with pa.OSFile(str(out), "wb") as sink:
        try:
            for table in arrow_batches(split):
                if schema is None:
                    schema = table.schema
                    writer = pa.ipc.new_stream(sink, schema)
                elif not table.schema.equals(schema):
                    # A stream's batches can infer types apart (a column null in one batch): one schema.
                    table = table.cast(schema)
                assert writer is not None
                writer.write_table(table)
                rows += table.num_rows
            if schema is None:  # no rows: the columns still travel
                features = getattr(split, "features", None)
                schema = features.arrow_schema if features is not None else pa.schema([])
                writer = pa.ipc.new_stream(sink, schema)
        finally:
            if writer is not None:
                writer.close()
    return rows, list(schema.names)


def load_to_arrow(source: DatasetSource, out: Path) -> dict[str, Any]:
    """Reads ``source`` and writes it to ``out``; the success line's fields."""
    split = open_split(source)
    try:
        rows, columns = write_stream(split, out)
    except WorkerFailure:
        raise
    except network_errors():  # a streamed split reads its shards as it goes
        datasets = import_datasets()
        raise not_cached(source, datasets, _unreachable(datasets)) from None
    except Exception as exc:  # a feature pyarrow cannot write, a broken shard read while streaming
        raise WorkerFailure(
            DATASET_FORMAT, f"{source.describe()}: cannot be read as Arrow ({type(exc).__name__}: {exc})"
        ) from exc
    return {"ok": True, "rows": rows, "columns": columns}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posttrain_worker.data.hub_dataset", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--hub", help="a Hub dataset id (or a local directory load_dataset reads)")
    parser.add_argument("--disk", help="a save_to_disk directory")
    parser.add_argument("--config", help="the dataset config (subset), e.g. main")
    parser.add_argument("--split", help="the split, e.g. train")
    parser.add_argument("--revision", help="a Hub revision: branch, tag or commit")
    parser.add_argument(
        "--streaming", action="store_true", help="stream the split instead of downloading it whole"
    )
    parser.add_argument("--limit", type=int, help="keep only the first LIMIT rows")
    parser.add_argument("--out", required=True, help="the Arrow IPC stream file to write")
    return parser


def source_of(args: argparse.Namespace) -> DatasetSource:
    """The source the parsed arguments name; ``BAD_ARGUMENTS`` unless exactly one of hub and disk is given."""
    if (args.hub is None) == (args.disk is None):
        raise WorkerFailure(BAD_ARGUMENTS, "give exactly one of --hub and --disk", {"field": "hub"})
    if args.limit is not None and args.limit < 1:
        raise WorkerFailure(
            BAD_ARGUMENTS, f"--limit must be a positive integer, got {args.limit}", {"field": "limit"}
        )
    return DatasetSource(
        hub=args.hub,
        disk=args.disk,
        config=args.config,
        split=args.split,
        revision=args.revision,
        streaming=args.streaming,
        limit=args.limit,
    )


def _reply_failure(failure: WorkerFailure, stdout: Any) -> None:
    line = {"ok": False, "code": failure.code, "message": failure.message, "details": failure.details}
    print(json.dumps(line), file=stdout)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the program; returns its exit status (0, or 1 after a failure line)."""
    args = _parser().parse_args(argv)
    # Rows only: without this the library imports torch for a streamed split (seconds, for nothing).
    os.environ["USE_TORCH"] = "0"
    stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the result line
            result = load_to_arrow(source_of(args), Path(args.out))
    except WorkerFailure as failure:
        _reply_failure(failure, stdout)
        return 1
    except Exception as exc:  # what the library raised that no case above names: still one typed line
        failure = WorkerFailure(
            DATASET_FORMAT,
            f"{args.hub or args.disk}: the datasets library failed ({type(exc).__name__}: {exc})",
            {"type": type(exc).__name__},
        )
        _reply_failure(failure, stdout)
        return 1
    print(json.dumps(result), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
