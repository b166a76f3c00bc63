"""A SavedModel's graph file read within --max-graph-bytes, its "serve"
MetaGraph and its SignatureDefs: the signatures (dtypes, shapes, graph tensor
names, method names: what TF Serving's metadata shows), each SignatureDef's
text, and the serialized SignatureDefMap."""

from __future__ import annotations

import errno
import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tf_entrypoint.server_flags import DEFAULT_MAX_GRAPH_BYTES, ENV_MAX_GRAPH_BYTES
from tf_entrypoint.serving.codec.tensor_proto import dtype_name
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.types import Signature, TensorSpec

SERVE_TAG = "serve"
#: A SavedModel's graph files, in the order TensorFlow looks for them.
GRAPH_FILES = ("saved_model.pb", "saved_model.pbtxt")


def graph_file(directory: Path) -> Path:
    """The version's graph: saved_model.pb, else saved_model.pbtxt (TensorFlow's order);
    FileNotFoundError naming saved_model.pb when neither is there."""
    for name in GRAPH_FILES:
        path = directory / name
        if path.is_file():
            return path
    path = directory / GRAPH_FILES[0]
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))


def graph_too_large(path: Path, size: int, limit: int) -> ServingError:
    """DATA_LOSS, as TensorFlow answers a graph it cannot parse (TF Serving's
    code for a saved_model.pb past protobuf's 2 GiB)."""
    return ServingError(
        Code.DATA_LOSS,
        f"{path} is {size:,} bytes, more than the limit of {limit:,} bytes on a SavedModel's "
        f"graph (--max-graph-bytes, {ENV_MAX_GRAPH_BYTES}): not read; a graph's weights "
        "belong in variables/, or raise --max-graph-bytes",
    )


def read_saved_model(directory: Path, limit: int = DEFAULT_MAX_GRAPH_BYTES) -> Any:
    """The version's SavedModel proto, its graph file's size checked before it is read.

    The file is read once (its size from the open file, so one that grows is
    noticed) and its bytes dropped once parsed. A graph over `limit` bytes
    (--max-graph-bytes) is DATA_LOSS without a byte read; one that does not
    parse is DATA_LOSS in TensorFlow's words ("Can't parse ... as binary
    proto"), as TF Serving reports it.
    """
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    path = graph_file(directory)
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size > limit:
            raise graph_too_large(path, size, limit)
        data = file.read(size + 1)  # one byte more: a file that grew is noticed
    if len(data) > limit:
        raise graph_too_large(path, len(data), limit)
    saved_model = saved_model_pb2.SavedModel()
    binary = path.name == GRAPH_FILES[0]
    try:
        if binary:
            saved_model.ParseFromString(data)
        else:
            # protobuf ships no type hints; TensorFlow depends on it, so it is there.
            text_format = importlib.import_module("google.protobuf.text_format")
            text = data.decode()
            del data
            text_format.Parse(text, saved_model)
    except Exception as err:  # noqa: BLE001 - DecodeError, ParseError, UnicodeDecodeError
        reason = "" if binary else f": {err}"
        kind = "binary" if binary else "text"
        raise ServingError(Code.DATA_LOSS, f"Can't parse {path} as {kind} proto{reason}") from None
    return saved_model


def serve_meta_graph(saved_model: Any, directory: Path) -> Any:
    """The "serve" MetaGraphDef of `saved_model` (else its first)."""
    graphs = list(saved_model.meta_graphs)
    if not graphs:
        raise ValueError(f"{directory} holds no MetaGraph")
    for graph in graphs:
        if SERVE_TAG in graph.meta_info_def.tags:
            return graph
    return graphs[0]


def without_graph(meta_graph: Any) -> Any:
    """A MetaGraphDef of its own with all of `meta_graph` but its GraphDef (which
    `meta_graph` loses): what a version keeps (signatures, saver, object graph),
    so that the parsed SavedModel, the graph's bytes with it, can be freed
    (protobuf frees a message's memory with its whole tree, not field by field)."""
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415

    meta_graph.ClearField("graph_def")
    return meta_graph_pb2.MetaGraphDef.FromString(meta_graph.SerializeToString())


def read_meta_graph(directory: Path, limit: int = DEFAULT_MAX_GRAPH_BYTES) -> Any:
    """The "serve" MetaGraphDef, without its GraphDef (:func:`without_graph`)."""
    return without_graph(serve_meta_graph(read_saved_model(directory, limit), directory))


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
