"""GetModelMetadata's JSON, field by field as TF Serving's C++ printer writes it.

The host has protobuf but no TensorFlow, so the messages are built here by
protobuf itself from descriptors written after TensorFlow's
tensor_shape.proto, types.proto, tensor.proto and meta_graph.proto and TF
Serving's get_model_metadata.proto (same names, field numbers, types, oneofs
and maps; TensorProto's value fields in part). The real messages are checked
against the server in tests/container/test_tfserving_flows.py and test_grpc.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

from tf_entrypoint.serving.codec import metadata, proto_json
from tf_entrypoint.serving.core import types as p

_F = descriptor_pb2.FieldDescriptorProto
OPTIONAL, REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED


def _field(message: Any, name: str, number: int, kind: int, **extra: Any) -> Any:
    label = extra.pop("label", OPTIONAL)
    return message.field.add(name=name, number=number, type=kind, label=label, **extra)


def _build() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    tf = descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/protobuf/meta_graph.proto",
        package="tensorflow",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    dtype = tf.enum_type.add(name="DataType")
    for number, name in enumerate(["DT_INVALID", "DT_FLOAT", "DT_DOUBLE", "DT_INT32"]):
        dtype.value.add(name=name, number=number)
    dtype.value.add(name="DT_STRING", number=7)
    dtype.value.add(name="DT_INT64", number=9)

    shape = tf.message_type.add(name="TensorShapeProto")
    dim = shape.nested_type.add(name="Dim")
    _field(dim, "size", 1, _F.TYPE_INT64)
    _field(dim, "name", 2, _F.TYPE_STRING)
    _field(shape, "dim", 2, _F.TYPE_MESSAGE, label=REPEATED,
           type_name=".tensorflow.TensorShapeProto.Dim")  # fmt: skip
    _field(shape, "unknown_rank", 3, _F.TYPE_BOOL)

    tensor = tf.message_type.add(name="TensorProto")
    _field(tensor, "dtype", 1, _F.TYPE_ENUM, type_name=".tensorflow.DataType")
    _field(tensor, "tensor_shape", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.TensorShapeProto")
    _field(tensor, "version_number", 3, _F.TYPE_INT32)
    _field(tensor, "tensor_content", 4, _F.TYPE_BYTES)
    # Declared out of number order, as tensor.proto declares half_val (13) early.
    _field(tensor, "half_val", 13, _F.TYPE_INT32, label=REPEATED)
    _field(tensor, "float_val", 5, _F.TYPE_FLOAT, label=REPEATED)
    _field(tensor, "double_val", 6, _F.TYPE_DOUBLE, label=REPEATED)
    _field(tensor, "string_val", 8, _F.TYPE_BYTES, label=REPEATED)
    _field(tensor, "int64_val", 10, _F.TYPE_INT64, label=REPEATED)

    info = tf.message_type.add(name="TensorInfo")
    coo = info.nested_type.add(name="CooSparse")
    _field(coo, "values_tensor_name", 1, _F.TYPE_STRING)
    _field(coo, "indices_tensor_name", 2, _F.TYPE_STRING)
    _field(coo, "dense_shape_tensor_name", 3, _F.TYPE_STRING)
    info.oneof_decl.add(name="encoding")
    _field(info, "name", 1, _F.TYPE_STRING, oneof_index=0)
    _field(info, "coo_sparse", 4, _F.TYPE_MESSAGE, oneof_index=0,
           type_name=".tensorflow.TensorInfo.CooSparse")  # fmt: skip
    _field(info, "dtype", 2, _F.TYPE_ENUM, type_name=".tensorflow.DataType")
    _field(info, "tensor_shape", 3, _F.TYPE_MESSAGE, type_name=".tensorflow.TensorShapeProto")

    signature = tf.message_type.add(name="SignatureDef")
    for name, number, value in (
        ("inputs", 1, ".tensorflow.TensorInfo"),
        ("outputs", 2, ".tensorflow.TensorInfo"),
        ("defaults", 4, ".tensorflow.TensorProto"),
    ):
        entry = signature.nested_type.add(name=f"{name.title()}Entry")
        entry.options.map_entry = True
        _field(entry, "key", 1, _F.TYPE_STRING)
        _field(entry, "value", 2, _F.TYPE_MESSAGE, type_name=value)
        _field(signature, name, number, _F.TYPE_MESSAGE, label=REPEATED,
               type_name=f".tensorflow.SignatureDef.{entry.name}")  # fmt: skip
    _field(signature, "method_name", 3, _F.TYPE_STRING)

    spec = tf.message_type.add(name="ModelSpec")  # tensorflow.serving's, here for its oneof
    _field(spec, "name", 1, _F.TYPE_STRING)
    spec.oneof_decl.add(name="version_choice")
    _field(spec, "version", 2, _F.TYPE_MESSAGE, oneof_index=0,
           type_name=".google.protobuf.Int64Value")  # fmt: skip
    _field(spec, "version_label", 4, _F.TYPE_STRING, oneof_index=0)
    _field(spec, "signature_name", 3, _F.TYPE_STRING)

    defs = tf.message_type.add(name="SignatureDefMap")
    entry = defs.nested_type.add(name="SignatureDefEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.SignatureDef")
    _field(defs, "signature_def", 1, _F.TYPE_MESSAGE, label=REPEATED,
           type_name=".tensorflow.SignatureDefMap.SignatureDefEntry")  # fmt: skip
    pool.Add(tf)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{name}"))
        for name in ("SignatureDefMap", "SignatureDef", "TensorInfo", "TensorProto", "ModelSpec")
    }


MESSAGES = _build()


def tensor_info(name: str, dtype: int, *dims: int, unknown: bool = False) -> Any:
    info = MESSAGES["TensorInfo"](name=name, dtype=dtype)
    for size in dims:
        info.tensor_shape.dim.add(size=size)
    if unknown:
        info.tensor_shape.unknown_rank = True
    return info


def half_plus_two() -> Any:
    """Two of the signatures of TF Serving's saved_model_half_plus_two testdata."""
    defs = MESSAGES["SignatureDefMap"]()
    regress = defs.signature_def["regress_x_to_y"]
    regress.method_name = "tensorflow/serving/regress"
    regress.inputs["inputs"].CopyFrom(tensor_info("tf_example:0", 7, unknown=True))
    regress.outputs["outputs"].CopyFrom(tensor_info("y:0", 1, -1, 1))
    default = defs.signature_def["serving_default"]
    default.method_name = "tensorflow/serving/predict"
    default.inputs["x"].CopyFrom(tensor_info("x:0", 1, -1, 1))
    default.outputs["y"].CopyFrom(tensor_info("y:0", 1, -1, 1))
    return defs


