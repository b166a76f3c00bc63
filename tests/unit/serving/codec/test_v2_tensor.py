"""Open Inference Protocol tensors (codec/v2_tensor.py): datatypes, raw bytes,
JSON data and gRPC typed contents, without NumPy (struct and array checks)."""

from __future__ import annotations

import array
import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.serving.codec import v2_tensor as v2
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.types import Tensor, TensorSpec

LIMIT = 1 << 20

PAIRS = {
    "BOOL": "DT_BOOL",
    "UINT8": "DT_UINT8",
    "UINT16": "DT_UINT16",
    "UINT32": "DT_UINT32",
    "UINT64": "DT_UINT64",
    "INT8": "DT_INT8",
    "INT16": "DT_INT16",
    "INT32": "DT_INT32",
    "INT64": "DT_INT64",
    "FP16": "DT_HALF",
    "FP32": "DT_FLOAT",
    "FP64": "DT_DOUBLE",
    "BYTES": "DT_STRING",
    "BF16": "DT_BFLOAT16",
}
#: struct formats and sizes the raw encoding must use (little-endian).
FORMATS = {
    "BOOL": ("?", 1),
    "UINT8": ("B", 1),
    "UINT16": ("H", 2),
    "UINT32": ("I", 4),
    "UINT64": ("Q", 8),
    "INT8": ("b", 1),
    "INT16": ("h", 2),
    "INT32": ("i", 4),
    "INT64": ("q", 8),
    "FP16": ("e", 2),
    "FP32": ("f", 4),
    "FP64": ("d", 8),
    "BF16": ("H", 2),
}
#: Values of each datatype, exact in it.
SAMPLES: dict[str, list[Any]] = {
    "BOOL": [True, False, True, True, False, False],
    "UINT8": [0, 1, 2, 128, 254, 255],
    "UINT16": [0, 1, 300, 2**15, 65534, 65535],
    "UINT32": [0, 1, 70000, 2**31, 2**32 - 2, 2**32 - 1],
    "UINT64": [0, 1, 2**40, 2**63, 2**64 - 2, 2**64 - 1],
    "INT8": [-128, -1, 0, 1, 100, 127],
    "INT16": [-(2**15), -1, 0, 1, 1000, 2**15 - 1],
    "INT32": [-(2**31), -1, 0, 1, 10**9, 2**31 - 1],
    "INT64": [-(2**63), -1, 0, 1, 10**18, 2**63 - 1],
    "FP16": [0.0, -1.5, 0.0999755859375, 65504.0, -65504.0, 1.0],
    "FP32": [0.0, -1.5, 0.10000000149011612, 3.4028234663852886e38, 1.401298464324817e-45, 2.0],
    "FP64": [0.0, -1.5, 0.1, 1.7976931348623157e308, 5e-324, 2.0],
    "BF16": [0.0, -1.5, 0.10009765625, 1.0, 256.0, -3.0],
    "BYTES": [b"", b"a", "é".encode(), b"xyz", b"0123456789", b" "],
}


def raises(message: str, code: Code = Code.INVALID_ARGUMENT) -> Any:
    class _Check:
        def __enter__(self) -> None:
            return None

        def __exit__(self, kind: Any, err: Any, tb: Any) -> bool:
            assert isinstance(err, ServingError), f"no ServingError: {err!r}"
            assert err.code is code, err
            assert message in err.message, err.message
            return True

    return _Check()


def pack(datatype: str, values: list[Any]) -> bytes:
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(v)) + v for v in values)
    if datatype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    fmt, _ = FORMATS[datatype]
    return struct.pack(f"<{len(values)}{fmt}", *values)


# --------------------------------------------------------------------------
# Datatypes


def test_the_table_pairs_every_datatype_with_its_tensorflow_dtype() -> None:
    assert {name: d.dtype for name, d in v2.DATATYPES.items()} == PAIRS
    for name, dtype in PAIRS.items():
        assert v2.v2_datatype(dtype) == name
        assert v2.tf_dtype(name) == dtype
    for name, (fmt, size) in FORMATS.items():
        assert v2.DATATYPES[name].format == fmt
        assert v2.DATATYPES[name].itemsize == size == struct.calcsize(fmt)


def test_contents_fields_follow_the_protocol() -> None:
    assert v2.CONTENTS_FIELD == {
        "BOOL": "bool_contents",
        "UINT8": "uint_contents",
        "UINT16": "uint_contents",
        "UINT32": "uint_contents",
        "UINT64": "uint64_contents",
        "INT8": "int_contents",
        "INT16": "int_contents",
        "INT32": "int_contents",
        "INT64": "int64_contents",
        "FP32": "fp32_contents",
        "FP64": "fp64_contents",
        "BYTES": "bytes_contents",
    }


