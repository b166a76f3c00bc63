"""Golden answers: the server's exact answers to a fixed corpus, recorded once, compared after.

A refactor of the server must change no answer. Each case here is one request
(REST from the host, gRPC from a sidecar running grpc_client.py's `wire` op,
TF Serving's own message classes) and its recorded answer in
tests/container/answers/PHASE.json:

- REST: the status code, the Content-Type and Retry-After headers, and the
  body text exactly as sent (a JSON body is also shown indented in a diff,
  for reading only: the comparison is on the text).
- gRPC: the status code's name, the details string, and for an answer its
  size in bytes as sent, the sha256 of it serialized deterministically, and
  its text format (Any fields expanded, so GetModelMetadata's signatures can
  be read).

Numbers are part of the answers and are kept. Nothing is normalized except:

- metrics (phase `metrics`): of the /monitoring/prometheus/metrics page only
  its `# HELP` and `# TYPE` lines (the metric names, types and help texts) and
  each sample's name with its label *names* are kept, in the page's order
  (once each); the values (timings and counts of this run) and label values
  are left out.
- the order of map entries (a PredictResponse's outputs, a SignatureDefMap's
  signatures) in a gRPC answer: the server writes them in an order that varies
  between runs (protobuf's map order is unspecified; two recordings differed),
  so the sha256 is of the answer re-serialized deterministically (entries by
  key, also inside Any fields: grpc_client.canonical); its size and text
  format do not depend on that order.
- TensorFlow's own words in an error (a REST body, a gRPC status's
  message): its node annotation and a kernel library's wording depend on the
  host (how TensorFlow rewrote the graph there, oneDNN or Eigen), so they are
  recorded and compared as tests/tf_text.py's `tf_text` writes them, with
  placeholders; `test_tensorflow_words_either_way` serves the graph under
  each setting that decides them and compares those answers with the same
  recording.
- nothing else varies: the servers see their models at /models and gates at
  /gates whatever the host's temporary directory, the host's ports appear in
  no answer, and no answer carries a time. A gRPC status's trailing metadata
  is not recorded.

Servers: `main` (one for the module) serves plus/1-2 with labels (make_models.py),
dtypes/gated/matmul/defaults (make_grpc_models.py), examples
(classify/regress, make_models.py --kind classify_regress) and `late`, a
start-up model whose version is put in place only after the `startup` phase
has recorded the start-up gate's answers (every other model is AVAILABLE
then, so the gate's message names `late` alone, deterministically). Its
--max-body-bytes is 65536, so the size-limit cases are small. The `reload`
phase runs last on it: it changes what it serves (adds `broken`, whose
warm-up record fails its load, for the status of a failed model). `limits`
(a second server) serves gated/1 with one worker, one admission slot and a
1 s --request-timeout: a call held by its gate (gates.py) times out (408,
DEADLINE_EXCEEDED) and keeps the only slot, so the next call is refused
(503, RESOURCE_EXHAUSTED) on any CPU; no sleep decides an answer.

Record (on the code whose answers are the reference):

    TF_ENTRYPOINT_RECORD_ANSWERS=1 pytest tests/container/test_answers.py

Without it each phase compares every case and fails with one readable diff
per case that changed (all of them, not the first).
"""

from __future__ import annotations

import base64
import difflib
import json
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from harness import web
from harness.docker import poll
from harness.models import ModelLibrary
from harness.servers import SHAPES, Server, ServerPool, ServerSpec, serve, write_models
from tests.container.gates import Gate
from tests.container.grpc_models import MODEL_CONFIGS, MODELS, gate_volume
from tests.tf_text import tf_text

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

HERE = Path(__file__).resolve().parent
ANSWERS = HERE / "answers"
RECORD = os.environ.get("TF_ENTRYPOINT_RECORD_ANSWERS", "") == "1"
MAX_BODY = 65536
LATE_CONFIG = '  config { name: "late" base_path: "/models/late" }\n'
CONFIG = f"\nmodel_config_list {{\n{MODEL_CONFIGS}{LATE_CONFIG}}}\n"
MONITORING = 'prometheus_config { enable: true path: "/monitoring/prometheus/metrics" }\n'
EARLY = ("plus", "dtypes", "gated", "examples", "matmul", "defaults")
#: `main`'s models (`late` is an empty folder until its version is put in place).
MAIN_MODELS = {**MODELS, "broken": "badwarm"}

# --------------------------------------------------------------------------
# Recording and comparing


def _shown(answer: dict[str, Any]) -> list[str]:
    """An answer as lines for a diff (a JSON body indented, for reading)."""
    lines = []
    for key, value in answer.items():
        if key == "body" and isinstance(value, str):
            try:
                pretty = json.dumps(json.loads(value), indent=1, ensure_ascii=False)
            except ValueError:
                pretty = value
            lines.append("body:")
            lines.extend("  " + line for line in pretty.splitlines())
        elif key == "text" and isinstance(value, str):
            lines.append("text:")
            lines.extend("  " + line for line in value.splitlines())
        else:
            lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return lines


