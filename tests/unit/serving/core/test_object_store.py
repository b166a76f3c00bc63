"""Models in object storage (core/object_store.py) against real S3 and GCS servers.

moto's server and gcp-storage-emulator run on 127.0.0.1 (tests/object_stores.py);
the server's own clients (s3fs, gcsfs) list and copy from them. The manager
is driven with a pure-Python loader (the real TensorFlow path is
tests/container/test_object_store.py).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.object_stores import Emulator, put_files, put_raw, running, stored_keys
from tests.unit.serving.core.manager_helpers import Fake, sample, served, states
from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.core import object_store as store
from tf_entrypoint.serving.core import repository, store_rules
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.model_cache import DIRECTORY_LOCK, ModelCache
from tf_entrypoint.serving.core.model_specs import All, ModelSpec, ServingConfig, StoreURL
from tf_entrypoint.serving.core.object_store import ObjectStores
from tf_entrypoint.serving.core.types import AVAILABLE, END, LOADING


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, written by hand (the wire format)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def saved_model_pb(*, restore_op: str = "") -> bytes:
    """A SavedModel's bytes: one MetaGraphDef with a meta_info_def (field 1), a
    graph_def (2) and, given `restore_op`, a SaverDef (3) naming it in field 3."""
    meta = _field(1, _field(4, b"serve")) + _field(2, b"\x0a\x03abc")
    if restore_op:
        meta += _field(3, _field(1, b"save/Const:0") + _field(3, restore_op.encode()))
    return _varint(1 << 3) + _varint(1) + _field(2, meta)


TF2_GRAPH = saved_model_pb(restore_op="StatefulPartitionedCall_2")
CHECKPOINT = {
    "variables/variables.index": b"index",
    "variables/variables.data-00000-of-00001": b"d" * 4096,
}


def version_files(*, graph: bytes = TF2_GRAPH) -> dict[str, bytes]:
    return {"saved_model.pb": graph, **CHECKPOINT, "assets/vocab.txt": b"a\nb\n"}


# ----------------------------------------------------------------------
# Pure rules


def test_urls_are_read_and_what_cannot_be_read_is_named() -> None:
    assert store.parse_url("s3://bucket/models/resnet/") == StoreURL(
        "s3", "bucket", "models/resnet"
    )
    assert store.parse_url("GS://b") == StoreURL("gs", "b", "")
    assert store.parse_url("/models/resnet") is None
    assert str(StoreURL("s3", "b", "m") / "3") == "s3://b/m/3"
    assert (StoreURL("s3", "b", "m") / "3").name == "3"
    with pytest.raises(ValueError, match=r"hdfs:// is not a model store .* s3://, gs://"):
        store.parse_url("hdfs://namenode/models")
    with pytest.raises(ValueError, match=r"names no bucket: expected s3://BUCKET/PATH"):
        store.parse_url("s3:///models")


def test_endpoints_come_from_the_variables_users_already_set() -> None:
    tf_style = store.s3_options({"S3_ENDPOINT": "minio:9000", "S3_USE_HTTPS": "0",
                                 "S3_VERIFY_SSL": "0"})  # fmt: skip
    assert tf_style["client_kwargs"] == {"endpoint_url": "http://minio:9000", "verify": False}
    https = store.s3_options({"S3_ENDPOINT": "minio:9000"})["client_kwargs"]
    assert https == {"endpoint_url": "https://minio:9000"}
    aws = store.s3_options({"AWS_ENDPOINT_URL": "http://a:1", "S3_ENDPOINT": "b:2",
                            "AWS_REGION": "eu-west-1"})  # fmt: skip
    assert aws["client_kwargs"] == {"endpoint_url": "http://a:1", "region_name": "eu-west-1"}
    assert store.s3_options({"AWS_ENDPOINT_URL_S3": "http://s3:1", "AWS_ENDPOINT_URL": "http://x"})[
        "client_kwargs"
    ] == {"endpoint_url": "http://s3:1"}
    assert "key" not in store.s3_options({})  # botocore's own chain
    emulator = store.gcs_options({"STORAGE_EMULATOR_HOST": "localhost:9023"})
    assert (emulator["endpoint_url"], emulator["token"]) == ("http://localhost:9023", "anon")
    assert "token" not in store.gcs_options({})  # Google's default credentials


@pytest.mark.parametrize(
    ("names", "why"),
    [
        ({"variables/variables.index"}, "saved_model.pb is not there yet"),
        ({"saved_model.pb"}, "variables/variables.index is not there yet"),
        ({"saved_model.pb", "variables/variables.index"}, "variables.data-00000-of-NNNNN"),
        (
            {"saved_model.pb", "variables/variables.index",
             "variables/variables.data-00001-of-00003"},
            "variables/variables.data-00000-of-00003 is not there yet (and 1 more)",
        ),
        (
            {"saved_model.pb", "variables/variables.index",
             "variables/variables.data-00000-of-00001",
             "variables/variables.data-00000-of-00002"},
            "in 1 and 2 shards at once",
        ),
        ({"saved_model.pb", *CHECKPOINT}, None),
        ({"saved_model.pbtxt", *CHECKPOINT}, None),
    ],
)  # fmt: skip
def test_a_version_is_complete_with_its_graph_and_its_whole_checkpoint(
    names: set[str], why: str | None
) -> None:
    files = dict.fromkeys(names, (1, "tag"))
    found = store_rules.incomplete(files, lambda: True)
    assert found == why if why is None else why in (found or "")


def test_a_graph_without_variables_needs_no_checkpoint_unless_it_restores_one() -> None:
    files = {"saved_model.pb": (1, "t")}
    assert store_rules.incomplete(files, lambda: False) is None
    assert (
        store_rules.incomplete(files, lambda: True) == "variables/variables.index is not there yet"
    )
    assert store_rules.restores_checkpoint(TF2_GRAPH)
    assert not store_rules.restores_checkpoint(saved_model_pb())
    assert store_rules.restores_checkpoint(b"\xff\xff not a proto")  # damaged: wait for it
    text = b'meta_graphs { saver_def { restore_op_name: "save/restore_all" } }'
    assert store_rules.restores_checkpoint(text, "saved_model.pbtxt")
    assert not store_rules.restores_checkpoint(b"meta_graphs { }", "saved_model.pbtxt")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (FileNotFoundError("The specified bucket does not exist"), "NOT_FOUND"),
        (PermissionError("Access Denied"), "PERMISSION_DENIED"),
        (RuntimeError("An error occurred (AccessDenied) when calling ListObjectsV2"),
         "PERMISSION_DENIED"),
        (RuntimeError("403 Forbidden: caller does not have storage.objects.list"),
         "PERMISSION_DENIED"),
        (RuntimeError("An error occurred (NoSuchBucket) when calling ListObjectsV2"), "NOT_FOUND"),
        (RuntimeError("Could not connect to the endpoint URL"), "UNAVAILABLE"),
        (RuntimeError("Read timed out"), "DEADLINE_EXCEEDED"),
        (RuntimeError("something else"), "UNKNOWN"),
        (OSError(errno.ENOSPC, "the cache is full", "/tmp/c"), "RESOURCE_EXHAUSTED"),
    ],
)  # fmt: skip
def test_a_client_error_gets_the_status_code_tensorflow_would_give(
    error: Exception, code: str
) -> None:
    """Denied access, a missing bucket, a store that is down: each keeps the client's
    words and gets its canonical code for the status API and the log."""
    found = store.as_os_error(error, "s3://b/m")
    assert repository.error_code(found).name == code
    words = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    assert words in repository.describe(found)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../../../x", "a '..' segment (it would be written outside the copy)"),
        ("variables/../../../../y", "a '..' segment"),
        ("/box/z", "is absolute"),
        ("./saved_model.pb", "a '.' segment"),
        ("assets//vocab.txt", "an empty segment"),
        ("assets/..", "a '..' segment"),
        ("assets/a\0b", "NUL character"),
        ("assets/..\\..\\w", None),  # a backslash is no separator on Linux: stays inside
        ("assets/...", None),
        ("variables/variables.index", None),
    ],
)
def test_an_object_name_must_be_a_plain_path_inside_its_version(name: str, why: str | None) -> None:
    found = store_rules.unsafe_name(name)
    assert found == why if why is None else why in (found or "")
    url = StoreURL("s3", "models", "tr/2")
    if why is None:
        store_rules.check_names(url, [name, "saved_model.pb"])
        return
    with pytest.raises(OSError, match="refusing to copy the version: object") as raised:
        store_rules.check_names(url, [name, "saved_model.pb"])
    assert repr(f"s3://models/tr/2/{name}") in str(raised.value)
    assert repository.error_code(raised.value).name == "INVALID_ARGUMENT"


def test_an_object_that_is_both_a_file_and_a_folder_is_named() -> None:
    url = StoreURL("s3", "models", "tr/2")
    with pytest.raises(OSError, match=r"'s3://models/tr/2/variables': it is a file and also a"):
        store_rules.check_names(url, ["variables", "variables/variables.index", "saved_model.pb"])
    with pytest.raises(OSError, match=r"'s3://models/tr/2/a/b': it is a file and also a"):
        store_rules.check_names(url, ["a/b", "a/b/c/d"])
    store_rules.check_names(url, ["a/b", "a/bc", "a/b.d/e"])


def test_the_cache_is_bounded_and_removes_what_no_live_server_holds(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "cache", limit=1000)
    url = StoreURL("s3", "b", "m/1")
    first = cache.reserve(url, 600)
    assert first.is_dir()
    assert cache.used == 600
    with pytest.raises(OSError, match=r"needs 500 bytes .* holds 600 of its 1,000-byte limit") as e:
        cache.reserve(url, 500)
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(OSError, match=r"has [\d,]+ free \(--model-cache-dir"):
        ModelCache(tmp_path / "big").reserve(url, 2**62)
    # A second server sharing the directory keeps the first's copies (it holds its lock) ...
    other = ModelCache(tmp_path / "cache")
    other.reserve(url, 1)
    assert first.is_dir()
    # ... and removes a crashed one's (nobody holds its lock).
    stale = tmp_path / "cache" / "tfe-cache-crashed"
    stale.mkdir()
    (stale / ".lock").touch()  # (made now: its age does not matter, its lock does)
    ModelCache(tmp_path / "cache").reserve(url, 1)
    assert not stale.exists()
    assert first.is_dir()
    cache.keep_only([])
    assert not first.exists()
    assert cache.used == 0
    cache.close()
    other.close()


# ----------------------------------------------------------------------
# Against real stores


@pytest.fixture(scope="module", params=["s3", "gs"])
def emulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Emulator]:
    with running(request.param, tmp_path_factory.mktemp(request.param)) as running_store:
        yield running_store


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stores_for(emulator: Emulator, tmp_path: Path, clock: Clock | None = None) -> ObjectStores:
    return ObjectStores(ModelCache(tmp_path / "cache"), env=emulator.env, clock=clock or Clock())


def listed(stores: ObjectStores, base: StoreURL) -> list[int]:
    """The versions a listing of `base` finds complete (it must be listable)."""
    listing = stores.scan(base)
    assert listing is not None
    return sorted(listing.versions)


def url_of(emulator: Emulator, key: str) -> StoreURL:
    found = store.parse_url(emulator.url(key))
    assert found is not None
    return found


def test_a_version_is_listed_once_complete_and_settled_then_copied(
    emulator: Emulator, tmp_path: Path
) -> None:
    fs = emulator.filesystem()
    clock = Clock()
    stores = stores_for(emulator, tmp_path, clock)
    base = url_of(emulator, "settle/m")
    put_files(fs, "models/settle/m/7", version_files())
    assert listed(stores, base) == []
    assert "changed less than 1 s ago" in stores.problem(base)
    clock.now += 1.0
    assert listed(stores, base) == [7]
    identity = stores.identity(base / "7")
    local = stores.fetch(base / "7")
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == [
        "assets/vocab.txt", "saved_model.pb", "variables/variables.data-00000-of-00001",
        "variables/variables.index",
    ]  # fmt: skip
    assert (local / "saved_model.pb").read_bytes() == TF2_GRAPH
    # A changed file is a new identity, and settles again before it counts.
    put_files(fs, "models/settle/m/7", {"assets/vocab.txt": b"a\nb\nc\n"})
    assert listed(stores, base) == []
    clock.now += 1.0
    assert stores.scan(base) is not None
    assert stores.identity(base / "7") != identity
    stores.keep_only([])
    assert not local.exists()
    stores.close()


@pytest.mark.parametrize("first", ["graph", "checkpoint"])
def test_an_upload_in_either_order_is_never_listed_half_done(
    emulator: Emulator, tmp_path: Path, first: str
) -> None:
    fs = emulator.filesystem()
    clock = Clock()
    stores = stores_for(emulator, tmp_path, clock)
    base = url_of(emulator, f"order-{first}/m")
    prefix = f"models/order-{first}/m/1"
    halves = [{"saved_model.pb": TF2_GRAPH}, dict(CHECKPOINT)]
    if first == "checkpoint":
        halves.reverse()
    put_files(fs, prefix, halves[0])
    for _ in range(3):  # however long the second half takes
        clock.now += 5
        assert listed(stores, base) == []
    expected = "saved_model.pb" if first == "checkpoint" else "variables/variables.index"
    assert f"version 1: {expected} is not there yet" in stores.problem(base)
    put_files(fs, prefix, halves[1])
    assert listed(stores, base) == []
    clock.now += 1
    assert listed(stores, base) == [1]
    stores.close()


def test_a_graph_that_restores_nothing_is_complete_alone(
    emulator: Emulator, tmp_path: Path
) -> None:
    fs = emulator.filesystem()
    clock = Clock()
    stores = stores_for(emulator, tmp_path, clock)
    put_files(fs, "models/novars/m", {"saved_model.pb": saved_model_pb()})  # at the root
    base = url_of(emulator, "novars/m")
    stores.scan(base)
    clock.now += 1
    assert listed(stores, base) == [1]
    stores.close()


def test_a_graph_over_max_graph_bytes_is_not_read_and_counts_as_complete(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Whether a graph without variables/ restores a checkpoint is read from the graph;
    one over --max-graph-bytes is not read (it could be gigabytes): its version is
    complete, and its load fails naming the limit."""
    fs = emulator.filesystem()
    clock = Clock()
    stores = ObjectStores(
        ModelCache(tmp_path / "cache"),
        env=emulator.env,
        clock=clock,
        max_graph_bytes=len(TF2_GRAPH) - 1,
    )
    put_files(fs, "models/biggraph/m/1", {"saved_model.pb": TF2_GRAPH})  # restores, no variables
    base = url_of(emulator, "biggraph/m")
    stores.scan(base)
    clock.now += 1
    assert listed(stores, base) == [1]
    stores.close()


