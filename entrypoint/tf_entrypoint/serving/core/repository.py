"""TF Serving's model layout on disk: MODEL_DIR/<version>/saved_model.pb.

A version is a directory whose name is a non-negative integer that fits
int64 (TF Serving's version type) and that holds a saved_model.pb (or
saved_model.pbtxt). Anything else (a half-written export in `.tmp-1`,
`README`, `1.bak`) is ignored, so an exporter that writes elsewhere and
renames into place is never seen half done.

Nothing here raises OSError: a model directory that cannot be listed is
None, a version directory that cannot be read is a version with its error
(so the manager can report it, and retry it when it changes), and an
identity that cannot be taken is None. These functions do file-system I/O
(on NFS or FUSE a call can take seconds): never call them under a lock
that requests take.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tf_entrypoint.serving.core.errors import Code
from tf_entrypoint.serving.core.model_specs import ModelPath

log = logging.getLogger("tf_entrypoint.serving")

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
#: The version a SavedModel directly in the model directory (no version
#: folder) is served as; only while the directory has no version folder.
ROOT_VERSION = 1
#: The largest version number: TF Serving's versions are int64.
MAX_VERSION = 2**63 - 1
#: errno values that mean "not there" (a version still being written):
#: anything else (EACCES, ESTALE, EIO, ...) is a version that cannot be read.
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR})

#: What identifies one export of a version directory: the directory's inode
#: and change time (which a rename, a re-creation or a chmod updates and
#: `cp -a` cannot set back) and its saved_model.pb's inode, size and
#: modification time (or the errno that kept it from being read). A failed
#: version is retried only once its identity changes.
Identity = tuple[int, ...]


@dataclass(frozen=True)
class Found:
    """One version directory: where it is and, if it cannot be read, why."""

    path: ModelPath
    #: The error that kept its saved_model.pb from being looked at, or None.
    error: OSError | None = None


@dataclass(frozen=True)
class Listing:
    """What a model directory holds."""

    #: Version number -> its directory, as spelled on disk.
    versions: dict[int, Found] = field(default_factory=dict)
    #: Names of directories made of digits whose number does not fit int64
    #: (a timestamp such as 20240101123045000000): ignored, as TF Serving does.
    too_large: tuple[str, ...] = ()


def _graph_state(directory: Path) -> OSError | bool:
    """True when `directory` holds a SavedModel graph file, False when not (yet),
    the error when it cannot be told."""
    for name in SAVED_MODEL_FILES:
        try:
            mode = os.stat(directory / name).st_mode
        except OSError as err:
            if err.errno in _ABSENT:
                continue
            return err
        if stat.S_ISREG(mode):
            return True
    return False


def version_number(name: str) -> int | None:
    """The version a directory name stands for: ASCII digits that fit int64; else None."""
    if not (name.isascii() and name.isdigit()):
        return None
    digits = name.lstrip("0")
    if len(digits) > len(str(MAX_VERSION)):  # never int() a long string
        return None
    number = int(digits or "0")
    return number if number <= MAX_VERSION else None


def scan(model_dir: Path) -> Listing | None:
    """The versions in `model_dir`: complete ones, and those that cannot be read.

    None when the directory cannot be listed (missing, unreadable, a stale
    NFS handle): callers keep what they serve rather than read a transient
    error as "no versions". A directory of digits without a graph file yet
    is not a version; one that cannot be looked into (EACCES: another uid
    wrote it with mode 0700; EIO, ESTALE) is a version with its error, as
    TF Serving, which never looks into a version before loading it, would
    try to load it and fail. Two spellings of one number (`1` and `001`):
    the plain one wins, as the TF Serving file-system source warns and
    picks one. A model directory with no version folder that holds a
    saved_model.pb itself is version ROOT_VERSION (our extension).
    """
    try:
        with os.scandir(model_dir) as listing:
            names = sorted(entry.name for entry in listing)
    except OSError:
        return None
    found: dict[int, Found] = {}
    too_large: list[str] = []
    for name in names:
        if not (name.isascii() and name.isdigit()):
            continue
        number = version_number(name)
        if number is None:
            too_large.append(name)
            continue
        if number in found and found[number].path.name == str(number):
            continue
        directory = model_dir / name
        state = _graph_state(directory)
        if state is False:
            continue
        found[number] = Found(directory, state if isinstance(state, OSError) else None)
    if not found and not too_large:
        # Our extension: an export written straight into the model directory
        # (no version folder; TF Serving finds no version there) is version 1.
        state = _graph_state(model_dir)
        if state is not False:
            found[ROOT_VERSION] = Found(model_dir, state if isinstance(state, OSError) else None)
    return Listing(found, tuple(too_large))


def identity(directory: Path) -> Identity | None:
    """The marks of one export of `directory` (see Identity); None if it cannot be stat'ed."""
    try:
        info = directory.stat()
    except OSError:
        return None
    marks = [info.st_ino, info.st_ctime_ns]
    for name in SAVED_MODEL_FILES:
        try:
            graph = os.stat(directory / name)
        except OSError as err:
            if err.errno not in _ABSENT:
                marks += [-(err.errno or 1)]
            continue
        marks += [graph.st_ino, graph.st_size, graph.st_mtime_ns]
    return tuple(marks)


#: errno -> the canonical code TensorFlow's file systems give the same
#: failure (its IOError), so the status API says what TF Serving would.
_CODES = {
    errno.EACCES: Code.PERMISSION_DENIED,
    errno.EPERM: Code.PERMISSION_DENIED,
    errno.EROFS: Code.PERMISSION_DENIED,
    errno.EINVAL: Code.INVALID_ARGUMENT,  # (an object key that is no plain path)
    errno.ENOENT: Code.NOT_FOUND,
    errno.ENODEV: Code.NOT_FOUND,
    errno.ENXIO: Code.NOT_FOUND,
    errno.ETIMEDOUT: Code.DEADLINE_EXCEEDED,
    errno.ENOTDIR: Code.FAILED_PRECONDITION,
    errno.ENOTCONN: Code.FAILED_PRECONDITION,
    errno.EBUSY: Code.FAILED_PRECONDITION,
    errno.ENOMEM: Code.RESOURCE_EXHAUSTED,
    errno.ENOSPC: Code.RESOURCE_EXHAUSTED,
    errno.EMFILE: Code.RESOURCE_EXHAUSTED,
    errno.ENFILE: Code.RESOURCE_EXHAUSTED,
    errno.EAGAIN: Code.UNAVAILABLE,
    errno.EINTR: Code.UNAVAILABLE,
    errno.ECONNRESET: Code.UNAVAILABLE,
    errno.ECONNREFUSED: Code.UNAVAILABLE,
    errno.EHOSTDOWN: Code.UNAVAILABLE,
    errno.ENOLINK: Code.UNAVAILABLE,
    errno.ESTALE: Code.ABORTED,
}


#: The errno values with a code of their own (the rest are UNKNOWN).
KNOWN_ERRNOS = frozenset(_CODES)


def error_code(err: OSError) -> Code:
    """The canonical status code for a file-system error: EACCES is
    PERMISSION_DENIED, ESTALE ABORTED, EIO UNKNOWN, as TensorFlow reports them."""
    return _CODES.get(err.errno or 0, Code.UNKNOWN)


def describe(err: OSError) -> str:
    """`err` for a message: "Permission denied (EACCES): /models/m/2/saved_model.pb"."""
    reason = err.strerror or str(err)
    name = errno.errorcode.get(err.errno or 0)
    if name:
        reason += f" ({name})"
    if err.filename is not None:
        reason += f": {os.fsdecode(err.filename)}"
    return reason
