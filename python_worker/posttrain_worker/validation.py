"""Reading a JSON object of arguments or settings: typed reads of its fields, every mistake a
``BAD_ARGUMENTS`` naming the field, and the fields nobody read rejected at the end (most likely typos).

One reader serves every such object, so it sits at the bottom of the package, beside the failure type,
knowing no protocol: a method's ``args`` (``protocol/args.py``), a trainer's config sections
(``optimizer``, ``schedule``, ``lora``: ``training/``) and a loss config (``objectives/config.py``).
:class:`FieldReader` holds the reads; the two subclasses only word the failures, as the clients read them:

- :class:`ArgReader`, arguments: ``trainer_create: "optimizer.lr" must be >= 0, got -1``,
  ``trainer_create: missing argument "optimizer.lr"``, ``m: unknown argument(s) "x"; accepted: "n"``;
- :class:`ConfigFields`, a loss config: ``loss.entropyCoeff must be >= 0, got -1`` with ``details.field``
  (``"loss.entropyCoeff"``), and ``loss.x is not a field of type "grpo"; accepted: ...``.

A field without a ``default`` is required; ``default=None`` makes it optional with nothing in its place;
``nullable``: JSON ``null`` is accepted too and read as ``None``.

Usage::

    reader = ArgReader("trainer_create", raw, section="optimizer")
    lr = reader.number("lr", minimum=0)  # "optimizer.lr", required
    decay = reader.number("weightDecay", default=0.01, minimum=0)
    reader.finish()  # rejects fields nobody read
"""

from __future__ import annotations

import math
from typing import Any

from posttrain_worker.errors import BAD_ARGUMENTS, WorkerFailure, render


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The default of a field that must be given (the default of every read's ``default``)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class FieldReader:
    """Typed reads of the fields of one JSON object; remembers which fields were read.

    ``section``: the object is the field ``section`` of a larger one, so its fields are named
    ``section.key`` (and the object itself must be a JSON object). Subclasses word the failures."""

    def __init__(self, raw: Any, section: str = "") -> None:
        self.section = section
        if not isinstance(raw, dict):
            assert section, "a top-level object is checked by its reader's caller"
            raise self.failure(section, f"must be a JSON object, got {render(raw)}")
        self.raw: dict[str, Any] = raw
        self._seen: set[str] = set()

    # ---- the wording (subclasses) ----------------------------------------------------------------------

    def failure(self, name: str, message: str) -> WorkerFailure:
        """The failure of the field named ``name`` (its full, dotted name): ``message`` says what is wrong."""
        raise NotImplementedError

    def missing(self, name: str) -> WorkerFailure:
        raise NotImplementedError

    # ---- reads ---------------------------------------------------------------------------------------------

    def name(self, key: str) -> str:
        """The field's full name in messages: ``section.key``, or ``key`` at the top level."""
        return f"{self.section}.{key}" if self.section else key

    def fail(self, key: str, message: str) -> WorkerFailure:
        """A failure of the field ``key`` (for checks of its value beyond its type)."""
        return self.failure(self.name(key), message)

    def has(self, key: str) -> bool:
        return key in self.raw

    def unread(self) -> list[str]:
        """The fields nobody read, in the object's order."""
        return [key for key in self.raw if key not in self._seen]

    def _read(self, key: str, default: Any, nullable: bool) -> tuple[Any, bool]:
        """``(value, True)`` for a value to check; ``(result, False)`` when there is nothing to check (the
        field is missing and takes ``default``, or it is an accepted ``null``)."""
        self._seen.add(key)
        if key not in self.raw:
            if default is REQUIRED:
                raise self.missing(self.name(key))
            return default, False
        value = self.raw[key]
        if value is None and nullable:
            return None, False
        return value, True

    def _wrong(self, key: str, kind: str, value: Any, nullable: bool) -> WorkerFailure:
        return self.fail(key, f"must be {kind}{' or null' if nullable else ''}, got {render(value)}")

    def _check_range(
        self,
        key: str,
        value: float,
        minimum: float | None,
        maximum: float | None,
        greater_than: float | None = None,
    ) -> None:
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {render(value)}")
        if greater_than is not None and value <= greater_than:
            raise self.fail(key, f"must be > {greater_than}, got {render(value)}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"must be <= {maximum}, got {render(value)}")

    def number(
        self,
        key: str,
        *,
        default: Any = REQUIRED,
        minimum: float | None = None,
        maximum: float | None = None,
        greater_than: float | None = None,
        nullable: bool = False,
    ) -> float | None:
        """A finite number (an integer is read as a float)."""
        value, given = self._read(key, default, nullable)
        if not given:
            return value
        if not _is_number(value):
            raise self._wrong(key, "a finite number", value, nullable)
        self._check_range(key, value, minimum, maximum, greater_than)
        return float(value)

    def integer(
        self,
        key: str,
        *,
        default: Any = REQUIRED,
        minimum: int | None = None,
        maximum: int | None = None,
        nullable: bool = False,
    ) -> int | None:
        value, given = self._read(key, default, nullable)
        if not given:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer", value, nullable)
        self._check_range(key, value, minimum, maximum)
        return value

    def string(
        self, key: str, *, default: Any = REQUIRED, nullable: bool = False, non_empty: bool = False
    ) -> str | None:
        value, given = self._read(key, default, nullable)
        if not given:
            return value
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value, nullable)
        if non_empty and value == "":
            raise self.fail(key, f"must be a non-empty string{' or null' if nullable else ''}")
        return value

    def boolean(self, key: str, *, default: Any = REQUIRED, nullable: bool = False) -> bool | None:
        value, given = self._read(key, default, nullable)
        if not given:
            return value
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false", value, nullable)
        return value

    def choice(
        self, key: str, options: tuple[str, ...], *, default: Any = REQUIRED, nullable: bool = False
    ) -> str | None:
        """One of ``options``."""
        value, given = self._read(key, default, nullable)
        if not given:
            return value
        if not isinstance(value, str) or value not in options:
            raise self._wrong(key, "one of " + ", ".join(f'"{o}"' for o in options), value, nullable)
        return value

    def strings(self, key: str, *, default: Any = REQUIRED, nullable: bool = False) -> list[str] | None:
        """A JSON array of strings (a fresh list, the default's too)."""
        value, given = self._read(key, default, nullable)
        if not given:
            return None if value is None else list(value)
        if not isinstance(value, list):
            raise self._wrong(key, "an array of strings", value, nullable)
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.failure(f"{self.name(key)}[{index}]", f"must be a string, got {render(item)}")
        return list(value)

    def object(self, key: str, *, default: Any = REQUIRED, nullable: bool = False) -> dict[str, Any] | None:
        """A JSON object, as it is (read further by its own reader)."""
        value, given = self._read(key, default, nullable)
        if not given:
            return value
        if not isinstance(value, dict):
            raise self._wrong(key, "a JSON object", value, nullable)
        return value

    def json(self, key: str, *, default: Any = REQUIRED) -> Any:
        """Any JSON value, ``null`` included, passed through unchecked."""
        value, _ = self._read(key, default, nullable=True)
        return value

    def pair(
        self,
        key: str,
        *,
        default: Any = REQUIRED,
        scalar: bool = False,
        within: tuple[float, float] | None = None,
    ) -> tuple[float, float]:
        """A ``[low, high]`` array of two finite numbers; with ``scalar``, a number ``x`` too (read as
        ``(x, x)``); with ``within=(a, b)``, each in ``[a, b)``."""
        value, given = self._read(key, default, nullable=False)
        if not given:
            return value
        if scalar and _is_number(value):
            return float(value), float(value)
        numbers = isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value)
        if not numbers or (within is not None and not all(within[0] <= v < within[1] for v in value)):
            kind = "two numbers" + (f" in [{within[0]:g}, {within[1]:g})" if within is not None else "")
            raise self._wrong(key, f"a finite number or {kind}" if scalar else kind, value, False)
        return float(value[0]), float(value[1])


