"""HTTP from the tests to the servers they start: httpx2, one TLS context for all.

`httpx2.get(url)` and its siblings build a Client per call, and a Client
builds the default TLS context: it loads the machine's CA bundle
(SSL_CERT_FILE or OpenSSL's), about 55 ms of CPU here, even for an http:// URL.
py-spy over the container tier's pytest workers found that load in 600 of
the 960 seconds it sampled them running; the workers used 400 CPU-seconds,
13% of the machine's during the tier (docs/development.md, "The harness").
These functions are httpx2's, with the same fresh connection per call, and
`verify` defaulting to one context built once, with no CA at all: every
test's URL is http:// on 127.0.0.1 or a container; an https:// URL must pass
its own `verify` (tests/tls_certs.py's CA), and without it the handshake
fails rather than trusting anything.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx2

#: Verifies peers (CERT_REQUIRED, hostnames checked) against no CA: never
#: trusts a server; building it loads nothing.
NO_CA = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _verify(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("verify", NO_CA)
    return kwargs


def request(method: str, url: str, **kwargs: Any) -> httpx2.Response:
    return httpx2.request(method, url, **_verify(kwargs))


def get(url: str, **kwargs: Any) -> httpx2.Response:
    return httpx2.get(url, **_verify(kwargs))


def post(url: str, **kwargs: Any) -> httpx2.Response:
    return httpx2.post(url, **_verify(kwargs))


def put(url: str, **kwargs: Any) -> httpx2.Response:
    return httpx2.put(url, **_verify(kwargs))


def client(**kwargs: Any) -> httpx2.Client:
    """An httpx2.Client (keeps its connections: for tests that want them kept)."""
    return httpx2.Client(**_verify(kwargs))


def async_client(**kwargs: Any) -> httpx2.AsyncClient:
    """An httpx2.AsyncClient, as `client`."""
    return httpx2.AsyncClient(**_verify(kwargs))
