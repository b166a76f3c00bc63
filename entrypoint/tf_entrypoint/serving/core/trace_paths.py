"""Where a profile's trace may be written: only under --profile-dir (docs/robustness.md).

TF Serving's ProfilerService writes REPOSITORY_ROOT/SESSION_ID/HOST.xplane.pb
wherever the client's ProfileRequest says: any path the server's user can
write, or a bucket with the server's credentials. Here the gRPC port is no
such primitive: :func:`trace_folder` is the one rule, a pure function of the
request's names and the operator's --profile-dir (local paths resolved with
realpath, so neither ``..`` nor a symlink leads out; URLs compared segment
by segment, so ``gs://b/logs2`` is not inside ``gs://b/logs``).
"""

from __future__ import annotations

import os
import posixpath
import re

from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument

FLAG = "--profile-dir"
ENV = "SERVE_PROFILE_DIR"
#: The object stores TensorFlow's file system writes traces to (tf.io.gfile).
SCHEMES = ("gs", "s3")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
FILE_SUFFIX = ".xplane.pb"


def normalise_dir(text: str) -> str:
    """--profile-dir's value, normalised: an absolute real path, or SCHEME://BUCKET[/KEY].

    ValueError naming what is wrong (an empty value, an unknown scheme, no bucket).
    """
    if not text or "\0" in text:
        raise ValueError("expected a directory, or a gs:// or s3:// prefix")
    url = _url(text)
    if url is not None:
        return url
    return os.path.realpath(os.path.abspath(text))


def _url(text: str) -> str | None:
    """`text` as SCHEME://BUCKET/KEY with `.`/`..`/empty segments resolved; None when it is
    a local path; ValueError for a scheme traces cannot be written to or no bucket."""
    found = _SCHEME.fullmatch(text)
    if found is None:
        return None
    scheme, rest = found.group(1).lower(), found.group(2)
    if scheme not in SCHEMES:
        raise ValueError(f"{scheme}:// is not supported: expected a local path, gs:// or s3://")
    bucket, _, key = rest.partition("/")
    if not bucket or bucket in (".", ".."):
        raise ValueError(f"{text!r} names no bucket: expected {scheme}://BUCKET/PATH")
    key = posixpath.normpath("/" + key).lstrip("/")  # ".." stops at the bucket's root
    return f"{scheme}://{bucket}/{key}" if key else f"{scheme}://{bucket}"


def _inside(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or under it, segment by segment (both normalised)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def check_name(field: str, name: str) -> None:
    """A session id or host name becomes one file or folder name: a plain one, or
    INVALID_ARGUMENT naming the field."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise invalid_argument(
            f"ProfileRequest.{field} {name!r} is not a plain name: it names one folder or file "
            "under repository_root (not empty, '.' or '..', no '/' or NUL)"
        )


def trace_folder(profile_dir: str | None, root: str, session_id: str, host: str) -> str:
    """The folder REPOSITORY_ROOT/SESSION_ID to write HOST.xplane.pb in, normalised, when
    it lies under `profile_dir` (--profile-dir, normalised; None: not set).

    INVALID_ARGUMENT for a session id or host name that is not a plain name;
    PERMISSION_DENIED naming the path and the flag when --profile-dir is not set
    or the path is not inside it. Nothing is touched but the file system's names
    (realpath), so it is checked before a capture starts.
    """
    check_name("session_id", session_id)
    check_name("host_name", host)
    if profile_dir is None:
        raise ServingError(
            Code.PERMISSION_DENIED,
            f"Profile would write the trace under {root!r}, and this server writes traces "
            f"only under {FLAG} ({ENV}), which is not set: start the server with "
            f"{FLAG}=DIR and give the client a logdir inside DIR (or ask for emit_xspace, "
            "which answers the trace and writes nothing)",
        )
    folder = target = None
    try:
        url = _url(root) if root else None
    except ValueError:  # a scheme traces are not written to: refused below
        url = None
        root_ok = False
    else:
        root_ok = url is not None or (bool(root) and "\0" not in root and os.path.isabs(root))
    if url is not None:
        folder = posixpath.join(url, session_id)
        target = posixpath.join(folder, host + FILE_SUFFIX)
    elif root_ok:  # a relative root would be the server's working directory's: refused
        folder = os.path.realpath(os.path.join(root, session_id))
        target = os.path.realpath(os.path.join(folder, host + FILE_SUFFIX))
    if (
        folder is None
        or target is None
        or not (_inside(folder, profile_dir) and _inside(target, profile_dir))
    ):
        raise ServingError(
            Code.PERMISSION_DENIED,
            f"Profile's repository_root {root!r} is not inside {FLAG} {profile_dir!r} (with "
            f"session_id {session_id!r}): this server writes traces only under it; give the "
            f"client a logdir inside {profile_dir}",
        )
    return folder