def test_a_dtype_without_an_equivalent_keeps_its_tensorflow_name() -> None:
    assert v2.v2_datatype("DT_COMPLEX64") == "COMPLEX64"
    assert v2.v2_datatype("DT_RESOURCE") == "RESOURCE"
    with raises("datatype COMPLEX64 has no Open Inference Protocol equivalent"):
        v2.tf_dtype("COMPLEX64")


def test_an_unknown_datatype_names_the_valid_ones() -> None:
    with raises('unknown datatype "FLOAT32"; the Open Inference Protocol\'s datatypes are BOOL,'):
        v2.tf_dtype("FLOAT32")
    with raises("BYTES, BF16"):
        v2.tf_dtype("fp32")


def test_check_datatype_names_both() -> None:
    v2.check_datatype("x", "FP32", TensorSpec("DT_FLOAT", (2,)))
    with raises("input 'x' has datatype FP64; the model's signature expects FP32"):
        v2.check_datatype("x", "FP64", TensorSpec("DT_FLOAT", (2,)))


def test_check_shape_rank_and_fixed_dims() -> None:
    spec = TensorSpec("DT_FLOAT", (-1, 3))
    v2.check_shape("x", [2, 3], spec)
    v2.check_shape("x", [0, 3], spec)
    v2.check_shape("x", [7, 1, 2], TensorSpec("DT_FLOAT", None))
    with raises("input 'x' has shape [2,4]; the signature expects [-1,3]"):
        v2.check_shape("x", [2, 4], spec)
    with raises("input 'x' has shape [6]; the signature expects [-1,3]"):
        v2.check_shape("x", [6], spec)
    with raises("input 'x' has shape []; the signature expects [-1,3]"):
        v2.check_shape("x", [], spec)


@pytest.mark.parametrize("shape", [[-1, 2], [1.5], ["2"], [True], "2", None, [0] * 255])
def test_a_bad_shape_is_refused(shape: Any) -> None:
    with raises("input 'x': shape "):
        v2.from_json("x", "FP32", shape, [], LIMIT)
    with raises("is not a list of at most 254 non-negative integers"):
        v2.from_raw("x", "FP32", shape, b"", LIMIT)


# --------------------------------------------------------------------------
# Raw bytes


@pytest.mark.parametrize("datatype", list(PAIRS))
def test_raw_round_trip_of_every_datatype(datatype: str) -> None:
    values = SAMPLES[datatype]
    raw = pack(datatype, values)
    tensor = v2.from_raw("x", datatype, [2, 3], raw, LIMIT)
    assert tensor.dtype == PAIRS[datatype]
    assert tensor.shape == (2, 3)
    assert len(tensor.values) == 6
    if datatype == "BYTES":
        assert tensor.values == values
    else:
        assert isinstance(tensor.values, memoryview)
        assert tensor.values.itemsize == FORMATS[datatype][1]
        if datatype not in ("FP16", "BF16"):
            assert tensor.values.tolist() == values
    assert v2.to_raw(tensor) == raw
    data = [v.decode() for v in values] if datatype == "BYTES" else values
    assert v2.to_json_data(tensor) == data


def test_raw_values_are_a_view_of_the_body_without_a_copy() -> None:
    body = bytearray(pack("FP32", [1.0, 2.0]))
    tensor = v2.from_raw("x", "FP32", [2], memoryview(body), LIMIT)
    body[0:4] = struct.pack("<f", 5.0)
    assert list(tensor.values) == [5.0, 2.0]


def test_bf16_raw_round_trip_keeps_the_bits() -> None:
    bits = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0x3F80, 0x0001, 0xFFFF]
    raw = struct.pack("<8H", *bits)
    tensor = v2.from_raw("x", "BF16", [8], raw, LIMIT)
    assert tensor.values.tolist() == bits  # type: ignore[attr-defined]
    assert v2.to_raw(tensor) == raw
    data = v2.to_json_data(tensor)
    assert data[5] == 1.0
    assert data[2] == math.inf
    assert math.isnan(data[4])


