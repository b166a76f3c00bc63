"""harness/web.py: httpx2 without a CA bundle loaded per call, against local servers."""

from __future__ import annotations

import http.server
import re
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from harness import web
from tests.tls_certs import make_certs


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def echo() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_call_loads_no_ca_bundle(
    echo: http.server.ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A bundle httpx2 reads on every call, whatever this machine's own (CI sets one too).
    make_certs(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    url = f"http://127.0.0.1:{echo.server_address[1]}/"
    answer = web.post(url, content=b"hello", timeout=10)
    assert (answer.status_code, answer.content) == (200, b"hello")
    with web.client(base_url=url, timeout=10) as client:
        assert client.post("/", content=b"again").content == b"again"
    assert loads == []
    # httpx2's own function loads the bundle on every call: what this module saves.
    httpx2.post(url, content=b"x", timeout=10)
    assert loads


def test_https_without_its_own_verify_trusts_nothing(tmp_path: Path) -> None:
    make_certs(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://localhost:{server.server_address[1]}/"
    try:
        with pytest.raises(httpx2.ConnectError):
            web.post(url, content=b"x", timeout=10)
        trusted = ssl.create_default_context(cafile=tmp_path / "ca.pem")
        assert web.post(url, content=b"x", timeout=10, verify=trusted).content == b"x"
    finally:
        server.shutdown()
        server.server_close()


def test_tests_call_httpx2_through_this_module() -> None:
    root = Path(__file__).resolve().parents[3]
    direct = re.compile(r"\bhttpx2\.(get|post|put|delete|head|request|stream|Client|AsyncClient)\(")
    offenders = [
        str(path.relative_to(root))
        for path in [*(root / "tests").rglob("*.py"), *(root / "harness").glob("*.py")]
        if path.name not in {"web.py", "test_web.py"} and direct.search(path.read_text())
    ]
    assert offenders == []
