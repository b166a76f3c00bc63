"""The model cache: local copies of versions read from object storage, bounded in size.

TensorFlow loads a SavedModel from a directory, so ``object_store.py``
copies a version here before it loads and the manager deletes the copy
once the version is unloaded or its load failed (docs/object-storage.md).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from tf_entrypoint.serving.core.model_specs import StoreURL

log = logging.getLogger("tf_entrypoint.serving")

#: Where local copies go by default (below $TMPDIR, writable in the images).
DEFAULT_CACHE_DIR = Path(tempfile.gettempdir()) / "tf-entrypoint-models"
#: A cache folder younger than this is never removed as stale (made, not locked yet).
_YOUNG_SECONDS = 10.0


class ModelCache:
    """Local copies of versions read from object storage, bounded in size.

    The directory (`root`) may be shared by several servers and survives a
    crashed one (an emptyDir survives its container's restarts): each
    process copies into its own `tfe-cache-*` directory, holding an flock on
    it, and removes the others' that no live process holds.
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

    @property
    def used(self) -> int:
        return sum(self._held.values())

    def _directory(self) -> Path:
        if self._own is None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._remove_stale()
            own = Path(tempfile.mkdtemp(prefix="tfe-cache-", dir=self.root))
            fd = os.open(own / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._own, self._lock_fd = own, fd
        return self._own

    def _remove_stale(self) -> None:
        for entry in self.root.glob("tfe-cache-*"):
            try:
                if time.time() - (entry / ".lock").stat().st_mtime < _YOUNG_SECONDS:
                    continue  # just made: its server may not hold the lock yet
                fd = os.open(entry / ".lock", os.O_RDWR)
            except OSError:
                continue  # not ours, or being made right now
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live server's
            finally:
                os.close(fd)
            log.info("removing %s: a model cache no running server holds", entry)
            shutil.rmtree(entry, ignore_errors=True)

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
        """Delete every copy not in `wanted` (the versions loading or loaded)."""
        keep = set(wanted)
        for local in [p for p in self._held if p not in keep]:
            self.release(local)

    def close(self) -> None:
        if self._own is not None:
            shutil.rmtree(self._own, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self._own, self._lock_fd = None, None
        self._held.clear()
