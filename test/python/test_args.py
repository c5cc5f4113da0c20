"""Declared method arguments (``protocol/args.py``): parsing, the messages of each mistake, and describe()."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from posttrain_worker.methods.models import LOAD_ARGS
from posttrain_worker.protocol.args import NO_ARGS, Arg, ArgsSchema, ParsedArgs
from posttrain_worker.protocol.errors import WorkerFailure


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    top_p: float
    stop: list[str]
    seed: int | None


SAMPLING = ArgsSchema(
    (
        Arg("maxNewTokens", "integer", minimum=1),
        Arg("topP", "number", default=1.0, maximum=1),
        Arg("stop", "strings", default=()),
        Arg("seed", "integer", default=None, minimum=0, nullable=True),
    ),
    build=Sampling,
)


def bad(schema: ArgsSchema, args: dict[str, Any]) -> str:
    with pytest.raises(WorkerFailure) as caught:
        schema.parse("m", args)
    assert caught.value.code == "BAD_ARGUMENTS"
    return caught.value.message


def test_builds_the_dataclass_with_defaults() -> None:
    assert SAMPLING.parse("m", {"maxNewTokens": 4}) == Sampling(4, 1.0, [], None)
    assert SAMPLING.parse("m", {"maxNewTokens": 4, "topP": 0.5, "stop": ["x"], "seed": None}) == Sampling(
        4, 0.5, ["x"], None
    )
    first, second = SAMPLING.parse("m", {"maxNewTokens": 1}), SAMPLING.parse("m", {"maxNewTokens": 1})
    assert first.stop is not second.stop  # a fresh list each time


def test_mistakes_name_the_argument() -> None:
    assert bad(SAMPLING, {}) == 'm: missing argument "maxNewTokens"'
    assert bad(SAMPLING, {"maxNewTokens": 0}) == 'm: "maxNewTokens" must be >= 1, got 0'
    assert bad(SAMPLING, {"maxNewTokens": True}) == 'm: "maxNewTokens" must be an integer, got true'
    assert bad(SAMPLING, {"maxNewTokens": 1, "topP": 2}) == 'm: "topP" must be <= 1, got 2'
    assert bad(SAMPLING, {"maxNewTokens": 1, "stop": [1]}) == 'm: "stop[0]" must be a string, got 1'
    assert bad(SAMPLING, {"maxNewTokens": 1, "seed": "x"}) == 'm: "seed" must be an integer or null, got "x"'
    assert bad(SAMPLING, {"maxNewTokens": 1, "topP": None}) == 'm: "topP" must be a finite number, got null'
    assert (
        bad(SAMPLING, {"maxNewTokens": 1, "top_p": 1, "x": 2})
        == 'm: unknown argument(s) "top_p", "x"; accepted: "maxNewTokens", "seed", "stop", "topP"'
    )
    assert bad(NO_ARGS, {"fast": True}) == 'm: unknown argument(s) "fast"; accepted: none'
    assert NO_ARGS.parse("m", {}) is None


def test_kinds_null_and_non_empty() -> None:
    schema = ArgsSchema(
        (
            Arg("model", "string", non_empty=True),
            Arg("clip", "number", default=1.0, nullable=True),
            Arg("mode", "choice", choices=("a", "b"), default="a"),
            Arg("flag", "boolean", default=False),
            Arg("config", "object", default=None),
            Arg("position", "json", default=None),
        )
    )
    assert schema.parse("m", {"model": "p"}) == {
        "model": "p",
        "clip": 1.0,
        "mode": "a",
        "flag": False,
        "config": None,
        "position": None,
    }
    got = schema.parse("m", {"model": "p", "clip": None, "config": {"k": 1}, "position": [1, {"a": None}]})
    assert got["clip"] is None and got["config"] == {"k": 1} and got["position"] == [1, {"a": None}]
    assert bad(schema, {"model": ""}) == 'm: "model" must be a non-empty string'
    assert bad(schema, {"model": "p", "mode": "c"}) == 'm: "mode" must be one of "a", "b", got "c"'
    assert bad(schema, {"model": "p", "flag": 1}) == 'm: "flag" must be true or false, got 1'
    assert bad(schema, {"model": "p", "config": []}) == 'm: "config" must be a JSON object, got []'


def test_build_function_checks_across_arguments() -> None:
    def build(parsed: ParsedArgs) -> tuple[int, bool]:
        if parsed["low"] > parsed["high"]:
            raise parsed.fail('"low" must not exceed "high"')
        return parsed["low"], "high" in parsed.given

    schema = ArgsSchema((Arg("low", "integer"), Arg("high", "integer", default=10)), build=build)
    assert schema.parse("m", {"low": 1}) == (1, False)
    assert schema.parse("m", {"low": 1, "high": 10}) == (1, True)
    assert bad(schema, {"low": 11}) == 'm: "low" must not exceed "high"'


def test_method_schemas_keep_their_messages() -> None:
    with pytest.raises(
        WorkerFailure, match='"maxModelLen" is an option of backend "vllm", not of "transformers"'
    ):
        LOAD_ARGS.parse("load_model", {"name": "a", "path": "p", "maxModelLen": 8})
    with pytest.raises(WorkerFailure, match='load_model: "name" must be a non-empty string'):
        LOAD_ARGS.parse("load_model", {"name": "", "path": "p"})


def test_declarations_are_checked() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        Arg("x", "float")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="choice"):
        Arg("x", "choice")
    with pytest.raises(ValueError, match="choice"):
        Arg("x", "string", choices=("a",))
    with pytest.raises(ValueError, match="minimum and maximum"):
        Arg("x", "string", minimum=0)
    with pytest.raises(ValueError, match="non_empty"):
        Arg("x", "integer", non_empty=True)
    with pytest.raises(ValueError, match="declared twice"):
        ArgsSchema((Arg("x", "integer"), Arg("x", "string")))
    with pytest.raises(ValueError, match="Sampling has fields"):
        ArgsSchema((Arg("maxNewTokens", "integer"),), build=Sampling)


def test_describe() -> None:
    assert SAMPLING.describe() == {
        "maxNewTokens": {"type": "integer", "required": True, "nullable": False},
        "seed": {"type": "integer", "required": False, "nullable": True},
        "stop": {"type": "strings", "required": False, "nullable": False},
        "topP": {"type": "number", "required": False, "nullable": False},
    }
    assert Arg("position", "json", default=None).describe() == {
        "type": "json",
        "required": False,
        "nullable": True,
    }
    assert NO_ARGS.describe() == {}
