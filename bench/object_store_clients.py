"""Object-store clients for reading SavedModels from s3:// and gs:// (issue 26), side by side.

Starts moto's S3 server and gcp-storage-emulator (in memory) on free
127.0.0.1 ports, uploads one SavedModel-shaped version to each
(saved_model.pb of 100 kB, variables/variables.index,
variables/variables.data-00000-of-00001 of --size-mib, three small assets
files), and measures each client arm:

* import: wall time of a fresh `python -c "import M"` less that of
  `python -c "pass"` (medians of --import-reps, arms interleaved);
* installed: the bytes of the client's distribution and of every dependency
  it pulls in that the model server's image does not already have (the names
  in requirements/cpu.lock: grpcio, protobuf, requests, urllib3, certifi, ...),
  summed from each dist-info RECORD of the bench venv; markers are evaluated
  for this interpreter, extras are not followed;
* list: one recursive listing of the version's prefix, a fresh client each
  time (no listing cache), median of --reps;
* download: the whole version to an empty local directory, the way the
  client's own API does it (s3fs/gcsfs: fs.get(recursive=True), whose
  transfers run concurrently; obstore: get_async of every object, gathered;
  google-cloud-storage: download_to_filename, one object after another),
  median of --reps, checked byte for byte (SHA-256) after the clock stops;
* peak RSS of the process that imported, listed and downloaded (VmHWM, read
  before the check), and
  its RSS once the client was made; client_ms is the worker's importing of
  the arm's modules and making of its client (modules warm in the page cache).

Every list and download runs in a fresh worker process and the arms take
turns, round by round, so all of them see the same minutes of this shared
machine. Both servers are Python emulators on the same host: the absolute
MB/s are the emulators', not the clouds'; what the arms share is the
server, so their differences are the clients'. obstore's GCSStore speaks
GCS's XML API, which gcp-storage-emulator does not serve: that arm is run
anyway and its error is recorded, not replaced by a number.

The runner writes OUT/object_store.json; the report renders its Markdown
table. Needs the bench venv (requirements/bench.lock): `make bench-object-store` runs
`python -m bench run object_store` there.
"""

# The clients, the emulators and packaging are imported late: only the bench venv has them.
# ruff: noqa: PLC0415

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.common import REPO, loadavg, log, now_iso

S3_BUCKET = "models-s3"
GCS_BUCKET = "models-gcs"
PREFIX = "models/resnet/1"
#: moto accepts any credentials; these only keep botocore and obstore from looking elsewhere.
MOTO_KEY = "testing"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": MOTO_KEY,
    "AWS_SECRET_ACCESS_KEY": MOTO_KEY,
    "AWS_DEFAULT_REGION": "us-east-1",
}
#: gcsfs's default ExtendedGcsFileSystem asks GCS's gRPC API for each bucket's type
#: (zonal/hierarchical) first; an emulator has no gRPC API, so each bucket waits 60 s.
GCS_ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


@dataclass(frozen=True)
class Arm:
    name: str
    store: str  # "s3" or "gcs"
    dist: str  # the distribution pip installs
    module: str  # what the server would import


ARMS = (
    Arm("obstore S3", "s3", "obstore", "obstore.store"),
    Arm("s3fs (fsspec)", "s3", "s3fs", "s3fs"),
    Arm("gcsfs (fsspec)", "gcs", "gcsfs", "gcsfs"),
    Arm("google-cloud-storage", "gcs", "google-cloud-storage", "google.cloud.storage"),
    Arm("obstore GCS", "gcs", "obstore", "obstore.store"),
    # The server's own store (serving/core/object_store.py) over the same clients:
    # its listing, and its copy in 16 MiB parts read 4 at a time instead of fs.get.
    Arm("server store S3 (s3fs, parts)", "s3", "s3fs", "s3fs"),
    Arm("server store GCS (gcsfs, parts)", "gcs", "gcsfs", "gcsfs"),
)

