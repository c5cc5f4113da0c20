"""Models by Hub id, offline: a real worker with ``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE`` pointing at a
temporary Hugging Face cache holding the tiny model loads it by id and generates with it; an id missing from
the cache answers ``MODEL_NOT_CACHED`` naming the id and the cache; a malformed id answers ``BAD_ARGUMENTS``
naming ``path``. Nothing here reaches a network."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import pytest
from posttrain_worker.codec import TensorBatch
from worker_harness import Client, call, error, load, ok, rows_of, worker_client

CACHED_ID = "tiny-org/tiny-model"
BARE_ID = "tiny-bare"  # an id without a namespace, as "gpt2" is
NO_TOKENIZER_ID = "tiny-org/no-tokenizer"
UNCACHED_ID = "tiny-org/never-downloaded"


def cache_model(cache: Path, repo_id: str, source: Path) -> Path:
    """Put the files of ``source`` into ``cache`` the way ``huggingface_hub`` lays out a download: content
    blobs, a snapshot of symlinks to them under a commit hash, and ``refs/main`` naming that commit."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    digests = {}
    for file in sorted(source.iterdir()):
        data = file.read_bytes()
        digests[file.name] = hashlib.sha256(data).hexdigest()
        (blobs / digests[file.name]).write_bytes(data)
    commit = hashlib.sha1("".join(f"{n}:{d}" for n, d in digests.items()).encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, digest in digests.items():
        (snapshot / name).symlink_to(Path("..", "..", "blobs", digest))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path) -> Path:
    """A Hub cache holding the tiny model as ``CACHED_ID`` and ``BARE_ID``, and a copy of it without its
    tokenizer files as ``NO_TOKENIZER_ID``."""
    cache = tmp_path_factory.mktemp("hf") / "hub"
    cache_model(cache, CACHED_ID, tiny_dir)
    cache_model(cache, BARE_ID, tiny_dir)
    stripped = tmp_path_factory.mktemp("stripped") / "model"
    shutil.copytree(tiny_dir, stripped)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (stripped / name).unlink(missing_ok=True)
    cache_model(cache, NO_TOKENIZER_ID, stripped)
    return cache


@pytest.fixture(scope="module")
def client(hub_cache: Path, tiny_dir: Path) -> Iterator[Client]:
    """An offline worker reading ``hub_cache``, with the tiny model also loaded from its directory."""
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HOME": str(hub_cache.parent / "home"),  # nothing else of the user's HF state is read
    }
    with worker_client({"local": tiny_dir}, env=env) as (c, _):
        yield c


def test_the_hub_library_sees_the_cache(hub_cache: Path) -> None:
    scanned = {repo.repo_id: repo for repo in huggingface_hub.scan_cache_dir(hub_cache).repos}
    assert set(scanned) == {CACHED_ID, BARE_ID, NO_TOKENIZER_ID}
    (revision,) = scanned[CACHED_ID].revisions
    assert revision.refs == frozenset({"main"}) and revision.nb_files == 6
    found = huggingface_hub.try_to_load_from_cache(CACHED_ID, "config.json", cache_dir=hub_cache)
    assert isinstance(found, str) and Path(found).parent == revision.snapshot_path


@pytest.mark.parametrize("repo_id", [CACHED_ID, BARE_ID])
def test_a_cached_id_loads_offline_and_generates(client: Client, repo_id: str) -> None:
    info = ok(load(client, "hub", repo_id))
    local = ok(client.call("list_models")[0])["models"][0]
    assert info["path"] == repo_id and info["modelType"] == "qwen2"
    assert info["parameters"] == local["parameters"] and info["hasChatTemplate"] is True
    hub_rows, dir_rows = responses(client, "hub"), responses(client, "local")
    assert all(len(row) >= 1 for row in hub_rows) and hub_rows == dir_rows  # the same weights and tokenizer
    ok(client.call("unload_model", {"name": "hub"})[0])


def responses(client: Client, model: str) -> list[list[int]]:
    """The response tokens of ``model`` for two text prompts (6 new tokens, seed 0)."""
    batch = TensorBatch((2,), {"text": {"prompt": ["Hello world", "2+2="]}})
    reply = call(client, "generate", {"model": model, "maxNewTokens": 6, "seed": 0}, batch)
    ok(reply)
    return [row.tolist() for row in rows_of(reply["batch"].columns["tokens"]["response"])]


def test_an_uncached_id_answers_model_not_cached(client: Client, hub_cache: Path) -> None:
    message = error(load(client, "m", UNCACHED_ID), "MODEL_NOT_CACHED")
    assert UNCACHED_ID in message and str(hub_cache) in message
    assert "HF_HUB_OFFLINE" in message and f"huggingface-cli download {UNCACHED_ID}" in message
    assert "local model directory" in message
    assert [m["name"] for m in ok(client.call("list_models")[0])["models"]] == ["local"]


def test_a_cached_snapshot_gets_the_local_checks(client: Client) -> None:
    message = error(load(client, "m", NO_TOKENIZER_ID), "MODEL_LOAD_FAILED")
    assert NO_TOKENIZER_ID in message and "no tokenizer files" in message


MALFORMED = ["a/b/c", "bad id", "org/na--me", "org/name.git", "-dash/x", "org/name@main"]


@pytest.mark.parametrize("path", MALFORMED)
def test_a_malformed_id_answers_bad_arguments_naming_path(client: Client, path: str) -> None:
    message = error(load(client, "m", path), "BAD_ARGUMENTS")
    assert '"path"' in message and repr(path) in message and "Hub model id" in message


def test_an_online_failure_is_not_cached_only_when_the_library_could_not_reach_the_hub() -> None:
    # transformers 5 re-raises the library's LocalEntryNotFoundError as an OSError (checked by hand against a
    # closed loopback HF_ENDPOINT: the library retries for ~23 s, too slow to run here)
    from huggingface_hub.errors import LocalEntryNotFoundError
    from posttrain_worker.models.hub import online_failure

    try:
        try:
            raise LocalEntryNotFoundError("cannot find the requested files in the local cache")
        except LocalEntryNotFoundError as inner:
            raise OSError("We couldn't connect to the hub") from inner
    except OSError as unreachable:
        failure = online_failure(UNCACHED_ID, unreachable)
    assert failure.code == "MODEL_NOT_CACHED" and "could not be reached" in failure.message
    assert UNCACHED_ID in failure.message
    missing = online_failure(UNCACHED_ID, OSError(f"{UNCACHED_ID} is not a valid model identifier"))
    assert missing.code == "MODEL_NOT_FOUND" and "not found on the hub" in missing.message
