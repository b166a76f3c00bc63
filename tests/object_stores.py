"""Real S3- and GCS-compatible servers on 127.0.0.1 for the object-store tests.

moto's server mode (S3's REST API, in memory) and gcp-storage-emulator (GCS's
JSON API, files in a directory so a restart keeps them) run as child
processes of the test run, from the dev venv (requirements/dev.in). The
tests write to them with the same fsspec clients the server reads with.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from harness import web

#: What the S3 clients send moto (any credentials are accepted).
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Emulator:
    """One store server: started, stopped and started again on the same port."""

    kind: str  # "s3" or "gs"
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The variables that point a client (ours, the server's) at this store."""
        if self.kind == "s3":
            return {**S3_ENV, "AWS_ENDPOINT_URL": self.endpoint}
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def command(self) -> list[str]:
        if self.kind == "s3":
            return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        return [
            sys.executable, "-m", "gcp_storage_emulator", "start",
            "--host", "127.0.0.1", "--port", str(self.port), "--default-bucket", "models",
        ]  # fmt: skip

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "STORAGE_BASE": str(self.workdir), "STORAGE_DIR": "gcs"}
        log = (self.workdir / f"{self.kind}.log").open("ab")
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            with contextlib.suppress(httpx2.TransportError):
                web.get(self.endpoint, timeout=2)
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the {self.kind} store did not start: {self.log()}")
        if self.kind == "s3":
            web.put(f"{self.endpoint}/models", timeout=10).raise_for_status()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def log(self) -> str:
        path = self.workdir / f"{self.kind}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def filesystem(self) -> Any:
        """An fsspec client for this store (the tests' uploader)."""
        from tf_entrypoint.serving.core.object_store import open_filesystem  # noqa: PLC0415

        return open_filesystem(self.kind, self.env)

    def url(self, key: str) -> str:
        return f"{self.kind}://models/{key}"


@contextlib.contextmanager
def running(kind: str, workdir: Path) -> Iterator[Emulator]:
    emulator = Emulator(kind, workdir)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


def upload(
    fs: Any,
    source: Path,
    prefix: str,
    *,
    order: Iterable[str] | None = None,
    pause: float = 0.0,
) -> None:
    """Copy the directory `source` to `prefix` ("models/m/1"), file by file: in
    `order` (paths relative to `source`; the rest after, sorted), sleeping `pause`
    seconds between files."""
    files = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
    first = [name for name in (order or ()) if name in files]
    for index, name in enumerate(first + [n for n in files if n not in first]):
        if index and pause:
            time.sleep(pause)
        fs.put_file(str(source / name), f"{prefix}/{name}")


def put_files(fs: Any, prefix: str, files: Mapping[str, bytes]) -> None:
    for name, data in files.items():
        fs.pipe_file(f"{prefix}/{name}", data)


def put_raw(emulator: Emulator, key: str, data: bytes) -> None:
    """Store one object under exactly `key` in bucket "models" ("m/2/../../x" too):
    a bare HTTP request with the key percent-encoded whole, where a client (botocore,
    gcsfs) might normalise `.`, `..` or `//` out of it first."""
    if emulator.kind == "s3":
        answer = web.put(
            f"{emulator.endpoint}/models/{urllib.parse.quote(key, safe='')}",
            content=data,
            timeout=30,
        )
    else:
        answer = web.post(
            f"{emulator.endpoint}/upload/storage/v1/b/models/o",
            params={"uploadType": "media", "name": key},
            content=data,
            timeout=30,
        )
    answer.raise_for_status()


def stored_keys(emulator: Emulator, prefix: str) -> list[str]:
    """The keys in bucket "models" below `prefix`, as the store's own listing API
    gives them (to check that a hostile name was stored as written)."""
    if emulator.kind == "s3":
        answer = web.get(
            f"{emulator.endpoint}/models", params={"list-type": "2", "prefix": prefix}, timeout=30
        )
        answer.raise_for_status()
        return [html.unescape(k) for k in re.findall(r"<Key>([^<]*)</Key>", answer.text)]
    answer = web.get(
        f"{emulator.endpoint}/storage/v1/b/models/o", params={"prefix": prefix}, timeout=30
    )
    answer.raise_for_status()
    return [item["name"] for item in answer.json().get("items", [])]