#: Distributions whose upkeep also matters: what the arms stand on, and TensorFlow's own
#: S3/GCS filesystems (tensorflow-io), the option the issue names first.
UPKEEP_TOO = (
    "fsspec", "boto3", "botocore", "aiobotocore", "google-auth",
    "tensorflow-io", "tensorflow-io-gcs-filesystem",
)  # fmt: skip


# --- the model ---------------------------------------------------------------------------


def model_files(size_mib: float) -> dict[str, bytes]:
    """A SavedModel-shaped version: relative path -> content (random, so nothing compresses)."""
    rng = random.Random(26)

    def blob(n: int) -> bytes:  # randbytes takes at most 2**31 bits at once
        return b"".join(rng.randbytes(min(1 << 24, n - i)) for i in range(0, n, 1 << 24))

    return {
        "saved_model.pb": blob(100 * 1024),
        "fingerprint.pb": blob(60),
        "variables/variables.index": blob(2 * 1024),
        "variables/variables.data-00000-of-00001": blob(int(size_mib * 1024 * 1024)),
        "assets/vocab.txt": b"".join(b"token%d\n" % i for i in range(2000)),
        "assets/labels.txt": b"".join(b"label%d\n" % i for i in range(1000)),
        "assets/README": b"made by bench/object_store_clients.py\n",
    }


def manifest(files: dict[str, bytes]) -> dict[str, str]:
    return {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}


# --- the emulators -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before serving")
        try:
            urllib.request.urlopen(url, timeout=2).close()  # noqa: S310 (a local http URL)
            return
        except urllib.error.HTTPError:
            return  # it answers: that is all we wait for
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


