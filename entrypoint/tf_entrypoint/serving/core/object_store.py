"""Models in object storage: `s3://` and `gs://` model paths (docs/object-storage.md).

TF Serving reads a model path from any TensorFlow file system; this server
reads local directories (``repository.py``) and, here, object stores through
fsspec's file systems (s3fs for `s3://`, gcsfs for `gs://`; `az://` and
`abfs://` with adlfs, which the images do not include). What they add to the
manager's work, on its one thread:

- **Listing**: one recursive listing of the model's prefix per poll
  (:meth:`ObjectStores.scan`) gives every version and every file in it.
  A listing that fails (the bucket missing, access denied, the store down) is
  logged with the store's reason and retried with back-off (1 s doubling to
  60 s); meanwhile the loaded versions keep serving.
- **When a version is complete** (``store_rules.incomplete``): object stores have no
  atomic rename, so a version is loaded only once (1) it holds
  saved_model.pb (or .pbtxt); (2) its checkpoint is whole: when it has any
  `variables/` object, or its graph restores one (the MetaGraphDef has a
  SaverDef: every TF2 export, a TF1 export with variables), then
  `variables/variables.index` and every `variables.data-I-of-N` shard are
  there; and (3) its files (names, sizes, ETags) have not changed for
  :data:`SETTLE_SECONDS`. So a version uploaded in any order is never loaded
  half done: graph first (the checkpoint is awaited), checkpoint first (the
  graph is awaited), assets last (the settling time).
- **A local copy** (:class:`ModelCache`): TensorFlow loads from a directory,
  so a version is copied into the cache (`--model-cache-dir`, default
  `$TMPDIR/tf-entrypoint-models`: writable with the images' read-only root),
  checked against the listing, loaded, and deleted once the version is
  unloaded or its load failed. Each object goes to the path its name gives
  below the version, so every name is checked first (``store_rules.check_names``:
  no absolute path, no empty, `.` or `..` segment, no file that is also a
  folder) and every target resolved inside the copy: a bucket's writer
  cannot write outside the cache. `--model-cache-bytes` bounds the cache; a
  copy that would not fit (or does not fit the disk) fails its load with
  RESOURCE_EXHAUSTED naming the limit, before a byte is copied.

Credentials come from each client's standard chain (botocore's: the
environment, ~/.aws files, web identity (IRSA), ECS/EKS, IMDS; Google's
application default credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud's
file, the metadata server and workload identity). Endpoints from the
variables users already set: AWS_ENDPOINT_URL(_S3), TensorFlow's
S3_ENDPOINT / S3_USE_HTTPS / S3_VERIFY_SSL, STORAGE_EMULATOR_HOST.

Every call here does network I/O: only the manager's thread calls it, never
under the lock requests take.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tf_entrypoint.common import FALSE_WORDS
from tf_entrypoint.serving.core import repository, store_rules
from tf_entrypoint.serving.core.model_cache import ModelCache
from tf_entrypoint.serving.core.model_specs import StoreURL
from tf_entrypoint.serving.core.repository import Found, Identity, Listing
from tf_entrypoint.serving.core.store_rules import Obj

log = logging.getLogger("tf_entrypoint.serving")

#: URL scheme -> the Python package that reads it (fsspec's implementation).
SCHEMES = {"s3": "s3fs", "gs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}
#: The schemes the images can read as built (the others need their package added).
IN_IMAGES = ("s3", "gs")
#: How long a version's files must stay the same before it is loaded.
SETTLE_SECONDS = 1.0
#: Back-off between listings of a store that failed: 1 s doubling up to this.
MAX_BACKOFF_SECONDS = 60.0
#: A copy reads this many parts of PART_BYTES at once (memory: their product).
COPY_THREADS = 4
PART_BYTES = 16 * 1024 * 1024
#: Longest one listing may take before it counts as failed.
LIST_TIMEOUT_SECONDS = 10.0


def parse_url(text: str) -> StoreURL | None:
    """The StoreURL `text` names (`s3://bucket/a/b/`), None when it is no URL;
    ValueError naming what is wrong for a URL this server cannot read."""
    scheme, sep, rest = text.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return None
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        readable = ", ".join(f"{s}://" for s in SCHEMES)
        raise ValueError(
            f"{text!r}: {scheme}:// is not a model store this server reads (it reads local "
            f"directories and {readable}); mount it, or copy the model into a volume"
        )
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"{text!r} names no bucket: expected {scheme}://BUCKET/PATH/TO/MODEL")
    return StoreURL(scheme, bucket, key.strip("/"))


def _import_client(scheme: str) -> Any:
    """Import `scheme`'s client package (ImportError when it is not installed)."""
    if scheme == "gs":
        # gcsfs's default asks a gRPC control API for each bucket's layout
        # (hierarchical namespaces), which listing and reading do not need and
        # which an emulator does not answer (60 s per bucket): the plain JSON
        # API. Read when gcsfs is first imported, so set before any import.
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    return importlib.import_module(SCHEMES[scheme])