def test_a_store_that_is_down_or_missing_is_reported_and_retried_with_back_off(
    emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    stores = ObjectStores(
        ModelCache(tmp_path / "cache"), env=emulator.env, clock=clock, list_timeout=3
    )
    missing = StoreURL(emulator.kind, "no-such-bucket", "m")
    caplog.set_level(logging.INFO, "tf_entrypoint.serving")
    assert stores.scan(missing) is None
    assert "failed: " in stores.problem(missing)
    assert "(ENOENT)" in stores.problem(missing)
    put_files(emulator.filesystem(), "models/down/m/1", version_files())
    base = url_of(emulator, "down/m")
    assert stores.scan(base) is not None
    emulator.stop()
    try:
        assert stores.scan(base) is None
        # moto refuses the connection; gcsfs retries that for about 30 s, past the bound.
        code = "UNAVAILABLE" if emulator.kind == "s3" else "DEADLINE_EXCEEDED"
        assert f"failed ({code})" in caplog.text
        assert "listing again in 1 s" in caplog.text
        assert f"listing {base} failed" in stores.problem(base)
        assert stores.scan(base) is None  # backing off: no request made
        clock.now += 1
        assert stores.scan(base) is None
        assert "listing again in 2 s" in caplog.text
    finally:
        emulator.start()
    clock.now += 2
    listing = stores.scan(base)
    assert listing is not None
    assert "can be listed again (after 2 failed tries)" in caplog.text
    stores.close()


def test_the_manager_swaps_versions_from_a_store_and_deletes_the_copies(
    emulator: Emulator, tmp_path: Path
) -> None:
    fs = emulator.filesystem()
    loaded: list[Path] = []

    def loader(directory: Path, version: int) -> Fake:
        assert (directory / "saved_model.pb").read_bytes() == TF2_GRAPH
        loaded.append(directory)
        return Fake(version)

    stores = ObjectStores(ModelCache(tmp_path / "cache"), env=emulator.env, settle=0)
    manager = Manager(loader, Metrics(), metadata.rest_answer, stores=stores)
    base = url_of(emulator, "swap/m")
    manager.apply(ServingConfig((ModelSpec("m", base),)), initial=True)
    put_files(fs, "models/swap/m/1", version_files())
    assert manager.initial_load(30, lambda: False) == ""
    assert (served(manager), states(manager)) == (1, {1: AVAILABLE})
    put_files(fs, "models/swap/m/2", version_files())
    assert manager.sync() == []
    assert served(manager) == 2
    assert states(manager) == {2: AVAILABLE, 1: END}
    manager.sync()  # the next poll deletes version 1's copy
    assert [p.exists() for p in loaded] == [False, True]
    manager.close()
    assert not any(p.exists() for p in loaded)
    assert os.listdir(tmp_path / "cache") == [DIRECTORY_LOCK]  # (the directory's own lock)


def test_with_policy_all_a_version_removed_from_the_store_is_unloaded(
    emulator: Emulator, tmp_path: Path
) -> None:
    fs = emulator.filesystem()
    stores = ObjectStores(ModelCache(tmp_path / "cache"), env=emulator.env, settle=0)
    manager = Manager(lambda d, v: Fake(v), Metrics(), metadata.rest_answer, stores=stores)
    base = url_of(emulator, "all/m")
    manager.apply(ServingConfig((ModelSpec("m", base, All()),)), initial=True)
    put_files(fs, "models/all/m/1", version_files())
    put_files(fs, "models/all/m/2", version_files())
    assert manager.initial_load(30, lambda: False) == ""
    assert states(manager) == {1: AVAILABLE, 2: AVAILABLE}
    fs.rm("models/all/m/1", recursive=True)
    assert manager.sync() == []
    assert states(manager) == {1: END, 2: AVAILABLE}
    manager.sync()
    assert len(os.listdir(next((tmp_path / "cache").glob("tfe-cache-*")))) == 2  # lock, version 2
    manager.close()


def test_a_version_that_cannot_be_copied_fails_its_load_and_keeps_the_old_one(
    emulator: Emulator, tmp_path: Path
) -> None:
    fs = emulator.filesystem()
    stores = ObjectStores(ModelCache(tmp_path / "cache", limit=10_000), env=emulator.env, settle=0)
    manager = Manager(lambda d, v: Fake(v), Metrics(), metadata.rest_answer, stores=stores)
    base = url_of(emulator, "limit/m")
    manager.apply(ServingConfig((ModelSpec("m", base),)), initial=True)
    put_files(fs, "models/limit/m/1", version_files())
    assert manager.initial_load(30, lambda: False) == ""
    put_files(fs, "models/limit/m/2", {**version_files(), "assets/big": b"x" * 10_000})
    errors = manager.sync()
    assert len(errors) == 1
    assert "--model-cache-bytes" in errors[0]
    assert states(manager) == {2: END, 1: AVAILABLE}
    status = {s.version: s for s in manager.status(p.Route("status", "m"))}
    assert status[2].error_code == "RESOURCE_EXHAUSTED"
    assert LOADING not in states(manager).values()
    manager.close()


# ----------------------------------------------------------------------
# Object names that would be written outside the model cache


#: Each hostile name (below version 2) with the stores that keep it as written
#: (gcp-storage-emulator refuses `..` in names, and a name that is both a file and a
#: folder: it keeps objects as files on disk).
HOSTILE = {
    "up": ("../../../x", ("s3",)),
    "up-from-variables": ("variables/../../../../y", ("s3",)),
    "absolute": ("/{box}/z", ("s3", "gs")),
    "dot": ("./assets/dot", ("s3", "gs")),
    "double-slash": ("assets//double", ("s3", "gs")),
    "file-and-folder": ("variables", ("s3",)),
}


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_an_object_name_that_leaves_the_copy_fails_its_version_and_writes_nothing(
    emulator: Emulator, tmp_path: Path, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 2 holds a whole model plus one object named to escape the cache
    (`--model-cache-dir=BOX/cache`: `2/../../../x` would be BOX/x, `2//BOX/z` BOX/z):
    its load fails naming the object, version 1 keeps serving, nothing is written
    outside the cache, and the failure is counted."""
    template, kinds = HOSTILE[shape]
    if emulator.kind not in kinds:
        pytest.skip(f"{emulator.kind}'s emulator cannot hold the name {template!r}")
    box = tmp_path / "box"
    name = template.format(box=str(box).strip("/"))
    fs = emulator.filesystem()
    metrics = Metrics()
    stores = ObjectStores(ModelCache(box / "cache"), env=emulator.env, settle=0)
    manager = Manager(lambda d, v: Fake(v), metrics, metadata.rest_answer, stores=stores)
    base = url_of(emulator, f"hostile-{shape}/tr")
    manager.apply(ServingConfig((ModelSpec("m", base),)), initial=True)
    put_files(fs, f"models/hostile-{shape}/tr/1", version_files())
    assert manager.initial_load(30, lambda: False) == ""
    put_files(fs, f"models/hostile-{shape}/tr/2", version_files())
    key = f"hostile-{shape}/tr/2/{name}"
    put_raw(emulator, key, b"written by whoever can write to the bucket")
    assert key in stored_keys(emulator, f"hostile-{shape}/"), "the store changed the name"
    caplog.set_level(logging.INFO, "tf_entrypoint.serving")
    errors = manager.sync()
    assert len(errors) == 1, errors
    assert repr(f"{emulator.kind}://models/{key}") in errors[0]
    assert (served(manager), states(manager)) == (1, {2: END, 1: AVAILABLE})
    status = {s.version: s for s in manager.status(p.Route("status", "m"))}
    assert status[2].error_code == "INVALID_ARGUMENT"
    assert repr(f"{emulator.kind}://models/{key}") in status[2].error_message
    assert sample(metrics, "serving_model_loads_total", model="m", result="failure") == 1
    assert f"models/{key}" in caplog.text
    written = sorted(p.relative_to(box).as_posix() for p in box.rglob("*") if p.is_file())
    assert not [p for p in written if not p.startswith("cache/")], written
    manager.close()
    assert not [p for p in (box.rglob("*")) if p.is_file() and p.name != DIRECTORY_LOCK]


# ----------------------------------------------------------------------
# The sweep: every folder no running server holds, whatever its age

#: A server's start in a child process: makes its cache folder and a 1 MiB copy
#: in it (as a copy under way), says where, and waits to be killed.
_SERVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tf_entrypoint.serving.core.model_cache import ModelCache
    from tf_entrypoint.serving.core.model_specs import StoreURL

    local = ModelCache(Path(sys.argv[1])).reserve(StoreURL("s3", "b", "m/1"), 1 << 20)
    (local / "variables.data").write_bytes(b"x" * (1 << 20))
    print(local.parent, flush=True)
    time.sleep(600)
    """
)


class OtherServer:
    """Another server's process sharing the cache directory: alive until killed."""

    def __init__(self, root: Path) -> None:
        entrypoint = Path(__file__).parents[4] / "entrypoint"
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(root)],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(entrypoint)},
        )
        assert self.process.stdout is not None
        self.folder = Path(self.process.stdout.readline().decode().strip())
        assert self.folder.name.startswith("tfe-cache-"), self.folder

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


