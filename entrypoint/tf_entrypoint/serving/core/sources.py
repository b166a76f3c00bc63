"""Where the manager reads versions from: local directories or object stores.

One face for ``manager.py`` over ``repository.py`` (a local model
directory) and ``object_store.py`` (an `s3://` or `gs://` prefix): list a
model's versions, take a version's identity, give a directory TensorFlow
can load (a store's version is copied into the model cache first), and say
why a model has no version yet. Also the warnings about what a listing
showed. Every call may do I/O: the manager's thread only, never under the
lock requests take.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from tf_entrypoint.serving.core import repository
from tf_entrypoint.serving.core.model_specs import ModelPath, StoreURL
from tf_entrypoint.serving.core.models import Model
from tf_entrypoint.serving.core.object_store import ObjectStores

log = logging.getLogger("tf_entrypoint.serving")


class Sources:
    """Local directories, and the object stores (None: local only)."""

    def __init__(self, stores: ObjectStores | None = None) -> None:
        self.stores = stores

    def _stores(self, path: StoreURL) -> ObjectStores:
        if self.stores is None:  # the composition root always gives them
            raise OSError(errno.EPROTONOSUPPORT, "no object store client configured", str(path))
        return self.stores

    def scan(self, base: ModelPath) -> repository.Listing | None:
        """The versions under `base` (None: it cannot be listed now)."""
        if isinstance(base, StoreURL):
            return self._stores(base).scan(base)
        return repository.scan(base)

    def identity(self, path: ModelPath) -> repository.Identity | None:
        if isinstance(path, StoreURL):
            return self._stores(path).identity(path)
        return repository.identity(path)

    def problem(self, base: ModelPath) -> str:
        """Why `base` shows no version to load, when a store said ("" otherwise)."""
        return self._stores(base).problem(base) if isinstance(base, StoreURL) else ""

    def logs_its_failures(self, base: ModelPath) -> bool:
        """Whether a failed listing of `base` is logged here (a store's, with its reason)."""
        return isinstance(base, StoreURL)

    def loadable(self, model: str, number: int, path: ModelPath) -> tuple[Path, Path | None]:
        """(the directory to load version `number` from, the copy made for it or None)."""
        if not isinstance(path, StoreURL):
            return path, None
        started = time.monotonic()
        local = self._stores(path).fetch(path)
        log.info(
            "model %r version %d: copied %s to %s in %.2f s",
            model,
            number,
            path,
            local,
            time.monotonic() - started,
        )
        return local, local

    def keep_only(self, copies: Iterable[Path]) -> None:
        """Delete the copies of versions that are no longer loading or loaded."""
        if self.stores is not None:
            self.stores.keep_only(copies)

    def close(self) -> None:
        if self.stores is not None:
            self.stores.close()

    @staticmethod
    def warn_too_large(model: Model, names: tuple[str, ...]) -> None:
        """Log the version directories ignored for a number beyond int64, once each."""
        new = [name for name in names if name not in model.too_large]
        model.too_large = names
        for name in new:
            log.warning(
                "model %r: ignoring %s: its version number does not fit int64 (at most %d), "
                "as TF Serving ignores it; name versions with smaller numbers (a Unix "
                "timestamp in seconds fits)",
                model.spec.name,
                model.spec.base_path / name,
                repository.MAX_VERSION,
            )
