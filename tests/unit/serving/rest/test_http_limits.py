"""The bounds on an HTTP request's head (rest/http_limits.py), with or without httptools."""

from __future__ import annotations

from tf_entrypoint.serving.rest import http_limits


def test_without_httptools_h11_bounds_the_head_to_the_same_size() -> None:
    options = http_limits.uvicorn_options()
    if options["http"] == "h11":  # this venv: no httptools (the image has it: container test)
        assert options["h11_max_incomplete_event_size"] == http_limits.MAX_HEAD
    else:
        assert options["http"].__name__ == "BoundedHead"
