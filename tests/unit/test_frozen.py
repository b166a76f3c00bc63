"""tf_entrypoint.frozen behaves like @dataclass(frozen=True) wherever the plan relies on it.

Each behaviour is checked against a real frozen dataclass declared the same
way, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.frozen import FrozenInstanceError, fields, frozen, replace


@frozen
class Point:
    x: int
    y: int = 0
    label: str = "p"


@dataclasses.dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 0
    label: str = "p"


@frozen
class Labelled(Point):
    colour: str = "red"

    def __str__(self) -> str:
        return f"{self.label}@{self.x},{self.y}"


def test_fields_in_declaration_order_base_first() -> None:
    assert fields(Point) == ("x", "y", "label")
    assert fields(Labelled(1)) == ("x", "y", "label", "colour")
    assert fields(Point) == tuple(f.name for f in dataclasses.fields(DataPoint))


@given(st.integers(), st.integers(), st.text())
def test_same_values_repr_equality_and_hash_as_a_dataclass(x: int, y: int, label: str) -> None:
    ours, theirs = Point(x, y=y, label=label), DataPoint(x, y=y, label=label)
    assert (ours.x, ours.y, ours.label) == (theirs.x, theirs.y, theirs.label)
    assert repr(ours) == repr(theirs).replace("DataPoint", "Point")
    assert ours == Point(x, y, label)
    assert hash(ours) == hash(Point(x, y, label))
    assert ours != Point(x, y + 1, label)


def test_defaults_positional_and_keyword() -> None:
    assert Point(1) == Point(x=1, y=0, label="p")
    assert Labelled(1, 2, "q", "blue").colour == "blue"
    assert Labelled(x=3).label == "p"


def test_equality_needs_the_same_class() -> None:
    assert Point(1) != Labelled(1)
    same_values: object = (1, 0, "p")
    assert Point(1) != same_values
    assert Point(1).__eq__(DataPoint(1)) is NotImplemented


def test_frozen_like_a_dataclass() -> None:
    point = Point(1)
    with pytest.raises(FrozenInstanceError, match="'x'"):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del point.y
    with pytest.raises(AttributeError):
        point.new = 1  # type: ignore[attr-defined]
    assert issubclass(FrozenInstanceError, AttributeError)
    assert point == Point(1)


def test_replace() -> None:
    point = Labelled(1, colour="green")
    moved = replace(point, y=5)
    assert moved == Labelled(1, 5, "p", "green")
    assert type(moved) is Labelled
    assert point.y == 0
    with pytest.raises(TypeError, match="no field 'z'"):
        replace(point, z=1)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing required argument 'x'"),
        ((1, 2, "a", "b"), {}, "takes 3 arguments but 4 were given"),
        ((1,), {"x": 2}, "multiple values for argument 'x'"),
        ((1,), {"z": 2}, "unexpected keyword argument 'z'"),
    ],
)
def test_bad_arguments_are_type_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)
    with pytest.raises(TypeError):
        DataPoint(*args, **kwargs)


def test_own_methods_are_kept() -> None:
    assert str(Labelled(1, 2)) == "p@1,2"


def test_a_required_field_after_a_default_is_refused() -> None:
    with pytest.raises(TypeError, match="'b' without a default follows one"):

        @frozen
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]
