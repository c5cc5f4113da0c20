"""Validation of a request's ``args`` object; every mistake is a ``BAD_ARGUMENTS`` naming the argument.

Usage::

    reader = ArgReader("compute_for", args)
    seconds = reader.number("seconds", minimum=0)
    reader.finish()  # rejects arguments the method does not know
"""

from __future__ import annotations

import math
from typing import Any

from posttrain_worker.protocol.envelope import render
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, WorkerFailure

_MISSING = object()


class ArgReader:
    def __init__(self, method: str, args: dict[str, Any]) -> None:
        self.method = method
        self.args = args
        self._seen: set[str] = set()

    def fail(self, message: str) -> WorkerFailure:
        return WorkerFailure(BAD_ARGUMENTS, f"{self.method}: {message}")

    def _get(self, key: str, required: bool) -> Any:
        self._seen.add(key)
        if key not in self.args:
            if required:
                raise self.fail(f'missing argument "{key}"')
            return _MISSING
        return self.args[key]

    def number(
        self,
        key: str,
        *,
        required: bool = True,
        default: float | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float | None:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(f'"{key}" must be a finite number, got {render(value)}')
        if minimum is not None and value < minimum:
            raise self.fail(f'"{key}" must be >= {minimum}, got {render(value)}')
        if maximum is not None and value > maximum:
            raise self.fail(f'"{key}" must be <= {maximum}, got {render(value)}')
        return float(value)

    def integer(
        self,
        key: str,
        *,
        required: bool = True,
        default: int | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
        nullable: bool = False,
    ) -> int | None:
        """An integer; with ``nullable``, JSON ``null`` is accepted too and read as ``default``."""
        value = self._get(key, required)
        if value is _MISSING or (nullable and value is None):
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            kind = "an integer or null" if nullable else "an integer"
            raise self.fail(f'"{key}" must be {kind}, got {render(value)}')
        if minimum is not None and value < minimum:
            raise self.fail(f'"{key}" must be >= {minimum}, got {render(value)}')
        if maximum is not None and value > maximum:
            raise self.fail(f'"{key}" must be <= {maximum}, got {render(value)}')
        return value

    def string(self, key: str, *, required: bool = True, default: str | None = None) -> str | None:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise self.fail(f'"{key}" must be a string, got {render(value)}')
        return value

    def boolean(self, key: str, *, required: bool = True, default: bool | None = None) -> bool | None:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self.fail(f'"{key}" must be true or false, got {render(value)}')
        return value

    def choice(
        self, key: str, options: tuple[str, ...], *, required: bool = True, default: str | None = None
    ) -> str | None:
        value = self.string(key, required=required, default=default)
        if value is not None and value not in options:
            allowed = ", ".join(f'"{o}"' for o in options)
            raise self.fail(f'"{key}" must be one of {allowed}, got {render(value)}')
        return value

    def strings(
        self, key: str, *, required: bool = True, default: list[str] | None = None
    ) -> list[str] | None:
        """A JSON array of strings."""
        value = self._get(key, required)
        if value is _MISSING:
            return None if default is None else list(default)
        if not isinstance(value, list):
            raise self.fail(f'"{key}" must be an array of strings, got {render(value)}')
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(f'"{key}[{index}]" must be a string, got {render(item)}')
        return list(value)

    def object(self, key: str, *, required: bool = True) -> dict[str, Any] | None:
        value = self._get(key, required)
        if value is _MISSING:
            return None
        if not isinstance(value, dict):
            raise self.fail(f'"{key}" must be a JSON object, got {render(value)}')
        return value

    def finish(self) -> None:
        """Reject arguments nobody asked for (most likely typos)."""
        unknown = [key for key in self.args if key not in self._seen]
        if unknown:
            known = ", ".join(f'"{k}"' for k in sorted(self._seen)) or "none"
            names = ", ".join(f'"{k}"' for k in unknown)
            raise self.fail(f"unknown argument(s) {names}; accepted: {known}")


def no_args(method: str, args: dict[str, Any]) -> None:
    """Validator for methods that take no arguments."""
    ArgReader(method, args).finish()