def test_bf16_and_fp16_outputs_as_floats_pack_to_their_bits() -> None:
    floats = [1.0, -2.5, 0.1, math.inf]
    bf16 = v2.to_raw(Tensor("DT_BFLOAT16", (4,), floats))
    assert struct.unpack("<4H", bf16) == (0x3F80, 0xC020, 0x3DCD, 0x7F80)
    half = v2.to_raw(Tensor("DT_HALF", (4,), floats))
    assert half == struct.pack("<4e", *floats)
    assert math.isnan(struct.unpack("<e", v2.to_raw(Tensor("DT_HALF", (1,), [math.nan])))[0])
    assert v2.to_raw(Tensor("DT_BFLOAT16", (1,), [math.nan])) == struct.pack("<H", 0x7FC0)


@given(st.lists(st.integers(0, 0xFFFF), max_size=20))
def test_bf16_bits_survive_any_round_trip(bits: list[int]) -> None:
    raw = struct.pack(f"<{len(bits)}H", *bits)
    assert v2.to_raw(v2.from_raw("x", "BF16", [len(bits)], raw, LIMIT)) == raw


@given(st.lists(st.floats(width=32), max_size=20))
def test_fp32_raw_round_trip(values: list[float]) -> None:
    raw = struct.pack(f"<{len(values)}f", *values)
    tensor = v2.from_raw("x", "FP32", [len(values)], raw, LIMIT)
    assert v2.to_raw(tensor) == raw


@given(st.lists(st.binary(max_size=8), max_size=10))
def test_bytes_raw_round_trip(values: list[bytes]) -> None:
    raw = pack("BYTES", values)
    tensor = v2.from_raw("s", "BYTES", [len(values)], raw, LIMIT)
    assert tensor.values == values
    assert v2.to_raw(tensor) == raw


def test_bytes_raw_encoding_is_length_prefixed_little_endian() -> None:
    tensor = Tensor("DT_STRING", (2,), [b"ab", b""])
    assert v2.to_raw(tensor) == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"


def test_raw_size_mismatch_names_the_input_and_sizes() -> None:
    with raises(
        "input 'x': shape [2,3] holds 6 FP32 values (24 bytes), the binary data has 20 bytes"
    ):
        v2.from_raw("x", "FP32", [2, 3], bytes(20), LIMIT)
    with raises("input 'b': shape [1] holds 1 BOOL value (1 bytes), the binary data has 0"):
        v2.from_raw("b", "BOOL", [1], b"", LIMIT)


def test_raw_bytes_errors() -> None:
    with raises("input 's': BYTES element 1 has 2 bytes left for its 4-byte length"):
        v2.from_raw("s", "BYTES", [2], pack("BYTES", [b"a"]) + b"\x00\x00", LIMIT)
    with raises("input 's': BYTES element 0 has length 9, but only 2 bytes"):
        v2.from_raw("s", "BYTES", [1], struct.pack("<I", 9) + b"ab", LIMIT)
    with raises("input 's': shape [3] holds 3 BYTES values, the binary data has 2"):
        v2.from_raw("s", "BYTES", [3], pack("BYTES", [b"a", b"b"]), LIMIT)
    with raises("input 's': shape [1] holds 1 BYTES values, the binary data has 5 bytes after"):
        v2.from_raw("s", "BYTES", [1], pack("BYTES", [b"a", b"b"]), LIMIT)


def test_a_huge_declared_shape_is_refused_before_anything_is_built() -> None:
    too_large = "input 'x' of shape [1000000000000,1000] (FP32) would take 4000000000000000 bytes"
    with raises(too_large, Code.RESOURCE_EXHAUSTED):
        v2.from_raw("x", "FP32", [10**12, 1000], b"", LIMIT)
    with raises(too_large, Code.RESOURCE_EXHAUSTED):
        v2.from_json("x", "FP32", [10**12, 1000], [], LIMIT)
    with raises("would take 1600000000000 bytes", Code.RESOURCE_EXHAUSTED):
        v2.from_raw("s", "BYTES", [10**11], b"", LIMIT)
    with raises("more than the limit of 1048576 bytes", Code.RESOURCE_EXHAUSTED):
        v2.from_contents("x", "INT64", [10**9], [], LIMIT)
    # within the limit: exactly at it
    assert len(v2.from_raw("x", "UINT8", [LIMIT], bytes(LIMIT), LIMIT).values) == LIMIT


def test_an_output_without_an_equivalent_is_refused() -> None:
    tensor = Tensor("DT_COMPLEX64", (1,), [1j])
    for write in (v2.to_raw, v2.to_json_data, v2.to_contents):
        with raises("datatype COMPLEX64 has no Open Inference Protocol equivalent"):
            write(tensor)


