"""Models served from object storage by the real image: s3:// from moto's server,
gs:// from gcp-storage-emulator, both started by the test on 127.0.0.1.

The server runs with the images' read-only root (a tmpfs on /tmp, where the
model cache is) in the host's network namespace, so it reaches the stores on
127.0.0.1 as a client on the host would. Versions are uploaded file by
file, seconds apart (longer than a poll plus the settling time), in both
orders, while a client keeps predicting: no request fails, readiness stays
up, the new version answers once complete, and the old one's copy is
deleted. Then the store stops (the loaded version keeps serving, the log
names the failure) and comes back (a new version is served).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from harness import web
from harness.docker import Containers, poll, remove
from harness.models import ModelLibrary
from tests.object_stores import Emulator, free_port, put_raw, running, stored_keys, upload

IMAGE_FLAVORS = ("cpu",)
#: Longer than a poll (1 s) plus the settling time (1 s): without the
#: completeness rule a half-uploaded version would be loaded in between.
PAUSE = 3.0
GRAPH_FIRST = ["saved_model.pb"]
CHECKPOINT_FIRST = ["variables/variables.data-00000-of-00001", "variables/variables.index"]


@pytest.fixture(scope="module")
def exports(model_library: ModelLibrary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Versions 1, 2 and 3 of a model answering y = x + V (the model library's plus)."""
    return model_library.copy("plus", tmp_path_factory.mktemp("store-models") / "plus")


