"""The Open Inference Protocol on the REST port (rest/v2.py), on pure-Python models.

What a v2 client sees: metadata, health, readiness, infer in JSON and with the
binary tensor data extension, its errors, its metrics; the real clients
(tritonclient, KServe's) run against the image in tests/container/test_v2_clients.py.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import config, export, make_app, serving, wait_ready
from tests.unit.serving.v2_models import NOT_PREDICT, Awkward, Mixed
from tf_entrypoint import __version__
from tf_entrypoint.serving.core import types as p

HEADER = "Inference-Header-Content-Length"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with serving(tmp_path, Mixed()) as test_client:
        yield test_client


def infer(client: TestClient, body: object, path: str = "/v2/models/model/infer") -> object:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


X = {"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4.5]]}


def test_server_metadata_health_and_readiness(client: TestClient) -> None:
    metadata = client.get("/v2")
    assert metadata.status_code == 200
    assert metadata.json() == {
        "name": "tf-entrypoint",
        "version": __version__,
        "extensions": ["binary_tensor_data"],
    }
    live = client.get("/v2/health/live")
    assert (live.status_code, live.json()) == (200, {"live": True})
    ready = client.get("/v2/health/ready")
    assert (ready.status_code, ready.json()) == (200, {"ready": True})
    model = client.get("/v2/models/model/ready")
    assert (model.status_code, model.json()) == (200, {"name": "model", "ready": True})
    assert client.get("/v2/models/model/versions/1/ready").status_code == 200
    head = client.head("/v2/health/ready")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == str(len(ready.content))
    missing = client.get("/v2/models/other/ready")
    assert missing.status_code == 404
    assert "other" in missing.json()["error"]
    assert client.get("/v2/models/model/versions/7/ready").status_code == 404


def test_model_metadata_describes_the_default_signature(client: TestClient) -> None:
    for path in ("/v2/models/model", "/v2/models/model/versions/1"):
        response = client.get(path)
        assert response.status_code == 200, response.text
        assert response.json() == {
            "name": "model",
            "versions": ["1"],
            "platform": "tensorflow_savedmodel",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
            "outputs": [
                {"name": "sum", "datatype": "FP32", "shape": [-1]},
                {"name": "twice", "datatype": "FP32", "shape": [-1, 2]},
            ],
        }


def test_infer_json_nested_or_flat_with_id_and_requested_outputs(client: TestClient) -> None:
    answer = infer(client, {"id": "abc", "inputs": [X]})
    assert answer == {
        "model_name": "model",
        "model_version": "1",
        "id": "abc",
        "outputs": [
            {"name": "sum", "datatype": "FP32", "shape": [2], "data": [3.0, 7.5]},
            {"name": "twice", "datatype": "FP32", "shape": [2, 2], "data": [2.0, 4.0, 6.0, 9.0]},
        ],
    }
    flat = {**X, "data": [1, 2, 3, 4.5]}
    answer = infer(
        client,
        {"inputs": [flat], "outputs": [{"name": "twice"}]},
        "/v2/models/model/versions/1/infer",
    )
    assert answer == {
        "model_name": "model",
        "model_version": "1",
        "outputs": [
            {"name": "twice", "datatype": "FP32", "shape": [2, 2], "data": [2.0, 4.0, 6.0, 9.0]}
        ],
    }


def test_the_signature_name_parameter_picks_a_signature(client: TestClient) -> None:
    body = {
        "parameters": {"signature_name": "words"},
        "inputs": [{"name": "s", "shape": [2], "datatype": "BYTES", "data": ["ab", "xyz"]}],
    }
    answer = infer(client, body)
    assert answer["outputs"] == [  # type: ignore[index]
        {"name": "length", "datatype": "INT64", "shape": [2], "data": [2, 3]},
        {"name": "upper", "datatype": "BYTES", "shape": [2], "data": ["AB", "XYZ"]},
    ]
    unknown = client.post(
        "/v2/models/model/infer", json={**body, "parameters": {"signature_name": "nope"}}
    )
    assert unknown.status_code == 400
    assert "nope" in unknown.json()["error"]


def _binary_request(
    inputs: list[dict[str, object]], parts: list[bytes], **extra: object
) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": inputs, **extra}).encode()
    return header + b"".join(parts), {HEADER: str(len(header))}


def _split(response: object) -> tuple[dict[str, object], bytes]:
    length = int(response.headers[HEADER])  # type: ignore[attr-defined]
    content: bytes = response.content  # type: ignore[attr-defined]
    return json.loads(content[:length]), content[length:]


def test_binary_inputs_and_outputs(client: TestClient) -> None:
    data = struct.pack("<4f", 1, 2, 3, 4.5)
    body, headers = _binary_request(
        [
            {
                "name": "x",
                "shape": [2, 2],
                "datatype": "FP32",
                "parameters": {"binary_data_size": len(data)},
            }
        ],
        [data],
        outputs=[{"name": "sum", "parameters": {"binary_data": True}}, {"name": "twice"}],
    )
    response = client.post("/v2/models/model/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    header, rest = _split(response)
    assert header["outputs"] == [
        {"name": "sum", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}},
        {"name": "twice", "datatype": "FP32", "shape": [2, 2], "data": [2.0, 4.0, 6.0, 9.0]},
    ]
    assert struct.unpack("<2f", rest) == (3.0, 7.5)


def test_binary_output_for_every_output_by_default_flag(client: TestClient) -> None:
    body = {"inputs": [X], "parameters": {"binary_data_output": True}}
    response = client.post("/v2/models/model/infer", json=body)
    assert response.status_code == 200, response.text
    header, rest = _split(response)
    sizes = [o["parameters"]["binary_data_size"] for o in header["outputs"]]  # type: ignore[attr-defined]
    assert sizes == [8, 16]
    assert struct.unpack("<2f4f", rest) == (3.0, 7.5, 2.0, 4.0, 6.0, 9.0)


def test_binary_bytes_inputs_are_length_prefixed(client: TestClient) -> None:
    words = [b"ab", b"\xc3\xa9t\xc3\xa9"]
    data = b"".join(struct.pack("<I", len(w)) + w for w in words)
    body, headers = _binary_request(
        [
            {
                "name": "s",
                "shape": [2],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(data)},
            }
        ],
        [data],
        parameters={"signature_name": "words"},
        outputs=[{"name": "upper", "parameters": {"binary_data": True}}],
    )
    response = client.post("/v2/models/model/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    header, rest = _split(response)
    upper = [w.upper() for w in words]
    assert rest == b"".join(struct.pack("<I", len(w)) + w for w in upper)
    assert header["outputs"] == [
        {
            "name": "upper",
            "datatype": "BYTES",
            "shape": [2],
            "parameters": {"binary_data_size": len(rest)},
        },
    ]


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v2/models/other/infer", {"inputs": [X]}, 404, ["other"]),
        ("/v2/models/model/versions/9/infer", {"inputs": [X]}, 404, ["9"]),
        ("/v2/models/model/versions/x1/infer", {"inputs": [X]}, 400, ["x1"]),
        (
            "/v2/models/model/infer",
            {"inputs": [{**X, "datatype": "FP64"}]},
            400,
            ["x", "FP64", "FP32"],
        ),
        ("/v2/models/model/infer", {"inputs": [{**X, "shape": [2, 3]}]}, 400, ["x"]),
        ("/v2/models/model/infer", {"inputs": [{**X, "shape": [4]}]}, 400, ["x", "[4]"]),
        ("/v2/models/model/infer", {"inputs": [{**X, "name": "y"}]}, 400, ["y"]),
        ("/v2/models/model/infer", {"inputs": [X], "outputs": [{"name": "z"}]}, 400, ["z"]),
        ("/v2/models/model/infer", {"inputs": "x"}, 400, ["inputs"]),
        ("/v2/models/model/infer", [1], 400, ["object"]),
    ],
)
def test_bad_requests_get_the_protocol_s_error(
    client: TestClient, path: str, body: object, status: int, words: list[str]
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(response.json()) == {"error"}
    for word in words:
        assert word in error, (word, error)


def test_binary_header_lengths_that_do_not_fit_the_body(client: TestClient) -> None:
    header = json.dumps({"inputs": [X]}).encode()
    for length in (str(len(header) + 1), "-1", "ten"):
        response = client.post("/v2/models/model/infer", content=header, headers={HEADER: length})
        assert response.status_code == 400, (length, response.text)
        assert HEADER in response.json()["error"] or "header" in response.json()["error"]


def test_a_body_over_the_limit_is_413(tmp_path: Path) -> None:
    with serving(tmp_path, Mixed(), "--max-body-bytes", "100") as client:
        big = {"inputs": [{**X, "shape": [100, 2], "data": [1.0] * 200}]}
        response = client.post("/v2/models/model/infer", json=big)
        assert response.status_code == 413
        assert set(response.json()) == {"error"}


def test_wrong_methods_and_unknown_paths(client: TestClient) -> None:
    response = client.get("/v2/models/model/infer")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert client.post("/v2/health/live").status_code == 405
    unknown = client.get("/v2/nothing/here")
    assert unknown.status_code == 404
    assert "/v2/nothing/here" in unknown.json()["error"]


def test_v2_requests_are_counted_with_their_protocol(client: TestClient) -> None:
    infer(client, {"inputs": [X]})
    client.post("/v2/models/model/infer", json={"inputs": "x"})
    text = client.get("/metrics").text
    assert (
        'serving_requests_total{api="predict",code="200",model="model",protocol="v2"} 1.0' in text
    )
    assert (
        'serving_requests_total{api="predict",code="400",model="model",protocol="v2"} 1.0' in text
    )
    assert 'serving_inference_duration_seconds_count{model="model"} 1.0' in text


def test_not_ready_while_the_model_loads(tmp_path: Path) -> None:
    export(tmp_path)
    release = threading.Event()

    def slow(directory: Path, version: int) -> Mixed:
        release.wait(10)
        return Mixed()

    app = make_app(config(tmp_path), loader=slow)
    with TestClient(app) as client:
        try:
            assert client.get("/v2/health/live").status_code == 200
            ready = client.get("/v2/health/ready")
            assert ready.status_code == 503
            assert ready.json()["ready"] is False
            assert "model" in ready.json()["error"]
            model = client.get("/v2/models/model/ready")
            assert (model.status_code, model.json()["ready"]) == (503, False)
        finally:
            release.set()
        wait_ready(client)
        assert client.get("/v2/health/ready").status_code == 200


class NoDefault(Mixed):
    """No serving_default: "words" and "sums" (Mixed's default under another name), and
    an init op first in name order that cannot be run (as TF2 exports list it)."""

    signatures: Mapping[str, p.Signature] = {
        "__saved_model_init_op": p.Signature({}, {}),
        "words": Mixed.signatures["words"],
        "sums": Mixed.signatures["serving_default"],
    }

    def runs(self, name: str) -> bool:
        return name in ("words", "sums")

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        return super().run("serving_default" if name == "sums" else name, inputs, outputs)


def test_without_serving_default_the_first_runnable_signature_answers(tmp_path: Path) -> None:
    with serving(tmp_path, NoDefault()) as client:
        metadata = client.get("/v2/models/model").json()
        assert [i["name"] for i in metadata["inputs"]] == ["x"]  # "sums" before "words"
        answer = infer(client, {"inputs": [X], "outputs": [{"name": "sum"}]})
        assert answer["outputs"][0]["data"] == [3.0, 7.5]  # type: ignore[index]
        words = {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["a"]}
        named = {"parameters": {"signature_name": "words"}, "inputs": [words]}
        assert infer(client, named)["outputs"][1]["data"] == ["A"]  # type: ignore[index]


def test_a_signature_that_cannot_predict_is_a_400_in_tf_serving_s_words(tmp_path: Path) -> None:
    with serving(tmp_path, Awkward()) as client:
        body = {"parameters": {"signature_name": "__saved_model_init_op"}, "inputs": [X]}
        response = client.post("/v2/models/model/infer", json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error.endswith(NOT_PREDICT), error
        assert "__saved_model_init_op" in error


def test_an_output_the_protocol_cannot_carry_is_a_400_before_the_model_runs(
    tmp_path: Path,
) -> None:
    servable = Awkward()
    with serving(tmp_path, servable) as client:
        for binary in (False, True):
            body = {
                "parameters": {"signature_name": "complex", "binary_data_output": binary},
                "inputs": [X],
            }
            response = client.post("/v2/models/model/infer", json=body)
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert "output 'z'" in error
            assert "COMPLEX64" in error
        assert "complex" not in servable.ran
        body = {
            "parameters": {"signature_name": "complex"},
            "inputs": [X],
            "outputs": [{"name": "sum"}],
        }
        assert infer(client, body)["outputs"][0]["data"] == [3.0, 7.5]  # type: ignore[index]


def test_a_server_fault_is_logged_with_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with serving(tmp_path, Awkward()) as client:
        body = {"parameters": {"signature_name": "broken"}, "inputs": [X]}
        with caplog.at_level(logging.ERROR, logger="tf_entrypoint.serving"):
            response = client.post("/v2/models/model/infer", json=body)
            v1 = client.post(
                "/v1/models/model:predict",
                json={"signature_name": "broken", "instances": [[1.0, 2.0]]},
            )
        assert (response.status_code, v1.status_code) == (500, 500)
        faults = [r for r in caplog.records if "the kernel broke" in r.getMessage()]
        assert len(faults) == 2, [r.getMessage() for r in caplog.records]
        assert all(r.exc_info and r.exc_info[2] is not None for r in faults)
        # a user's mistake is not logged as a fault
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="tf_entrypoint.serving"):
            assert client.post("/v2/models/model/infer", json={"inputs": "x"}).status_code == 400
        assert not caplog.records


def test_the_first_runnable_signature_is_never_an_init_op(tmp_path: Path) -> None:
    class InitOpFirst(Awkward):
        signatures: Mapping[str, p.Signature] = {
            name: signature
            for name, signature in Awkward.signatures.items()
            if name not in ("serving_default", "broken")
        }

    with serving(tmp_path, InitOpFirst()) as client:
        metadata = client.get("/v2/models/model").json()
        assert [o["name"] for o in metadata["outputs"]] == ["sum", "z"]  # "complex"
