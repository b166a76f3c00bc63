"""TF Serving's URL grammar (http_rest_api_util.cc): a /v1/ request's path to a Route."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import invalid_argument
from tf_entrypoint.serving.core.types import version_number

# TF Serving's URL grammar (http_rest_api_util.cc), matched, as there, on the
# path as sent (still percent-encoded); the model name and label are decoded
# afterwards. So any name is reachable: `a/b` as `a%2Fb`, `a?b` as `a%3Fb`.
# A version is ASCII digits (RE2's \d), not any script's digits as Python's \d.
_PREDICT_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/([0-9]+))|(?:/labels/([^/:]+)))?"
    r":(classify|regress|predict)",
    re.IGNORECASE | re.ASCII,
)
_STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/([0-9]+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE | re.ASCII,
)


def decoded_name(text: str | None) -> str | None:
    """A percent-encoded name or label, decoded as UTF-8 (U+FFFD for bytes that are not)."""
    if text is None:
        return None
    raw = urllib.parse.unquote_to_bytes(text)
    return raw.decode("utf-8", "replace")


def _route(kind: p.Kind, name: str, version: str | None, label: str | None) -> p.Route:
    return p.Route(kind, decoded_name(name) or "", version_number(version), decoded_name(label))


def parse_route(method: str, path: str) -> p.Route:
    """Match a /v1/ request as TF Serving does (case-insensitive paths).

    `path` is the path as sent, percent-encoded (ASGI's raw_path): the model
    name and label are decoded after the match, as TF Serving does, so a `/`,
    `:`, `?`, `#` or `%` in them is sent as %2F, %3A, %3F, %23 or %25.
    """
    if method == "POST":
        match = _PREDICT_PATH.fullmatch(path)
        if match:
            name, version, label, verb = match.groups()
            kind: p.Kind = verb.lower()  # type: ignore[assignment]
            return p.Route(
                kind, decoded_name(name) or "", version_number(version), decoded_name(label)
            )
    elif method in ("GET", "HEAD"):
        match = _STATUS_PATH.fullmatch(path)
        if match:
            name, version, label, metadata = match.groups()
            if not name:
                raise invalid_argument("Missing model name in request.")
            kind = "metadata" if metadata else "status"
            return p.Route(
                kind, decoded_name(name) or "", version_number(version), decoded_name(label)
            )
    raise invalid_argument(f"Malformed request: {method} {p.quote(path)}")


def path_as_sent(scope: Mapping[str, Any]) -> str:
    """The URL path as the client sent it, percent-encoded (TF Serving matches routes on it)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        return raw.decode("latin-1")
    return urllib.parse.quote(scope["path"], safe="/:")