@contextmanager
def emulators(workdir: Path) -> Iterator[dict[str, str]]:
    """moto's S3 server and gcp-storage-emulator, each on a free port; stopped on exit."""
    bindir = Path(sys.executable).parent
    s3_port, gcs_port = free_port(), free_port()
    commands = {
        "s3": [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
        "gcs": [
            str(bindir / "gcp-storage-emulator"),
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(gcs_port),
            "--in-memory",
            "--quiet",
        ],
    }
    urls = {"s3": f"http://127.0.0.1:{s3_port}", "gcs": f"http://127.0.0.1:{gcs_port}"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for store, command in commands.items():
            logfile = (workdir / f"{store}-emulator.log").open("wb")
            procs[store] = subprocess.Popen(command, stdout=logfile, stderr=subprocess.STDOUT)
            logfile.close()
        _wait_http(urls["s3"] + "/", procs["s3"])
        _wait_http(urls["gcs"] + "/storage/v1/b", procs["gcs"])
        yield urls
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def upload(urls: dict[str, str], files: dict[str, bytes]) -> None:
    """Create both buckets and put the version under PREFIX (setup, not measured)."""
    import boto3  # type: ignore[import-untyped, import-not-found, unused-ignore]

    s3 = boto3.client(
        "s3", endpoint_url=urls["s3"], region_name="us-east-1",
        aws_access_key_id=MOTO_KEY, aws_secret_access_key=MOTO_KEY,
    )  # fmt: skip
    s3.create_bucket(Bucket=S3_BUCKET)
    for path, data in files.items():
        s3.put_object(Bucket=S3_BUCKET, Key=f"{PREFIX}/{path}", Body=data)
    # A neighbour that a listing of PREFIX must not return.
    s3.put_object(Bucket=S3_BUCKET, Key="models/resnet/10/saved_model.pb", Body=b"x")

    def gcs(method: str, url: str, body: bytes, ctype: str) -> None:
        headers = {"Content-Type": ctype}
        request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310
        urllib.request.urlopen(request, timeout=120).close()  # noqa: S310 (a local http URL)

    base = urls["gcs"]
    gcs("POST", f"{base}/storage/v1/b?project=bench", json.dumps({"name": GCS_BUCKET}).encode(),
        "application/json")  # fmt: skip
    for path, data in {**files, "../10/saved_model.pb": b"x"}.items():
        name = urllib.parse.quote(os.path.normpath(f"{PREFIX}/{path}"), safe="")
        gcs("POST", f"{base}/upload/storage/v1/b/{GCS_BUCKET}/o?uploadType=media&name={name}",
            data, "application/octet-stream")  # fmt: skip


# --- the worker: one arm, one fresh process ----------------------------------------------


def _vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


class Client:
    """One arm's client, made once per process and reused, as a server that polls would."""

    def list(self) -> list[str]:
        """The version's objects, relative to PREFIX, read from the store (no cache)."""
        raise NotImplementedError

    def download(self, dest: Path) -> None:
        raise NotImplementedError


def _relative(keys: list[str], root: str) -> list[str]:
    return sorted(key[len(root) + 1 :] for key in keys if key.startswith(root + "/"))


def make_client(arm: Arm, url: str) -> Client:
    """Import the arm's modules (only the bench venv has them) and make its client."""
    if arm.name.startswith("server store"):
        return _server_store(arm, url)
    if arm.dist == "obstore":
        return _obstore(arm, url)
    if arm.dist in ("s3fs", "gcsfs"):
        return _fsspec(arm, url)
    if arm.dist == "google-cloud-storage":
        return _google_cloud_storage(url)
    raise ValueError(f"unknown arm {arm.name!r}")


def _obstore(arm: Arm, url: str) -> Client:
    import obstore  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from obstore.store import GCSStore, S3Store  # type: ignore[import-untyped, import-not-found, unused-ignore]

    store: Any
    if arm.store == "s3":
        store = S3Store(
            S3_BUCKET, endpoint=url, region="us-east-1",
            access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY,
            client_options={"allow_http": True},
        )  # fmt: skip
    else:
        store = GCSStore(
            GCS_BUCKET, config={"base_url": url, "skip_signature": True},
            client_options={"allow_http": True},
        )  # fmt: skip

    def keys() -> list[str]:
        return [meta["path"] for batch in obstore.list(store, PREFIX + "/") for meta in batch]

    async def fetch(key: str, dest: Path) -> None:
        target = dest / key[len(PREFIX) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        response = await obstore.get_async(store, key)
        with target.open("wb") as out:
            async for chunk in response.stream():
                out.write(chunk)

    async def fetch_all(dest: Path) -> None:
        await asyncio.gather(*(fetch(key, dest) for key in keys()))

    class Obstore(Client):
        def list(self) -> list[str]:
            return _relative(keys(), PREFIX)

        def download(self, dest: Path) -> None:
            asyncio.run(fetch_all(dest))

    return Obstore()


def _server_store(arm: Arm, url: str) -> Client:
    sys.path.insert(0, str(REPO / "entrypoint"))
    from tf_entrypoint.serving.core.model_cache import ModelCache
    from tf_entrypoint.serving.core.object_store import ObjectStores, parse_url

    if arm.store == "s3":
        env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": MOTO_KEY,
               "AWS_SECRET_ACCESS_KEY": MOTO_KEY, "AWS_REGION": "us-east-1"}  # fmt: skip
        found = parse_url(f"s3://{S3_BUCKET}/{PREFIX}")
    else:
        env = {"STORAGE_EMULATOR_HOST": url}
        found = parse_url(f"gs://{GCS_BUCKET}/{PREFIX}")
    assert found is not None
    version = found
    stores = ObjectStores(ModelCache(Path(tempfile.mkdtemp())), env=env)

    class ServerStore(Client):
        def list(self) -> list[str]:
            return sorted(stores._list(version))

        def download(self, dest: Path) -> None:
            stores._copy(version, stores._list(version), dest)

    return ServerStore()


def _fsspec(arm: Arm, url: str) -> Client:
    fs: Any
    if arm.store == "s3":
        import s3fs  # type: ignore[import-untyped, import-not-found, unused-ignore]

        root = f"{S3_BUCKET}/{PREFIX}"
        fs = s3fs.S3FileSystem(
            key=MOTO_KEY, secret=MOTO_KEY, endpoint_url=url,
            client_kwargs={"region_name": "us-east-1"}, skip_instance_cache=True,
        )  # fmt: skip
    else:
        import gcsfs  # type: ignore[import-untyped, import-not-found, unused-ignore]

        root = f"{GCS_BUCKET}/{PREFIX}"
        fs = gcsfs.GCSFileSystem(
            project="bench",
            token="anon",  # noqa: S106 (no credentials: the emulator takes none)
            endpoint_url=url,
            skip_instance_cache=True,
        )

    class Fsspec(Client):
        def list(self) -> list[str]:
            fs.invalidate_cache()  # a poll must see the store, not fsspec's listing cache
            return _relative(list(fs.find(root)), root)

        def download(self, dest: Path) -> None:
            fs.get(root + "/", str(dest) + "/", recursive=True)

    return Fsspec()


def _google_cloud_storage(url: str) -> Client:
    from google.auth.credentials import AnonymousCredentials  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from google.cloud import storage  # type: ignore[import-untyped, import-not-found, unused-ignore]

    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call, unused-ignore]
    client = storage.Client(
        project="bench", credentials=anonymous, client_options={"api_endpoint": url}
    )

    class Gcs(Client):
        def list(self) -> list[str]:
            blobs = client.list_blobs(GCS_BUCKET, prefix=PREFIX + "/")
            return _relative([blob.name for blob in blobs], PREFIX)

        def download(self, dest: Path) -> None:
            for blob in client.list_blobs(GCS_BUCKET, prefix=PREFIX + "/"):
                target = dest / blob.name[len(PREFIX) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                blob.download_to_filename(str(target))

    return Gcs()


def worker(arm: Arm, url: str, lists: int, dest: Path, expected: dict[str, str]) -> dict[str, Any]:
    """In a fresh process: make the client, list `lists` times, download once, check."""
    result: dict[str, Any] = {"arm": arm.name}
    try:
        started = time.perf_counter()
        client = make_client(arm, url)
        result["client_s"] = time.perf_counter() - started
        result["rss_after_import_kib"] = _vm_hwm_kib()
        times = []
        for _ in range(lists):
            started = time.perf_counter()
            listed = client.list()
            times.append(time.perf_counter() - started)
            if listed != sorted(expected):
                raise RuntimeError(f"listed {listed}, expected {sorted(expected)}")
        result["list_s"] = times
        started = time.perf_counter()
        client.download(dest)
        result["download_s"] = time.perf_counter() - started
        result["peak_rss_kib"] = _vm_hwm_kib()  # before the check, which reads the files
        got = {str(p.relative_to(dest)): sha256(p) for p in dest.rglob("*") if p.is_file()}
        if got != expected:
            raise RuntimeError(f"downloaded {sorted(got)} do not match the version")
        result["bytes"] = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    except Exception as error:  # noqa: BLE001 (an arm's failure is a result)
        result["error"] = f"{type(error).__name__}: {str(error).strip()[:400]}"
    result.setdefault("peak_rss_kib", _vm_hwm_kib())
    return result


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- the driver --------------------------------------------------------------------------


def arm_env(arm: Arm, url: str) -> dict[str, str]:
    env = {**os.environ, **AWS_ENV, **GCS_ENV}
    if arm.store == "gcs":
        env["STORAGE_EMULATOR_HOST"] = url
    return env


def run_worker(arm: Arm, url: str, lists: int, expected: dict[str, str], tmp: Path) -> Any:
    dest = Path(tempfile.mkdtemp(dir=tmp))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.object_store_clients", "--worker", arm.name,
             "--url", url, "--lists", str(lists), "--dest", str(dest)],
            input=json.dumps(expected), capture_output=True, text=True, timeout=600,
            env=arm_env(arm, url), cwd=REPO, check=False,
        )  # fmt: skip
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    if done.returncode != 0:
        return {"arm": arm.name, "error": f"worker exited {done.returncode}: {done.stderr[-300:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def import_times(reps: int) -> dict[str, float]:
    """Median wall of `python -c "import M"` less that of `python -c "pass"`, interleaved."""
    modules = sorted({arm.module for arm in ARMS if _importable(arm.module)})
    walls: dict[str, list[float]] = {m: [] for m in [*modules, ""]}
    for rep in range(reps):
        order = [*modules, ""]
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for module in order:
            code = f"import {module}" if module else "pass"
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, **GCS_ENV})
            walls[module].append(time.perf_counter() - started)
    bare = statistics.median(walls.pop(""))
    return {m: max(0.0, statistics.median(w) - bare) for m, w in walls.items()}


