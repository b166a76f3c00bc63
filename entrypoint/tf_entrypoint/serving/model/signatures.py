"""A SavedModel's "serve" MetaGraph and its SignatureDefs: the signatures
(dtypes, shapes, graph tensor names, method names: what TF Serving's metadata
shows), each SignatureDef's text, and the serialized SignatureDefMap."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.codec.tensor_proto import dtype_name
from tf_entrypoint.serving.core.types import Signature, TensorSpec

SERVE_TAG = "serve"


def read_meta_graph(directory: Path) -> Any:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    saved_model = saved_model_pb2.SavedModel()
    binary = directory / "saved_model.pb"
    if binary.is_file():
        saved_model.ParseFromString(binary.read_bytes())
    else:
        # protobuf ships no type hints; TensorFlow depends on it, so it is there.
        text_format = importlib.import_module("google.protobuf.text_format")
        text_format.Parse((directory / "saved_model.pbtxt").read_text(), saved_model)
    graphs = list(saved_model.meta_graphs)
    if not graphs:
        raise ValueError(f"{directory} holds no MetaGraph")
    for graph in graphs:
        if SERVE_TAG in graph.meta_info_def.tags:
            return graph
    return graphs[0]


def spec(info: Any) -> TensorSpec:
    shape = info.tensor_shape
    dims = None if shape.unknown_rank else tuple(int(d.size) for d in shape.dim)
    return TensorSpec(dtype_name(info.dtype), dims, info.name)


def read_signatures(directory: Path) -> dict[str, Signature]:
    """Every SignatureDef of the 'serve' MetaGraph, as the metadata shows them."""
    return signatures(read_meta_graph(directory))


def signatures(graph: Any) -> dict[str, Signature]:
    return {
        name: Signature(
            inputs={key: spec(info) for key, info in sig.inputs.items()},
            outputs={key: spec(info) for key, info in sig.outputs.items()},
            method_name=sig.method_name,
        )
        for name, sig in graph.signature_def.items()
    }


def signature_def_map(graph: Any) -> bytes:
    """The MetaGraph's SignatureDefs, every one as it is, as a serialized
    tensorflow.serving.SignatureDefMap (TF Serving's get_model_metadata_impl.cc)."""
    from tensorflow_serving.apis import get_model_metadata_pb2  # noqa: PLC0415

    message = get_model_metadata_pb2.SignatureDefMap()
    for name, definition in graph.signature_def.items():
        message.signature_def[name].CopyFrom(definition)
    serialized: bytes = message.SerializeToString()
    return serialized


def signature_texts(graph: Any) -> Mapping[str, str]:
    """Each SignatureDef's text (C++ DebugString), quoted by TF Serving's errors."""
    return {name: str(sig) for name, sig in graph.signature_def.items()}
