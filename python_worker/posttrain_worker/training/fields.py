"""Reading a nested config object (``optimizer``, ``schedule``, ``lora``) with the protocol's ArgReader, so
every mistake is a ``BAD_ARGUMENTS`` naming the dotted field (``trainer_create: "optimizer.lr" must be
...``)."""

from __future__ import annotations

import math
from typing import Any

from posttrain_worker.protocol.args import ArgReader
from posttrain_worker.protocol.envelope import render
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, WorkerFailure

_MISSING = object()


class Reader(ArgReader):
    """An ArgReader that also accepts JSON ``null`` for optional settings that can be off."""

    def null(self, key: str) -> bool:
        """True (and ``key`` known) when ``key`` is given as ``null``; read it normally otherwise."""
        if key in self.args and self.args[key] is None:
            self._seen.add(key)
            return True
        return False

    def json(self, key: str) -> Any:
        """Any JSON value (``None`` when missing), passed through unchecked."""
        self._seen.add(key)
        return self.args.get(key)


class SectionReader(Reader):
    """An ArgReader over the object ``raw`` whose keys read as ``section.key``."""

    def __init__(self, method: str, section: str, raw: Any) -> None:
        if not isinstance(raw, dict):
            raise WorkerFailure(
                BAD_ARGUMENTS, f'{method}: "{section}" must be a JSON object, got {render(raw)}'
            )
        super().__init__(method, {f"{section}.{key}": value for key, value in raw.items()})
        self.section = section

    def key(self, name: str) -> str:
        return f"{self.section}.{name}"

    def unit_pair(self, key: str, default: tuple[float, float]) -> tuple[float, float]:
        """A JSON array of two numbers, each in [0, 1) (Adam's betas)."""
        self._seen.add(key)
        value = self.args.get(key, _MISSING)
        if value is _MISSING:
            return default
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            or not all(math.isfinite(v) and 0 <= v < 1 for v in value)
        ):
            raise self.fail(f'"{key}" must be two numbers in [0, 1), got {render(value)}')
        return float(value[0]), float(value[1])
