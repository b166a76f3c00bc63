"""ipc/wire.py: tensors written into a region come back as they were; bad slots are refused."""

from __future__ import annotations

import array
import marshal
from collections.abc import Iterator
from typing import Any

import pytest

from tf_entrypoint.serving.core.types import Tensor
from tf_entrypoint.serving.ipc import wire
from tf_entrypoint.serving.ipc.region import ALIGN, Region


@pytest.fixture
def region() -> Iterator[Region]:
    made = Region.create(1 << 16)
    yield made
    made.close()


def roundtrip(
    tensors: Any, region: Region, **kw: Any
) -> tuple[wire.Layout, tuple[wire.Slot, ...], dict[str, Tensor]]:
    layout = wire.Layout(tensors, kw.pop("start", 0))
    slots = layout.write(region.view)
    return layout, slots, wire.read(slots, region.view, **kw)


def test_every_kind_comes_back_as_it_was_written(region: Region) -> None:
    tensors = {
        "floats": Tensor("DT_FLOAT", (2, 3), array.array("f", [1.5, -2.0, 3.25, 0.0, 1e-3, 7.0])),
        "ints": Tensor("DT_INT64", (3,), array.array("q", [-(2**63), 0, 2**63 - 1])),
        "text": Tensor("DT_STRING", (3,), [b"", b"caf\xc3\xa9", b"\x00" * 300]),
        "halves": Tensor("DT_HALF", (2,), [0.5, 65504.0]),  # REST's half: a Python list
        "bits": Tensor("DT_BFLOAT16", (2,), memoryview(array.array("H", [0x3F80, 0xC000]))),
        "empty": Tensor("DT_INT32", (0, 4), array.array("i")),
    }
    _, _, back = roundtrip(tensors, region)
    assert back.keys() == tensors.keys()
    for alias, sent in tensors.items():
        got = back[alias]
        assert (got.dtype, got.shape) == (sent.dtype, sent.shape), alias
        assert list(got.values) == list(sent.values), alias
    assert isinstance(back["floats"].values, memoryview)
    assert isinstance(back["bits"].values, memoryview)
    assert back["floats"].values.format == "f"
    assert back["bits"].values.format == "H"  # v2's raw half and bfloat16: their bits


def test_raw_values_are_views_of_the_region_unless_copied(region: Region) -> None:
    tensors = {"x": Tensor("DT_FLOAT", (2,), array.array("f", [1.0, 2.0]))}
    _, _, shared = roundtrip(tensors, region)
    _, _, copied = roundtrip(tensors, region, copy=True)
    region.view[: region.size] = bytes(region.size)  # the region is written again
    assert list(shared["x"].values) == [0.0, 0.0]
    assert list(copied["x"].values) == [1.0, 2.0]


def test_slots_are_aligned_and_start_where_asked(region: Region) -> None:
    tensors = {
        "a": Tensor("DT_INT8", (3,), array.array("b", [1, 2, 3])),
        "b": Tensor("DT_DOUBLE", (1,), array.array("d", [2.5])),
    }
    layout, slots, _ = roundtrip(tensors, region, start=100)
    offsets = [slot[4] for slot in slots]
    assert offsets == [128, 192]
    assert all(offset % ALIGN == 0 for offset in offsets)
    assert layout.end == 256


def test_a_buffer_without_a_format_memoryview_knows_goes_as_its_bytes(region: Region) -> None:
    class NoBuffer:  # as NumPy's bfloat16 arrays: tobytes() and a dtype, no buffer protocol
        class dtype:
            itemsize = 2

        def tobytes(self: Any) -> bytes:
            return b"\x80\x3f\x00\xc0"

    _, slots, back = roundtrip({"x": Tensor("DT_BFLOAT16", (2,), NoBuffer())}, region)  # type: ignore[arg-type]
    assert slots[0][3] == wire.RAW
    assert bytes(back["x"].values) == b"\x80\x3f\x00\xc0"


def test_wrap_makes_the_readers_values(region: Region) -> None:
    seen = []

    def wrap(dtype: Any, shape: Any, view: Any) -> tuple[str, bytes]:
        seen.append((dtype, shape, view.nbytes))
        return ("wrapped", bytes(view))

    _, _, back = roundtrip({"x": Tensor("DT_FLOAT", (1,), array.array("f", [1.0]))}, region,
                           wrap=wrap)  # fmt: skip
    assert seen == [("DT_FLOAT", (1,), 4)]
    assert back["x"].values == ("wrapped", array.array("f", [1.0]).tobytes())


@pytest.mark.parametrize(
    "slot",
    [
        ("x", "DT_FLOAT", (1,), wire.RAW, 1 << 16, 4, "f", 4),  # past the end
        ("x", "DT_FLOAT", (1,), wire.RAW, -8, 4, "f", 4),  # before the start
        ("x", "DT_STRING", (1,), wire.STRINGS, 0, 8, "", 5),  # more lengths than fit
        ("x", "DT_FLOAT", (1,), 9, 0, 4, "f", 4),  # no such kind
        ("x", "DT_FLOAT", (1,), wire.LISTED, 0, 4, "", 0),  # not marshal data
    ],
)
def test_a_slot_that_does_not_describe_the_region_is_refused(
    region: Region, slot: wire.Slot
) -> None:
    region.view[:8] = b"\xff" * 8
    with pytest.raises(wire.WireError):
        wire.read((slot,), region.view)


def test_string_lengths_that_do_not_add_up_are_refused(region: Region) -> None:
    region.view[:8] = (1000).to_bytes(8, "little")
    with pytest.raises(wire.WireError, match="add up"):
        wire.read((("x", "DT_STRING", (1,), wire.STRINGS, 0, 16, "", 1),), region.view)


def test_messages_are_plain_data() -> None:
    message = ("predict", ("m", 1, None), (), 0, 12.5, 7)
    assert wire.loads(wire.dumps(message)) == message
    with pytest.raises(wire.WireError, match="not a tuple"):
        wire.loads(marshal.dumps([1, 2]))
    with pytest.raises(wire.WireError, match="cannot be read"):
        wire.loads(b"\xff\x00garbage")
