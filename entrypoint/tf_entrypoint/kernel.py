"""Kernel files read as the kernel writes them (proc(5), the cgroup docs).

One record per ``\\n``, fields separated by single spaces, ``\\ooo`` octal
escapes in paths: never ``str.split()`` or ``str.splitlines()``, which also
break at ``\\x0b``, ``\\x1c``-``\\x1e``, ``\\x85``, U+00A0 or U+2028 inside a
path. Reading never raises past the callers' ``(OSError, ValueError)``.
"""

from __future__ import annotations

from tf_entrypoint.common import show
from tf_entrypoint.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

#: Control files are a few bytes; anything longer is garbage.
_MAX_CONTROL_FILE = 4096
#: /proc files worth reading here are far smaller (mountinfo of a busy host: ~100 KiB).
_MAX_PROC_FILE = 4 * 1024 * 1024
_OCTAL = frozenset("01234567")


class _Missing(Exception):
    """The file does not exist."""


@frozen
class LevelValue:
    """What one cgroup level's control files say."""

    #: "quota": a limit; "unlimited": no limit at this level; "invalid": the
    #: content makes no sense and the level is ignored (``problem`` says why).
    kind: Literal["quota", "unlimited", "invalid"]
    quota_us: int = 0
    period_us: int = 0
    problem: str = ""


def records(text: str) -> list[str]:
    """The records of a file: one per ``\\n``; the empty tail after the last one dropped."""
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def fields(record: str) -> list[str]:
    """The fields of a record, separated by single spaces."""
    return record.split(" ")


def value(text: str) -> str:
    """A one-value control file's content without its trailing newline."""
    return text[:-1] if text.endswith("\n") else text


def unescape(field: str) -> str:
    r"""Undo the kernel's octal escapes in a path (``\040`` is a space)."""
    if "\\" not in field:
        return field
    out: list[str] = []
    i = 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and set(code) <= _OCTAL:
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError("longer than such a file can be")
    return data


def _read_control_file(path: str) -> str:
    """A small ASCII control file. Raises _Missing, or OSError/ValueError."""
    try:
        return _read(path, _MAX_CONTROL_FILE).decode("ascii")
    except FileNotFoundError as error:
        raise _Missing from error


def read_level_file(directory: str, name: str) -> tuple[str | None, str]:
    """(content, why it could not be read) of one cgroup control file; (None, "") if missing."""
    try:
        return _read_control_file(f"{directory}/{name}"), ""
    except _Missing:
        return None, ""
    except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        return None, why(error)


def read_proc_file(path: str) -> str:
    """A /proc file; undecodable bytes are kept as surrogates (shown escaped)."""
    return _read(path, _MAX_PROC_FILE).decode("utf-8", "surrogateescape")


def why(error: BaseException) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "it is not ASCII text"
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return str(error) or type(error).__name__


def show_content(text: str) -> str:
    text = value(text)
    if len(text) > 40:
        text = text[:40] + "..."
    return f"'{show(text)}'"


def integer(text: str) -> int | None:
    """A plain ASCII decimal integer (int() also takes '+5', '1_0' and non-ASCII digits)."""
    body = text[1:] if text.startswith("-") else text
    if not (body and body.isascii() and body.isdigit()):
        return None
    return int(text)
