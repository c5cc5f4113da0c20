"""A method's arguments, declared: one :class:`Arg` per field of ``args``, gathered in an :class:`ArgsSchema`.

The schema reads ``args`` with the bottom-level :class:`~posttrain_worker.validation.ArgReader`, so every
mistake is a ``BAD_ARGUMENTS`` naming the argument, and an argument the method does not declare is rejected
with the accepted list. The same declaration describes the method (``MethodRegistry.describe``,
``python -m posttrain_worker --describe-methods``).

Usage::

    COMPUTE_FOR_ARGS = ArgsSchema(
        (Arg("seconds", "number", minimum=0, maximum=3600),),
        build=itemgetter("seconds"),
    )
    seconds = COMPUTE_FOR_ARGS.parse("compute_for", {"seconds": 1.5})  # 1.5
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from posttrain_worker.errors import WorkerFailure
from posttrain_worker.validation import REQUIRED, ArgReader

__all__ = ["ARG_KINDS", "NO_ARGS", "REQUIRED", "Arg", "ArgKind", "ArgsSchema", "ParsedArgs"]

ArgKind = Literal["string", "integer", "number", "boolean", "choice", "strings", "object", "json"]
"""``strings``: an array of strings; ``object``: a JSON object (read further by the schema's ``build``);
``json``: any JSON value, ``null`` included, passed through unchecked."""

ARG_KINDS: tuple[str, ...] = get_args(ArgKind)


@dataclass(frozen=True)
class Arg:
    """One argument: its name in ``args``, its JSON kind and the rules its value obeys.

    Without a ``default`` the argument is required; ``default=None`` makes it optional with nothing in its
    place. ``nullable``: JSON ``null`` is accepted too and read as ``None`` (not as the default).
    ``non_empty`` (strings): ``""`` is rejected.

    Usage: ``Arg("dtype", "choice", choices=("float32", "bfloat16"), default="float32")``
    """

    name: str
    kind: ArgKind
    default: Any = REQUIRED
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False
    choices: tuple[str, ...] = ()
    non_empty: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ARG_KINDS:
            raise ValueError(f"argument {self.name!r}: kind must be one of {ARG_KINDS}, got {self.kind!r}")
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError(f"argument {self.name!r}: kind 'choice' and choices go together")
        if (self.minimum is not None or self.maximum is not None) and self.kind not in ("integer", "number"):
            raise ValueError(f"argument {self.name!r}: minimum and maximum need kind 'integer' or 'number'")
        if self.non_empty and self.kind != "string":
            raise ValueError(f"argument {self.name!r}: non_empty needs kind 'string'")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def accepts_null(self) -> bool:
        return self.nullable or self.kind == "json"

    def describe(self) -> dict[str, Any]:
        """``{"type", "required", "nullable"}``, as ``--describe-methods`` prints it."""
        return {"type": self.kind, "required": self.required, "nullable": self.accepts_null}


class _SchemaReader(ArgReader):
    def read(self, arg: Arg) -> Any:
        """``arg``'s value (its default when absent), checked; marks it known for :meth:`finish`."""
        key, default, nullable = arg.name, arg.default, arg.nullable
        if arg.kind == "string":
            return self.string(key, default=default, nullable=nullable, non_empty=arg.non_empty)
        if arg.kind == "integer":
            low = None if arg.minimum is None else int(arg.minimum)
            high = None if arg.maximum is None else int(arg.maximum)
            return self.integer(key, default=default, minimum=low, maximum=high, nullable=nullable)
        if arg.kind == "number":
            return self.number(
                key, default=default, minimum=arg.minimum, maximum=arg.maximum, nullable=nullable
            )
        if arg.kind == "boolean":
            return self.boolean(key, default=default, nullable=nullable)
        if arg.kind == "choice":
            return self.choice(key, arg.choices, default=default, nullable=nullable)
        if arg.kind == "strings":
            return self.strings(key, default=default, nullable=nullable)
        if arg.kind == "object":
            return self.object(key, default=default, nullable=nullable)
        return self.json(key, default=default)


@dataclass(frozen=True)
class ParsedArgs:
    """The checked arguments (every declared one, defaults filled in), handed to the schema's ``build``."""

    method: str
    values: dict[str, Any]
    given: frozenset[str]
    """The names the request carried (to tell an explicit default from an absent argument)."""

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def fail(self, message: str) -> WorkerFailure:
        """A ``BAD_ARGUMENTS`` failure prefixed with the method's name, for checks across arguments."""
        return ArgReader(self.method, {}).fail_message(message)


Build = Callable[[ParsedArgs], Any]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(frozen=True)
class ArgsSchema:
    """A method's arguments: the declared fields, and ``build`` turning the checked values into what the
    handler gets.

    ``build`` is a dataclass whose fields are the arguments' names in snake case (``maxNewTokens`` ->
    ``max_new_tokens``), or a function of :class:`ParsedArgs` (cross-field checks and nested objects go
    there; raise ``parsed.fail(...)``). Without ``build`` the handler gets the values as a ``dict``, or
    ``None`` when the method takes no arguments.

    Usage: ``ArgsSchema((Arg("model", "string", non_empty=True),), build=itemgetter("model"))``
    """

    fields: tuple[Arg, ...] = ()
    build: type | Build | None = None

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"arguments declared twice: {duplicated}")
        if isinstance(self.build, type) and dataclasses.is_dataclass(self.build):
            expected = {f.name for f in dataclasses.fields(self.build) if f.init}
            got = {_snake(n) for n in names}
            if expected != got:
                raise ValueError(
                    f"{self.build.__name__} has fields {sorted(expected)}, the arguments give {sorted(got)}"
                )

    def parse(self, method: str, args: dict[str, Any]) -> Any:
        """Check ``args`` (raising ``BAD_ARGUMENTS``) and return what the handler gets."""
        if not args and not self.fields and self.build is None:
            return None  # no arguments declared and none given: nothing to read, nothing unknown to refuse
        reader = _SchemaReader(method, args)
        values = {arg.name: reader.read(arg) for arg in self.fields}
        reader.finish()
        if self.build is None:
            return dict(values) if self.fields else None
        if isinstance(self.build, type) and dataclasses.is_dataclass(self.build):
            return self.build(**{_snake(name): value for name, value in values.items()})
        return self.build(ParsedArgs(method, values, frozenset(args)))

    def describe(self) -> dict[str, dict[str, Any]]:
        """``{argName: {"type", "required", "nullable"}}``, names sorted."""
        return {arg.name: arg.describe() for arg in sorted(self.fields, key=lambda a: a.name)}


NO_ARGS = ArgsSchema()
"""The schema of a method that takes no arguments (any argument is rejected)."""
