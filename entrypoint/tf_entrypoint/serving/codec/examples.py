"""TF Serving's Classify and Regress APIs without TensorFlow.

What lies between a request and a classify or regress SignatureDef, written
after TF Serving's own sources so clients see the same answers and errors:

- the batch of serialized ``tensorflow.Example`` protos a request carries
  (servables/tensorflow/util.cc ``InputToSerializedExampleTensor``): from
  gRPC's ``tensorflow.serving.Input`` (:func:`serialized_examples`) or from
  the REST body ``{"signature_name", "context", "examples"}``
  (util/json_tensor.cc ``FillClassificationRequestFromJson``,
  :func:`parse_examples_request`, which encodes the Example protos itself);
- the checks of the signature (classifier.cc ``PreProcessClassification``,
  regressor.cc ``PreProcessRegression``) and of the model's outputs
  (``PostProcessClassificationResult``, ``PostProcessRegressionResult``);
- the REST answers ``{"results": ...}`` (``MakeJsonFromClassificationResult``).

Context features are merged into every example the way TF Serving does it:
the serialized context is prepended to each serialized example, so protobuf's
merge rules apply and an example's own feature wins over the context's
feature of the same name. A request's examples, with the context copied into
each, may take at most `limit` bytes (limits.EXPANSION x --max-body-bytes),
checked before any copy is made (413 / RESOURCE_EXHAUSTED, not TF Serving's:
it copies without bound).

Every error is a :class:`~tf_entrypoint.serving.core.types.ApiError`; TF Serving
returns INVALID_ARGUMENT (HTTP 400) for all of them.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core import types as p

CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
#: The keys a classify/regress SignatureDef must use (signature_constants.h).
INPUTS = "inputs"
CLASSES = "classes"
SCORES = "scores"
OUTPUTS = "outputs"

#: Per example, its (class label, score) pairs.
Classifications = list[list[tuple[bytes, float]]]
Method = Literal["classify", "regress"]


@dataclass(frozen=True)
class ExamplesRequest:
    """A classify/regress request: the signature ("" = serving_default) and its examples."""

    signature_name: str
    examples: list[bytes]


# --------------------------------------------------------------------------
# gRPC: tensorflow.serving.Input -> serialized examples


def serialized_examples(input_proto: Any, *, limit: int) -> list[bytes]:
    """The serialized Examples of a ``tensorflow.serving.Input`` message.

    ``example_list``: each example as is. ``example_list_with_context``: the
    context prepended to each example (TF Serving's merge). An Input with
    neither, or with no examples, gives ``[]``: the servable answers "Input is
    empty." after it has checked the signature, as TF Serving does. ApiError
    413 when they would take more than `limit` bytes (nothing is copied then).
    """
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        examples = input_proto.example_list.examples
        limits.check_examples(0, [example.ByteSize() for example in examples], limit)
        return [example.SerializeToString() for example in examples]
    if kind == "example_list_with_context":
        with_context = input_proto.example_list_with_context
        examples = with_context.examples
        sizes = [example.ByteSize() for example in examples]
        limits.check_examples(with_context.context.ByteSize(), sizes, limit)
        context: bytes = with_context.context.SerializeToString()
        return [context + example.SerializeToString() for example in examples]
    return []


# --------------------------------------------------------------------------
# REST: JSON -> serialized examples


def parse_examples_request(body: bytes, *, limit: int) -> ExamplesRequest:
    """A :classify or :regress body as TF Serving reads it (json_tensor.cc).

    ApiError 413 when its examples, with the context copied into each, would
    take more than `limit` bytes: checked before the first copy.
    """
    return examples_request(p.parse_json_object(body), limit=limit)


def examples_request(document: dict[str, Any], *, limit: int) -> ExamplesRequest:
    """parse_examples_request() of a body already parsed as JSON."""
    signature_name = document.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise p.bad_request(
            f"JSON Value: {p.quote(document)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    context = b""
    has_context = "context" in document
    if has_context:
        context = encode_example(document["context"])
    if "examples" not in document:
        # TF Serving says "classify" for :regress too.
        raise p.bad_request(
            f"JSON Value: {p.quote(document)} When method is classify, key 'examples' "
            "is expected and was not found"
        )
    examples = document["examples"]
    if not isinstance(examples, list):
        raise p.bad_request(
            f"JSON Value: {p.quote(document)} Expecting 'examples' value to be an list/array"
        )
    if not examples:
        raise p.bad_request(f"JSON Value: {p.quote(document)} 'examples' value is an empty array")
    encoded = [encode_example(e) for e in examples]
    limits.check_examples(len(context), [len(e) for e in encoded], limit)
    if context:
        for index, example in enumerate(encoded):  # in place: each old one freed as it goes
            encoded[index] = context + example
    return ExamplesRequest(signature_name, encoded)


def encode_example(value: Any) -> bytes:
    """One JSON object as a serialized ``tensorflow.Example``.

    Feature values (one value or a list of them): integers and booleans ->
    int64_list, other numbers -> float_list (float32), strings and
    ``{"b64": ...}`` -> bytes_list; all values of a feature must be of one kind.
    """
    if not isinstance(value, dict):
        raise p.bad_request(f"Example must be JSON object but got JSON {_json_type(value)}")
    entries = bytearray()
    for name, content in value.items():
        feature = _Feature(name)
        for item in content if isinstance(content, list) else [content]:
            feature.add(item)
        entry = _field_bytes(1, name.encode("utf-8", "surrogatepass")) + _field_bytes(
            2, feature.encode()
        )
        entries += _field_bytes(1, entry)
    return _field_bytes(1, bytes(entries)) if value else b""


def _json_type(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return {None: "Null", True: "True", False: "False"}[value]
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    return "Array" if isinstance(value, list) else "Object"


_FLOAT32_MAX = 3.4028234663852886e38
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
#: Feature's oneof field numbers (example/feature.proto) and their names in errors.
_BYTES, _FLOATS, _INT64S = 1, 2, 3
_KIND_NAMES = {_BYTES: "bytes", _FLOATS: "float", _INT64S: "int64"}


class _Feature:
    """One ``tensorflow.Feature`` being filled from JSON values (AddValueToFeature)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.kind = 0  # KIND_NOT_SET
        self.values: list[Any] = []

    def add(self, value: Any) -> None:
        if value is None or isinstance(value, list):
            raise self.unexpected(value)
        if isinstance(value, bool):
            self.put(_INT64S, int(value))
        elif isinstance(value, int):
            if _INT64_MIN <= value <= _INT64_MAX:
                self.put(_INT64S, value)
            elif _INT64_MAX < value <= _UINT64_MAX:
                raise p.bad_request(
                    f"Feature: {self.name} has uint64_t element. Only int64_t is supported."
                )
            else:  # rapidjson reads an integer beyond 64 bits as a double
                self.put(_FLOATS, float(value))
        elif isinstance(value, float):
            self.put(_FLOATS, value)
        elif isinstance(value, str):
            self.put(_BYTES, _utf8(value))
        elif isinstance(value, dict):
            if not (len(value) == 1 and isinstance(value.get("b64"), str)):
                raise self.unexpected(value)
            self.put(_BYTES, _b64(value["b64"]))
        else:  # pragma: no cover - json.loads makes nothing else
            raise self.unexpected(value)

    def put(self, kind: int, value: Any) -> None:
        if self.kind not in (0, kind):
            raise p.bad_request(
                f"Unexpected element type in feature: {self.name} expecting type: "
                f"{_KIND_NAMES[self.kind]}"
            )
        self.kind = kind
        self.values.append(value)

    def unexpected(self, value: Any) -> p.ApiError:
        return p.bad_request(
            f"Feature: {self.name} has element with unexpected JSON type: {_json_type(value)}"
        )

    def encode(self) -> bytes:
        if self.kind == _BYTES:
            body = b"".join(_field_bytes(1, v) for v in self.values)
        elif self.kind == _FLOATS:
            body = _field_bytes(1, b"".join(_float32(v) for v in self.values))
        elif self.kind == _INT64S:
            body = _field_bytes(1, b"".join(_varint(v & _UINT64_MAX) for v in self.values))
        else:
            return b""
        return _field_bytes(self.kind, body)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise p.bad_request(
            f"JSON Value: {p.quote(text)} is not valid Unicode (lone surrogate)"
        ) from None


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise p.bad_request("Unable to base64 decode") from None


def _float32(value: float) -> bytes:
    """A double as float32, little-endian (C's cast: out of range -> infinity)."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, value))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


# --------------------------------------------------------------------------
# Signatures


def find_signature(signature_name: str, signatures: Mapping[str, p.Signature]) -> str:
    """The signature's name ("" = serving_default); TF Serving's error when it is absent."""
    name = signature_name or p.DEFAULT_SIGNATURE
    if name not in signatures:
        raise p.bad_request(f"No signature was found with the name: {name}")
    return name


def check_classification_signature(
    signature: p.Signature, text: str, *, method_name_check: bool = False
) -> None:
    """PreProcessClassification. `text`: the SignatureDef's DebugString, quoted in errors.

    With `method_name_check` (TF Serving's --enable_signature_method_name_check,
    off by default) the method_name must be tensorflow/serving/classify; without
    it, any signature with the right keys classifies (TF2 exports say predict).
    """
    if method_name_check and signature.method_name != CLASSIFY_METHOD:
        raise p.bad_request(
            f"Expected classification signature method_name to be {CLASSIFY_METHOD}. "
            f"Was: {signature.method_name}"
        )
    if len(signature.inputs) != 1:
        raise p.bad_request("Expected one input Tensor.")
    if len(signature.outputs) not in (1, 2):
        raise p.bad_request(f"Expected one or two output Tensors, found {len(signature.outputs)}")
    if INPUTS not in signature.inputs:
        raise p.bad_request(f"No classification inputs found in SignatureDef: {text}")
    if CLASSES not in signature.outputs and SCORES not in signature.outputs:
        raise p.bad_request(
            'Expected classification signature outputs to contain at least one of "classes" '
            f'or "scores". Signature was: {text}'
        )


def check_regression_signature(
    signature: p.Signature, text: str, *, method_name_check: bool = False
) -> None:
    """PreProcessRegression; see :func:`check_classification_signature`."""
    if method_name_check and signature.method_name != REGRESS_METHOD:
        raise p.bad_request(
            f"Expected regression signature method_name to be {REGRESS_METHOD}. "
            f"Was: {signature.method_name}"
        )
    if len(signature.inputs) != 1:
        raise p.bad_request("Expected one input Tensor.")
    if len(signature.outputs) != 1:
        raise p.bad_request("Expected one output Tensor.")
    if INPUTS not in signature.inputs:
        raise p.bad_request(f"No regression inputs found in SignatureDef: {text}")
    if OUTPUTS not in signature.outputs:
        raise p.bad_request(f"No regression outputs found in SignatureDef: {text}")


@dataclass(frozen=True)
class Task:
    """One task of a MultiInference request: its ModelSpec's name and
    signature_name ("" = serving_default), and its method_name."""

    model: str
    signature_name: str
    method_name: str


def tasks_of(request: Any) -> list[Task]:
    """A tensorflow.serving.MultiInferenceRequest's tasks."""
    return [
        Task(task.model_spec.name, task.model_spec.signature_name, task.method_name)
        for task in request.tasks
    ]


#: One task's result: a classification (Classifications) or a regression (one value
#: per example), as its method_name says.
TaskResult = Classifications | list[float]


def check_tasks(
    tasks: Sequence[Task],
    signatures: Mapping[str, p.Signature],
    texts: Mapping[str, str],
    *,
    method_name_check: bool = False,
) -> list[str]:
    """MultiInference's checks (TF Serving's multi_inference.cc), task by task in its
    order: a model name, the same for every task; each signature once, in the model;
    classify or regress, with that method's signature checks (and the method_name
    check of --enable_signature_method_name_check). The signature name of each task.

    `texts`: each SignatureDef's text, quoted in the signature checks' errors.
    INVALID_ARGUMENT, but UNIMPLEMENTED for a method that is neither.
    """
    model = ""
    names: list[str] = []
    for task in tasks:
        if not task.model:
            raise p.bad_request("Found ModelSpec with an empty model name.")
        if not model:
            model = task.model
        elif task.model != model:
            raise p.bad_request(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name."
            )
        name = task.signature_name or p.DEFAULT_SIGNATURE
        if name in names:
            raise p.bad_request(f"Duplicate evaluation of signature: {name}")
        names.append(name)
        signature = signatures.get(name)
        if signature is None:
            raise p.bad_request(f"Requested signature not found in model graph: {name}")
        text = texts.get(name, name)
        if task.method_name == CLASSIFY_METHOD:
            check_classification_signature(signature, text, method_name_check=method_name_check)
        elif task.method_name == REGRESS_METHOD:
            check_regression_signature(signature, text, method_name_check=method_name_check)
        else:
            raise p.ApiError(
                501, f"Unsupported signature method_name: {task.method_name}", code="UNIMPLEMENTED"
            )
    return names


def check_examples(examples: Sequence[bytes]) -> None:
    if not examples:
        raise p.bad_request("Input is empty.")


# --------------------------------------------------------------------------
# Results


def classification_result(
    num_examples: int, classes: p.Tensor | None, scores: p.Tensor | None
) -> Classifications:
    """PostProcessClassificationResult: the outputs checked, per example (label, score).

    Without a classes output every label is b""; without scores every score 0.0.
    """
    for key, tensor, dtype in ((CLASSES, classes, "DT_STRING"), (SCORES, scores, "DT_FLOAT")):
        if tensor is None:
            continue
        if len(tensor.shape) != 2:
            raise p.bad_request(
                "Expected Tensor shape: [batch_size num_classes] but got "
                f"{p.format_shape(tensor.shape)}"
            )
        if tensor.dtype != dtype:
            raise p.bad_request(f"Expected {key} Tensor of {dtype}. Got: {tensor.dtype}")
        if tensor.shape[0] != num_examples:
            raise p.bad_request(
                f"Expected {key} output batch size of {num_examples}. Got: {tensor.shape[0]}"
            )
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise p.bad_request(
            "Tensors class and score should match in dim_size(1). Got "
            f"{classes.shape[1]} vs. {scores.shape[1]}"
        )
    shaped = classes if classes is not None else scores
    num_classes = 0 if shaped is None else shaped.shape[1]
    labels = None if classes is None else p.values_list(classes.values)
    values = None if scores is None else p.values_list(scores.values)
    result: Classifications = []
    for i in range(num_examples):
        row = []
        for c in range(num_classes):
            at = i * num_classes + c
            label = bytes(labels[at]) if labels is not None else b""
            score = float(values[at]) if values is not None else 0.0
            row.append((label, score))
        result.append(row)
    return result


def regression_result(num_examples: int, output: p.Tensor) -> list[float]:
    """PostProcessRegressionResult: one value per example from a [batch] or [batch, 1] output."""
    shape = output.shape
    if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
        raise p.bad_request(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{p.format_shape(shape)}"
        )
    if num_examples != shape[0]:
        raise p.bad_request(
            f"Input batch size did not match output batch size: {num_examples} vs. {shape[0]}"
        )
    if output.dtype != "DT_FLOAT":
        raise p.bad_request(f"Expected output Tensor of DT_FLOAT.  Got: {output.dtype}")
    return [float(v) for v in p.values_list(output.values)]


#: Rows of a classification written to JSON at a time (classify_json).
JSON_ROWS = 4096


def classify_json(result: Classifications) -> bytes:
    """``{"results": [[[label, score], ...], ...]}`` as JSON bytes (protocol.encode's).

    Written JSON_ROWS examples at a time and consuming `result` as it goes
    (it is left empty), so that the answer's Python objects never all exist
    at once: a classification holds a list and a tuple per class per example,
    and the JSON structure as much again. Labels are bytes in the model; one
    that is not UTF-8 is written with the replacement character (JSON strings
    must be Unicode); each distinct label is decoded once.
    """
    if not result:
        raise p.bad_request("Cannot convert empty ClassificationResults to JSON")
    labels: dict[bytes, str] = {}

    def text(label: bytes) -> str:
        if label not in labels:
            labels[label] = label.decode("utf-8", "replace")
        return labels[label]

    chunks: list[bytes] = []
    result.reverse()  # so that pop() takes the examples in order
    while result:
        rows = [result.pop() for _ in range(min(JSON_ROWS, len(result)))]
        written = p.encode([[[text(label), score] for label, score in row] for row in rows])
        chunks.append(written[1:-1])  # without the list's brackets
    return b'{"results":[' + b",".join(chunks) + b"]}"


def regress_response(values: Sequence[float]) -> dict[str, Any]:
    """``{"results": [value, ...]}``."""
    if not values:
        raise p.bad_request("Cannot convert empty RegressionResults to JSON")
    return {"results": list(values)}