@pytest.fixture(scope="module", params=["s3", "gs"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Emulator]:
    with running(request.param, tmp_path_factory.mktemp(f"store-{request.param}")) as emulator:
        yield emulator


class Server:
    def __init__(
        self, containers: Containers, store: Emulator, key: str, *extra: str, **run: Any
    ) -> None:
        #: The model's URL, and its prefix for the uploader ("models/KEY").
        self.url = store.url(key)
        self.prefix = f"models/{key}"
        self.port = free_port()
        self.rest = f"http://127.0.0.1:{self.port}"
        self.container = containers.start(
            [
                "serve", "--model_name=plus", f"--model_base_path={self.url}",
                "--port=0", f"--rest_api_port={self.port}", "--host=127.0.0.1",
                "--file_system_poll_wait_seconds=1", *extra,
            ],
            environment=store.env,
            network_mode="host",
            read_only=True,
            nano_cpus=1_000_000_000,
            **{"tmpfs": {"/tmp": "rw,size=256m"}, **run},
        )  # fmt: skip

    def logs(self) -> str:
        return self.container.logs().decode(errors="replace")

    def ready(self) -> bool:
        self.container.reload()
        assert self.container.status == "running", self.logs()
        try:
            return web.get(f"{self.rest}/readyz", timeout=5).status_code == 200
        except httpx2.TransportError:
            return False

    def predict(self) -> float:
        answer = web.post(
            f"{self.rest}/v1/models/plus:predict", json={"instances": [10.0]}, timeout=30
        )
        assert answer.status_code == 200, answer.text
        return float(answer.json()["predictions"][0]) - 10.0

    def copies(self) -> list[str]:
        ran = self.container.exec_run(["sh", "-c", "ls -d /tmp/tf-entrypoint-models/*/*/ || true"])
        output = ran.output
        assert isinstance(output, bytes)
        return sorted(output.decode().split())


class Client(threading.Thread):
    """Predicts without pause; records every version that answered and every failure."""

    def __init__(self, server: Server) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.stop = threading.Event()
        self.versions: list[int] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.versions.append(round(self.server.predict()))
                if web.get(f"{self.server.rest}/readyz", timeout=5).status_code != 200:
                    self.failures.append("readiness went down")
            except (AssertionError, httpx2.HTTPError) as err:
                self.failures.append(str(err))
            time.sleep(0.05)


@pytest.fixture
def server(
    containers: Containers, store: Emulator, request: pytest.FixtureRequest
) -> Iterator[Server]:
    key = request.node.name.split("[")[0].removeprefix("test_")[:24]
    running_server = Server(containers, store, key)
    try:
        yield running_server
    finally:
        remove(running_server.container)


def test_versions_uploaded_in_either_order_swap_in_without_a_failed_request(
    exports: Path, store: Emulator, server: Server
) -> None:
    fs = store.filesystem()
    prefix = server.prefix
    upload(fs, exports / "1", f"{prefix}/1", order=GRAPH_FIRST, pause=PAUSE)
    assert poll(server.ready, 180, 0.25), server.logs()
    assert server.predict() == 1
    assert len(server.copies()) == 1
    client = Client(server)
    client.start()
    try:
        upload(fs, exports / "2", f"{prefix}/2", order=GRAPH_FIRST, pause=PAUSE)
        assert poll(lambda: client.versions[-1:] == [2], 120, 0.25), server.logs()
        upload(fs, exports / "3", f"{prefix}/3", order=CHECKPOINT_FIRST, pause=PAUSE)
        assert poll(lambda: client.versions[-1:] == [3], 120, 0.25), server.logs()
    finally:
        client.stop.set()
        client.join(60)
    logs = server.logs()
    assert client.failures == [], logs
    assert set(client.versions) == {1, 2, 3}
    # Not one load of a half-uploaded version: each version loaded once, after it was whole.
    for version in (2, 3):
        assert logs.count(f"loading model 'plus' version {version} from") == 1, logs
        assert f"{server.url}/{version} is not complete yet" in logs, logs
    assert "(variables/variables.index is not there yet)" in logs  # version 2, graph first
    assert "(saved_model.pb is not there yet)" in logs  # version 3, checkpoint first
    assert "failed: " not in logs, logs
    assert poll(lambda: len(server.copies()) == 1, 30, 0.5), server.copies()


def test_a_store_that_stops_and_comes_back(exports: Path, store: Emulator, server: Server) -> None:
    fs = store.filesystem()
    prefix = server.prefix
    upload(fs, exports / "1", f"{prefix}/1")
    assert poll(server.ready, 180, 0.25), server.logs()
    store.stop()
    try:
        assert poll(lambda: f"listing {server.url} failed" in server.logs(), 60, 0.5), server.logs()
        for _ in range(5):  # the loaded version keeps serving while the store is down
            assert server.predict() == 1
            assert server.ready()
    finally:
        store.start()
    fs = store.filesystem()
    upload(fs, exports / "2", f"{prefix}/2")  # moto starts empty again; the emulator keeps files
    assert poll(lambda: server.predict() == 2, 180, 0.5), server.logs()
    assert "can be listed again" in server.logs()


def test_a_store_that_is_down_at_start_up(exports: Path, store: Emulator, server: Server) -> None:
    """The server starts while the store is down: not ready (alive), the failure logged;
    once the store answers and holds a version, it serves."""
    store.stop()
    try:
        assert poll(lambda: f"listing {server.url} failed" in server.logs(), 60, 0.5)
        assert not server.ready()
        assert web.get(f"{server.rest}/healthz", timeout=5).status_code == 200
    finally:
        store.start()
    upload(store.filesystem(), exports / "1", f"{server.prefix}/1")
    # The listing backs off (1, 2, 4 ... s) while the store was down: within a minute.
    assert poll(server.ready, 180, 0.25), server.logs()
    assert server.predict() == 1


#: Object names below version 2 that escape `--model-cache-dir=/box/cache`
#: (as the server copied them before: /box/x, /box/y, /box/z), with the stores
#: that keep them as written (gcp-storage-emulator refuses `..` in a name).
ESCAPING = {
    "../../../x": ("s3",),
    "variables/../../../../y": ("s3",),
    "/box/z": ("s3", "gs"),
}


def test_object_names_that_leave_the_model_cache_fail_their_version(
    containers: Containers, exports: Path, store: Emulator
) -> None:
    """Whoever can write to the bucket names objects to land outside the cache:
    version 2 fails to load, naming the object (INVALID_ARGUMENT in the status
    API), version 1 keeps answering, and nothing is written outside the cache."""
    key = "escape/tr"
    server = Server(
        containers, store, key, "--model-cache-dir=/box/cache",
        tmpfs={"/tmp": "rw,size=64m", "/box": "rw,size=64m,mode=1777"},
    )  # fmt: skip
    try:
        fs = store.filesystem()
        upload(fs, exports / "1", f"models/{key}/1")
        assert poll(server.ready, 180, 0.25), server.logs()
        assert server.predict() == 1
        names = [name for name, kinds in ESCAPING.items() if store.kind in kinds]
        for name in names:
            put_raw(store, f"{key}/2/{name}", b"written by whoever can write to the bucket")
        assert {f"{key}/2/{n}" for n in names} <= set(stored_keys(store, f"{key}/2/"))
        upload(fs, exports / "2", f"models/{key}/2")
        status = f"{server.rest}/v1/models/plus"

        def version_2_failed() -> bool:  # (LOADING while its load is retried, then END)
            answer = web.get(status, timeout=10).json()["model_version_status"]
            return any(
                v["version"] == "2" and v["status"].get("error_code") == "INVALID_ARGUMENT"
                for v in answer
            )

        assert poll(version_2_failed, 120, 0.5), server.logs()
        answer = web.get(status, timeout=10).json()["model_version_status"]
        failed = next(v["status"] for v in answer if v["version"] == "2")
        first = f"{store.kind}://models/{key}/2/{sorted(names)[0]}"
        assert f"object {first!r}" in failed["error_message"], answer
        assert f"object {first!r}" in server.logs()
        for _ in range(3):
            assert server.predict() == 1
        ran = server.container.exec_run(["find", "/box", "-type", "f"])
        assert isinstance(ran.output, bytes)
        files = ran.output.decode().split()
        assert [f for f in files if not f.startswith("/box/cache/")] == [], files
    finally:
        remove(server.container)


def test_a_copy_left_by_a_killed_server_is_removed(
    containers: Containers,
    exports: Path,
    store: Emulator,
    tmp_path: Path,
) -> None:
    """Servers share a cache directory (a volume); one is SIGKILLed moments into a
    copy and a new one starts at once: the new one removes the partial copy at
    start, and a third killed while the new one serves is removed at its next
    polls, so a cache sized for two versions keeps room for the next swap."""
    if store.kind != "s3":
        pytest.skip("the sweep is the same whatever the store: tested with one")
    key = "sweep/big"
    fs = store.filesystem()
    upload(fs, exports / "1", f"models/{key}/1")
    fs.pipe_file(f"models/{key}/1/assets/big", b"b" * (64 << 20))  # a copy that takes a while
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    volumes = {str(cache): {"bind": "/cache", "mode": "rw"}}

    def started() -> Server:
        return Server(containers, store, key, "--model-cache-dir=/cache", volumes=volumes)

    def killed_while_copying() -> Path:
        """A server killed (SIGKILL) as soon as its copy has begun: its folder."""
        before = set(cache.glob("tfe-cache-*"))

        def copying() -> bool:
            return any(any(f.glob("*/*")) for f in set(cache.glob("tfe-cache-*")) - before)

        victim = started()
        try:
            assert poll(copying, 180, 0.02), victim.logs()
            # Named before the kill: a server already serving may sweep it at once after.
            (folder,) = set(cache.glob("tfe-cache-*")) - before
            victim.container.kill(signal="SIGKILL")
            victim.container.wait(timeout=60)
        finally:
            remove(victim.container)
        return folder

    first = killed_while_copying()
    assert first.exists()
    server = started()
    try:
        assert poll(server.ready, 180, 0.25), server.logs()
        assert not first.exists(), f"{first} is still there: {server.logs()}"
        (own,) = cache.glob("tfe-cache-*")
        second = killed_while_copying()
        assert poll(lambda: not second.exists(), 30, 0.5), server.logs()
        assert list(cache.glob("tfe-cache-*")) == [own]
        assert server.predict() == 1
        assert "a model cache no running server holds" in server.logs()
    finally:
        remove(server.container)
