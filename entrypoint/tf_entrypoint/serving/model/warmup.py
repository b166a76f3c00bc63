"""Warm-up beside the servable: the export's ``tf_serving_warmup_requests``
replayed through the core and the codecs as requests are, else zeros once.

Either way the first client request does not pay for TensorFlow's first run
(its Session callable made, memory allocated). A record that fails fails the
load (the version never becomes available), as in TF Serving
(saved_model_warmup.md, saved_model_warmup_util.cc).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import tensorflow as tf

from tf_entrypoint.serving.codec import example_proto, tensor_proto
from tf_entrypoint.serving.core import inference
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.core.types import DEFAULT_SIGNATURE, Tensor
from tf_entrypoint.serving.model.bundle import log, quiet
from tf_entrypoint.serving.model.servable import FLOATS, TensorFlowServable

#: TF Serving's warm-up file, a TFRecord of PredictionLog (saved_model_warmup.md).
WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
#: TF Serving's limit (WarmupConsts::kMaxNumRecords).
MAX_WARMUP_RECORDS = 1000
#: The dtypes warm-up can make zeros of, and each one's zero.
_ZEROABLE = frozenset(
    {"DT_DOUBLE", "DT_INT8", "DT_INT16", "DT_INT32", "DT_INT64", "DT_UINT8", "DT_UINT16",
     "DT_UINT32", "DT_UINT64", "DT_BOOL", "DT_STRING"}
) | FLOATS  # fmt: skip
_ZEROS: dict[str, Any] = {"DT_STRING": b"", "DT_BOOL": False, **dict.fromkeys(FLOATS, 0.0)}
#: What a request the model refuses raises.
_REFUSED = (ServingError,)


def warm_up(servable: TensorFlowServable, *, limit: int, iterations: int = 1) -> None:
    """Replay the export's warm-up records, as TF Serving does; else run zeros once.

    `limit`: what a record's tensors and examples may decode to (limits.py).
    `iterations`: times each record is replayed (--num_request_iterations_for_warmup,
    as TF Serving's saved_model_warmup_util.cc); the zeros run once whatever it is.
    Sets the servable's warmup_records and warmup_seconds.
    """
    path = servable.directory / WARMUP_FILE
    if path.is_file():
        started = time.perf_counter()
        servable.warmup_records = _replay(servable, path, limit, iterations)
        servable.warmup_seconds = time.perf_counter() - started
        return
    _warm_up_with_zeros(servable)


def _replay(servable: TensorFlowServable, path: Path, limit: int, iterations: int) -> int:
    from tensorflow_serving.apis import prediction_log_pb2  # noqa: PLC0415

    replayed = 0
    with quiet():
        records = tf.compat.v1.io.tf_record_iterator(str(path))
    for index, record in enumerate(records):
        if index >= MAX_WARMUP_RECORDS:
            raise ValueError(
                f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}"
            )
        log_entry = prediction_log_pb2.PredictionLog()
        try:
            log_entry.ParseFromString(record)
        except Exception as err:
            raise ValueError(f"Failed to parse warmup record {index} from {path}") from err
        ran = 0
        for _ in range(iterations):  # as TF Serving: a record's iterations back to back
            ran = _replay_record(servable, index, path, log_entry, limit)
        replayed += ran  # records, as TF Serving counts them
    return replayed


def _replay_record(
    servable: TensorFlowServable, index: int, path: Path, log_entry: Any, limit: int
) -> int:
    """Run one warm-up record once; 1 if it ran something, 0 for an empty record."""
    kind = log_entry.WhichOneof("log_type")
    if kind in ("classify_log", "regress_log"):
        _replay_examples(servable, index, path, log_entry, limit)
        return 1
    if kind == "multi_inference_log":
        _replay_multi_inference(servable, index, path, log_entry, limit)
        return 1
    if kind in ("session_run_log", "predict_streamed_log"):  # as TF Serving
        number = log_entry.DESCRIPTOR.fields_by_name[kind].number
        raise ValueError(
            f"warm-up record {index} of {path}: Unsupported log_type for warmup: {number}"
        )
    if kind != "predict_log":  # none set: nothing to run, as in TF Serving
        return 0
    request = log_entry.predict_log.request
    name = request.model_spec.signature_name or DEFAULT_SIGNATURE
    if name not in servable.signatures or not servable.runs(name):
        raise ValueError(
            f"warm-up record {index} of {path}: serving signature name: "
            f'"{name}" not found in signature def'
        )
    try:
        inputs = tensor_proto.ProtoInputs(request.inputs, limit)
        _, outputs = inference.predict(servable, name, inputs, request.output_filter)
        for alias, tensor in outputs.items():  # as gRPC's answer would be written
            tensor_proto.as_proto_field(alias, tensor)
    except _REFUSED as err:
        raise ValueError(f"warm-up record {index} of {path}: {err.message}") from None
    return 1


def _replay_examples(
    servable: TensorFlowServable, index: int, path: Path, log_entry: Any, limit: int
) -> None:
    """One classify_log or regress_log warm-up record."""
    try:
        if log_entry.HasField("classify_log"):
            request = log_entry.classify_log.request
            examples = example_proto.serialized_examples(request.input, limit=limit)
            inference.classify(servable, request.model_spec.signature_name, examples)
        else:
            request = log_entry.regress_log.request
            examples = example_proto.serialized_examples(request.input, limit=limit)
            inference.regress(servable, request.model_spec.signature_name, examples)
    except _REFUSED as err:
        raise ValueError(f"warm-up record {index} of {path} failed: {err.message}") from None


def _replay_multi_inference(
    servable: TensorFlowServable, index: int, path: Path, log_entry: Any, limit: int
) -> None:
    """One multi_inference_log warm-up record (TF Serving runs it as a request,
    whatever model its tasks name, as long as they name one)."""
    request = log_entry.multi_inference_log.request
    try:
        examples = example_proto.serialized_examples(request.input, limit=limit)
        inference.multi_inference(servable, example_proto.tasks_of(request), examples)
    except _REFUSED as err:
        raise ValueError(f"warm-up record {index} of {path} failed: {err.message}") from None


def _warm_up_with_zeros(servable: TensorFlowServable) -> None:
    """Run each signature with inputs once on zeros: a free dimension is 1,
    a signature whose input has an unknown rank or dtype is skipped, and one
    the graph refuses zeros for is logged and skipped."""
    for name, signature in servable.signatures.items():
        if not servable.runs(name) or not signature.inputs:
            continue
        inputs = {}
        for key, spec in signature.inputs.items():
            if spec.shape is None or spec.dtype not in _ZEROABLE:
                break
            shape = tuple(1 if d < 0 else d for d in spec.shape)
            count = 1
            for d in shape:
                count *= d
            zero = _ZEROS.get(spec.dtype, 0)
            inputs[key] = Tensor(spec.dtype, shape, [zero] * count)
        else:
            try:
                inference.predict(servable, name, inference.Decoded(inputs), rest=True)
            except _REFUSED as err:
                log.info("warm-up of signature %r skipped: %s", name, err.message)