def test_to_raw_packs_sequences_without_tobytes_and_repacks_mismatched_arrays() -> None:
    assert v2.to_raw(Tensor("DT_INT32", (2,), [1, -1])) == struct.pack("<2i", 1, -1)
    assert v2.to_raw(Tensor("DT_BOOL", (3,), array.array("B", [1, 0, 1]))) == b"\x01\x00\x01"
    assert v2.to_raw(Tensor("DT_BOOL", (2,), [True, False])) == b"\x01\x00"
    # a float32 output held as doubles is packed as float32
    assert v2.to_raw(Tensor("DT_FLOAT", (1,), array.array("d", [1.5]))) == struct.pack("<f", 1.5)


# --------------------------------------------------------------------------
# JSON data


@pytest.mark.parametrize("datatype", list(PAIRS))
def test_json_round_trip_of_every_datatype(datatype: str) -> None:
    values = SAMPLES[datatype]
    data = [v.decode() for v in values] if datatype == "BYTES" else values
    tensor = v2.from_json("x", datatype, [2, 3], data, LIMIT)
    assert tensor.dtype == PAIRS[datatype]
    assert tensor.shape == (2, 3)
    assert list(tensor.values) == values
    code = v2.DATATYPES[datatype].typecode
    if code:
        assert isinstance(tensor.values, array.array)
        assert tensor.values.typecode == code
    else:
        assert isinstance(tensor.values, list)
    assert v2.to_json_data(tensor) == data
    if datatype != "BYTES":
        assert v2.to_raw(tensor) == pack(datatype, values)


def test_nested_and_flat_data_give_the_same_tensor() -> None:
    flat = v2.from_json("x", "INT32", [2, 2, 2], [1, 2, 3, 4, 5, 6, 7, 8], LIMIT)
    nested = v2.from_json("x", "INT32", [2, 2, 2], [[[1, 2], [3, 4]], [[5, 6], [7, 8]]], LIMIT)
    assert flat == nested
    scalar = v2.from_json("x", "FP32", [], 2.5, LIMIT)
    assert scalar.shape == ()
    assert list(scalar.values) == [2.5]
    assert v2.from_json("x", "FP32", [0, 3], [], LIMIT).values == array.array("f")


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=12))
def test_int64_json_round_trip(values: list[int]) -> None:
    tensor = v2.from_json("x", "INT64", [len(values)], values, LIMIT)
    assert v2.to_json_data(tensor) == values
    back = v2.from_raw("x", "INT64", [len(values)], v2.to_raw(tensor), LIMIT)
    assert back.values.tolist() == values  # type: ignore[attr-defined]


@given(st.lists(st.floats(allow_nan=False), max_size=12))
def test_fp64_json_round_trip(values: list[float]) -> None:
    tensor = v2.from_json("x", "FP64", [len(values)], values, LIMIT)
    assert v2.to_json_data(tensor) == values


def test_json_count_mismatch() -> None:
    with raises("input 'x': shape [2,3] holds 6 FP32 values, the data has 5"):
        v2.from_json("x", "FP32", [2, 3], [1.0] * 5, LIMIT)
    with raises("input 'x': shape [2] holds 2 INT8 values, the data has 3"):
        v2.from_json("x", "INT8", [2], [[1], [2, 3]], LIMIT)


def test_json_nesting_deeper_than_the_limit_is_refused() -> None:
    data: Any = [1]
    for _ in range(40):
        data = [data]
    with raises("input 'x': data nests lists deeper than 32 levels"):
        v2.from_json("x", "INT32", [1], data, LIMIT)


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        ("BOOL", [True, 1], "data element 1 is 1; expected true or false"),
        ("BOOL", ["true"], 'data element 0 is "true"; expected true or false'),
        ("INT8", [1, 128], "data element 1 is 128; expected an integer in [-128, 127] (INT8)"),
        ("UINT8", [-1], "data element 0 is -1; expected an integer in [0, 255] (UINT8)"),
        ("UINT16", [65536], "data element 0 is 65536; expected an integer in [0, 65535] (UINT16)"),
        ("INT32", [1.0], "data element 0 is 1.0; expected an integer in [-2147483648,"),
        ("INT64", [True], "data element 0 is true; expected an integer"),
        ("UINT64", [2**64], "data element 0 is 18446744073709551616; expected an integer in [0,"),
        ("INT16", [None], "data element 0 is null; expected an integer"),
        ("FP32", [1.0, True], "data element 1 is true; expected a number within ±3.40282e+38"),
        ("FP32", [3.5e38], "data element 0 is 3.5e+38; expected a number within ±3.40282e+38"),
        ("FP16", [1.0, 70000], "data element 1 is 70000; expected a number within ±65504"),
        ("BF16", ["1"], 'data element 0 is "1"; expected a number'),
        ("FP64", [10**400], "data element 0 is 1000000000"),
        ("BYTES", ["a", 1], "data element 1 is 1; expected a string"),
        ("BYTES", [{"b64": "YQ=="}], 'data element 0 is {"b64": "YQ=="}; expected a string'),
    ],
)
def test_json_value_errors_name_input_index_value_and_expectation(
    datatype: str, data: list[Any], message: str
) -> None:
    with raises(f"input 'x': {message}"):
        v2.from_json("x", datatype, [len(data)], data, LIMIT)


