"""Hub ids in ``load_model``'s ``path``: checked, and resolved from the Hugging Face cache when offline.

A ``path`` that is not an existing directory (and does not look like a filesystem path) is a Hub id,
``name`` or ``namespace/name``. Offline (``HF_HUB_OFFLINE=1``), the id is resolved by ``huggingface_hub``
itself to the snapshot directory of its cached ``main`` revision and loaded from there, so the directory
checks of a local load apply to it; an id missing from the cache fails with :data:`MODEL_NOT_CACHED`.
Online, the id goes to ``transformers`` as before (it downloads, or falls back to the cache on its own
when the hub cannot be reached); :func:`online_failure` names the code of a failed online load.
"""

from __future__ import annotations

from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.models.errors import MODEL_NOT_CACHED, MODEL_NOT_FOUND


def check_hub_id(path: str) -> str:
    """``path`` when it has the shape of a Hub model id, else ``BAD_ARGUMENTS`` naming the field ``path``."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(path)
    except HFValidationError as exc:
        raise WorkerFailure(
            BAD_ARGUMENTS,
            f'load_model: "path" {path!r} is neither an existing directory nor a Hub model id '
            f'("name" or "namespace/name": letters, digits, "-", "_", "."; {exc})',
            {"path": path},
        ) from None
    return path


def hub_offline() -> bool:
    """Whether ``huggingface_hub`` is in offline mode (``HF_HUB_OFFLINE=1``), read the library's way."""
    from huggingface_hub import is_offline_mode

    return bool(is_offline_mode())


def cache_dir() -> str:
    """The Hub cache this worker reads (``HF_HUB_CACHE``, else ``$HF_HOME/hub``), as the library sees it."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def cached_snapshot(repo_id: str) -> str:
    """The cached snapshot directory of ``repo_id``'s ``main`` revision, or ``MODEL_NOT_CACHED``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return str(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        raise not_cached(repo_id, "the hub is offline (HF_HUB_OFFLINE=1)") from None


def not_cached(repo_id: str, why: str) -> WorkerFailure:
    """The ``MODEL_NOT_CACHED`` failure for ``repo_id``: names the id, the cache and how to fill it."""
    cache = cache_dir()
    return WorkerFailure(
        MODEL_NOT_CACHED,
        f"{repo_id}: not a local directory, and {why} and the model is not in the Hugging Face cache at "
        f"{cache} (HF_HUB_CACHE, else $HF_HOME/hub). Populate it on a machine that is online with "
        f"`huggingface-cli download {repo_id}` (or `hf download {repo_id}`) and copy the cache over, "
        "or pass the path of a local model directory instead",
        {"path": repo_id, "cacheDir": cache},
    )


def online_failure(repo_id: str, exc: BaseException) -> WorkerFailure:
    """What a failed online load of ``repo_id`` answers: ``MODEL_NOT_CACHED`` when the hub could not be
    reached and nothing was cached (the library's ``LocalEntryNotFoundError`` in the cause chain), else
    ``MODEL_NOT_FOUND``."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    cause: BaseException | None = exc
    seen: set[int] = set()  # a chain can loop back on itself
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, LocalEntryNotFoundError):
            return not_cached(repo_id, "the hub could not be reached")
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return WorkerFailure(
        MODEL_NOT_FOUND,
        f"{repo_id}: not a local directory, and not found on the hub ({exc})",
        {"path": repo_id},
    )
