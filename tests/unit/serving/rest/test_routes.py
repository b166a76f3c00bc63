"""TF Serving's URL grammar (rest/routes.py): a /v1/ request's path to a Route."""

from __future__ import annotations

import json

import pytest

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.rest.errors import http_status
from tf_entrypoint.serving.rest.routes import parse_route


@pytest.mark.parametrize(
    ("method", "path", "route"),
    [
        ("GET", "/v1/models/model", p.Route("status", "model")),
        ("GET", "/v1/models/model/versions/3", p.Route("status", "model", 3)),
        ("GET", "/v1/models/model/metadata", p.Route("metadata", "model")),
        ("GET", "/v1/models/model/versions/3/metadata", p.Route("metadata", "model", 3)),
        ("GET", "/V1/MODELS/model/METADATA", p.Route("metadata", "model")),
        ("POST", "/v1/models/model:predict", p.Route("predict", "model")),
        ("POST", "/v1/models/model/versions/12:predict", p.Route("predict", "model", 12)),
        ("POST", "/v1/models/m/labels/stable:predict", p.Route("predict", "m", None, "stable")),
        ("POST", "/v1/models/m:classify", p.Route("classify", "m")),
        ("POST", "/v1/models/m:PREDICT", p.Route("predict", "m")),
    ],
)
def test_routes(method: str, path: str, route: p.Route) -> None:
    assert parse_route(method, path) == route


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/models/model"),
        ("GET", "/v1/models/model:predict"),
        ("POST", "/v1/models/model:explode"),
        ("PUT", "/v1/models/model:predict"),
        ("DELETE", "/v1/models/model"),
        ("GET", "/v1/models/model/versions/x"),
        ("GET", "/v1/other"),
    ],
)
def test_malformed_routes_are_400(method: str, path: str) -> None:
    with pytest.raises(ServingError) as caught:
        parse_route(method, path)
    assert http_status(caught.value) == 400
    assert caught.value.message == f"Malformed request: {method} {json.dumps(path)}"


def test_route_without_model_name() -> None:
    with pytest.raises(ServingError, match="Missing model name"):
        parse_route("GET", "/v1/models")


def test_version_beyond_int64_is_400() -> None:
    with pytest.raises(ServingError, match="Failed to convert version"):
        parse_route("GET", f"/v1/models/m/versions/{2**63}")


def test_a_version_of_thousands_of_digits_is_tf_servings_400() -> None:
    # int() refuses more than 4,300 digits: the length is checked first.
    digits = "9" * 5000
    for method, path in (
        ("GET", f"/v1/models/m/versions/{digits}"),
        ("GET", f"/v1/models/m/versions/{digits}/metadata"),
        ("POST", f"/v1/models/m/versions/{digits}:predict"),
    ):
        with pytest.raises(ServingError) as caught:
            parse_route(method, path)
        assert http_status(caught.value) == 400
        message = caught.value.message
        assert message.startswith("Failed to convert version: 9999")
        assert message.endswith("... to numeric.")
        assert len(message) < 300  # quoted back cut, not 5,000 characters


def test_versions_with_leading_zeros_and_int64s_largest() -> None:
    assert parse_route("GET", "/v1/models/m/versions/" + "0" * 40 + "7").version == 7
    assert parse_route("GET", f"/v1/models/m/versions/{2**63 - 1}").version == 2**63 - 1


@pytest.mark.parametrize("digit", ["\u0661", "\uff11", "\u00b9"])
def test_only_ascii_digits_are_versions(digit: str) -> None:
    with pytest.raises(ServingError, match="Malformed request"):
        parse_route("GET", f"/v1/models/m/versions/{digit}")


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/models/a%2Fb%3Ac:predict", p.Route("predict", "a/b:c")),
        ("/v1/models/a%3Fb%23c%5Cd:predict", p.Route("predict", "a?b#c\\d")),
        ("/v1/models/100%25%20sure:predict", p.Route("predict", "100% sure")),
        ("/v1/models/mod%C3%A8le:predict", p.Route("predict", "mod\u00e8le")),
        ("/v1/models/bad%FFbyte:predict", p.Route("predict", "bad\ufffdbyte")),
        ("/v1/models/m/labels/can%3Fary:predict", p.Route("predict", "m", None, "can?ary")),
        ("/v1/models/a+b:predict", p.Route("predict", "a+b")),  # '+' is not a space in a path
    ],
)
def test_names_and_labels_are_percent_decoded_after_the_match(path: str, route: p.Route) -> None:
    # As TF Serving: the route is matched on the path as sent, then decoded.
    assert parse_route("POST", path) == route


def test_encoded_separators_do_not_route() -> None:
    # TF Serving matches the path as sent: %3A is part of the name, not the verb's ':'.
    with pytest.raises(ServingError, match="Malformed request"):
        parse_route("POST", "/v1/models/m%3Apredict")
    assert parse_route("GET", "/v1/models/m%2Fversions%2F1") == p.Route("status", "m/versions/1")