class ArgReader(FieldReader):
    """The reader of a method's arguments (and of a config section inside them, ``section``): every message
    starts with the method's name and quotes the field's full name.

    Usage::

        reader = ArgReader("compute_for", args)
        seconds = reader.number("seconds", minimum=0)
        reader.finish()  # rejects arguments the method does not know
    """

    def __init__(self, method: str, args: Any, section: str = "") -> None:
        self.method = method
        super().__init__(args, section)

    def fail_message(self, message: str) -> WorkerFailure:
        """A failure worded freely (``message`` quotes the fields it names), prefixed with the method."""
        return WorkerFailure(BAD_ARGUMENTS, f"{self.method}: {message}")

    def failure(self, name: str, message: str) -> WorkerFailure:
        return self.fail_message(f'"{name}" {message}')

    def missing(self, name: str) -> WorkerFailure:
        return self.fail_message(f'missing argument "{name}"')

    def finish(self) -> None:
        """Reject arguments nobody asked for (most likely typos)."""
        unknown = self.unread()
        if unknown:
            known = ", ".join(f'"{self.name(k)}"' for k in sorted(self._seen)) or "none"
            names = ", ".join(f'"{self.name(k)}"' for k in unknown)
            raise self.fail_message(f"unknown argument(s) {names}; accepted: {known}")


class ConfigFields(FieldReader):
    """The reader of a loss config: every message starts with the field's full name (``loss.clipEpsilon must
    be ...``), which ``details.field`` carries too.

    Usage::

        fields = ConfigFields(raw, "loss")
        coeff = fields.number("entropyCoeff", default=0.01, minimum=0)
        fields.finish("grpo")  # rejects fields the loss type does not know
    """

    def failure(self, name: str, message: str) -> WorkerFailure:
        return WorkerFailure(BAD_ARGUMENTS, f"{name} {message}", {"field": name})

    def missing(self, name: str) -> WorkerFailure:
        return self.failure(name, "is required")

    def finish(self, config_type: str) -> None:
        """Rejects fields nobody read (typos, or fields of another ``type``)."""
        unknown = self.unread()
        if unknown:
            others = ", ".join(f'"{k}"' for k in unknown[1:])
            known = ", ".join(f'"{k}"' for k in sorted(self._seen))
            raise self.fail(
                unknown[0],
                f'is not a field of type "{config_type}"'
                + (f" (nor {others})" if others else "")
                + f"; accepted: {known}",
            )