def check_client(scheme: str) -> str | None:
    """Why `scheme`'s client cannot be imported here, or None (it can)."""
    package = SCHEMES[scheme]
    try:
        _import_client(scheme)
    except ImportError as err:
        extra = "" if scheme in IN_IMAGES else " (the images do not include it)"
        return (
            f"{scheme}:// needs the Python package {package}{extra}: {err}; install it in "
            "the image (pip install " + package + ")"
        )
    return None


# ----------------------------------------------------------------------
# The clients


def s3_options(env: Mapping[str, str]) -> dict[str, Any]:
    """s3fs's options from the environment: AWS's variables (botocore reads most
    itself) and TensorFlow's S3_ENDPOINT, S3_USE_HTTPS and S3_VERIFY_SSL."""
    client: dict[str, Any] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    tf_endpoint = env.get("S3_ENDPOINT", "").strip()
    if not endpoint and tf_endpoint:
        https = env.get("S3_USE_HTTPS", "1").strip().lower() not in FALSE_WORDS
        endpoint = tf_endpoint if "://" in tf_endpoint else (
            f"{'https' if https else 'http'}://{tf_endpoint}"
        )  # fmt: skip
    if endpoint:
        client["endpoint_url"] = endpoint
    if env.get("S3_VERIFY_SSL", "1").strip().lower() in FALSE_WORDS:
        client["verify"] = False
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or env.get("S3_REGION")
    if region:
        client["region_name"] = region
    options: dict[str, Any] = {
        "client_kwargs": client,
        # botocore's and s3fs's retries multiply: two attempts each keep a store
        # that is down from holding the manager's thread for more than seconds.
        "config_kwargs": {
            "connect_timeout": 5,
            "read_timeout": 60,
            "retries": {"max_attempts": 2, "mode": "standard"},
        },
        "use_listings_cache": False,
        "skip_instance_cache": True,
    }
    # botocore reads these itself from the process's environment; given when
    # `env` is another mapping (the rest of its chain: ~/.aws files, IRSA, IMDS).
    for name, option in (("AWS_ACCESS_KEY_ID", "key"), ("AWS_SECRET_ACCESS_KEY", "secret"),
                         ("AWS_SESSION_TOKEN", "token")):  # fmt: skip
        if env.get(name):
            options[option] = env[name]
    return options


def gcs_options(env: Mapping[str, str]) -> dict[str, Any]:
    """gcsfs's options: Google's default credentials, or none for an emulator
    (STORAGE_EMULATOR_HOST, which gcsfs reads for the endpoint)."""
    options: dict[str, Any] = {"use_listings_cache": False, "skip_instance_cache": True}
    emulator = env.get("STORAGE_EMULATOR_HOST", "").strip()
    if emulator:
        options["token"] = "anon"  # noqa: S105 - no credentials: emulators take none
        options["endpoint_url"] = emulator if "://" in emulator else f"http://{emulator}"
    return options


