"""Open Inference Protocol (KServe v2) REST bodies: the infer request and
response with the binary data extension, and the metadata answers.

A body of ``Inference-Header-Content-Length`` bytes of JSON may be followed by
binary data: an input whose ``parameters.binary_data_size`` is N takes the
next N bytes, in input order, and the sizes must add up to what follows the
JSON. An output is written as binary data when its requested output asks
(``parameters.binary_data``), else when the request's
``parameters.binary_data_output`` is true (Triton's rule); otherwise as JSON.
Tensors go through v2_tensor.py. Input names are the core's to check against
the signature; each input's datatype and shape are checked here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tf_entrypoint.serving.codec import v2_tensor
from tf_entrypoint.serving.codec.json_values import encode, parse_json_object
from tf_entrypoint.serving.core.errors import ServingError, invalid_argument
from tf_entrypoint.serving.core.types import Signature, Tensor, TensorSpec, quote

#: The server's name in the server metadata answer.
SERVER_NAME = "tf-entrypoint"
#: The protocol extensions the server supports.
EXTENSIONS = ("binary_tensor_data",)
PLATFORM = "tensorflow_savedmodel"


@dataclass(frozen=True)
class RequestedOutput:
    """One of a request's `outputs`: its name and whether it asked for binary data."""

    name: str
    #: parameters.binary_data, None when not given.
    binary: bool | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InferRequest:
    id: str | None
    parameters: dict[str, Any]
    inputs: dict[str, Tensor]
    outputs: list[RequestedOutput]
    #: parameters.binary_data_output: outputs not requested otherwise are binary.
    binary_data_output: bool


