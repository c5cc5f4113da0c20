"""The JSON field reader (``validation.py``): its reads, and the two wordings of its failures (a method's
arguments, a loss config)."""

from __future__ import annotations

from typing import Any

import pytest
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.validation import ArgReader, ConfigFields, FieldReader


def failure(read: Any) -> WorkerFailure:
    with pytest.raises(WorkerFailure) as caught:
        read()
    assert caught.value.code == "BAD_ARGUMENTS"
    return caught.value


def test_reads_and_defaults() -> None:
    reader = ArgReader("m", {"n": 2, "s": "x", "x": 1, "c": None, "p": 0.5, "j": [None]})
    assert reader.integer("n") == 2
    assert reader.string("s") == "x"
    assert reader.number("x") == 1.0 and isinstance(reader.number("x"), float)
    assert reader.number("missing", default=1.5) == 1.5
    assert reader.choice("c", ("a",), default="a", nullable=True) is None
    assert reader.pair("p", scalar=True) == (0.5, 0.5)
    assert reader.json("j") == [None]
    assert reader.strings("none", default=None) is None
    reader.finish()


def test_argument_wording() -> None:
    reader = ArgReader("m", {"n": 2, "extra": 1})
    reader.integer("n")
    assert failure(reader.finish).message == 'm: unknown argument(s) "extra"; accepted: "n"'
    assert failure(lambda: ArgReader("m", {}).number("x")).message == 'm: missing argument "x"'
    assert (
        failure(lambda: ArgReader("m", {"n": True}).integer("n")).message
        == 'm: "n" must be an integer, got true'
    )
    message = failure(lambda: ArgReader("m", {"n": "1"}).integer("n", nullable=True)).message
    assert message == 'm: "n" must be an integer or null, got "1"'
    assert failure(lambda: ArgReader("m", {"x": 2}).number("x", maximum=1)).details == {}


def test_a_section_names_its_fields_in_full() -> None:
    reader = ArgReader("trainer_create", {"lr": -1, "typo": 0}, section="optimizer")
    assert failure(lambda: reader.number("lr", minimum=0)).message == (
        'trainer_create: "optimizer.lr" must be >= 0, got -1'
    )
    assert failure(reader.finish).message == (
        'trainer_create: unknown argument(s) "optimizer.typo"; accepted: "optimizer.lr"'
    )
    betas = ArgReader("t", {"betas": [0.9, 1.5]}, section="optimizer")
    assert failure(lambda: betas.pair("betas", within=(0, 1))).message == (
        't: "optimizer.betas" must be two numbers in [0, 1), got [0.9,1.5]'
    )
    not_object = failure(lambda: ArgReader("t", "adam", section="optimizer"))
    assert not_object.message == 't: "optimizer" must be a JSON object, got "adam"'


def test_config_wording_names_the_field_in_the_details() -> None:
    bad = failure(lambda: ConfigFields({"beta": 0}, "loss").number("beta", default=0.1, greater_than=0))
    assert bad.message == "loss.beta must be > 0, got 0" and bad.details == {"field": "loss.beta"}
    fields = ConfigFields({"type": "sft", "a": 1, "b": 2}, "loss")
    fields.choice("type", ("sft",))
    unknown = failure(lambda: fields.finish("sft"))
    assert unknown.message == 'loss.a is not a field of type "sft" (nor "b"); accepted: "type"'
    assert unknown.details == {"field": "loss.a"}
    assert failure(lambda: ConfigFields([], "loss")).message == "loss must be a JSON object, got []"


@pytest.mark.parametrize("reader", [ArgReader("m", {"k": "x"}), ConfigFields({"k": "x"}, "loss")])
def test_both_wordings_share_the_checks(reader: FieldReader) -> None:
    message = failure(lambda: reader.choice("k", ("a", "b"))).message
    assert message.endswith('must be one of "a", "b", got "x"')
