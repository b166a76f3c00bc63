"""TF Serving's URL grammar (http_rest_api_util.cc): a /v1/ request's path to a Route."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import invalid_argument

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
_INT64_MAX = 2**63 - 1


def _version(text: str | None) -> int | None:
    """A version from the URL: digits that fit int64, else TF Serving's 400.

    Its length is checked before int(): Python refuses to convert more than
    4,300 digits (ValueError), and a URL may carry thousands.
    """
    if text is None:
        return None
    digits = text.lstrip("0")
    if len(digits) > len(str(_INT64_MAX)) or int(digits or "0") > _INT64_MAX:
        shown = text if len(text) <= p.MAX_QUOTED else text[: p.MAX_QUOTED - 3] + "..."
        raise invalid_argument(f"Failed to convert version: {shown} to numeric.")
    return int(digits or "0")


def _decoded(text: str | None) -> str | None:
    """A percent-encoded name or label, decoded as UTF-8 (U+FFFD for bytes that are not)."""
    if text is None:
        return None
    raw = urllib.parse.unquote_to_bytes(text)
    return raw.decode("utf-8", "replace")


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
            return p.Route(kind, _decoded(name) or "", _version(version), _decoded(label))
    elif method in ("GET", "HEAD"):
        match = _STATUS_PATH.fullmatch(path)
        if match:
            name, version, label, metadata = match.groups()
            if not name:
                raise invalid_argument("Missing model name in request.")
            kind = "metadata" if metadata else "status"
            return p.Route(kind, _decoded(name) or "", _version(version), _decoded(label))
    raise invalid_argument(f"Malformed request: {method} {p.quote(path)}")


def path_as_sent(scope: Mapping[str, Any]) -> str:
    """The URL path as the client sent it, percent-encoded (TF Serving matches routes on it)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        return raw.decode("latin-1")
    return urllib.parse.quote(scope["path"], safe="/:")
