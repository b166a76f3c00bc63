"""What the objects of a version in object storage must be before it is copied
and loaded (object_store.py; docs/object-storage.md), as pure functions of
its listing:

- when a version is complete (:func:`incomplete`): its graph, a whole
  checkpoint whenever it has or restores one (:func:`restores_checkpoint`
  reads the graph's SaverDef without TensorFlow);
- which object names can be written inside the version's copy
  (:func:`check_names`, :func:`target`): a bucket's writer never writes
  outside the model cache (docs/robustness.md).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.core import repository
from tf_entrypoint.serving.core.model_specs import StoreURL

_INDEX = "variables/variables.index"
_SHARD = re.compile(r"variables/variables\.data-(\d{5,})-of-(\d{5,})")
_RESTORE_TEXT = re.compile(rb'restore_op_name\s*:\s*"[^"]')

#: One object: (size in bytes, the store's tag for its content: ETag or generation).
Obj = tuple[int, str]
#: A version's files: path below the version -> Obj.
Files = Mapping[str, Obj]


def incomplete(  # noqa: PLR0911 - one reason per return
    files: Files, restores_checkpoint: Callable[[], bool]
) -> str | None:
    """Why a version with these `files` cannot be loaded yet, or None.

    `restores_checkpoint`: whether its graph restores variables (asked only
    when it has saved_model.pb and no `variables/` object).
    """
    if not any(name in files for name in repository.SAVED_MODEL_FILES):
        return "saved_model.pb is not there yet"
    has_variables = any(name.startswith("variables/") for name in files)
    if not has_variables and not restores_checkpoint():
        return None
    if _INDEX not in files:
        return f"{_INDEX} is not there yet"
    shards: dict[int, set[int]] = {}
    for name in files:
        if match := _SHARD.fullmatch(name):
            shards.setdefault(int(match[2]), set()).add(int(match[1]))
    if not shards:
        return "variables/variables.data-00000-of-NNNNN is not there yet"
    if len(shards) > 1:
        counts = " and ".join(str(n) for n in sorted(shards))
        return f"its variables are in {counts} shards at once (two exports mixed?)"
    count, present = next(iter(shards.items()))
    missing = [i for i in range(count) if i not in present]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"variables/variables.data-{missing[0]:05d}-of-{count:05d} is not there yet{more}"
    return None


_SAVED_MODEL_CLASS: Any = None


def _saved_model_class() -> Any:
    """A message class reading only SavedModel.meta_graphs[].saver_def.restore_op_name
    (tensorflow/core/protobuf/saved_model.proto, meta_graph.proto, saver.proto:
    fields 2, 3 and 3); every other field is skipped unparsed."""
    global _SAVED_MODEL_CLASS  # noqa: PLW0603 - built once
    if _SAVED_MODEL_CLASS is None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: PLC0415

        field = descriptor_pb2.FieldDescriptorProto
        proto = descriptor_pb2.FileDescriptorProto(
            name="tf_entrypoint_saver_probe.proto", package="tfe_probe", syntax="proto3"
        )
        saver = proto.message_type.add(name="SaverDef")
        saver.field.add(name="restore_op_name", number=3, type=field.TYPE_STRING,
                        label=field.LABEL_OPTIONAL)  # fmt: skip
        meta = proto.message_type.add(name="MetaGraphDef")
        meta.field.add(name="saver_def", number=3, type=field.TYPE_MESSAGE,
                       type_name=".tfe_probe.SaverDef", label=field.LABEL_OPTIONAL)  # fmt: skip
        saved = proto.message_type.add(name="SavedModel")
        saved.field.add(name="meta_graphs", number=2, type=field.TYPE_MESSAGE,
                        type_name=".tfe_probe.MetaGraphDef",
                        label=field.LABEL_REPEATED)  # fmt: skip
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        found = pool.FindMessageTypeByName("tfe_probe.SavedModel")
        _SAVED_MODEL_CLASS = message_factory.GetMessageClass(found)
    return _SAVED_MODEL_CLASS


def restores_checkpoint(graph: bytes, name: str = "saved_model.pb") -> bool:
    """Whether a saved_model.pb (or .pbtxt) restores variables from a checkpoint
    when loaded: one of its MetaGraphDefs has a SaverDef with a restore op.
    A graph that cannot be read counts as one that does (wait for the checkpoint:
    the load reports what is wrong with it)."""
    if name.endswith(".pbtxt"):
        return _RESTORE_TEXT.search(graph) is not None
    message = _saved_model_class()()
    try:
        message.ParseFromString(graph)
    except Exception:  # noqa: BLE001 - any parse failure: a damaged or partial graph
        return True
    return any(meta.saver_def.restore_op_name for meta in message.meta_graphs)


def unsafe_name(name: str) -> str | None:
    """Why the object at path `name` below its version cannot be written inside the
    version's copy, or None. A name is a plain relative path: not absolute, no
    empty, `.` or `..` segment (`a//b`, `./a`, `../x`), no NUL (no file name
    holds one). A backslash is an ordinary character on Linux (it stays in the
    copy)."""
    if "\0" in name:
        return "its name holds a NUL character, which no file name can"
    if name.startswith("/"):
        return "its path below the version is absolute (it would be written outside the copy)"
    for segment in name.split("/"):
        if segment in ("", ".", ".."):
            shown = "an empty" if not segment else f"a '{segment}'"
            return f"its path below the version has {shown} segment (it would be written " + (
                "outside the copy)" if segment == ".." else "elsewhere than it says)"
            )
    return None


def check_names(url: StoreURL, files: Iterable[str]) -> None:
    """OSError (EINVAL, INVALID_ARGUMENT) naming the first object of version `url`
    that cannot be written inside its copy (:func:`unsafe_name`), or that is both
    a file and a folder (`variables` next to `variables/variables.index`)."""
    names = sorted(files)
    problems: list[str] = []
    for name in names:
        why = unsafe_name(name)
        if why:
            problems.append(f"object {f'{url}/{name}'!r}: {why}")
    folders = {name.rsplit("/", 1)[0] for name in names if "/" in name}
    parents = {"/".join(folder.split("/")[: i + 1]) for folder in folders
               for i in range(folder.count("/") + 1)}  # fmt: skip
    problems.extend(
        f"object {f'{url}/{name}'!r}: it is a file and also a folder of other objects"
        for name in names
        if name in parents
    )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise OSError(
            errno.EINVAL,
            f"refusing to copy the version: {problems[0]}{more}; rename or delete the object",
            str(url),
        )


def target(local: Path, name: str) -> Path:
    """Where object `name` goes in the copy `local`, checked to be inside it (a
    second line of defence after check_names)."""
    root = os.path.realpath(local)
    target = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, target]) != root or target == root:
        raise OSError(
            errno.EINVAL, f"refusing to write {target!r}: outside the version's copy", name
        )
    return Path(target)