def folders(root: Path) -> list[Path]:
    return sorted(root.glob("tfe-cache-*"))


def test_a_copy_whose_server_was_killed_moments_ago_is_removed_at_start(tmp_path: Path) -> None:
    """A server SIGKILLed during a copy, and a new one started at once on the same
    directory: the new server's start (its first poll) removes the copy, however
    young, before any copy of its own."""
    root = tmp_path / "cache"
    killed = OtherServer(root)
    killed.kill()
    assert folders(root) == [killed.folder]
    manager = Manager(
        lambda d, v: Fake(v), Metrics(), metadata.rest_answer, stores=ObjectStores(ModelCache(root))
    )
    manager.apply(ServingConfig(()), initial=True)
    manager.sync()
    assert folders(root) == []
    manager.close()


def test_every_poll_sweeps_and_keeps_what_a_live_server_holds(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = ModelCache(root)
    ours = cache.reserve(StoreURL("s3", "b", "m/1"), 1)
    stores = ObjectStores(cache)
    stores.keep_only([ours])
    live = OtherServer(root)
    try:
        stores.keep_only([ours])  # a poll: the live server's folder is kept
        assert folders(root) == sorted([ours.parent, live.folder])
        killed = OtherServer(root)
        killed.kill()
        stores.keep_only([ours])  # the next poll: the killed one's is removed
        assert folders(root) == sorted([ours.parent, live.folder])
        assert not killed.folder.exists()
    finally:
        live.kill()
    stores.keep_only([ours])
    assert folders(root) == [ours.parent]
    assert ours.is_dir()
    stores.close()


def test_a_folder_being_made_is_never_taken_for_a_dead_servers(tmp_path: Path) -> None:
    """The race the cache directory's lock closes: a server holds that lock from
    making its folder to locking it, so a sweep meanwhile leaves the folder alone
    (it is swept once its maker is gone without ever locking it)."""
    root = tmp_path / "cache"
    root.mkdir()
    making = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(
            """
            import fcntl, os, sys, time
            fd = os.open(os.path.join(sys.argv[1], sys.argv[2]), os.O_CREAT | os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.mkdir(os.path.join(sys.argv[1], "tfe-cache-being-made"))
            print("made", flush=True)
            time.sleep(600)
            """
        ), str(root), DIRECTORY_LOCK],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert making.stdout is not None
    assert making.stdout.readline() == b"made\n"
    cache = ModelCache(root)
    try:
        cache.keep_only([])
        assert [f.name for f in folders(root)] == ["tfe-cache-being-made"]
    finally:
        making.kill()
        making.wait(30)
    cache.keep_only([])
    assert folders(root) == []