def _name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


#: The clients the server image itself installs for object storage (requirements/serving.in).
SERVER_STORE_CLIENTS = frozenset({"s3fs", "gcsfs"})


def server_packages(lock: Path) -> set[str]:
    """Distribution names pinned in a hashed lock (the server image's packages), less
    the object-store clients and what only they bring in (read from the lock's
    `# via` comments), so that a client's size counts what it adds to the server."""
    via: dict[str, set[str]] = {}
    name = ""
    for line in lock.read_text().splitlines():
        if line[:1].isalnum() and "==" in line:
            name = normalize(line.split("==")[0])
            via[name] = set()
        elif name and line.strip().startswith("#"):
            text = line.strip().lstrip("#").strip()
            parent = text.removeprefix("via").strip()
            if parent and not parent.startswith("-r"):
                via[name].add(normalize(parent.split()[0]))
            elif parent.startswith("-r"):
                via[name].add("-r")
    only_stores = set(SERVER_STORE_CLIENTS)
    while True:
        more = {n for n, parents in via.items() if parents and parents <= only_stores} - only_stores
        if not more:
            return set(via) - only_stores
        only_stores |= more


def dependency_closure(dist: str, have: set[str]) -> list[str]:
    """dist and what it requires (markers for this interpreter, no extras), less `have`."""
    from packaging.requirements import Requirement

    seen: list[str] = []
    todo = [dist]
    while todo:
        name = normalize(todo.pop())
        if name in have or name in seen:
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (a --quick run outside the bench venv)
        seen.append(name)
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def record_bytes(dist: str) -> int:
    """The installed size of one distribution: the sizes its RECORD lists."""
    files = metadata.distribution(dist).files or []
    return sum(f.size or 0 for f in files)