def open_filesystem(scheme: str, env: Mapping[str, str]) -> Any:
    """The fsspec file system for `scheme` (its package imported now)."""
    client = _import_client(scheme)
    if scheme == "s3":
        filesystem = client.S3FileSystem(**s3_options(env))
        filesystem.retries = 2  # s3fs's own retries (5 by default)
        return filesystem
    if scheme == "gs":
        return client.GCSFileSystem(**gcs_options(env))
    import fsspec  # noqa: PLC0415 - adlfs registers az:// and abfs:// with fsspec

    return fsspec.filesystem(scheme, skip_instance_cache=True, use_listings_cache=False)


def _tag(info: Mapping[str, Any]) -> str:
    for key in ("ETag", "etag", "generation", "md5Hash", "LastModified", "last_modified"):
        if info.get(key):
            return str(info[key])
    return ""


#: Words in a client's error -> the errno that says the same (for the status code).
_WORDS = (
    (("NoSuchBucket", "NoSuchKey", "Not Found", "404"), errno.ENOENT),
    (("AccessDenied", "Forbidden", "403", "401", "InvalidAccessKeyId", "SignatureDoes"),
     errno.EACCES),
    (("Timeout", "timed out"), errno.ETIMEDOUT),
    (("connect", "Connect"), errno.ECONNREFUSED),
)  # fmt: skip


def as_os_error(err: BaseException, where: str) -> OSError:
    """`err` from a store client as an OSError with an errno (for the status's code)
    and a message that keeps the client's words."""
    if isinstance(err, OSError) and err.errno in repository.KNOWN_ERRNOS and err.filename:
        return err  # ours (a timeout, the cache's limit): already says it all
    text = f"{type(err).__name__}: {err}".replace("\n", " ")
    if len(text) > 400:
        text = text[:400] + "..."
    if isinstance(err, FileNotFoundError):
        code = errno.ENOENT
    elif isinstance(err, PermissionError):
        code = errno.EACCES
    elif isinstance(err, OSError) and err.errno in repository.KNOWN_ERRNOS:
        code = err.errno
    else:
        code = next((c for words, c in _WORDS if any(w in text for w in words)), errno.EIO)
    return OSError(code, text, where)


# ----------------------------------------------------------------------
# The stores


@dataclass
class _Watch:
    """What the manager knows of one model prefix between polls."""

    failures: int = 0
    retry_at: float = 0.0
    #: The last listing's error, or why its versions are not complete ("" none).
    problem: str = ""


