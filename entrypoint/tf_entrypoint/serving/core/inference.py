"""The checks and result shaping of predict, classify, regress and
MultiInference, run once for every transport (docs/architecture.md, ``core/``).

A transport decodes its wire format (REST: ``codec/json_tensor``,
``codec/json_examples``; gRPC: ``codec/tensor_proto``, ``codec/example_proto``)
and calls :func:`predict`, :func:`classify`, :func:`regress` or
:func:`multi_inference` with the version it leased; these check the request
against the signature as TF Serving does, call the servable's one
:meth:`~tf_entrypoint.serving.core.servable.Servable.run`, and check and
shape what it returns; the transport encodes the result.

Written after TF Serving's sources, so clients see the same answers and
errors: predict_util.cc (the signature and its method, the input names, the
output filter, each input's dtype; not its shape, which the graph checks),
classifier.cc ``PreProcessClassification`` / ``PostProcessClassificationResult``,
regressor.cc ``PreProcessRegression`` / ``PostProcessRegressionResult``,
multi_inference.cc. Every error is a :class:`ServingError`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument
from tf_entrypoint.serving.core.servable import Servable
from tf_entrypoint.serving.core.types import (
    CLASSIFY_METHOD,
    DEFAULT_SIGNATURE,
    PREDICT_METHOD,
    REGRESS_METHOD,
    Signature,
    Tensor,
    format_shape,
    quote,
    values_list,
)

#: The keys a classify/regress SignatureDef must use (signature_constants.h).
INPUTS = "inputs"
CLASSES = "classes"
SCORES = "scores"
OUTPUTS = "outputs"
#: The methods a Predict may run (predict_util.cc).
RUNNABLE_METHODS = (PREDICT_METHOD, CLASSIFY_METHOD, REGRESS_METHOD)

#: Per example, its (class label, score) pairs.
Classifications = list[list[tuple[bytes, float]]]


# --------------------------------------------------------------------------
# Predict


class Inputs(Protocol):
    """A predict's inputs as a transport decoded them, read in two steps so
    that the request is checked against the signature before its values are
    decoded (TF Serving's order: a bad signature is answered before a bad tensor)."""

    def keys(self) -> Collection[str]:
        """The inputs' aliases."""
        ...

    def dtype(self, key: str) -> str:
        """An input's DataType name; ServingError when the wire names none TensorFlow knows."""
        ...

    def tensors(self) -> Mapping[str, Tensor]:
        """The inputs decoded (ServingError for what cannot be)."""
        ...


class Decoded:
    """Inputs decoded already (REST's JSON, parsed for the signature's dtypes)."""

    __slots__ = ("_tensors",)

    def __init__(self, tensors: Mapping[str, Tensor]) -> None:
        self._tensors = tensors

    def keys(self) -> Collection[str]:
        return self._tensors.keys()

    def dtype(self, key: str) -> str:
        return self._tensors[key].dtype

    def tensors(self) -> Mapping[str, Tensor]:
        return self._tensors


def tf_type(dtype: str) -> str:
    """TensorFlow's DataTypeString: DT_FLOAT -> float."""
    return dtype.removeprefix("DT_").lower()


def check_input_names(given: Collection[str], signature: Signature) -> None:
    """TF Serving's VerifyRequestInputsSize, message and all."""
    names, wanted = set(given), set(signature.inputs)
    if names == wanted:
        return
    raise invalid_argument(
        f"input size does not match signature: {len(names)}!={len(wanted)} "
        f"len({{{','.join(sorted(names))}}}) != len({{{','.join(sorted(wanted))}}}). "
        f"Sent extra: {{{','.join(sorted(names - wanted))}}}. "
        f"Missing but required: {{{','.join(sorted(wanted - names))}}}."
    )


def check_output_filter(output_filter: Sequence[str], signature: Signature) -> None:
    seen: set[str] = set()
    for alias in output_filter:
        if alias not in signature.outputs:
            raise invalid_argument(
                f"output tensor alias not found in signature: {alias} Outputs expected to be "
                f"in the set {{{','.join(sorted(signature.outputs))}}}."
            )
        if alias in seen:
            raise invalid_argument(f"duplicate output tensor alias: {alias}")
        seen.add(alias)


def check_dtypes(inputs: Inputs, signature: Signature) -> None:
    """Each input's dtype is the signature's (TensorFlow's words, as Session::Run says them)."""
    for index, key in enumerate(sorted(inputs.keys())):
        given, wanted = inputs.dtype(key), signature.inputs[key].dtype
        if given != wanted:
            raise invalid_argument(
                f"Expects arg[{index}] to be {tf_type(wanted)} but {tf_type(given)} is provided"
            )


def predict(
    servable: Servable,
    signature_name: str,
    inputs: Inputs,
    output_filter: Sequence[str] = (),
    *,
    rest: bool = False,
) -> tuple[str, dict[str, Tensor]]:
    """One Predict, either transport: (the signature name used, the outputs by alias).

    :func:`checked_predict` then the servable's run, through the batch queue
    when batching is on.
    """
    name, tensors, wanted = checked_predict(
        servable, signature_name, inputs, output_filter, rest=rest
    )
    return name, servable.run(name, tensors, wanted, batch=True)


def checked_predict(
    servable: Servable,
    signature_name: str,
    inputs: Inputs,
    output_filter: Sequence[str] = (),
    *,
    rest: bool = False,
) -> tuple[str, Mapping[str, Tensor], tuple[str, ...]]:
    """A Predict checked against the signature: (its name, the inputs, the outputs to fetch).

    The checks are TF Serving's (predict_util.cc): the signature and its
    method, the input names, the output filter, each input's dtype; not
    shapes, which the graph checks (it takes what it can and refuses the rest
    with its own error). Only the outputs asked for are computed (every one,
    sorted, without a filter).

    `rest`: the REST body names the signature and gives each input the
    signature's dtype (codec/json_tensor.py, which answers an unknown signature
    in REST's words before this runs); a signature the servable cannot run
    is answered in those words too, and REST has never checked the method
    name (kept: answers unchanged).
    """
    name = signature_name or DEFAULT_SIGNATURE
    signature = servable.signatures.get(name)
    if signature is None or not servable.runs(name):
        if rest:
            raise invalid_argument(f'Serving signature name: "{name}" not found in signature def')
        raise ServingError(Code.FAILED_PRECONDITION, f'Serving signature key "{name}" not found.')
    if not rest and signature.method_name not in RUNNABLE_METHODS:
        raise ServingError(Code.INTERNAL, method_name_message(signature))
    check_input_names(inputs.keys(), signature)
    check_output_filter(output_filter, signature)
    check_dtypes(inputs, signature)
    wanted = tuple(output_filter) or tuple(sorted(signature.outputs))
    return name, inputs.tensors(), wanted


def method_name_message(signature: Signature) -> str:
    """TF Serving's words for a signature a Predict cannot run (predict_util.cc)."""
    return (
        "Expected prediction signature method_name to be one of {"
        + ", ".join(RUNNABLE_METHODS)
        + "}. Was: "
        + signature.method_name
    )


def predicts(servable: Servable, name: str) -> bool:
    """Whether a Predict can run signature `name`: the servable runs it and its
    method is predict, classify or regress (not an init op's SignatureDef)."""
    signature = servable.signatures.get(name)
    return (
        signature is not None and signature.method_name in RUNNABLE_METHODS and servable.runs(name)
    )


def unnamed_signature(requested: str | None, servable: Servable) -> str:
    """The signature a request of a protocol without signature names runs (the Open
    Inference Protocol), and the one its metadata describes: `requested` (its
    `signature_name` parameter) if given, else serving_default, else the first
    signature a Predict can run in name order (docs/v2.md, "Which signature").

    A requested signature that is not a prediction signature (a TF2 export's
    ``__saved_model_init_op``) is the user's mistake: INVALID_ARGUMENT with TF
    Serving's words, where gRPC's Predict keeps TF Serving's INTERNAL.
    """
    signatures = servable.signatures
    if requested:
        signature = signatures.get(requested)
        if signature is None:
            raise invalid_argument(
                f"signature {quote(requested)} not found; the model's signatures: "
                + ", ".join(sorted(signatures))
            )
        if signature.method_name not in RUNNABLE_METHODS:
            raise invalid_argument(
                f"signature {quote(requested)} cannot be called: {method_name_message(signature)}"
            )
        return requested
    if DEFAULT_SIGNATURE in signatures:
        return DEFAULT_SIGNATURE
    for name in sorted(signatures):
        if predicts(servable, name):
            return name
    raise ServingError(Code.FAILED_PRECONDITION, "the model has no signature to run")


def signature_of(parameters: Mapping[str, object], servable: Servable) -> str:
    """:func:`unnamed_signature` of a request whose `signature_name` parameter may name one."""
    name = parameters.get("signature_name")
    if name is not None and not isinstance(name, str):
        raise invalid_argument(f"the signature_name parameter must be a string, not {quote(name)}")
    return unnamed_signature(name, servable)


# --------------------------------------------------------------------------
# Classify, regress and MultiInference: signatures


def find_signature(signature_name: str, signatures: Mapping[str, Signature]) -> str:
    """The signature's name ("" = serving_default); TF Serving's error when it is absent."""
    name = signature_name or DEFAULT_SIGNATURE
    if name not in signatures:
        raise invalid_argument(f"No signature was found with the name: {name}")
    return name


def check_classification_signature(
    signature: Signature, text: str, *, method_name_check: bool = False
) -> None:
    """PreProcessClassification. `text`: the SignatureDef's DebugString, quoted in errors.

    With `method_name_check` (TF Serving's --enable_signature_method_name_check,
    off by default) the method_name must be tensorflow/serving/classify; without
    it, any signature with the right keys classifies (TF2 exports say predict).
    """
    if method_name_check and signature.method_name != CLASSIFY_METHOD:
        raise invalid_argument(
            f"Expected classification signature method_name to be {CLASSIFY_METHOD}. "
            f"Was: {signature.method_name}"
        )
    if len(signature.inputs) != 1:
        raise invalid_argument("Expected one input Tensor.")
    if len(signature.outputs) not in (1, 2):
        raise invalid_argument(
            f"Expected one or two output Tensors, found {len(signature.outputs)}"
        )
    if INPUTS not in signature.inputs:
        raise invalid_argument(f"No classification inputs found in SignatureDef: {text}")
    if CLASSES not in signature.outputs and SCORES not in signature.outputs:
        raise invalid_argument(
            'Expected classification signature outputs to contain at least one of "classes" '
            f'or "scores". Signature was: {text}'
        )


def check_regression_signature(
    signature: Signature, text: str, *, method_name_check: bool = False
) -> None:
    """PreProcessRegression; see :func:`check_classification_signature`."""
    if method_name_check and signature.method_name != REGRESS_METHOD:
        raise invalid_argument(
            f"Expected regression signature method_name to be {REGRESS_METHOD}. "
            f"Was: {signature.method_name}"
        )
    if len(signature.inputs) != 1:
        raise invalid_argument("Expected one input Tensor.")
    if len(signature.outputs) != 1:
        raise invalid_argument("Expected one output Tensor.")
    if INPUTS not in signature.inputs:
        raise invalid_argument(f"No regression inputs found in SignatureDef: {text}")
    if OUTPUTS not in signature.outputs:
        raise invalid_argument(f"No regression outputs found in SignatureDef: {text}")


@dataclass(frozen=True)
class Task:
    """One task of a MultiInference request: its ModelSpec's name and
    signature_name ("" = serving_default), and its method_name."""

    model: str
    signature_name: str
    method_name: str


#: One task's result: a classification (Classifications) or a regression (one value
#: per example), as its method_name says.
TaskResult = Classifications | list[float]


def check_tasks(
    tasks: Sequence[Task],
    signatures: Mapping[str, Signature],
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
            raise invalid_argument("Found ModelSpec with an empty model name.")
        if not model:
            model = task.model
        elif task.model != model:
            raise invalid_argument(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name."
            )
        name = task.signature_name or DEFAULT_SIGNATURE
        if name in names:
            raise invalid_argument(f"Duplicate evaluation of signature: {name}")
        names.append(name)
        signature = signatures.get(name)
        if signature is None:
            raise invalid_argument(f"Requested signature not found in model graph: {name}")
        text = texts.get(name, name)
        if task.method_name == CLASSIFY_METHOD:
            check_classification_signature(signature, text, method_name_check=method_name_check)
        elif task.method_name == REGRESS_METHOD:
            check_regression_signature(signature, text, method_name_check=method_name_check)
        else:
            raise ServingError(
                Code.UNIMPLEMENTED, f"Unsupported signature method_name: {task.method_name}"
            )
    return names


def check_examples(examples: Sequence[bytes]) -> None:
    if not examples:
        raise invalid_argument("Input is empty.")


# --------------------------------------------------------------------------
# Classify, regress and MultiInference: results


def classification_result(
    num_examples: int, classes: Tensor | None, scores: Tensor | None
) -> Classifications:
    """PostProcessClassificationResult: the outputs checked, per example (label, score).

    Without a classes output every label is b""; without scores every score 0.0.
    """
    for key, tensor, dtype in ((CLASSES, classes, "DT_STRING"), (SCORES, scores, "DT_FLOAT")):
        if tensor is None:
            continue
        if len(tensor.shape) != 2:
            raise invalid_argument(
                "Expected Tensor shape: [batch_size num_classes] but got "
                f"{format_shape(tensor.shape)}"
            )
        if tensor.dtype != dtype:
            raise invalid_argument(f"Expected {key} Tensor of {dtype}. Got: {tensor.dtype}")
        if tensor.shape[0] != num_examples:
            raise invalid_argument(
                f"Expected {key} output batch size of {num_examples}. Got: {tensor.shape[0]}"
            )
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise invalid_argument(
            "Tensors class and score should match in dim_size(1). Got "
            f"{classes.shape[1]} vs. {scores.shape[1]}"
        )
    shaped = classes if classes is not None else scores
    num_classes = 0 if shaped is None else shaped.shape[1]
    labels = None if classes is None else values_list(classes.values)
    values = None if scores is None else values_list(scores.values)
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


def regression_result(num_examples: int, output: Tensor) -> list[float]:
    """PostProcessRegressionResult: one value per example from a [batch] or [batch, 1] output."""
    shape = output.shape
    if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
        raise invalid_argument(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{format_shape(shape)}"
        )
    if num_examples != shape[0]:
        raise invalid_argument(
            f"Input batch size did not match output batch size: {num_examples} vs. {shape[0]}"
        )
    if output.dtype != "DT_FLOAT":
        raise invalid_argument(f"Expected output Tensor of DT_FLOAT.  Got: {output.dtype}")
    return [float(v) for v in values_list(output.values)]


# --------------------------------------------------------------------------
# Classify, regress and MultiInference: runs


#: The outputs a task fetches, by its method (as Classify and Regress do).
TASK_OUTPUTS = {CLASSIFY_METHOD: (CLASSES, SCORES), REGRESS_METHOD: (OUTPUTS,)}


def examples_tensor(examples: Sequence[bytes]) -> Tensor:
    """Serialized examples as the DT_STRING vector a classify/regress signature takes."""
    return Tensor("DT_STRING", (len(examples),), examples)


def _run_examples(
    servable: Servable, name: str, examples: Sequence[bytes], wanted: Sequence[str]
) -> dict[str, Tensor]:
    """Feed the serialized examples to the signature's one DT_STRING input; fetch
    the outputs of `wanted` the signature has (as TF Serving's classifier and
    regressor fetch only those)."""
    check_examples(examples)
    signature = servable.signatures[name]
    if not servable.runs(name):
        raise invalid_argument(f"No signature was found with the name: {name}")
    outputs = [alias for alias in wanted if alias in signature.outputs]
    return servable.run(name, {INPUTS: examples_tensor(examples)}, outputs)


def classify(servable: Servable, signature_name: str, examples: Sequence[bytes]) -> Classifications:
    """TF Serving's Classify: per example, its (class label, score) pairs.

    `signature_name` "" means serving_default. Label b"" when the signature
    has no "classes" output, score 0.0 when it has no "scores".
    INVALID_ARGUMENT with TF Serving's message for a signature that cannot
    classify, no examples ("Input is empty."), an example the model cannot
    parse, or outputs of the wrong dtype or shape.
    """
    name = find_signature(signature_name, servable.signatures)
    check_classification_signature(
        servable.signatures[name],
        servable.signature_texts.get(name, name),
        method_name_check=servable.method_name_check,
    )
    outputs = _run_examples(servable, name, examples, (CLASSES, SCORES))
    return classification_result(len(examples), outputs.get(CLASSES), outputs.get(SCORES))


def regress(servable: Servable, signature_name: str, examples: Sequence[bytes]) -> list[float]:
    """TF Serving's Regress: one value per example; errors as :func:`classify`'s."""
    name = find_signature(signature_name, servable.signatures)
    check_regression_signature(
        servable.signatures[name],
        servable.signature_texts.get(name, name),
        method_name_check=servable.method_name_check,
    )
    outputs = _run_examples(servable, name, examples, (OUTPUTS,))
    output = outputs.get(OUTPUTS)
    if output is None:  # the function lost an output its SignatureDef declares
        raise invalid_argument(f"Could not find output tensor '{OUTPUTS}'")
    return regression_result(len(examples), output)


def multi_inference(
    servable: Servable, tasks: Sequence[Task], examples: Sequence[bytes]
) -> list[TaskResult]:
    """MultiInference (TF Serving's multi_inference.cc): every task checked, then
    the tasks' signatures run on the shared examples, then each result checked.

    As in TF Serving, the tasks run in one call where the servable can (one
    Session run: the examples fed to each signature's input tensor, every
    task's outputs fetched together, so the examples are parsed once and a
    node the signatures share runs once).
    """
    names = check_tasks(
        tasks,
        servable.signatures,
        servable.signature_texts,
        method_name_check=servable.method_name_check,
    )
    check_examples(examples)
    for name in names:
        if not servable.runs(name):
            raise invalid_argument(f"No signature was found with the name: {name}")
    serialized = examples_tensor(examples)
    calls = []
    for task, name in zip(tasks, names, strict=True):
        outputs = servable.signatures[name].outputs
        wanted = [alias for alias in TASK_OUTPUTS[task.method_name] if alias in outputs]
        calls.append((name, {INPUTS: serialized}, wanted))
    results: list[TaskResult] = []
    for task, out in zip(tasks, servable.run_many(calls), strict=True):
        if task.method_name == CLASSIFY_METHOD:
            classes, scores = out.get(CLASSES), out.get(SCORES)
            results.append(classification_result(len(examples), classes, scores))
            continue
        output = out.get(OUTPUTS)
        if output is None:  # the function lost an output its SignatureDef declares
            raise invalid_argument(f"Could not find output tensor '{OUTPUTS}'")
        results.append(regression_result(len(examples), output))
    return results


# --------------------------------------------------------------------------
# TensorFlow's errors


_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\]\s*$")


def tensorflow_error_message(text: str, limit: int = 2000) -> str:
    """A TensorFlow op error as TF Serving would pass it on, cut to `limit` characters.

    Eager TensorFlow puts "Graph execution error:" and the Python frames that
    built the failing node before the kernel's message, and "[Op:...]" after
    it; TF Serving's clients see only the kernel's message (e.g. "Name:
    <unknown>, Feature: x (data type: float) is required but could not be
    found.").
    """
    kept = []
    for part in text.split("\n\n"):
        if part.startswith("Detected at node "):
            # A function loaded from a SavedModel has no Python frames: the
            # kernel's message follows this line in the same paragraph.
            _, unavailable, rest = part.partition("<stack traces unavailable>\n")
            if unavailable and rest:
                kept.append(rest)
        elif part != "Graph execution error:" and not part.startswith("  File "):
            kept.append(part)
    message = _OP_SUFFIX.sub("", "\n\n".join(kept)).strip() or text
    return message[:limit]
