"""The REST handlers, independent of TensorFlow and of HTTP.

Each turns a :class:`~tf_entrypoint.serving.core.types.Route` (and a body) into an
HTTP status and a JSON body, against the models a
:class:`~tf_entrypoint.serving.core.manager.Manager` serves; the TensorFlow
servable lives in :mod:`tf_entrypoint.serving.model`, the tests use a
pure-Python one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tf_entrypoint.serving.codec import examples as ex
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.manager import Manager


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str]


def answer(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, p.encode(body), headers or {})


def error_answer(err: p.ApiError) -> Answer:
    return answer(err.status, p.error_body(err.message), err.headers)


class Body:
    """A request body that its handler takes once, so that nothing else keeps it.

    The bytes are freed as soon as they are parsed, not when the request
    ends: a request that waits (for a worker, for its batch) holds its
    compact tensors, not its body and not its JSON document.
    """

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def take(self) -> bytes:
        data, self._data = self._data, b""
        return data


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
    body: Body,
    observe_inference: Callable[[float], None],
    limits: RequestLimits,
) -> Answer:
    """POST ...:predict, :classify or :regress (by route.kind). Blocking: run it on a worker.

    The JSON body is parsed, and the JSON answer written, while holding one
    of `limits.converting`'s slots (docs/robustness.md, "Memory per request"),
    taken before the request's deadline.
    """
    if route.kind in ("classify", "regress"):
        return classify_or_regress(manager, route, body, observe_inference, limits)
    return predict(manager, route, body, observe_inference, limits)


def predict(
    manager: Manager,
    route: p.Route,
    body: Body,
    observe_inference: Callable[[float], None],
    limits: RequestLimits,
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
            with limits.slot():
                request = p.parse_predict_request(
                    p.parse_json_object(body.take()), servable.signatures
                )
            name, request_format, inputs = request.signature_name, request.format, request.inputs
            del request
            started = time.perf_counter()
            outputs = servable.predict(name, inputs)
            observe_inference(time.perf_counter() - started)
            del inputs
        with limits.slot():
            return Answer(200, p.predict_json(request_format, outputs), {})
    except p.ApiError as err:
        return error_answer(err)


def classify_or_regress(
    manager: Manager,
    route: p.Route,
    body: Body,
    observe_inference: Callable[[float], None],
    limits: RequestLimits,
) -> Answer:
    """POST /v1/models/NAME[/versions/N|/labels/L]:classify or :regress. Blocking.

    The body is read before a version is leased, as TF Serving does (a bad
    body is a 400 whichever version would have run it).
    """
    try:
        if route.kind not in ("classify", "regress"):
            raise p.bad_request(f"{route.kind} is not a classify or regress request")
        with limits.slot():
            request = ex.parse_examples_request(body.take(), limit=limits.expansion)
        with manager.lease(route) as version:
            servable = version.servable
            assert servable is not None  # noqa: S101 - AVAILABLE versions have one
            started = time.perf_counter()
            if route.kind == "classify":
                classes = servable.classify(request.signature_name, request.examples)
            else:
                values = servable.regress(request.signature_name, request.examples)
            observe_inference(time.perf_counter() - started)
        del request
        with limits.slot():
            if route.kind == "classify":
                return Answer(200, ex.classify_json(classes), {})
            return answer(200, ex.regress_response(values))
    except p.ApiError as err:
        return error_answer(err)