def _hosts_alike(answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` with TensorFlow's host-dependent words in its error text normalized."""
    return {
        key: tf_text(value) if key in {"body", "message"} and isinstance(value, str) else value
        for key, value in answer.items()
    }


def check(phase: str, got: dict[str, dict[str, Any]]) -> None:
    """Record `got` as the phase's answers, or compare it with the recorded ones
    (error texts normalized, as recorded: `_hosts_alike`)."""
    got = {case: _hosts_alike(answer) for case, answer in got.items()}
    path = ANSWERS / f"{phase}.json"
    if RECORD:
        ANSWERS.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
        return
    assert path.exists(), f"{path} is not recorded: run with TF_ENTRYPOINT_RECORD_ANSWERS=1"
    recorded: dict[str, dict[str, Any]] = json.loads(path.read_text())
    problems = []
    for case in [*recorded, *(c for c in got if c not in recorded)]:
        if case not in got:
            problems.append(f"--- case {case}: recorded, not asked any more")
        elif case not in recorded:
            problems.append(f"--- case {case}: not recorded (record again)")
        elif got[case] != recorded[case]:
            before, after = _shown(recorded[case]), _shown(got[case])
            if before == after:  # same when indented: the difference is in the raw text
                before, after = [json.dumps(recorded[case])], [json.dumps(got[case])]
            diff = difflib.unified_diff(before, after, "recorded", "now", lineterm="", n=2)
            problems.append(f"--- case {case}:\n" + "\n".join(diff))
    if problems:
        pytest.fail(
            f"{len(problems)} of {len(recorded)} {phase} answers changed:\n\n"
            + "\n\n".join(problems),
            pytrace=False,
        )


# --------------------------------------------------------------------------
# Asking


def rest(server: Server, method: str, path: str, body: Any = None) -> dict[str, Any]:
    """One REST request; `body`: bytes or str sent as is, else JSON of it."""
    if body is None:
        content = None
    elif isinstance(body, bytes):
        content = body
    elif isinstance(body, str):
        content = body.encode()
    else:
        content = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if content is not None else {}
    answer = web.request(method, server.rest + path, content=content, headers=headers, timeout=120)
    recorded: dict[str, Any] = {
        "status": answer.status_code,
        "content_type": answer.headers.get("content-type"),
    }
    if "retry-after" in answer.headers:
        recorded["retry_after"] = answer.headers["retry-after"]
    recorded["body"] = answer.text
    return recorded


def ask_rest(server: Server, cases: dict[str, tuple[Any, ...]]) -> dict[str, dict[str, Any]]:
    return {name: rest(server, *case) for name, case in cases.items()}


def ask_grpc(server: Server, cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every case in one sidecar, in order."""
    results = server.grpc(*({"op": "wire", **case} for case in cases.values()))
    return dict(zip(cases, results, strict=True))


# --------------------------------------------------------------------------
# Requests


def example(**features: list[float]) -> bytes:
    """A serialized tf.Example of float features (protobuf written by hand, no TF here)."""

    def field(number: int, payload: bytes) -> bytes:
        size, length = len(payload), b""
        while True:
            low, size = size & 0x7F, size >> 7
            length += bytes([low | (0x80 if size else 0)])
            if not size:
                break
        return bytes([number << 3 | 2]) + length + payload

    entries = b""
    for key, values in features.items():
        floats = field(1, struct.pack(f"<{len(values)}f", *values))  # FloatList.value, packed
        entry = field(1, key.encode()) + field(2, field(2, floats))  # Feature.float_list
        entries += field(1, entry)  # Features.feature (map entry)
    return field(1, entries)  # Example.features


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def tensor(values: list[Any], dtype: str = "DT_FLOAT", field: str = "float_val") -> str:
    """A TensorProto in text format: `values` of shape [len(values)]."""
    vals = " ".join(f"{field}: {json.dumps(v)}" for v in values)
    return f"dtype: {dtype} tensor_shape {{ dim {{ size: {len(values)} }} }} {vals}"


def predict(model: str, inputs: dict[str, str], spec: str = "", extra: str = "") -> str:
    """A PredictRequest in text format (`spec`: more of its model_spec)."""
    given = " ".join(f'inputs {{ key: "{k}" value {{ {v} }} }}' for k, v in inputs.items())
    return f'model_spec {{ name: "{model}" {spec} }} {given} {extra}'


def spec(model: str, signature: str = "") -> str:
    named = f' signature_name: "{signature}"' if signature else ""
    return f'model_spec {{ name: "{model}"{named} }}'


def examples_input(*rows: dict[str, list[float]]) -> str:
    def one(features: dict[str, list[float]]) -> str:
        return " ".join(
            f'feature {{ key: "{k}" value {{ float_list {{ '
            + " ".join(f"value: {v}" for v in vals)
            + " } } }"
            for k, vals in features.items()
        )

    listed = " ".join(f"examples {{ features {{ {one(r)} }} }}" for r in rows)
    return f"input {{ example_list {{ {listed} }} }}"


X = {"x": tensor([1.0, 2.5])}
ROWS = ({"x": [0.5], "y": [1.5]}, {"x": [-2.25]})
CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"

EX1 = b64(example(x=[1.5], y=[0.25]))
EX2 = b64(example(x=[-2.0]))
DTYPE_VALUES: dict[str, list[Any]] = {
    "float16": [0.5, -2.0], "bfloat16": [0.5, -2.0], "float32": [0.1, -2.5],
    "float64": [0.1, 1e300], "int8": [-128, 127], "int16": [-32768, 32767],
    "int32": [-(2**31), 2**31 - 1], "int64": [-(2**63), 2**63 - 1], "uint8": [0, 255],
    "uint16": [0, 65535], "uint32": [0, 2**32 - 1], "uint64": [0, 2**64 - 1],
    "bool": [True, False], "string": ["a", "\u00e9t\u00e9"],
}  # fmt: skip
DTYPES_ROWS = {f"in_{k}": v for k, v in DTYPE_VALUES.items()}
DTYPES_ROWS["in_string"] = [{"b64": b64(b"\xff\x00bin")}, {"b64": b64(b"ok")}]
DTYPES_ROWS["in_complex64"] = DTYPES_ROWS["in_complex128"] = [[1.0, 2.0], [0.0, -0.5]]


def rest_cases() -> dict[str, tuple[Any, ...]]:
    p = "/v1/models/plus:predict"
    e = "/v1/models/examples"
    label = "/v1/models/plus/labels/"
    return {
        # predict: forms, versions, labels, signatures
        "predict_row": ("POST", p, {"instances": [1.0, 2.5]}),
        "predict_row_named": ("POST", p, {"instances": [{"x": 1.0}, {"x": -3.5}]}),
        "predict_columnar": ("POST", p, {"inputs": [1.0, 2.5]}),
        "predict_columnar_named": ("POST", p, {"inputs": {"x": [1.0, 2.5]}}),
        "predict_ints_as_float": ("POST", p, {"instances": [1, 2]}),
        "predict_signature_named": (
            "POST", p, {"signature_name": "serving_default", "instances": [0.125]}
        ),
        "predict_version_1": ("POST", "/v1/models/plus/versions/1:predict", {"inputs": [1.0]}),
        "predict_label_stable": ("POST", f"{label}stable:predict", {"inputs": [1.0]}),
        "predict_label_canary": ("POST", f"{label}canary:predict", {"inputs": [1.0]}),
        "predict_case_insensitive_path": ("POST", "/V1/Models/plus:PREDICT", {"inputs": [1.0]}),
        "predict_float_extremes": ("POST", p, {"inputs": [3.4e38, -1e-45, 0.1]}),
        "predict_two_inputs": ("POST", "/v1/models/defaults:predict",
                               {"inputs": {"x": [1.0, 2.0], "y": 3.0}}),
        "predict_input_default": ("POST", "/v1/models/defaults:predict", {"inputs": {"x": [1.5]}}),
        "predict_rows_2d": ("POST", "/v1/models/matmul:predict",
                            {"instances": [[1.0, 2.0], [3.0, 4.5]]}),
        "predict_every_dtype_complex_as_pairs": ("POST", "/v1/models/dtypes:predict",
                                         {"inputs": DTYPES_ROWS}),
        "predict_b64_on_classify_signature": (
            "POST", "/v1/models/examples:predict",
            {"signature_name": "classify", "instances": [{"b64": EX1}, {"b64": EX2}]},
        ),
        "predict_b64_columnar_regress_native": (
            "POST", "/v1/models/examples:predict",
            {"signature_name": "regress_native", "inputs": {"inputs": [{"b64": EX1}]}},
        ),
        # classify, regress, multi-inference
        "classify": ("POST", f"{e}:classify", {"signature_name": "classify",
                     "examples": [{"x": 0.5, "y": 1.5}, {"x": -2.25}]}),
        "classify_context": ("POST", f"{e}/versions/1:classify", {
            "signature_name": "classify", "context": {"y": 0.25},
            "examples": [{"x": 0.5}, {"x": 1.0, "y": 2.0}]}),
        "classify_scores_only": ("POST", f"{e}:classify",
                                 {"signature_name": "scores_only", "examples": [{"x": 3.0}]}),
        "regress": ("POST", f"{e}:regress", {"signature_name": "regress",
                    "examples": [{"x": 0.5, "y": 1.5}, {"x": -2.25}]}),
        "regress_native": ("POST", f"{e}:regress",
                           {"signature_name": "regress_native", "examples": [{"x": 4.0}]}),
        "multi_inference_not_a_rest_verb": ("POST", f"{e}:multi_inference", {
            "tasks": [{"model_spec": {"name": "examples", "signature_name": "regress"},
                       "method_name": REGRESS},
                      {"model_spec": {"name": "examples", "signature_name": "classify"},
                       "method_name": CLASSIFY}],
            "examples": [{"x": 1.0}]}),
        # status and metadata
        "status_all_versions": ("GET", "/v1/models/plus", None),
        "status_one_version": ("GET", "/v1/models/plus/versions/1", None),
        "status_label": ("GET", "/v1/models/plus/labels/canary", None),
        "status_examples": ("GET", "/v1/models/examples", None),
        "metadata": ("GET", "/v1/models/plus/metadata", None),
        "metadata_version": ("GET", "/v1/models/plus/versions/1/metadata", None),
        "metadata_defaults": ("GET", "/v1/models/defaults/metadata", None),
        "metadata_examples": ("GET", "/v1/models/examples/metadata", None),
        # errors
        "unknown_model": ("POST", "/v1/models/nope:predict", {"inputs": [1.0]}),
        "unknown_version": ("POST", "/v1/models/plus/versions/9:predict", {"inputs": [1.0]}),
        "unknown_label": ("POST", "/v1/models/plus/labels/nolabel:predict", {"inputs": [1.0]}),
        "unknown_signature": ("POST", p, {"signature_name": "nope", "inputs": [1.0]}),
        "status_unknown_model": ("GET", "/v1/models/nope", None),
        "status_unknown_version": ("GET", "/v1/models/plus/versions/7", None),
        "metadata_unknown_model": ("GET", "/v1/models/nope/metadata", None),
        "bad_json": ("POST", p, '{"instances": [1.0,'),
        "not_utf8": ("POST", p, b'{"instances": ["\xff"]}'),
        "empty_body": ("POST", p, b""),
        "json_not_object": ("POST", p, [1.0]),
        "no_instances_or_inputs": ("POST", p, {"x": [1.0]}),
        "instances_and_inputs": ("POST", p, {"instances": [1.0], "inputs": [1.0]}),
        "instances_not_list": ("POST", p, {"instances": 1.0}),
        "wrong_dtype": ("POST", p, {"instances": ["a"]}),
        "wrong_dtype_bool": ("POST", p, {"inputs": {"x": [True]}}),
        "ragged": ("POST", "/v1/models/matmul:predict", {"instances": [[1.0, 2.0], [3.0]]}),
        "ragged_named_rows": ("POST", "/v1/models/defaults:predict",
                              {"instances": [{"x": 1.0, "y": 2.0}, {"x": 1.0}]}),
        "missing_input": ("POST", "/v1/models/gated:predict", {"inputs": {"x": [1.0]}}),
        "extra_input": ("POST", p, {"inputs": {"x": [1.0], "z": [2.0]}}),
        "wrong_input_name": ("POST", p, {"inputs": {"z": [1.0]}}),
        "bad_base64": ("POST", "/v1/models/examples:predict",
                       {"signature_name": "classify", "instances": [{"b64": "%%%"}]}),
        "b64_on_float": ("POST", p, {"instances": [{"b64": "AAAA"}]}),
        "float32_overflow": ("POST", p, {"inputs": [1e39]}),
        "nan_as_string": ("POST", p, {"inputs": ["NaN"]}),
        "graph_refuses_shape": ("POST", "/v1/models/matmul:predict",
                                {"instances": [[1.0, 2.0, 3.0]]}),
        "graph_refuses_rank": ("POST", "/v1/models/matmul:predict", {"instances": [1.0, 2.0]}),
        "body_over_limit": ("POST", p, b'{"instances": [' + b"0," * MAX_BODY + b"0]}"),
        "classify_on_predict_signature": (
            "POST", f"{e}:classify", {"signature_name": "serving_default",
                                      "examples": [{"x": 1.0}]}),
        "regress_on_classify_signature": (
            "POST", f"{e}:regress", {"signature_name": "classify", "examples": [{"x": 1.0}]}),
        "classify_no_examples": ("POST", f"{e}:classify",
                                 {"signature_name": "classify", "examples": []}),
        "classify_bad_scores": ("POST", f"{e}:classify",
                                {"signature_name": "bad_scores", "examples": [{"x": 1.0}]}),
        "classify_feature_wrong_type": ("POST", f"{e}:classify",
                                        {"signature_name": "classify", "examples": [{"x": "s"}]}),
        "malformed_path": ("POST", "/v1/models/plus:explode", {"inputs": [1.0]}),
        "get_on_predict": ("GET", p, None),
        "put_on_status": ("PUT", "/v1/models/plus", "{}"),
        "missing_model_name": ("GET", "/v1/models/", None),
        "unknown_path": ("GET", "/v3/models/plus", None),
        "v2_model_metadata": ("GET", "/v2/models/plus", None),
    }  # fmt: skip


def grpc_cases() -> dict[str, dict[str, Any]]:
    def pr(model: str, inputs: dict[str, str], spec: str = "", extra: str = "") -> dict[str, Any]:
        return {"method": "Predict", "request": predict(model, inputs, spec, extra)}

    dtypes_inputs = {
        "in_float16": tensor([15360, 49152], "DT_HALF", "half_val"),  # 1.0, -2.0
        "in_bfloat16": tensor([16256, 49152], "DT_BFLOAT16", "half_val"),
        "in_float32": tensor([0.1, -2.5]),
        "in_float64": tensor([0.1, 1e300], "DT_DOUBLE", "double_val"),
        "in_int8": tensor([-128, 127], "DT_INT8", "int_val"),
        "in_int16": tensor([-32768, 32767], "DT_INT16", "int_val"),
        "in_int32": tensor([-(2**31), 2**31 - 1], "DT_INT32", "int_val"),
        "in_int64": tensor([-(2**63), 2**63 - 1], "DT_INT64", "int64_val"),
        "in_uint8": tensor([0, 255], "DT_UINT8", "int_val"),
        "in_uint16": tensor([0, 65535], "DT_UINT16", "int_val"),
        "in_uint32": tensor([0, 2**32 - 1], "DT_UINT32", "uint32_val"),
        "in_uint64": tensor([0, 2**64 - 1], "DT_UINT64", "uint64_val"),
        "in_bool": tensor(["true", "false"], "DT_BOOL", "bool_val").replace('"', ""),
        "in_string": "dtype: DT_STRING tensor_shape { dim { size: 2 } } "
        'string_val: "\\377\\000bin" string_val: "ok"',
        "in_complex64": "dtype: DT_COMPLEX64 tensor_shape { dim { size: 1 } } "
        "scomplex_val: 1.0 scomplex_val: -0.5",
        "in_complex128": "dtype: DT_COMPLEX128 tensor_shape { dim { size: 1 } } "
        "dcomplex_val: 1e-300 dcomplex_val: 2.0",
    }
    content = (
        "dtype: DT_FLOAT tensor_shape { dim { size: 2 } } "
        'tensor_content: "\\000\\000\\200?\\000\\000 @"'
    )  # 1.0, 2.5
    ex = examples_input(*ROWS)
    mi_tasks = (
        'tasks { model_spec { name: "examples" signature_name: "regress" } '
        f'method_name: "{REGRESS}" }} '
        'tasks { model_spec { name: "examples" signature_name: "classify" } '
        f'method_name: "{CLASSIFY}" }} '
    )
    gate_scalar = 'dtype: DT_STRING tensor_shape { } string_val: ""'
    return {
        # predict
        "predict": pr("plus", X),
        "predict_tensor_content": pr("plus", {"x": content}),
        "predict_version_1": pr("plus", X, "version { value: 1 }"),
        "predict_label_stable": pr("plus", X, 'version_label: "stable"'),
        "predict_label_canary": pr("plus", X, 'version_label: "canary"'),
        "predict_signature_named": pr("plus", X, 'signature_name: "serving_default"'),
        "predict_output_filter": pr("plus", X, "", 'output_filter: "y"'),
        "predict_two_inputs": pr("defaults", {"x": tensor([1.0, 2.0]),
                                              "y": "dtype: DT_FLOAT float_val: 3"}),
        "predict_input_default": pr("defaults", {"x": tensor([1.5])}),
        "predict_two_inputs_gate_open": pr("gated", {"x": tensor([7.0]), "gate": gate_scalar}),
        "predict_rows_2d": pr("matmul", {"x": "dtype: DT_FLOAT tensor_shape { dim { size: 2 } "
                              "dim { size: 2 } } float_val: 1 float_val: 2 float_val: 3 "
                              "float_val: 4.5"}),
        "predict_every_dtype": pr("dtypes", dtypes_inputs),
        "predict_every_dtype_filtered": pr("dtypes", dtypes_inputs, "",
                                           'output_filter: "out_string" '
                                           'output_filter: "out_int8"'),
        "predict_on_classify_signature": pr(
            "examples", {"inputs": "dtype: DT_STRING tensor_shape { dim { size: 1 } } "
                         'string_val: "' + "".join(f"\\{b:03o}" for b in example(x=[1.5])) + '"'},
            'signature_name: "classify"'),
        # classify, regress, multi-inference
        "classify": {"method": "Classify", "request":
                     f'model_spec {{ name: "examples" signature_name: "classify" }} {ex}'},
        "classify_version": {"method": "Classify", "request":
                             'model_spec { name: "examples" version { value: 1 } '
                             f'signature_name: "scores_only" }} {ex}'},
        "classify_context": {"method": "Classify", "request":
                             'model_spec { name: "examples" signature_name: "classify" } '
                             "input { example_list_with_context { "
                             'context { features { feature { key: "y" value { float_list { '
                             "value: 0.25 } } } } } "
                             'examples { features { feature { key: "x" value { float_list { '
                             "value: 0.5 } } } } } } }"},
        "regress": {"method": "Regress", "request":
                    f'model_spec {{ name: "examples" signature_name: "regress" }} {ex}'},
        "regress_native": {"method": "Regress", "request":
                           f'{spec("examples", "regress_native")} {ex}'},
        "multi_inference": {"method": "MultiInference", "request": f"{mi_tasks} {ex}"},
        # metadata, status, health
        "metadata": {"method": "GetModelMetadata", "request":
                     'model_spec { name: "plus" } metadata_field: "signature_def"'},
        "metadata_version": {"method": "GetModelMetadata", "request":
                             'model_spec { name: "plus" version { value: 1 } } '
                             'metadata_field: "signature_def"'},
        "metadata_defaults": {"method": "GetModelMetadata", "request":
                              'model_spec { name: "defaults" } metadata_field: "signature_def"'},
        "metadata_examples": {"method": "GetModelMetadata", "request":
                              'model_spec { name: "examples" } metadata_field: "signature_def"'},
        "status_all_versions": {"method": "GetModelStatus", "request": spec("plus")},
        "status_one_version": {"method": "GetModelStatus",
                               "request": 'model_spec { name: "plus" version { value: 1 } }'},
        "status_label": {"method": "GetModelStatus",
                         "request": 'model_spec { name: "plus" version_label: "canary" }'},
        "health": {"method": "Check", "request": ""},
        "health_model": {"method": "Check", "request": 'service: "plus"'},
        "health_service": {"method": "Check",
                           "request": 'service: "tensorflow.serving.PredictionService"'},
        # errors
        "unknown_model": pr("nope", X),
        "unknown_version": pr("plus", X, "version { value: 9 }"),
        "unknown_label": pr("plus", X, 'version_label: "nolabel"'),
        "unknown_signature": pr("plus", X, 'signature_name: "nope"'),
        "no_model_name": {"method": "Predict", "request": 'inputs { key: "x" value { '
                          + X["x"] + " } }"},
        "unknown_output_filter": pr("plus", X, "", 'output_filter: "q"'),
        "wrong_dtype": pr("plus", {"x": tensor([1], "DT_INT32", "int_val")}),
        "bad_dtype_enum": pr("plus", {"x": "dtype: 999 tensor_shape { dim { size: 1 } } "
                                           "float_val: 1"}),
        "shape_values_mismatch": pr("plus", {"x": "dtype: DT_FLOAT tensor_shape { dim { size: 3 } "
                                                  "} float_val: 1 float_val: 2"}),
        "tensor_content_ragged": pr("plus", {"x": "dtype: DT_FLOAT tensor_shape { dim { size: 2 } "
                                                  '} tensor_content: "\\000\\000\\200?\\000"'}),
        "missing_input": pr("gated", {"x": tensor([1.0])}),
        "extra_input": pr("plus", {"x": X["x"], "z": tensor([2.0])}),
        "wrong_input_name": pr("plus", {"z": X["x"]}),
        "no_inputs": pr("plus", {}),
        "graph_refuses_shape": pr("matmul", {"x": "dtype: DT_FLOAT tensor_shape { dim { size: 1 } "
                                                  "dim { size: 3 } } float_val: 1 float_val: 2 "
                                                  "float_val: 3"}),
        "graph_refuses_rank": pr("matmul", {"x": tensor([1.0, 2.0])}),
        "message_over_limit": {"method": "Predict", "request": 'model_spec { name: "plus" }',
                               "fill": {"input": "x", "floats": MAX_BODY // 4 + 16}},
        "corrupt_message": {"method": "Predict", "request_b64": b64(b"\x0a\xff\xff\x01garbage")},
        "corrupt_status_message": {"method": "GetModelStatus", "request_b64": b64(b"\x0a\x05ab")},
        "classify_on_predict_signature": {"method": "Classify", "request":
                                          'model_spec { name: "examples" } ' + ex},
        "regress_on_classify_signature": {"method": "Regress", "request":
                                          'model_spec { name: "examples" signature_name: '
                                          f'"classify" }} {ex}'},
        "classify_no_input": {"method": "Classify", "request":
                              'model_spec { name: "examples" signature_name: "classify" }'},
        "classify_bad_scores": {"method": "Classify", "request":
                                f'{spec("examples", "bad_scores")} {ex}'},
        "classify_feature_wrong_type": {
            "method": "Classify", "request":
            'model_spec { name: "examples" signature_name: "classify" } input { example_list { '
            'examples { features { feature { key: "x" value { bytes_list { value: "s" } } } } } '
            "} }"},
        "multi_inference_no_tasks": {"method": "MultiInference", "request": ex},
        "multi_inference_two_models": {
            "method": "MultiInference", "request":
            'tasks { model_spec { name: "examples" signature_name: "regress" } '
            f'method_name: "{REGRESS}" }} '
            'tasks { model_spec { name: "plus" signature_name: "classify" } '
            f'method_name: "{CLASSIFY}" }} {ex}'},
        "multi_inference_predict_method": {
            "method": "MultiInference", "request":
            'tasks { model_spec { name: "examples" signature_name: "regress" } '
            f'method_name: "tensorflow/serving/predict" }} {ex}'},
        "metadata_no_field": {"method": "GetModelMetadata", "request": spec("plus")},
        "metadata_bad_field": {"method": "GetModelMetadata",
                               "request": 'model_spec { name: "plus" } metadata_field: "bogus"'},
        "metadata_unknown_model": {"method": "GetModelMetadata", "request":
                                   'model_spec { name: "nope" } metadata_field: "signature_def"'},
        "status_unknown_model": {"method": "GetModelStatus", "request": spec("nope")},
        "status_unknown_version": {"method": "GetModelStatus",
                                   "request": 'model_spec { name: "plus" version { value: 7 } }'},
        "health_unknown_service": {"method": "Check", "request": 'service: "nope"'},
    }  # fmt: skip


RELOAD_ERRORS = {
    "reload_custom_config": 'config { custom_model_config { type_url: "x" } }',
    "reload_empty_specific": 'config { model_config_list { config { name: "plus" '
    'base_path: "/models/plus" model_version_policy { specific { } } } } }',
    "reload_duplicate_name": 'config { model_config_list { config { name: "plus" '
    'base_path: "/models/plus" } config { name: "plus" base_path: "/models/dtypes" } } }',
    "reload_no_base_path": 'config { model_config_list { config { name: "plus" } } }',
    "reload_relative_base_path": 'config { model_config_list { config { name: "plus" '
    'base_path: "models/plus" } } }',
    "reload_bad_platform": 'config { model_config_list { config { name: "plus" '
    'base_path: "/models/plus" model_platform: "pytorch" } } }',
    "reload_label_of_missing_version": 'config { model_config_list { config { name: "plus" '
    'base_path: "/models/plus" model_version_policy { all {} } '
    'version_labels { key: "x" value: 5 } } } }',
    "reload_empty": "",
}


# --------------------------------------------------------------------------
# Servers


@pytest.fixture(scope="module", params=list(SHAPES))
def main(
    request: pytest.FixtureRequest,
    servers: ServerPool,
    model_library: ModelLibrary,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, dict[str, Any]]]:
    """The module's server, after its start-up phase: (server, the start-up answers); each
    phase runs against both shapes of the server and compares with the same recording."""
    extra, cpus = SHAPES[request.param]
    spec = ServerSpec(
        args=(
            "serve", "--wait-for-model", "600", "--model_config_file=/models/models.config",
            "--monitoring_config_file=/models/monitoring.config", f"--max-body-bytes={MAX_BODY}",
            # The recorded answers are of `broken` failing at once, without load retries.
            "--max_num_load_retries=0", *extra,
        ),
        cpus=cpus,
        models=tuple(sorted(MAIN_MODELS.items())),
        files=(("models.config", CONFIG), ("monitoring.config", MONITORING)),
        ready=False,  # ready only once `late` is in place
    )  # fmt: skip
    models = write_models(spec, model_library, tmp_path_factory.mktemp("answers-models"))
    (models / "late").mkdir()
    (models / "late").chmod(0o777)
    with servers.private(spec, models) as server:
        container = server.container

        def early_loaded() -> bool:
            container.reload()
            assert container.status == "running", server.logs()
            try:
                return all(server.state(m) == "AVAILABLE" for m in EARLY)
            except httpx2.TransportError:
                return False

        assert poll(early_loaded, 300, 0.25), server.logs()
        startup: dict[str, Any] = {}
        startup["rest"] = ask_rest(server, {
            "predict_late": ("POST", "/v1/models/late:predict", {"inputs": [1.0]}),
            "predict_unknown_model": ("POST", "/v1/models/nope:predict", {"inputs": [1.0]}),
            "predict_unknown_version": ("POST", "/v1/models/plus/versions/9:predict",
                                        {"inputs": [1.0]}),
            "predict_loaded_model": ("POST", "/v1/models/plus:predict", {"inputs": [1.0]}),
            "status_late": ("GET", "/v1/models/late", None),
            "status_unknown_model": ("GET", "/v1/models/nope", None),
            "metadata_late": ("GET", "/v1/models/late/metadata", None),
            "readyz": ("GET", "/readyz", None),
            "healthz": ("GET", "/healthz", None),
        })  # fmt: skip
        startup["grpc"] = ask_grpc(server, {
            "predict_late": {"method": "Predict", "request": predict("late", X)},
            "predict_unknown_model": {"method": "Predict", "request": predict("nope", X)},
            "predict_loaded_model": {"method": "Predict", "request": predict("plus", X)},
            "status_late": {"method": "GetModelStatus", "request": 'model_spec { name: "late" }'},
            "health": {"method": "Check", "request": ""},
            "health_late": {"method": "Check", "request": 'service: "late"'},
            "health_plus": {"method": "Check", "request": 'service: "plus"'},
        })  # fmt: skip
        staged = model_library.copy("plus/1", models / "late" / ".staged-1")
        staged.rename(models / "late" / "1")

        def ready() -> bool:
            return web.get(server.rest + "/readyz", timeout=5).status_code == 200

        assert poll(ready, 300, 0.25), server.logs()
        yield server, startup


def prefixed(answers: dict[str, dict[str, Any]], prefix: str) -> dict[str, dict[str, Any]]:
    return {f"{prefix}{name}": answer for name, answer in answers.items()}


# --------------------------------------------------------------------------
# Phases (in this order: `reload` changes what `main` serves)


def test_startup_answers(main: tuple[Server, dict[str, Any]]) -> None:
    _, startup = main
    check("startup", {**prefixed(startup["rest"], "rest/"), **prefixed(startup["grpc"], "grpc/")})


def test_rest_answers(main: tuple[Server, dict[str, Any]]) -> None:
    server, _ = main
    check("rest", ask_rest(server, rest_cases()))


def test_grpc_answers(main: tuple[Server, dict[str, Any]]) -> None:
    server, _ = main
    check("grpc", ask_grpc(server, grpc_cases()))


def test_metric_names(main: tuple[Server, dict[str, Any]]) -> None:
    server, _ = main
    page = web.get(server.rest + "/monitoring/prometheus/metrics", timeout=30)
    lines = page.text.splitlines()
    samples = []  # each sample's name and label names, in the page's order, once
    for line in lines:
        match = re.fullmatch(r"([^{ #]+)(?:\{(.*)\})? \S+", line)
        if match:
            keys = ",".join(re.findall(r'(\w+)="(?:[^"\\]|\\.)*"', match.group(2) or ""))
            samples.append(f"{match.group(1)}{{{keys}}}")
    check("metrics", {
        "page": {"status": page.status_code, "content_type": page.headers.get("content-type"),
                 "help_and_type_lines": [line for line in lines if line.startswith("# ")],
                 "samples": list(dict.fromkeys(samples))},
    })  # fmt: skip


def test_reload_answers(main: tuple[Server, dict[str, Any]]) -> None:
    server, _ = main
    errors = ask_grpc(server, {
        name: {"method": "HandleReloadConfigRequest", "request": text}
        for name, text in RELOAD_ERRORS.items()
    })  # fmt: skip
    keep = " ".join(line.strip() for line in CONFIG.strip().splitlines()[1:-1])  # the same models
    broken = 'config { name: "broken" base_path: "/models/broken" }'
    (added,) = ask_grpc(server, {
        "reload_adds_broken": {"method": "HandleReloadConfigRequest", "timeout": 300,
                               "request": f"config {{ model_config_list {{ {keep} {broken} }} }}"},
    }).values()  # fmt: skip

    def failed() -> bool:
        answer = web.get(server.rest + "/v1/models/broken", timeout=10)
        versions = answer.json().get("model_version_status", []) if answer.is_success else []
        return bool(versions) and versions[0]["state"] == "END"

    assert poll(failed, 300, 0.25), server.logs()
    after = ask_grpc(server, {
        "status_failed_model": {"method": "GetModelStatus",
                                "request": 'model_spec { name: "broken" }'},
        "predict_failed_model": {"method": "Predict", "request": predict("broken", X)},
    })  # fmt: skip
    rest_after = ask_rest(server, {
        "status_failed_model": ("GET", "/v1/models/broken", None),
        "predict_failed_model": ("POST", "/v1/models/broken:predict", {"inputs": [1.0]}),
        "metadata_failed_model": ("GET", "/v1/models/broken/metadata", None),
    })  # fmt: skip
    check("reload", {
        **prefixed(errors, "grpc/"), "grpc/reload_adds_broken": added,
        **prefixed(after, "grpc/"), **prefixed(rest_after, "rest/"),
    })  # fmt: skip


def test_limit_answers(servers: ServerPool, tmp_path: Path) -> None:
    """408/DEADLINE_EXCEEDED, then 503/RESOURCE_EXHAUSTED while the timed-out call
    still holds the only worker and slot (its gate shut), on any CPU."""
    gate = Gate(tmp_path / "gates")
    with servers.private(serve(
        "--model_name=gated", "--model_base_path=/models/gated",
        "--workers", "1", "--max-queue", "1", "--request-timeout", "1",
        models={"gated": MODELS["gated"]}, volumes=gate_volume(gate),
    )) as server:  # fmt: skip

        def gated(name: str) -> dict[str, Any]:
            return {"inputs": {"x": [1.0], "gate": Gate.path(name)}}

        def held_until_idle(name: str) -> None:
            gate.open(name)
            assert poll(server.idle, 120, 0.05), server.logs()

        answers: dict[str, Any] = {}
        path = "/v1/models/gated:predict"
        answers["rest/timed_out"] = rest(server, "POST", path, gated("rest"))
        answers["rest/at_capacity"] = rest(server, "POST", path, gated(""))
        answers["rest/status_while_busy"] = rest(server, "GET", "/v1/models/gated")
        held_until_idle("rest")
        timed_out, refused = ask_grpc(server, {
            "timed_out": {"method": "Predict", "timeout": 120, "request": predict(
                "gated", {"x": tensor([1.0]), "gate": 'dtype: DT_STRING tensor_shape { } '
                          f'string_val: "{Gate.path("grpc")}"'})},
            "at_capacity": {"method": "Predict", "request": predict(
                "gated", {"x": tensor([1.0]), "gate": 'dtype: DT_STRING tensor_shape { } '
                          'string_val: ""'})},
        }).values()  # fmt: skip
        answers["grpc/timed_out"], answers["grpc/at_capacity"] = timed_out, refused
        held_until_idle("grpc")
        answers["rest/after"] = rest(server, "POST", path, gated(""))
    check("limits", answers)


#: The cases whose answers carry TensorFlow's own error text from the graph.
TF_WORDED = ("graph_refuses_shape", "graph_refuses_rank")
#: What TensorFlow logs at start when its oneDNN kernels are on.
ONEDNN_ON = "oneDNN custom operations are on"


@pytest.mark.parametrize("onednn", ["0", "1"], ids=["eigen", "onednn"])
def test_tensorflow_words_either_way(servers: ServerPool, onednn: str) -> None:
    """TF_ENABLE_ONEDNN_OPTS decides how TensorFlow words a graph's error (the
    kernel's words, and the node annotation: oneDNN's rewrite inlines the
    signature's function). Its default depends on the CPU, so a host's own
    answers show one way only: here the server runs under each, and its
    answers are the recorded ones, normalized (tests/tf_text.py)."""
    with servers.private(serve(
        "--model_name=matmul", "--model_base_path=/models/matmul",
        models={"matmul": MODELS["matmul"]}, env={"TF_ENABLE_ONEDNN_OPTS": onednn},
    )) as server:  # fmt: skip
        # The setting took: TensorFlow says so at start when its oneDNN kernels are on.
        assert (ONEDNN_ON in server.logs()) == (onednn == "1"), server.logs()
        got = {
            "rest": ask_rest(server, {case: rest_cases()[case] for case in TF_WORDED}),
            "grpc": ask_grpc(server, {case: grpc_cases()[case] for case in TF_WORDED}),
        }
    for phase, answers in got.items():
        recorded = json.loads((ANSWERS / f"{phase}.json").read_text())
        assert {case: _hosts_alike(answer) for case, answer in answers.items()} == {
            case: recorded[case] for case in TF_WORDED
        }, phase


def test_cases_are_many() -> None:
    """The corpus covers the APIs broadly (a guard against a corpus cut by mistake)."""
    assert len(rest_cases()) >= 45
    assert len(grpc_cases()) >= 45
