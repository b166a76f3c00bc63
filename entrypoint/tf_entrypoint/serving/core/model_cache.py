"""The model cache: local copies of versions read from object storage, bounded in size.

TensorFlow loads a SavedModel from a directory, so ``object_store.py``
copies a version here before it loads and the manager deletes the copy
once the version is unloaded or its load failed (docs/object-storage.md).

Several servers may share the directory, and a server killed (SIGKILL, the
OOM killer, a node's restart) leaves its copies behind. Each server copies
into its own `tfe-cache-*` folder and holds an flock on the folder's
`.lock` for as long as it lives; the kernel drops the lock when the process
dies, so "no process holds its lock" is exactly "its server is gone",
whatever the folder's age. The sweep (:meth:`ModelCache.sweep`, at start
and at every poll) removes the folders nobody holds.

The one race: a folder made but not yet locked looks like a dead server's.
So a folder is made and locked while holding the cache directory's own
lock (`.tfe-cache.lock`, never removed), and a sweep judges folders while
holding it too: a sweep never sees a folder between its creation and its
lock. A folder without `.lock` under that lock is a server's that died
while making it. Stale folders are renamed to `.tfe-trash-*` under the lock
(so no two sweeps judge them) and deleted after it is released.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tf_entrypoint.serving.core.model_specs import StoreURL

log = logging.getLogger("tf_entrypoint.serving")

#: Where local copies go by default (below $TMPDIR, writable in the images).
DEFAULT_CACHE_DIR = Path(tempfile.gettempdir()) / "tf-entrypoint-models"
#: Each server's folder (with its `.lock`), and what a sweep renames a stale one to.
FOLDER_PREFIX = "tfe-cache-"
TRASH_PREFIX = ".tfe-trash-"
#: The cache directory's lock: held while a folder is made and locked, and while a sweep judges.
DIRECTORY_LOCK = ".tfe-cache.lock"
#: How long a server waits for the directory's lock before its first copy (a
#: sweep does not wait: it skips and sweeps at the next poll).
CREATE_WAIT_SECONDS = 30.0


class ModelCache:
    """Local copies of versions read from object storage, bounded in size.

    The directory (`root`) may be shared by several servers and survives a
    crashed one (an emptyDir survives its container's restarts): each
    process copies into its own `tfe-cache-*` directory, holding an flock on
    it, and removes the others' that no live process holds (module docstring).
    """

    def __init__(self, root: Path = DEFAULT_CACHE_DIR, limit: int = 0) -> None:
        self.root = root
        #: Most bytes held at once (0: what the file system has free).
        self.limit = limit
        self._own: Path | None = None
        self._lock_fd: int | None = None
        #: Local copy -> its bytes.
        self._held: dict[Path, int] = {}
        self._count = 0
        #: The last sweep's failure, logged once until it changes.
        self._sweep_error = ""

    @property
    def used(self) -> int:
        return sum(self._held.values())

    @contextlib.contextmanager
    def _directory_lock(self, wait: float) -> Iterator[bool]:
        """Hold the cache directory's lock; yields False when another process held
        it for `wait` seconds (it is not held then)."""
        fd = os.open(self.root / DIRECTORY_LOCK, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        try:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.01)
            yield True
        finally:
            os.close(fd)  # (closing it releases the lock)

    def _directory(self) -> Path:
        if self._own is None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.sweep()
            with self._directory_lock(CREATE_WAIT_SECONDS) as held:
                if not held:
                    raise OSError(
                        errno.EAGAIN,
                        f"another process held the model cache's lock ({DIRECTORY_LOCK}) for "
                        f"{CREATE_WAIT_SECONDS:g} s",
                        str(self.root),
                    )
                own = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=self.root))
                try:
                    fd = os.open(own / ".lock", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BaseException:
                    shutil.rmtree(own, ignore_errors=True)
                    raise
            self._own, self._lock_fd = own, fd
        return self._own

    def sweep(self) -> None:
        """Remove every `tfe-cache-*` folder no running process holds (at start and
        at every poll); never raises (a failure is logged once)."""
        try:
            stale = self._stale()
            for trash in self.root.glob(f"{TRASH_PREFIX}*"):
                shutil.rmtree(trash, ignore_errors=True)
        except FileNotFoundError:
            return  # no cache directory yet: nothing to sweep
        except OSError as err:
            if str(err) != self._sweep_error:
                self._sweep_error = str(err)
                log.warning("sweeping the model cache %s failed: %s", self.root, err)
            return
        self._sweep_error = ""
        for name in stale:
            log.info(
                "removed %s: a model cache no running server holds (a crashed server's)",
                self.root / name,
            )

    def _stale(self) -> list[str]:
        """Rename the folders no process holds to `.tfe-trash-*`; their names."""
        if not self.root.is_dir():
            return []
        stale: list[str] = []
        with self._directory_lock(0.5) as held:
            if not held:
                return []  # a server is making its folder: at the next poll
            for entry in self.root.iterdir():
                if not entry.name.startswith(FOLDER_PREFIX) or entry == self._own:
                    continue
                if _held(entry):
                    continue
                entry.rename(self.root / f"{TRASH_PREFIX}{os.urandom(4).hex()}-{entry.name}")
                stale.append(entry.name)
        return stale

    def reserve(self, url: StoreURL, size: int) -> Path:
        """A new empty directory for a copy of `url` of `size` bytes; OSError
        (ENOSPC) naming the limit when it would not fit."""
        own = self._directory()
        if self.limit and self.used + size > self.limit:
            raise OSError(
                errno.ENOSPC,
                f"copying {url} needs {size:,} bytes and the model cache holds {self.used:,} "
                f"of its {self.limit:,}-byte limit (--model-cache-bytes, SERVE_MODEL_CACHE_BYTES)",
                str(self.root),
            )
        free = shutil.disk_usage(own).free
        if size > free:
            raise OSError(
                errno.ENOSPC,
                f"copying {url} needs {size:,} bytes and the model cache's file system has "
                f"{free:,} free (--model-cache-dir, SERVE_MODEL_CACHE_DIR)",
                str(self.root),
            )
        self._count += 1
        digest = hashlib.sha256(str(url).encode()).hexdigest()[:12]
        local = own / f"{digest}-{self._count}"
        local.mkdir()
        self._held[local] = size
        return local

    def release(self, local: Path) -> None:
        """Delete a copy (its version is unloaded, or its load failed)."""
        self._held.pop(local, None)
        shutil.rmtree(local, ignore_errors=True)

    def keep_only(self, wanted: Iterable[Path]) -> None:
        """Delete every copy not in `wanted` (the versions loading or loaded), and
        the folders of servers that are gone (the sweep: each poll)."""
        keep = set(wanted)
        for local in [p for p in self._held if p not in keep]:
            self.release(local)
        self.sweep()

    def close(self) -> None:
        if self._own is not None:
            shutil.rmtree(self._own, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self._own, self._lock_fd = None, None
        self._held.clear()


def _held(folder: Path) -> bool:
    """Whether a live process holds `folder`'s lock (called under the directory's
    lock: a folder without `.lock` then is one whose server died making it)."""
    try:
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # not a folder of ours (a file, another user's): left alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
