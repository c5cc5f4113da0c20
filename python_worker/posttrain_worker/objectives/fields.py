"""Reading one JSON loss config: every mistake is a ``BAD_ARGUMENTS`` naming the field, as ``loss.<field>``.

Usage::

    fields = ConfigFields(raw, prefix="loss")
    coeff = fields.number("entropyCoeff", default=0.01, minimum=0)
    fields.finish("grpo")  # rejects fields the loss type does not know
"""

from __future__ import annotations

import math
from typing import Any

from posttrain_worker.protocol.envelope import render
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, WorkerFailure

_MISSING = object()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class ConfigFields:
    """Typed reads of the fields of one config object; remembers which fields were read."""

    def __init__(self, raw: dict[str, Any], prefix: str = "loss") -> None:
        self.raw = raw
        self.prefix = prefix
        self._seen: set[str] = set()

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}"

    def fail(self, key: str, message: str) -> WorkerFailure:
        """A ``BAD_ARGUMENTS`` failure whose message starts with the field's full name."""
        return WorkerFailure(BAD_ARGUMENTS, f"{self.name(key)} {message}", {"field": self.name(key)})

    def has(self, key: str) -> bool:
        return key in self.raw

    def _get(self, key: str) -> Any:
        self._seen.add(key)
        return self.raw.get(key, _MISSING)

    def number(
        self,
        key: str,
        *,
        default: float,
        minimum: float | None = None,
        greater_than: float | None = None,
    ) -> float:
        value = self._get(key)
        if value is _MISSING:
            return default
        return self._check_number(key, value, minimum=minimum, greater_than=greater_than)

    def optional_number(self, key: str, *, minimum: float | None = None) -> float | None:
        """A number, or ``None`` when the field is missing or JSON ``null``."""
        value = self._get(key)
        if value is _MISSING or value is None:
            return None
        return self._check_number(key, value, minimum=minimum, greater_than=None, nullable=True)

    def _check_number(
        self,
        key: str,
        value: Any,
        *,
        minimum: float | None,
        greater_than: float | None,
        nullable: bool = False,
    ) -> float:
        if not _is_number(value):
            kind = "a finite number or null" if nullable else "a finite number"
            raise self.fail(key, f"must be {kind}, got {render(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {render(value)}")
        if greater_than is not None and value <= greater_than:
            raise self.fail(key, f"must be > {greater_than}, got {render(value)}")
        return float(value)

    def optional_integer(self, key: str, *, minimum: int) -> int | None:
        value = self._get(key)
        if value is _MISSING or value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer or null, got {render(value)}")
        if value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {render(value)}")
        return value

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self._get(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {render(value)}")
        return value

    def choice(self, key: str, options: tuple[str, ...], *, default: str | None) -> str | None:
        """One of ``options``; ``default`` when missing (``None`` default and JSON ``null`` give ``None``)."""
        value = self._get(key)
        if value is _MISSING or (value is None and default is None):
            return default
        if value not in options:
            allowed = ", ".join(f'"{o}"' for o in options)
            raise self.fail(key, f"must be one of {allowed}, got {render(value)}")
        return str(value)

    def pair(self, key: str, *, default: tuple[float, float]) -> tuple[float, float]:
        """A number ``x`` (read as ``(x, x)``) or a ``[low, high]`` array of two numbers."""
        value = self._get(key)
        if value is _MISSING:
            return default
        if _is_number(value):
            return float(value), float(value)
        if isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value):
            return float(value[0]), float(value[1])
        raise self.fail(key, f"must be a finite number or a [low, high] pair of numbers, got {render(value)}")

    def finish(self, loss_type: str) -> None:
        """Rejects fields nobody read (typos, or fields of another loss type)."""
        unknown = [key for key in self.raw if key not in self._seen]
        if unknown:
            others = ", ".join(f'"{k}"' for k in unknown[1:])
            known = ", ".join(f'"{k}"' for k in sorted(self._seen))
            raise self.fail(
                unknown[0],
                f'is not a field of type "{loss_type}"'
                + (f" (nor {others})" if others else "")
                + f"; accepted: {known}",
            )