def dims(*sizes: int) -> list[dict[str, str]]:
    return [{"size": str(size), "name": ""} for size in sizes]


def test_signature_defs_are_written_field_by_field_as_tf_serving_does() -> None:
    """TF Serving's saved_model_half_plus_two_2_versions_metadata.json, in the order of
    protobuf's current printer: fields by number, every field without presence
    printed (defaults {}, the dims' empty names, unknown_rank false)."""
    written = proto_json.message_json(half_plus_two())
    assert written == {
        "signature_def": {
            "regress_x_to_y": {
                "inputs": {
                    "inputs": {
                        "name": "tf_example:0",
                        "dtype": "DT_STRING",
                        "tensor_shape": {"dim": [], "unknown_rank": True},
                    }
                },
                "outputs": {
                    "outputs": {
                        "name": "y:0",
                        "dtype": "DT_FLOAT",
                        "tensor_shape": {"dim": dims(-1, 1), "unknown_rank": False},
                    }
                },
                "method_name": "tensorflow/serving/regress",
                "defaults": {},
            },
            "serving_default": {
                "inputs": {
                    "x": {
                        "name": "x:0",
                        "dtype": "DT_FLOAT",
                        "tensor_shape": {"dim": dims(-1, 1), "unknown_rank": False},
                    }
                },
                "outputs": {
                    "y": {
                        "name": "y:0",
                        "dtype": "DT_FLOAT",
                        "tensor_shape": {"dim": dims(-1, 1), "unknown_rank": False},
                    }
                },
                "method_name": "tensorflow/serving/predict",
                "defaults": {},
            },
        }
    }
    signature = written["signature_def"]["serving_default"]
    assert list(signature) == ["inputs", "outputs", "method_name", "defaults"]
    assert list(signature["inputs"]["x"]) == ["name", "dtype", "tensor_shape"]
    assert list(signature["inputs"]["x"]["tensor_shape"]["dim"][0]) == ["size", "name"]
    assert list(written["signature_def"]) == ["regress_x_to_y", "serving_default"]


def test_what_has_presence_is_written_only_when_set() -> None:
    """A TensorInfo without a shape (TF1 Estimator exports) has no tensor_shape; a
    sparse one has coo_sparse instead of name (the oneof); a oneof member set to
    its default is still set."""
    no_shape = proto_json.message_json(MESSAGES["TensorInfo"](name="x:0", dtype=1))
    assert no_shape == {"name": "x:0", "dtype": "DT_FLOAT"}
    sparse = MESSAGES["TensorInfo"](dtype=9)
    sparse.coo_sparse.values_tensor_name = "v:0"
    assert proto_json.message_json(sparse) == {
        "dtype": "DT_INT64",
        "coo_sparse": {
            "values_tensor_name": "v:0",
            "indices_tensor_name": "",
            "dense_shape_tensor_name": "",
        },
    }
    assert proto_json.message_json(MESSAGES["TensorInfo"](name="")) == {
        "name": "",
        "dtype": "DT_INVALID",
    }