def _parameters(where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_argument(f"{where}'s 'parameters' must be an object, not {quote(value)}")
    return value


def split_body(body: bytes, header_length: int | None) -> tuple[bytes, memoryview]:
    """The JSON part and the binary part of a request body."""
    view = memoryview(body)
    if header_length is None:
        return body, view[len(body) :]
    if not 0 <= header_length <= len(body):
        raise invalid_argument(
            f"Inference-Header-Content-Length is {header_length}, but the body has "
            f"{len(body)} bytes"
        )
    return body[:header_length], view[header_length:]


def parse_infer_request(
    body: bytes,
    header_length: int | None,
    signature_inputs: Mapping[str, TensorSpec]
    | Callable[[Mapping[str, Any]], Mapping[str, TensorSpec]],
    limit: int,
) -> InferRequest:
    """An infer request's JSON (and binary data) as tensors of their datatypes.

    `signature_inputs`: the inputs of the signature that runs it, or a function
    of the request's parameters that gives them (the signature a request's
    `signature_name` parameter picks), called before any input is decoded.
    """
    text, binary = split_body(body, header_length)
    document = parse_json_object(text)
    request_id = document.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise invalid_argument(f"the request's 'id' must be a string, not {quote(request_id)}")
    parameters = _parameters("the request", document.get("parameters"))
    binary_output = parameters.get("binary_data_output", False)
    if not isinstance(binary_output, bool):
        raise invalid_argument(
            f"parameters.binary_data_output must be true or false, not {quote(binary_output)}"
        )
    if callable(signature_inputs):
        signature_inputs = signature_inputs(parameters)
    items = document.get("inputs")
    if not isinstance(items, list):
        raise invalid_argument(
            f"the request's 'inputs' must be a list of input objects, not {quote(items)}"
        )
    inputs: dict[str, Tensor] = {}
    offset = 0
    for index, item in enumerate(items):
        name, tensor, used = _input(
            index, item, binary, offset, signature_inputs=signature_inputs, limit=limit
        )
        if name in inputs:
            raise invalid_argument(f"input '{name}' is given more than once")
        inputs[name] = tensor
        offset += used
    if offset != len(binary):
        raise invalid_argument(
            f"the body has {len(binary)} bytes of binary data after the JSON, the inputs' "
            f"binary_data_size add up to {offset}"
        )
    return InferRequest(
        request_id, parameters, inputs, _requested(document.get("outputs")), binary_output
    )


def _input(
    index: int,
    item: Any,
    binary: memoryview,
    offset: int,
    *,
    signature_inputs: Mapping[str, TensorSpec],
    limit: int,
) -> tuple[str, Tensor, int]:
    """One input object as (name, tensor, binary bytes it took)."""
    if not isinstance(item, dict):
        raise invalid_argument(f"inputs[{index}] must be an object, not {quote(item)}")
    name = item.get("name")
    if not isinstance(name, str):
        raise invalid_argument(f"inputs[{index}] needs a 'name' string, not {quote(name)}")
    shape: Any = item.get("shape")
    v2_tensor.element_count(name, shape)
    datatype = item.get("datatype")
    if not isinstance(datatype, str):
        raise invalid_argument(f"input '{name}' needs a 'datatype' string, not {quote(datatype)}")
    v2_tensor.datatype(datatype, name)
    v2_tensor.check_input(name, datatype, shape, signature_inputs.get(name))
    parameters = _parameters(f"input '{name}'", item.get("parameters"))
    size = parameters.get("binary_data_size")
    if size is None:
        if "data" not in item:
            raise invalid_argument(
                f"input '{name}' has neither 'data' nor parameters.binary_data_size"
            )
        return name, v2_tensor.from_json(name, datatype, shape, item["data"], limit), 0
    if "data" in item:
        raise invalid_argument(
            f"input '{name}' has both 'data' and parameters.binary_data_size; send one"
        )
    if type(size) is not int or size < 0:
        raise invalid_argument(
            f"input '{name}': parameters.binary_data_size must be a non-negative integer, "
            f"not {quote(size)}"
        )
    if offset + size > len(binary):
        raise invalid_argument(
            f"input '{name}' has binary_data_size {size}, but only {len(binary) - offset} "
            "bytes of binary data are left after the inputs before it"
        )
    data = binary[offset : offset + size]
    return name, v2_tensor.from_raw(name, datatype, shape, data, limit), size


def _requested(value: Any) -> list[RequestedOutput]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_argument(
            f"the request's 'outputs' must be a list of output objects, not {quote(value)}"
        )
    requested: list[RequestedOutput] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise invalid_argument(
                f"outputs[{index}] must be an object with a 'name' string, not {quote(item)}"
            )
        name = item["name"]
        if name in seen:
            raise invalid_argument(f"output '{name}' is requested more than once")
        seen.add(name)
        parameters = _parameters(f"output '{name}'", item.get("parameters"))
        binary = parameters.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise invalid_argument(
                f"output '{name}': parameters.binary_data must be true or false, not "
                f"{quote(binary)}"
            )
        requested.append(RequestedOutput(name, binary, parameters))
    return requested


# --------------------------------------------------------------------------
# Answers


def infer_response(
    model_name: str,
    model_version: str,
    request_id: str | None,
    outputs: Mapping[str, Tensor],
    *,
    requested: Sequence[RequestedOutput] = (),
    binary_data_output: bool = False,
    parameters: Mapping[str, Any] | None = None,
) -> tuple[bytes, int | None]:
    """The infer answer: (body, length of its JSON part, None when nothing is binary).

    The outputs are the requested ones in the requested order, else all of
    `outputs` sorted by name.
    """
    if requested:
        chosen = [(r.name, binary_data_output if r.binary is None else r.binary) for r in requested]
    else:
        chosen = [(name, binary_data_output) for name in sorted(outputs)]
    entries: list[dict[str, Any]] = []
    parts: list[bytes] = []
    for name, binary in chosen:
        tensor = outputs.get(name)
        if tensor is None:
            raise invalid_argument(
                f"output '{name}' is not one of the model's outputs: {', '.join(sorted(outputs))}"
            )
        entry: dict[str, Any] = {
            "name": name,
            "datatype": v2_tensor.v2_datatype(tensor.dtype),
            "shape": list(tensor.shape),
        }
        try:
            if binary:
                raw = v2_tensor.to_raw(tensor)
                parts.append(raw)
                entry["parameters"] = {"binary_data_size": len(raw)}
            else:
                entry["data"] = v2_tensor.to_json_data(tensor)
        except ServingError as err:
            raise invalid_argument(f"output '{name}': {err.message}") from None
        entries.append(entry)
    document: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        document["id"] = request_id
    if parameters:
        document["parameters"] = dict(parameters)
    document["outputs"] = entries
    text = encode(document)
    if not parts:
        return text, None
    return b"".join([text, *parts]), len(text)


def model_metadata(name: str, versions: Sequence[int], signature: Signature) -> bytes:
    """GET /v2/models/NAME[/versions/N]'s answer: the signature's inputs and outputs."""
    return encode(
        {
            "name": name,
            "versions": [str(v) for v in sorted(versions)],
            "platform": PLATFORM,
            "inputs": _tensor_metadata(signature.inputs),
            "outputs": _tensor_metadata(signature.outputs),
        }
    )


def _tensor_metadata(specs: Mapping[str, TensorSpec]) -> list[dict[str, Any]]:
    return [
        {"name": key, "datatype": datatype, "shape": shape}
        for key, datatype, shape in v2_tensor.tensor_metadata(specs)
    ]


def server_metadata(version: str) -> bytes:
    """GET /v2's answer."""
    return encode({"name": SERVER_NAME, "version": version, "extensions": list(EXTENSIONS)})


def error_body(message: str) -> bytes:
    """An error answer: {"error": message}."""
    return encode({"error": message})
