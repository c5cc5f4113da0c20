"""Fixtures shared by the worker test modules: the tiny model on disk and clients of real workers.

A module that needs other tiny weights sets ``TINY_SEED = n`` at its top (default 0); a module that needs a
different client overrides ``client`` in itself, requesting this one (pytest's fixture override).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from posttrain_worker.models import make_tiny_model
from worker_harness import Client, policy_client, worker_client


@pytest.fixture(scope="module")
def tiny_seed(request: pytest.FixtureRequest) -> int:
    """The tiny model's weight seed: the test module's ``TINY_SEED``, else 0."""
    return int(getattr(request.module, "TINY_SEED", 0))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, tiny_seed: int) -> Path:
    """A directory holding the tiny model (``make_tiny_model``), built once per test module."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=tiny_seed)


@pytest.fixture(scope="module")
def client(tiny_dir: Path) -> Iterator[Client]:
    """A worker with the tiny model loaded as ``"policy"``, and a client to it."""
    with policy_client(tiny_dir) as c:
        yield c


@pytest.fixture(scope="module")
def bare_client() -> Iterator[Client]:
    """A worker with no model loaded, and a client to it."""
    with worker_client() as (c, _):
        yield c


@pytest.fixture(scope="module")
def zctx() -> Iterator[zmq.Context]:
    """A ZeroMQ context for a module's raw clients, destroyed (linger 0) after the module."""
    context = zmq.Context()
    yield context
    context.destroy(linger=0)
