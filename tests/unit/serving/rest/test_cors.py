"""--rest_api_enable_cors_support: TF Serving's CORS headers and preflights (rest/cors.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import HalfPlusTwo, config, export, make_app, wait_ready
from tf_entrypoint.serving.rest.asgi import RestApp
from tf_entrypoint.serving.rest.cors import CorsRestApp

#: TF Serving's AddCORSHeaders (model_servers/http_rest_api_util.cc).
CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "POST, GET",
    "access-control-allow-headers": (
        "Content-Type, Content-Encoding, Inference-Header-Content-Length"
    ),
}
ORIGIN = {"Origin": "https://app.example.com"}
PREFLIGHT = {**ORIGIN, "Access-Control-Request-Method": "POST"}
INFER = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}


def client_for(directory: Path, *args: str) -> Iterator[TestClient]:
    directory.mkdir()
    export(directory)
    app = make_app(
        config(directory, "--workers=1", *args), loader=lambda directory, version: HalfPlusTwo()
    )
    with TestClient(app) as client:
        wait_ready(client)
        yield client


@pytest.fixture
def cors(tmp_path: Path) -> Iterator[TestClient]:
    yield from client_for(tmp_path / "cors", "--rest_api_enable_cors_support")


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[TestClient]:
    yield from client_for(tmp_path / "plain")


def cors_headers(response: Any) -> dict[str, str]:
    return {
        name: value
        for name, value in response.headers.items()
        if name.startswith("access-control-")
    }


def test_the_flag_is_read_as_a_boolean(tmp_path: Path) -> None:
    assert config(tmp_path).enable_cors_support is False
    assert config(tmp_path, "--rest_api_enable_cors_support").enable_cors_support is True
    on = config(tmp_path, "--rest_api_enable_cors_support=true")
    assert on.enable_cors_support is True
    off = config(tmp_path, "--rest_api_enable_cors_support=false")
    assert off.enable_cors_support is False


def test_the_choice_is_made_when_the_app_is_built(cors: TestClient, plain: TestClient) -> None:
    # Off, the application is RestApp itself: no request pays for CORS.
    assert type(plain.app) is RestApp
    assert type(cors.app) is CorsRestApp


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/model:predict",
        "/v1/models/model",
        "/v2/models/model/infer",
        "/healthz",
        "/metrics",
    ],
)
def test_a_preflight_is_answered_with_the_headers_and_no_body(cors: TestClient, path: str) -> None:
    response = cors.options(path, headers=PREFLIGHT)
    assert response.status_code == 200
    assert response.content == b""
    assert cors_headers(response) == CORS
    assert "content-type" not in response.headers


@pytest.mark.parametrize("origin", [None, "", "null", "file:///index.html", "example.com"])
def test_a_preflight_without_an_http_origin_is_a_400_that_says_so(
    cors: TestClient, origin: str | None
) -> None:
    headers = {} if origin is None else {"Origin": origin}
    response = cors.options("/v1/models/model:predict", headers=headers)
    assert response.status_code == 400
    assert response.json() == {"error": "Origin header is missing in CORS preflight"}
    assert cors_headers(response) == CORS


def test_a_preflight_reaches_no_handler(cors: TestClient) -> None:
    app = cors.app
    assert isinstance(app, CorsRestApp)
    reached: list[str] = []

    async def starlette(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    async def v2(scope: Any, receive: Any) -> Any:
        reached.append(scope["path"])

    app.other = starlette  # type: ignore[assignment]
    app.v2.handle = v2  # type: ignore[method-assign]
    for path in ("/v1/models/model:predict", "/v2/models/model/infer", "/healthz"):
        assert cors.options(path, headers=PREFLIGHT).status_code == 200
    assert reached == []


def test_a_simple_predict_carries_the_headers(cors: TestClient) -> None:
    response = cors.post("/v1/models/model:predict", json={"instances": [1.0]}, headers=ORIGIN)
    assert response.status_code == 200
    assert response.json() == {"predictions": [2.5]}
    assert cors_headers(response) == CORS
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "case",
    [
        ("POST", "/v1/models/nope:predict", {"instances": [1.0]}, 404),
        ("POST", "/v1/models/model:predict", {"instances": "x"}, 400),
        ("GET", "/v1/models/model", None, 200),
        ("GET", "/v1/models/nope", None, 404),
        ("POST", "/v2/models/model/infer", INFER, 200),
        ("POST", "/v2/models/nope/infer", INFER, 404),
        ("GET", "/healthz", None, 200),
        ("GET", "/readyz", None, 200),
        ("GET", "/metrics", None, 200),
        ("GET", "/nowhere", None, 404),
    ],
)
def test_every_answer_errors_too_carries_the_headers(
    cors: TestClient, plain: TestClient, case: tuple[str, str, Any, int]
) -> None:
    method, path, body, status = case
    with_cors = cors.request(method, path, json=body, headers=ORIGIN)
    without = plain.request(method, path, json=body, headers=ORIGIN)
    assert with_cors.status_code == without.status_code == status
    assert cors_headers(with_cors) == CORS
    assert cors_headers(without) == {}
    if path != "/metrics":  # its counters differ between the two servers
        assert with_cors.content == without.content


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/v1/models/model:predict", 400, 'Malformed request: OPTIONS "/v1/models/model:predict"'),
        ("/v2/models/model/infer", 405, None),
        ("/healthz", 404, '404: OPTIONS "/healthz"'),
    ],
)
def test_off_an_options_request_is_answered_as_before(
    plain: TestClient, path: str, status: int, error: str | None
) -> None:
    response = plain.options(path, headers=PREFLIGHT)
    assert response.status_code == status
    if error is not None:
        assert response.json() == {"error": error}
    assert cors_headers(response) == {}
