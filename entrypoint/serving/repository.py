"""TF Serving's model layout on disk: MODEL_DIR/<version>/saved_model.pb.

A version is a directory whose name is a non-negative integer and that holds
a saved_model.pb (or saved_model.pbtxt). Anything else (a half-written
export in `.tmp-1`, `README`, `1.bak`) is ignored, so an exporter that writes
elsewhere and renames into place is never seen half done.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("tf_entrypoint.serving")

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")

#: What identifies one export of a version directory: the directory's inode
#: and change time (which a rename or re-creation updates and `cp -a` cannot
#: set back) and its saved_model.pb's inode, size and modification time. A
#: failed version is retried only once its files were replaced.
Identity = tuple[int, ...]


def scan(model_dir: Path) -> dict[int, Path] | None:
    """The complete versions in `model_dir` (number -> directory as spelled on disk).

    None when the directory cannot be listed (missing, unreadable): callers
    keep what they serve rather than read a transient error as "no versions".
    Two spellings of one number (`1` and `001`): the plain one wins, as the
    TF Serving file-system source warns and picks one.
    """
    try:
        entries = sorted(os.scandir(model_dir), key=lambda e: e.name)
    except OSError:
        return None
    found: dict[int, Path] = {}
    for entry in entries:
        name = entry.name
        if not (name.isascii() and name.isdigit()):
            continue
        directory = Path(entry.path)
        if not any((directory / f).is_file() for f in SAVED_MODEL_FILES):
            continue
        number = int(name)
        if number in found and found[number].name == str(number):
            continue
        found[number] = directory
    return found


def identity(directory: Path) -> Identity | None:
    try:
        stat = directory.stat()
        marks = [stat.st_ino, stat.st_ctime_ns]
        for name in SAVED_MODEL_FILES:
            path = directory / name
            if path.is_file():
                graph = path.stat()
                marks += [graph.st_ino, graph.st_size, graph.st_mtime_ns]
    except OSError:
        return None
    return tuple(marks)