def installed(dists: list[str], have: set[str]) -> dict[str, Any]:
    names = list(dict.fromkeys(n for dist in dists for n in dependency_closure(dist, have)))
    sizes = {name: record_bytes(name) for name in names}
    return {
        "bytes": sum(sizes.values()),
        "distributions": dict(sorted(sizes.items(), key=lambda kv: -kv[1])),
    }


def upkeep(dists: list[str]) -> dict[str, Any]:
    """Newest release, its month and download rank (of PyPI's top 15000) from a local index."""
    table = Path("/work/.library/env/packages/pypi.tsv")
    out: dict[str, Any] = {}
    if not table.exists():
        return out
    wanted = {normalize(d) for d in dists}
    for line in table.read_text().splitlines()[1:]:
        cells = line.split("\t")
        if len(cells) >= 3 and normalize(cells[0]) in wanted:
            out[normalize(cells[0])] = {
                "version": cells[1],
                "month": cells[2],
                "download_rank": int(cells[3]) if len(cells) > 3 and cells[3] else None,
            }
    return out


def analyse(results: list[dict[str, Any]], size_bytes: int) -> dict[str, Any]:
    by_arm: dict[str, Any] = {}
    for arm in ARMS:
        mine = [r for r in results if r["arm"] == arm.name]
        ok = [r for r in mine if "error" not in r]
        cell: dict[str, Any] = {"runs": len(mine), "ok": len(ok)}
        if ok:
            download = statistics.median(r["download_s"] for r in ok)
            cell.update(
                first_list_ms=1000 * statistics.median(r["list_s"][0] for r in ok),
                list_ms=1000
                * statistics.median(t for r in ok for t in r["list_s"][1:] or r["list_s"]),
                download_s=download,
                client_ms=1000 * statistics.median(r["client_s"] for r in ok),
                download_mb_s=size_bytes / 1e6 / download,
                peak_rss_mib=statistics.median(r["peak_rss_kib"] for r in ok) / 1024,
                rss_after_import_mib=statistics.median(r["rss_after_import_kib"] for r in ok)
                / 1024,
            )
        errors = sorted({r["error"] for r in mine if "error" in r})
        if errors:
            cell["errors"] = errors
        by_arm[arm.name] = cell
    return by_arm


