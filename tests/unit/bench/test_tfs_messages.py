"""bench/tfs_messages.py: the load client's TF Serving Predict messages without TensorFlow.

That a server answers them as it answers TensorFlow's own messages is the bench
smoke's check (tests/container/test_bench.py: every window's first answer, gRPC
included, matches the model's recorded answer); here, the encoding itself.
"""

from __future__ import annotations

import struct

import pytest

from bench import tfs_messages as m


def test_a_request_carries_the_tensor_in_tensor_content_with_its_shape() -> None:
    values = [0.0, 1.5, -2.0, 3.25, 4.0, 1e-3]
    request = m.PredictRequest()
    request.model_spec.name = "mlp"
    request.inputs["x"].CopyFrom(m.float_tensor(values, (2, 3)))
    again = m.PredictRequest.FromString(request.SerializeToString())
    tensor = again.inputs["x"]
    assert (tensor.dtype, [d.size for d in tensor.tensor_shape.dim]) == (m.DT_FLOAT, [2, 3])
    assert tensor.tensor_content == struct.pack("<6f", *values)  # float32, little-endian
    read, shape = m.float_values(tensor) or ([], [])
    assert shape == [2, 3]
    assert read == [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]


def test_the_field_numbers_are_tf_servings() -> None:
    # model_spec 1 {name 1, signature_name 3}, inputs 2 (a map entry: key 1, value 2),
    # TensorProto dtype 1: the bytes TF Serving's predict.proto gives these fields.
    request = m.PredictRequest()
    request.model_spec.name = "m"
    request.model_spec.signature_name = "s"
    request.inputs["x"].dtype = m.DT_FLOAT
    assert request.SerializeToString(deterministic=True) == (
        b"\x0a\x06" + b"\x0a\x01m" + b"\x1a\x01s" + b"\x12\x07" + b"\x0a\x01x" + b"\x12\x02\x08\x01"
    )


@pytest.mark.parametrize(
    ("values", "want"),
    [
        pytest.param([2.5, 3.0, 4.5], [2.5, 3.0, 4.5], id="one per element"),
        pytest.param([7.0], [7.0, 7.0, 7.0], id="one for all"),
    ],
)
def test_an_answer_in_float_val_reads_as_tensorflow_reads_it(
    values: list[float], want: list[float]
) -> None:
    response = m.PredictResponse()
    tensor = response.outputs["y"]
    tensor.dtype = m.DT_FLOAT
    tensor.tensor_shape.dim.add(size=3)
    tensor.float_val.extend(values)
    read = m.PredictResponse.FromString(response.SerializeToString()).outputs["y"]
    assert m.float_values(read) == (want, [3])


def test_another_dtype_is_not_read_as_floats() -> None:
    assert m.float_values(m.TensorProto(dtype=3)) is None  # DT_INT32
