"""Importing a parity peer (trl, torchrl, tensordict: the test extra) in a test module.

Where the peer is missing or cannot be imported, the module is skipped with the reason, except when peers are
required: ``CI`` set to a truthy value (CI sets ``CI=true``) or ``POSTTRAIN_REQUIRE_PEERS=1``. There a missing
peer fails the module, so parity is never skipped silently in CI.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

INSTALL_HINT = (
    "install the test extra into the project's .venv: `.venv/bin/pip install -e '.[test]'` "
    "(`npm test` and `node bridge/setup/bootstrap.mjs` bootstrap it)"
)
_FALSY = ("", "0", "false", "no", "off")


def peers_required() -> bool:
    """True when a missing peer must fail rather than skip: ``CI`` truthy or ``POSTTRAIN_REQUIRE_PEERS=1``."""
    ci = os.environ.get("CI", "").strip().lower() not in _FALSY
    return ci or os.environ.get("POSTTRAIN_REQUIRE_PEERS", "").strip() == "1"


def require_peer(module: str, package: str) -> ModuleType:
    """``module`` imported; else skip the calling test module, or fail it when peers are required.

    Any exception counts (an installed peer that cannot be imported cannot run either).
    """
    try:
        return importlib.import_module(module)
    except Exception as err:
        reason = f"parity peer {package!r} cannot be imported ({module}: {type(err).__name__}: {err})"
    # Outside the except block, so the report is this message alone, not the import's traceback too.
    if peers_required():
        pytest.fail(
            f"{reason}; peers are required here (CI or POSTTRAIN_REQUIRE_PEERS=1): {INSTALL_HINT}",
            pytrace=False,
        )
    pytest.skip(f"{reason}; {INSTALL_HINT}", allow_module_level=True)