def test_json_floats_accept_ints_and_non_finite_values() -> None:
    tensor = v2.from_json("x", "FP32", [3], [1, math.inf, math.nan], LIMIT)
    assert tensor.values[0] == 1.0
    assert tensor.values[1] == math.inf
    assert math.isnan(tensor.values[2])
    half = v2.from_json("x", "FP16", [2], [1, 0.5], LIMIT)
    assert half.values == [1.0, 0.5]


def test_json_bytes_refuses_a_lone_surrogate() -> None:
    with raises("is not valid Unicode (lone surrogate)"):
        v2.from_json("x", "BYTES", [1], ["\ud800"], LIMIT)


def test_json_output_of_bytes_that_are_not_utf8_asks_for_binary_data() -> None:
    tensor = Tensor("DT_STRING", (2,), [b"ok", b"\xff"])
    with raises("output element 1 is not valid UTF-8 and cannot be written as JSON; ask for"):
        v2.to_json_data(tensor)


def test_json_output_of_objects_with_tolist() -> None:
    class Values(list[Any]):
        def tolist(self) -> list[Any]:
            return list(self)

    assert v2.to_json_data(Tensor("DT_BOOL", (2,), array.array("B", [1, 0]))) == [True, False]
    assert v2.to_json_data(Tensor("DT_FLOAT", (2,), Values([0.5, 1.0]))) == [0.5, 1.0]


# --------------------------------------------------------------------------
# gRPC typed contents


@pytest.mark.parametrize("datatype", [d for d in PAIRS if d not in ("FP16", "BF16")])
def test_contents_round_trip_of_every_datatype(datatype: str) -> None:
    values = SAMPLES[datatype]
    tensor = v2.from_contents("x", datatype, [3, 2], values, LIMIT)
    assert tensor.dtype == PAIRS[datatype]
    assert tensor.shape == (3, 2)
    assert list(tensor.values) == values
    assert v2.to_contents(tensor) == (v2.CONTENTS_FIELD[datatype], values)
    if datatype != "BYTES":
        assert v2.to_raw(tensor) == pack(datatype, values)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_and_bfloat16_have_no_contents(datatype: str) -> None:
    with raises(
        f"input 'x': datatype {datatype} has no typed contents field; send it in raw_input_contents"
    ):
        v2.from_contents("x", datatype, [1], [1.0], LIMIT)
    with raises(f"datatype {datatype} has no typed contents field"):
        v2.to_contents(Tensor(PAIRS[datatype], (1,), [1.0]))


@pytest.mark.parametrize(
    ("datatype", "values", "message"),
    [
        ("INT8", [0, -129], "int_contents element 1 is -129; expected an integer in [-128, 127]"),
        ("INT16", [40000], "int_contents element 0 is 40000; expected an integer in [-32768,"),
        ("UINT8", [256], "uint_contents element 0 is 256; expected an integer in [0, 255] (UINT8)"),
        (
            "UINT16",
            [1, 70000],
            "uint_contents element 1 is 70000; expected an integer in [0, 65535]",
        ),
    ],
)
def test_contents_range_errors(datatype: str, values: list[int], message: str) -> None:
    with raises(f"input 'x': {message}"):
        v2.from_contents("x", datatype, [len(values)], values, LIMIT)


def test_contents_count_mismatch_names_the_field() -> None:
    with raises("input 'x': shape [2,2] holds 4 FP32 values, fp32_contents has 3"):
        v2.from_contents("x", "FP32", [2, 2], [1.0, 2.0, 3.0], LIMIT)


def test_a_signature_input_the_protocol_cannot_carry_is_refused_by_name() -> None:
    spec = TensorSpec("DT_COMPLEX64", (-1,))
    with raises("input 'z': the model's signature expects datatype COMPLEX64, which has no"):
        v2.check_datatype("z", "FP32", spec)