class ObjectStores:
    """Listing, completeness and copies for every model in object storage.

    `open_fs`: scheme -> file system (tests pass their own); `env` the
    variables that pick endpoints and credentials.
    """

    def __init__(
        self,
        cache: ModelCache,
        *,
        env: Mapping[str, str] | None = None,
        open_fs: Callable[[str, Mapping[str, str]], Any] = open_filesystem,
        settle: float = SETTLE_SECONDS,
        list_timeout: float = LIST_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_graph_bytes: int = 0,
    ) -> None:
        self.cache = cache
        #: --max-graph-bytes: a larger graph is never read to judge completeness (0: no limit).
        self._max_graph_bytes = max_graph_bytes
        self._env = os.environ if env is None else env
        self._open_fs = open_fs
        self._settle = settle
        self._list_timeout = list_timeout
        self._clock = clock
        self._filesystems: dict[str, Any] = {}
        self._watches: dict[StoreURL, _Watch] = {}
        #: Version -> its files at the last listing.
        self._files: dict[StoreURL, dict[str, Obj]] = {}
        #: Version -> (identity first seen, when): the settling clock.
        self._seen: dict[StoreURL, tuple[Identity, float]] = {}
        #: (saved_model.pb's URL, tag) -> whether it restores a checkpoint.
        self._restores: dict[tuple[str, str], bool] = {}
        #: Versions whose "not complete" reason was logged, with it.
        self._told: dict[StoreURL, str] = {}

    def _fs(self, scheme: str) -> Any:
        if scheme not in self._filesystems:
            self._filesystems[scheme] = self._open_fs(scheme, self._env)
        return self._filesystems[scheme]

    @staticmethod
    def _root(url: StoreURL) -> str:
        return f"{url.bucket}/{url.key}" if url.key else url.bucket

    def _list(self, url: StoreURL) -> dict[str, Obj]:
        """Every object below `url`: its path relative to `url` -> (size, tag)."""
        fs = self._fs(url.scheme)
        fs.invalidate_cache()
        root = self._root(url)
        # A bound on the manager thread's wait: clients retry a store that is
        # down for long (gcsfs: about 30 s); the listing is tried again later.
        try:
            found = fs.find(root, detail=True, timeout=self._list_timeout)
        except Exception as err:
            if type(err).__name__ == "FSTimeoutError":
                raise OSError(
                    errno.ETIMEDOUT, f"no answer within {self._list_timeout:g} s", str(url)
                ) from err
            raise
        objects: dict[str, Obj] = {}
        for path, info in found.items():
            if not path.startswith(f"{root}/"):
                continue  # (a client that matches `models/m2` for `models/m`)
            relative = path[len(root) + 1 :]
            if relative and info.get("type", "file") != "directory" and not relative.endswith("/"):
                objects[relative] = (int(info.get("size") or 0), _tag(info))
        return objects

    def problem(self, base: StoreURL) -> str:
        """Why `base` has no version to load, as far as the last listing told ("" none)."""
        watch = self._watches.get(base)
        return watch.problem if watch else ""

    def scan(self, base: StoreURL) -> Listing | None:
        """The complete versions below `base`; None when it cannot be listed now
        (the error is logged; the next try backs off)."""
        watch = self._watches.setdefault(base, _Watch())
        now = self._clock()
        if now < watch.retry_at:
            return None
        try:
            # (a version whose graph must be read to judge it reads it here too)
            listing = self._versions(base, watch, self._list(base), now)
        except Exception as err:  # noqa: BLE001 - any client error: logged, retried
            self._listing_failed(base, watch, as_os_error(err, str(base)))
            return None
        if watch.failures:
            log.info("%s can be listed again (after %d failed tries)", base, watch.failures)
        watch.failures, watch.retry_at = 0, 0.0
        return listing

    def _listing_failed(self, base: StoreURL, watch: _Watch, err: OSError) -> None:
        watch.failures += 1
        backoff = min(MAX_BACKOFF_SECONDS, 2.0 ** (watch.failures - 1))
        watch.retry_at = self._clock() + backoff
        reason = repository.describe(err)
        watch.problem = f"listing {base} failed: {reason}"
        log.error(
            "listing %s failed (%s): %s; keeping what is loaded, listing again in %g s",
            base,
            repository.error_code(err).name,
            reason,
            backoff,
        )

    def _versions(
        self, base: StoreURL, watch: _Watch, objects: Mapping[str, Obj], now: float
    ) -> Listing:
        groups: dict[str, dict[str, Obj]] = {}
        for relative, obj in objects.items():
            head, sep, rest = relative.partition("/")
            groups.setdefault(head if sep else "", {})[rest if sep else relative] = obj
        found: dict[int, Found] = {}
        too_large: list[str] = []
        waiting: list[str] = []
        for name in sorted(groups):
            if not (name.isascii() and name.isdigit()):
                continue
            number = repository.version_number(name)
            if number is None:
                too_large.append(name)
                continue
            if number in found and found[number].path.name == str(number):
                continue
            why = self._check(base / name, groups[name], now)
            if why:
                waiting.append(f"version {name}: {why}")
                continue
            found[number] = Found(base / name)
        root_export = any(n in objects for n in repository.SAVED_MODEL_FILES)
        if not found and not too_large and root_export:
            # As locally: an export written straight into the model's prefix is version 1.
            why = self._check(base, dict(objects), now)
            if why:
                waiting.append(f"the export at its root: {why}")
            else:
                found[repository.ROOT_VERSION] = Found(base)
        watch.problem = "; ".join(waiting)
        return Listing(found, tuple(too_large))

    def _check(self, url: StoreURL, files: dict[str, Obj], now: float) -> str:
        """Why version `url` is not complete (and logs it once), or ""."""
        why = store_rules.incomplete(files, lambda: self._restores_checkpoint(url, files))
        ident = _identity(files)
        if why is None:
            first = self._seen.get(url)
            if first is None or first[0] != ident:
                self._seen[url] = (ident, now)
                first = (ident, now)
            if now - first[1] >= self._settle:
                self._files[url] = files
                if self._told.pop(url, None):
                    log.info("%s is complete: loading it", url)
                return ""
            why = f"its files changed less than {self._settle:g} s ago"
        else:
            self._seen.pop(url, None)
        if self._told.get(url) != why:
            self._told[url] = why
            log.info("%s is not complete yet (%s): waiting", url, why)
        return why

    def _restores_checkpoint(self, url: StoreURL, files: Mapping[str, Obj]) -> bool:
        name = next(n for n in repository.SAVED_MODEL_FILES if n in files)
        size, tag = files[name]
        if self._max_graph_bytes and size > self._max_graph_bytes:
            # Not read (it could be gigabytes): complete, so its load fails naming the limit.
            return False
        key = (f"{url}/{name}", tag)
        if key not in self._restores:
            graph = self._fs(url.scheme).cat_file(f"{self._root(url)}/{name}")
            self._restores[key] = store_rules.restores_checkpoint(bytes(graph), name)
        return self._restores[key]

    def identity(self, url: StoreURL) -> Identity | None:
        """The version's identity at the last listing (no I/O); None if not seen."""
        files = self._files.get(url)
        return None if files is None else _identity(files)

    def fetch(self, url: StoreURL) -> Path:
        """Copy version `url` (its files as last listed) into the cache; the local
        directory. OSError when it cannot (the copy is deleted)."""
        files = self._files.get(url)
        if files is None:
            raise OSError(errno.ENOENT, "not listed (yet)", str(url))
        store_rules.check_names(url, files)  # before a byte is written
        local = self.cache.reserve(url, sum(size for size, _ in files.values()))
        try:
            self._copy(url, files, local)
        except BaseException as err:
            self.cache.release(local)
            if isinstance(err, OSError) and err.errno in repository.KNOWN_ERRNOS:
                raise
            if isinstance(err, Exception):
                raise as_os_error(err, str(url)) from err
            raise
        return local

    def _copy(self, url: StoreURL, files: Mapping[str, Obj], local: Path) -> None:
        """Copy `files` into `local` in parts read in parallel: at most COPY_THREADS x
        PART_BYTES of it in memory whatever the files' sizes (fsspec's `get`
        holds about a whole file: measured in docs/benchmarks.md)."""
        fs = self._fs(url.scheme)
        root = self._root(url)
        parts: list[tuple[str, Path, int, int]] = []
        for name, (size, _) in sorted(files.items()):
            target = store_rules.target(local, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            store_rules.target(local, name)  # (its folders made: no link leads out either)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
            parts.extend(
                (f"{root}/{name}", target, start, min(size, start + PART_BYTES))
                for start in range(0, size, PART_BYTES)
            )
        with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="model-copy") as pool:
            futures = [pool.submit(_copy_part, fs, *part) for part in parts]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        if _identity(self._list(url)) != _identity(files):
            raise OSError(
                errno.EAGAIN,
                "its files changed while they were copied: copied again on its next load",
                str(url),
            )

    def keep_only(self, wanted: Iterable[Path]) -> None:
        self.cache.keep_only(wanted)

    def close(self) -> None:
        self.cache.close()


def _copy_part(fs: Any, remote: str, target: Path, start: int, end: int) -> None:
    data = fs.cat_file(remote, start=start, end=end)
    if len(data) != end - start:
        raise OSError(
            errno.EAGAIN,
            f"changed while it was copied (bytes {start:,}-{end:,} of its listed size gave "
            f"{len(data):,}): copied again on its next load",
            remote,
        )
    fd = os.open(target, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.pwrite(fd, data, start)
    finally:
        os.close(fd)


def _identity(files: Mapping[str, Obj]) -> Identity:
    return (hash(tuple(sorted(files.items()))),)
