"""Domain types and the constants written once: signature and method names,
tensors, signatures, routes, statuses (docs/architecture.md, ``core/``).

No TensorFlow, no NumPy, no web framework: the JSON codecs are in ``codec/``
(json_values.py, json_tensor.py); the one error type is ``core/errors.ServingError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tf_entrypoint.serving.core.errors import invalid_argument

#: The signature used when a request names none.
DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
#: Values quoted back in error messages are cut to this many characters.
MAX_QUOTED = 200

Kind = Literal["status", "metadata", "predict", "classify", "regress", "multi_inference"]


# --------------------------------------------------------------------------
# Signatures and tensors


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a signature, as the SavedModel declares it."""

    #: TensorFlow's DataType name, e.g. "DT_FLOAT".
    dtype: str
    #: Dimensions, -1 where any size fits; None when even the rank is unknown.
    shape: tuple[int, ...] | None
    #: The graph tensor's name, e.g. "serving_default_x:0" (metadata only).
    tensor_name: str = ""


@dataclass(frozen=True)
class Signature:
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    method_name: str = PREDICT_METHOD


@dataclass(frozen=True)
class Tensor:
    """A dense tensor: dtype name, shape, values flat in row-major order.

    Values are Python ints, floats and bools, or bytes for DT_STRING. A REST
    request's numbers are parsed into a compact ``array.array``
    (codec/json_tensor.py), a gRPC request's into a flat NumPy array
    (codec/tensor_proto.py); a model's outputs may be any sequence with a
    ``tolist()`` that makes the Python objects (:func:`values_list`).
    """

    dtype: str
    shape: tuple[int, ...]
    values: Sequence[Any]


# --------------------------------------------------------------------------
# URLs


@dataclass(frozen=True)
class Route:
    kind: Kind
    model: str
    version: int | None = None
    label: str | None = None


_INT64_MAX = 2**63 - 1


def version_number(text: str | None) -> int | None:
    """A version as a request names it (URL, v2's model_version): digits that fit
    int64, else TF Serving's error (INVALID_ARGUMENT).

    Its length is checked before int(): Python refuses to convert more than
    4,300 digits (ValueError), and a URL may carry thousands.
    """
    if text is None:
        return None
    digits = text.lstrip("0")
    if (
        not (text.isascii() and text.isdigit())
        or len(digits) > len(str(_INT64_MAX))
        or int(digits or "0") > _INT64_MAX
    ):
        shown = text if len(text) <= MAX_QUOTED else text[: MAX_QUOTED - 3] + "..."
        raise invalid_argument(f"Failed to convert version: {shown} to numeric.")
    return int(digits or "0")


def servable_request(route: Route) -> str:
    """How TF Serving names a request in 'Servable not found' messages."""
    if route.version is not None:
        return f"Specific({route.model}, {route.version})"
    if route.label is not None:
        return f"Labeled({route.model}, {route.label})"
    return f"Latest({route.model})"


# --------------------------------------------------------------------------
# Request bodies


def quote(value: Any) -> str:
    """A value as JSON for an error message, cut to MAX_QUOTED characters."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= MAX_QUOTED else text[: MAX_QUOTED - 3] + "..."


def values_list(values: Sequence[Any]) -> list[Any]:
    """Values as a list of Python objects: the sequence's tolist(), else list()."""
    tolist = getattr(values, "tolist", None)
    if tolist is not None:
        converted: list[Any] = tolist()
        return converted
    return values if isinstance(values, list) else list(values)


def format_shape(shape: Sequence[int] | None) -> str:
    return "[?]" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


# --------------------------------------------------------------------------
# Status and metadata


#: The lifecycle states of a model version: TF Serving's ModelVersionStatus.State
#: by name, as REST's status answer writes them (gRPC's answer takes their numbers
#: from the enum of the same names).
START = "START"
LOADING = "LOADING"
AVAILABLE = "AVAILABLE"
UNLOADING = "UNLOADING"
END = "END"


@dataclass(frozen=True)
class VersionStatus:
    version: int
    #: One of the lifecycle states: START, LOADING, AVAILABLE, UNLOADING, END.
    state: str
    error_code: str = "OK"
    error_message: str = ""
