"""The REST handlers, independent of TensorFlow and of HTTP.

Each turns a :class:`~tf_entrypoint.serving.protocol.Route` (and a body) into an
HTTP status and a JSON body, against the models a
:class:`~tf_entrypoint.serving.lifecycle.Manager` serves; the TensorFlow
servable lives in :mod:`tf_entrypoint.serving.model`, the tests use a
pure-Python one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tf_entrypoint.serving import examples as ex
from tf_entrypoint.serving import protocol as p
from tf_entrypoint.serving.lifecycle import Manager


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str]


def answer(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, p.encode(body), headers or {})


def error_answer(err: p.ApiError) -> Answer:
    return answer(err.status, p.error_body(err.message), err.headers)


def status(manager: Manager, route: p.Route) -> Answer:
    """GET /v1/models/NAME[/versions/N|/labels/L]."""
    try:
        return answer(200, p.status_body(manager.status(route)))
    except p.ApiError as err:
        return error_answer(err)


def metadata(manager: Manager, route: p.Route) -> Answer:
    """GET /v1/models/NAME[/versions/N|/labels/L]/metadata."""
    try:
        with manager.lease(route) as version:
            return Answer(200, version.metadata, {})
    except p.ApiError as err:
        return error_answer(err)


def inference(
    manager: Manager,
    route: p.Route,
    body: bytes,
    observe_inference: Callable[[float], None] = lambda _: None,
) -> Answer:
    """POST ...:predict, :classify or :regress (by route.kind). Blocking: run it on a worker."""
    if route.kind in ("classify", "regress"):
        return classify_or_regress(manager, route, body, observe_inference)
    return predict(manager, route, body, observe_inference)


def predict(
    manager: Manager,
    route: p.Route,
    body: bytes,
    observe_inference: Callable[[float], None] = lambda _: None,
) -> Answer:
    """POST /v1/models/NAME[/versions/N|/labels/L]:predict. Blocking: run it on a worker.

    The version is chosen here, on the worker, so a request that waited in
    the queue during a swap runs on the newest version; the lease keeps that
    version loaded until the answer is ready.
    """
    try:
        if route.kind != "predict":
            raise p.bad_request(f"{route.kind} is not a predict request")
        with manager.lease(route) as version:
            servable = version.servable
            assert servable is not None  # noqa: S101 - AVAILABLE versions have one
            request = p.parse_predict_request(p.parse_json_object(body), servable.signatures)
            started = time.perf_counter()
            outputs = servable.predict(request.signature_name, request.inputs)
            observe_inference(time.perf_counter() - started)
        return answer(200, p.predict_response(request.format, outputs))
    except p.ApiError as err:
        return error_answer(err)


def classify_or_regress(
    manager: Manager,
    route: p.Route,
    body: bytes,
    observe_inference: Callable[[float], None] = lambda _: None,
) -> Answer:
    """POST /v1/models/NAME[/versions/N|/labels/L]:classify or :regress. Blocking.

    The body is read before a version is leased, as TF Serving does (a bad
    body is a 400 whichever version would have run it).
    """
    try:
        if route.kind not in ("classify", "regress"):
            raise p.bad_request(f"{route.kind} is not a classify or regress request")
        request = ex.parse_examples_request(body)
        with manager.lease(route) as version:
            servable = version.servable
            assert servable is not None  # noqa: S101 - AVAILABLE versions have one
            started = time.perf_counter()
            if route.kind == "classify":
                result = ex.classify_response(
                    servable.classify(request.signature_name, request.examples)
                )
            else:
                result = ex.regress_response(
                    servable.regress(request.signature_name, request.examples)
                )
            observe_inference(time.perf_counter() - started)
        return answer(200, result)
    except p.ApiError as err:
        return error_answer(err)
