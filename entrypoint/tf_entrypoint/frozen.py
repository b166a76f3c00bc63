"""``@frozen``: frozen-dataclass semantics without importing ``dataclasses``.

``dataclasses`` imports ``inspect`` and execs every method: it was most of the
entrypoint's start-up (docs/benchmarks.md, overhead). ``@frozen`` gives an
``__init__`` (positional or keyword, declaration order, immutable class-level
defaults), immutability (:class:`FrozenInstanceError`), value equality, a
matching hash and repr, :func:`replace` and :func:`fields`; type checkers see
a frozen dataclass (PEP 681). tests/unit/test_frozen.py compares it with dataclasses.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
else:

    def dataclass_transform(**_options: object) -> object:
        return lambda decorator: decorator


_FIELDS = "__frozen_fields__"
_MISSING = object()


class FrozenInstanceError(AttributeError):
    """An attempt to change a frozen record."""


def fields(record: object) -> tuple[str, ...]:
    """The field names of a frozen record (or class), in ``__init__`` order."""
    names: tuple[str, ...] = getattr(record, _FIELDS)
    return names


def replace(record: T, /, **changes: Any) -> T:
    """A copy of ``record`` with some fields changed (as ``dataclasses.replace``)."""
    names = fields(record)
    unknown = sorted(set(changes) - set(names))
    if unknown:
        raise TypeError(f"{type(record).__qualname__} has no field {unknown[0]!r}")
    values = {name: changes.get(name, getattr(record, name)) for name in names}
    return type(record)(**values)


def _init(self: object, *args: object, **kwargs: object) -> None:
    cls = type(self)
    names: tuple[str, ...] = getattr(cls, _FIELDS)
    if len(args) > len(names):
        raise TypeError(
            f"{cls.__qualname__}() takes {len(names)} arguments but {len(args)} were given"
        )
    values = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name not in names:
            raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {name!r}")
        if name in values:
            raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
        values[name] = value
    for name in names:
        value = values.get(name, _MISSING)
        if value is _MISSING:
            value = getattr(cls, name, _MISSING)
            if value is _MISSING:
                raise TypeError(f"{cls.__qualname__}() missing required argument {name!r}")
        object.__setattr__(self, name, value)


def _setattr(self: object, name: str, _value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r} of a frozen record")


def _delattr(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r} of a frozen record")


def _values(self: object) -> tuple[object, ...]:
    return tuple(getattr(self, name) for name in getattr(self, _FIELDS))


def _eq(self: object, other: object) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: object) -> int:
    return hash(_values(self))


def _repr(self: object) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in getattr(self, _FIELDS))
    return f"{type(self).__qualname__}({shown})"


@dataclass_transform(frozen_default=True)
def frozen(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen record (see the module docstring)."""
    names: list[str] = list(getattr(cls, _FIELDS, ()))  # inherited fields first
    for name in cls.__dict__.get("__annotations__", {}):  # noqa: RUF063 - no inspect here
        if name not in names:
            names.append(name)
    seen_default = False
    for name in names:
        has_default = hasattr(cls, name)
        if seen_default and not has_default:
            raise TypeError(f"{cls.__qualname__}: field {name!r} without a default follows one")
        seen_default = seen_default or has_default
    methods: dict[str, Callable[..., Any]] = {
        "__init__": _init,
        "__setattr__": _setattr,
        "__delattr__": _delattr,
        "__eq__": _eq,
        "__hash__": _hash,
    }
    if "__repr__" not in cls.__dict__:
        methods["__repr__"] = _repr
    for name, method in methods.items():
        setattr(cls, name, method)
    setattr(cls, _FIELDS, tuple(names))
    setattr(cls, "__match_args__", tuple(names))  # noqa: B010 - mypy: read-only in type
    return cls
