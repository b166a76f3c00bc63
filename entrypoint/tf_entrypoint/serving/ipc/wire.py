"""Tensors in a region, and the small messages that describe them.

A message is one datagram on the lane's socket: ``marshal`` of plain data
(tuples, strings, numbers, bytes), never of objects, so decoding one runs no
code. Tensors travel in the lane's region, each described by a :data:`Slot`:

- ``RAW``: the values' bytes as their buffer holds them (array.array,
  memoryview, a NumPy array of any fixed-size dtype), with the buffer's item
  format and size; the reader gets a ``memoryview`` of the region, no copy,
  cast to that format where ``memoryview`` can (else bytes, which
  ``np.frombuffer`` reads by dtype, as the model layer does for v2's raw
  half and bfloat16);
- ``STRINGS``: DT_STRING's elements, their lengths (``Q``) then their bytes
  (the slot's item size is their count);
- ``LISTED``: values that are neither (a Python list of floats or ints), as
  ``marshal`` bytes.

Every slot is checked against the region before it is read: a message that
names bytes outside it is refused (:class:`WireError`), whatever sent it.
"""

from __future__ import annotations

import array
import marshal
from collections.abc import Callable, Mapping
from typing import Any

from tf_entrypoint.serving.core.types import Tensor, values_list
from tf_entrypoint.serving.ipc.region import aligned

RAW, STRINGS, LISTED = 0, 1, 2

#: (alias, dtype, shape, kind, offset, nbytes, format, itemsize)
Slot = tuple[str, str, tuple[int, ...], int, int, int, str, int]

#: Item formats memoryview can cast to (and give Python numbers back for).
CASTS = frozenset("?bBhHiIlLqQfd")

#: Wraps a RAW slot's memory as the values of a tensor (dtype, shape, view):
#: the engine's inputs stay memoryviews; a front-end's outputs may become
#: arrays again (the composition root hands over the model layer's wrapper).
Wrap = Callable[[str, tuple[int, ...], memoryview], Any]


class WireError(Exception):
    """A message that does not describe what a region holds."""


class Layout:
    """Where each tensor goes in a region, computed before anything is written."""

    __slots__ = ("end", "parts")

    def __init__(self, tensors: Mapping[str, Tensor], start: int = 0) -> None:
        self.parts: list[tuple[str, Tensor, int, Any, int, int, str, int]] = []
        offset = aligned(start)
        for alias, tensor in tensors.items():
            kind, payload, nbytes, fmt, itemsize = _payload(tensor)
            self.parts.append((alias, tensor, kind, payload, offset, nbytes, fmt, itemsize))
            offset = aligned(offset + nbytes)
        #: The first byte past the last tensor (aligned).
        self.end = offset

    def write(self, view: memoryview) -> tuple[Slot, ...]:
        """Write the tensors into `view` (at least `end` bytes); their slots."""
        slots: list[Slot] = []
        for alias, tensor, kind, payload, offset, nbytes, fmt, itemsize in self.parts:
            if kind == STRINGS:
                count = len(payload)
                lengths = array.array("Q", map(len, payload))
                head = offset + lengths.itemsize * count
                view[offset:head] = memoryview(lengths).cast("B")
                view[head : offset + nbytes] = b"".join(payload)
            elif nbytes:
                view[offset : offset + nbytes] = payload
            slots.append((alias, tensor.dtype, tuple(tensor.shape), kind, offset, nbytes, fmt,
                          itemsize))  # fmt: skip
        return tuple(slots)


def _payload(tensor: Tensor) -> tuple[int, Any, int, str, int]:
    """(kind, what to write, bytes, item format, item size) for one tensor."""
    values = tensor.values
    if tensor.dtype == "DT_STRING":
        items = values_list(values)
        if all(type(item) is bytes for item in items):
            return STRINGS, items, 8 * len(items) + sum(map(len, items)), "", len(items)
    else:
        try:
            view = memoryview(values)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            tobytes = getattr(values, "tobytes", None)
            if tobytes is not None:  # NumPy's bfloat16, float8, int4, the model's outputs
                data = tobytes()
                itemsize = getattr(getattr(values, "dtype", None), "itemsize", 1)
                return RAW, data, len(data), "B", itemsize
        else:
            if not view.c_contiguous:
                view = memoryview(view.tobytes())
            flat = view.cast("B") if view.ndim != 1 or view.format != "B" else view
            return RAW, flat, view.nbytes, view.format.lstrip("@=<"), view.itemsize
    data = marshal.dumps(values_list(values))
    return LISTED, data, len(data), "", 0


def read(
    slots: tuple[Slot, ...], view: memoryview, wrap: Wrap | None = None, *, copy: bool = False
) -> dict[str, Tensor]:
    """The tensors `slots` describe in `view` (a region's whole view).

    RAW values are views of the region, valid until it is written again, or
    with `copy` views of a copy; `wrap` turns them into what the reader
    wants, else they are cast to their item format where memoryview can.
    """
    size = len(view)
    tensors: dict[str, Tensor] = {}
    try:
        for alias, dtype, shape, kind, offset, nbytes, fmt, itemsize in slots:
            if not (0 <= offset <= offset + nbytes <= size):
                raise WireError(f"tensor {alias!r} at {offset}+{nbytes} is outside the region")
            part = view[offset : offset + nbytes]
            values: Any
            if kind == RAW:
                if copy:
                    part = memoryview(bytes(part))
                if wrap is not None:
                    values = wrap(dtype, shape, part)
                elif fmt in CASTS and itemsize and nbytes % itemsize == 0:
                    values = part.cast(fmt)  # type: ignore[call-overload]
                else:
                    values = part
            elif kind == STRINGS:
                values = _strings(alias, itemsize, part)
            elif kind == LISTED:
                values = marshal.loads(part)  # noqa: S302 - plain data from our own processes
            else:
                raise WireError(f"tensor {alias!r} has an unknown kind {kind!r}")
            tensors[alias] = Tensor(dtype, tuple(shape), values)
    except (TypeError, ValueError, EOFError) as err:
        raise WireError(f"a tensor that cannot be read: {err}") from err
    return tensors


def _strings(alias: str, count: int, part: memoryview) -> list[bytes]:
    nbytes = len(part)
    if not 0 <= 8 * count <= nbytes:
        raise WireError(f"string tensor {alias!r}: {count} lengths do not fit its slot")
    lengths = part[: 8 * count].cast("Q")
    at = 8 * count
    if at + sum(lengths) != nbytes:
        raise WireError(f"string tensor {alias!r}: its lengths do not add up to its slot")
    items: list[bytes] = []
    for length in lengths:
        items.append(bytes(part[at : at + length]))
        at += length
    return items


def dumps(message: tuple[Any, ...]) -> bytes:
    """A message's datagram."""
    return marshal.dumps(message)


def loads(datagram: bytes | memoryview) -> tuple[Any, ...]:
    """A datagram's message; WireError for one that is not a tuple of plain data."""
    try:
        message = marshal.loads(datagram)  # noqa: S302 - plain data, never code
    except (EOFError, ValueError, TypeError) as err:
        raise WireError(f"a message that cannot be read: {err}") from err
    if not isinstance(message, tuple):
        raise WireError(f"a message that is not a tuple: {type(message).__name__}")
    return message