def short_error(error: str) -> str:
    """The request and the status of an HTTP failure, else the error's start."""
    request = re.search(r"(GET|PUT|POST|HEAD) (\S+)", error)
    status = re.search(r"status code: (\d{3}[A-Za-z ]*)", error)
    if request and status:
        query = urllib.parse.urlsplit(request.group(2)).query.split("&")[0]
        return f"{request.group(1)} ?{query} answered {status.group(1).strip()}"
    return error.replace("|", "/")[:90]


def table(data: dict[str, Any]) -> str:
    """Two Markdown tables: what each client costs to have, then what it does per size."""
    lines = [
        "| client | import | installed beyond the server's |",
        "|---|---|---|",
    ]
    for dist, module in {arm.dist: arm.module for arm in ARMS}.items():
        size = data["installed"][dist]["bytes"] / 1e6
        if module not in data["import_ms"]:  # not installed where it ran (a --quick smoke)
            lines.append(f"| {dist} | {NOT_INSTALLED} | |")
            continue
        lines.append(f"| {dist} | {data['import_ms'][module]:.0f} ms | {size:.1f} MB |")
    lines += [
        "",
        "| model | store | client | first list | list | download | MB/s "
        "| peak RSS (after import) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size in data["sizes"]:
        for arm in ARMS:
            cell = size["arms"][arm.name]
            head = f"| {size['bytes'] / 1e6:.0f} MB | {arm.store} | {arm.name} |"
            if cell.get("ok"):
                lines.append(
                    f"{head} {cell['first_list_ms']:.0f} ms | {cell['list_ms']:.0f} ms "
                    f"| {cell['download_s']:.2f} s | {cell['download_mb_s']:.0f} "
                    f"| {cell['peak_rss_mib']:.0f} MiB ({cell['rss_after_import_mib']:.0f}) |"
                )
            else:
                error = short_error(cell.get("errors", ["?"])[0])
                lines.append(f"{head} fails: {error} | - | - | - | - |")
    return "\n".join(lines)


def measure(size_mib: float, args: ObjectStoreConfig, tmp: Path) -> dict[str, Any]:
    """Fresh emulators holding one version with size_mib of variables; every arm, in turns."""
    files = model_files(size_mib)
    expected = manifest(files)
    size_bytes = sum(len(d) for d in files.values())
    results: list[dict[str, Any]] = []
    with emulators(tmp) as urls:
        log(f"emulators up: {urls}; uploading {size_bytes / 1e6:.1f} MB to each")
        upload(urls, files)
        del files
        for rep in range(args.reps):
            for arm in ARMS[rep % len(ARMS) :] + ARMS[: rep % len(ARMS)]:
                if arm.name == "obstore GCS" and rep > 0:
                    continue  # its failure is deterministic: once is the record
                if not _importable(arm.module):  # only where args.missing_arms allows it
                    results.append({"arm": arm.name, "rep": rep, "error": NOT_INSTALLED})
                    continue
                result = run_worker(arm, urls[arm.store], args.lists, expected, tmp)
                result["rep"] = rep
                log(f"{size_mib:g} MiB rep {rep} {arm.name}: " + json.dumps(
                    {k: v for k, v in result.items() if k not in ("arm", "rep")}))  # fmt: skip
                results.append(result)
    return {
        "variables_data_mib": size_mib,
        "bytes": size_bytes,
        "files": sorted(expected),
        "arms": analyse(results, size_bytes),
        "runs": results,
    }


def run(args: ObjectStoreConfig) -> dict[str, Any]:
    have = server_packages(REPO / "requirements" / "cpu.lock")
    load_before = loadavg()
    log("import times")
    imports = import_times(args.import_reps)
    with tempfile.TemporaryDirectory(prefix="bench-objstore-") as tmpdir:
        sizes = [measure(size, args, Path(tmpdir)) for size in args.size_mib]
    dists = sorted({arm.dist for arm in ARMS})
    versions = {d: _version(d) for d in [*dists, "fsspec", "moto", "gcp-storage-emulator"]}
    return {
        "bench": "object_store_clients",
        "date": now_iso(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": loadavg(),
        "reps": args.reps,
        "lists_per_run": args.lists,
        "import_reps": args.import_reps,
        "versions": versions,
        "server_packages_from": "requirements/cpu.lock",
        "import_ms": {m: 1000 * s for m, s in imports.items()},
        "installed": {d: installed([d], have) for d in dists},
        # What each choice installs for both schemes together.
        "installed_for_s3_and_gcs": {
            "s3fs + gcsfs": installed(["s3fs", "gcsfs"], have)["bytes"],
            "s3fs + google-cloud-storage": installed(["s3fs", "google-cloud-storage"], have)[
                "bytes"
            ],
            "obstore": installed(["obstore"], have)["bytes"],
        },
        "upkeep_pypi": upkeep([*dists, *UPKEEP_TOO]),
        "sizes": sizes,
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


NOT_INSTALLED = "not installed in this venv"
#: What the driver itself needs besides the arms' modules.
NEEDED = ("boto3", "moto.server", "gcp_storage_emulator", "packaging.requirements")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a missing parent package
        return False


@dataclass(frozen=True)
class ObjectStoreConfig:
    size_mib: tuple[float, ...] = (64.0, 256.0)  # variables data, one model (and emulators) each
    reps: int = 5  # download runs per arm
    lists: int = 3  # listings per run
    import_reps: int = 7  # imports per module
    #: Record an arm whose client is not installed as failed ("not installed in this
    #: venv") instead of refusing to run: the smoke, in the dev venv. Never for figures.
    missing_arms: bool = False

    def __post_init__(self) -> None:
        if min(*self.size_mib, self.reps, self.lists, self.import_reps) <= 0:
            raise ValueError("size_mib, reps, lists, import_reps must be positive")


def missing() -> list[str]:
    """The modules this needs that are not importable here (they are in the bench venv)."""
    return [m for m in sorted({*(a.module for a in ARMS), *NEEDED}) if not _importable(m)]


def run_all(config: ObjectStoreConfig) -> dict[str, Any]:
    """Every arm at every size, against fresh emulators (`python -m bench run object_store`)."""
    absent = [m for m in missing() if m in NEEDED or not config.missing_arms]
    if absent:
        raise RuntimeError(
            f"{', '.join(absent)} missing: this needs the bench venv (requirements/bench.lock)"
        )
    return run(config)  # python -m bench turns SIGTERM into SystemExit: the emulators stop


def main(argv: list[str]) -> int:
    """A worker process of one arm (run_worker starts it): `--worker ARM --url URL --dest DIR`,
    the expected hashes on stdin; prints one JSON line."""
    values = dict(zip(argv[::2], argv[1::2], strict=True))
    arm = next(a for a in ARMS if a.name == values["--worker"])
    expected = json.loads(sys.stdin.read())
    print(
        json.dumps(
            worker(arm, values["--url"], int(values["--lists"]), Path(values["--dest"]), expected)
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