def test_defaults_hold_tensor_protos_with_every_field_without_presence() -> None:
    """A signature input with a default (tf.function's default arguments, TF 2.13+):
    its TensorProto, every repeated field printed, 64-bit integers as strings,
    bytes in base64, float32 values as their shortest text."""
    signature = MESSAGES["SignatureDef"](method_name="tensorflow/serving/predict")
    signature.defaults["y"].dtype = 1
    signature.defaults["y"].tensor_shape.SetInParent()
    signature.defaults["y"].float_val.extend([2.0, 0.1])
    signature.defaults["n"].dtype = 9
    signature.defaults["n"].int64_val.append(2**40)
    signature.defaults["s"].dtype = 7
    signature.defaults["s"].string_val.append(b"\xff\x00a")
    written = proto_json.message_json(signature)
    assert written["defaults"] == {
        "n": {
            "dtype": "DT_INT64",
            "version_number": 0,
            "tensor_content": "",
            "float_val": [],
            "double_val": [],
            "string_val": [],
            "int64_val": ["1099511627776"],
            "half_val": [],
        },
        "s": {
            "dtype": "DT_STRING",
            "version_number": 0,
            "tensor_content": "",
            "float_val": [],
            "double_val": [],
            "string_val": ["/wBh"],
            "int64_val": [],
            "half_val": [],
        },
        "y": {
            "dtype": "DT_FLOAT",
            "tensor_shape": {"dim": [], "unknown_rank": False},
            "version_number": 0,
            "tensor_content": "",
            "float_val": [2.0, 0.1],
            "double_val": [],
            "string_val": [],
            "int64_val": [],
            "half_val": [],
        },
    }
    # Field-number order although half_val (13) is declared before float_val (5).
    assert list(written["defaults"]["y"])[-2:] == ["int64_val", "half_val"]
    assert list(written) == ["inputs", "outputs", "method_name", "defaults"]


def test_numbers_and_enums_as_cpp_writes_them() -> None:
    tensor = MESSAGES["TensorProto"](dtype=42)  # no such DataType: its number
    tensor.float_val.extend([float("nan"), float("inf"), -float("inf"), 1 / 3])
    tensor.double_val.extend([0.1, 1 / 3])
    written = proto_json.message_json(tensor)
    assert written["dtype"] == 42
    assert written["float_val"] == ["NaN", "Infinity", "-Infinity", 0.333333343]
    assert written["double_val"] == [0.1, 1 / 3]
    json.dumps(written, allow_nan=False)  # valid JSON: no bare NaN


def test_a_wrapper_is_its_value_and_oneofs_follow_field_numbers() -> None:
    """ModelSpec's version (Int64Value, in a oneof) is a string; fields by number."""
    spec = MESSAGES["ModelSpec"](name="m")
    spec.version.value = 123
    assert list(proto_json.message_json(spec).items()) == [
        ("name", "m"),
        ("version", "123"),
        ("signature_name", ""),
    ]
    assert proto_json.message_json(MESSAGES["ModelSpec"](name="m")) == {
        "name": "m",
        "signature_name": "",
    }


class Servable:
    """What metadata.rest_body reads of a servable."""

    def __init__(self, signature_def_map: bytes, signatures: Mapping[str, p.Signature]) -> None:
        self.signature_def_map = signature_def_map
        self.signatures = signatures


def test_the_rest_body_wraps_the_signature_defs_as_tf_serving_does() -> None:
    """{"model_spec": ModelSpec's fields by number, "metadata": {"signature_def": ...}};
    a servable without SignatureDefs of its own is written from its signatures."""
    sig = p.Signature({"x": p.TensorSpec("DT_FLOAT", (-1,), "x:0")}, {"y": p.TensorSpec(
        "DT_FLOAT", None, "y:0")})  # fmt: skip
    body = metadata.rest_body("m", 7, Servable(b"", {"serving_default": sig}))
    assert list(body) == ["model_spec", "metadata"]
    assert list(body["model_spec"].items()) == [
        ("name", "m"),
        ("version", "7"),
        ("signature_name", ""),
    ]
    assert body["metadata"] == {
        "signature_def": {
            "signature_def": {
                "serving_default": {
                    "inputs": {
                        "x": {
                            "name": "x:0",
                            "dtype": "DT_FLOAT",
                            "tensor_shape": {"dim": dims(-1), "unknown_rank": False},
                        }
                    },
                    "outputs": {
                        "y": {
                            "name": "y:0",
                            "dtype": "DT_FLOAT",
                            "tensor_shape": {"dim": [], "unknown_rank": True},
                        }
                    },
                    "method_name": "tensorflow/serving/predict",
                    "defaults": {},
                }
            }
        }
    }
