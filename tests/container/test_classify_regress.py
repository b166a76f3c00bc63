"""TF Serving's Classify and Regress over REST, on a real SavedModel in the image.

The model is the model library's "examples_warm", a TF1-style export made in
the image by make_models.py (--kind classify_regress --warmup 2): its
signatures read tf.Example features "x" and "y" (default 0). Signatures
(make_models.py says more): "classify" (classes ["sum", "difference"], scores
[x + y, x - y]), "regress" (2x + y + V), the same under method predict as
"regress_native", "scores_only" (scores [x, y], no classes), "bad_scores" (a
[batch] scores output), "serving_default" (predict: float "x" -> "y" = 2x + V).
Expected answers are computed here in float32 from the inputs, not read from
the server; errors are TF Serving's messages. tests/container/examples.py
holds the facts the gRPC tests of the same model share.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.servers import Server, ServerPool, serve
from tests.container.examples import BODY, f32

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

MODEL = "examples"


@pytest.fixture(scope="module")
def server(servers: ServerPool) -> Server:
    """The library's examples_warm (2 warm-up records of each kind) as "examples"; the
    tests only read it: the pool's shared server."""
    return servers.shared(serve("--model-name", MODEL, models={MODEL: "examples_warm"}))


def ok(server: Server, path: str, body: dict[str, Any]) -> Any:
    response = server.post(path, body)
    assert response.status_code == 200, response.text
    return response.json()


def error(server: Server, path: str, body: dict[str, Any]) -> str:
    response = server.post(path, body)
    assert response.status_code == 400, response.text
    message: str = response.json()["error"]
    return message


# Three examples: y from the context, y of its own (which wins), y from the context.
XS = [0.1, 1.5, -2.25]
YS = [0.2, 3.0, 0.2]


def test_warmup_records_for_classify_regress_and_multi_inference_are_replayed(
    server: Server,
) -> None:
    """Two of each kind (make_models.py); multi_inference_log records were skipped
    with a warning before MultiInference was served."""
    assert "6 warm-up record(s) replayed" in server.logs()
    assert "for multi_inference skipped" not in server.logs()


def test_classify(server: Server) -> None:
    answer = ok(server, f"/v1/models/{MODEL}:classify", {"signature_name": "classify", **BODY})
    expected = [
        [["sum", f32(f32(x) + f32(y))], ["difference", f32(f32(x) - f32(y))]]
        for x, y in zip(XS, YS, strict=True)
    ]
    got = [[[label, f32(score)] for label, score in row] for row in answer["results"]]
    assert got == expected


def test_classify_without_classes_has_empty_labels(server: Server) -> None:
    answer = ok(
        server, f"/v1/models/{MODEL}/versions/1:classify", {"signature_name": "scores_only", **BODY}
    )
    expected = [[["", f32(x)], ["", f32(y)]] for x, y in zip(XS, YS, strict=True)]
    assert [[[label, f32(s)] for label, s in row] for row in answer["results"]] == expected


@pytest.mark.parametrize("signature", ["regress", "regress_native"])
def test_regress(server: Server, signature: str) -> None:
    """regress_native says method predict, as TF2 exports do: TF Serving regresses it too."""
    answer = ok(server, f"/v1/models/{MODEL}:regress", {"signature_name": signature, **BODY})
    expected = [f32(f32(2 * f32(x) + f32(y)) + 1) for x, y in zip(XS, YS, strict=True)]
    assert [f32(v) for v in answer["results"]] == expected


def test_predict_still_works(server: Server) -> None:
    answer = ok(server, f"/v1/models/{MODEL}:predict", {"instances": [1.5, -0.5]})
    assert answer == {"predictions": [4.0, 0.0]}


def test_a_predict_signature_cannot_classify(server: Server) -> None:
    message = error(server, f"/v1/models/{MODEL}:classify", {"examples": [{"x": 1.0}]})
    assert message.startswith("No classification inputs found in SignatureDef: inputs {")
    assert 'key: "x"' in message


def test_a_classify_signature_cannot_regress(server: Server) -> None:
    body = {"signature_name": "classify", "examples": [{"x": 1.0}]}
    assert error(server, f"/v1/models/{MODEL}:regress", body) == "Expected one output Tensor."


@pytest.mark.parametrize(
    ("example", "message"),
    [
        ({"y": 1.0}, "Feature: x (data type: float) is required but could not be found."),
        ({"x": "one"}, "Key: x, Index: 1.  Data types don't match. Data type: string"),
    ],
)
def test_an_example_the_model_cannot_parse(
    server: Server, example: dict[str, Any], message: str
) -> None:
    body = {"signature_name": "regress", "examples": [{"x": 1.0}, example]}
    got = error(server, f"/v1/models/{MODEL}:regress", body)
    assert message in got
    assert "Graph execution error" not in got  # the kernel's message, as TF Serving gives it


def test_outputs_of_the_wrong_shape(server: Server) -> None:
    body = {"signature_name": "bad_scores", "examples": [{"x": 1.0}]}
    assert error(server, f"/v1/models/{MODEL}:classify", body) == (
        "Expected Tensor shape: [batch_size num_classes] but got [1]"
    )


def test_a_missing_signature(server: Server) -> None:
    body = {"signature_name": "nope", "examples": [{"x": 1.0}]}
    assert error(server, f"/v1/models/{MODEL}:classify", body) == (
        "No signature was found with the name: nope"
    )
