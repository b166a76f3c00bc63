"""Small pieces every module shares: words, digits, display, stderr. Imports nothing."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` costs start-up time; at run time Rounding is plain `str`
    from typing import Literal, TypeAlias

    Rounding: TypeAlias = Literal["floor", "ceil", "nearest"]
else:
    Rounding = str

ROUNDINGS: tuple[Rounding, ...] = ("floor", "ceil", "nearest")
PREFIX = "tf-entrypoint:"

#: ASCII whitespace, the only kind stripped from a value (a no-break space is reported).
WHITESPACE = " \t\n\r\v\f"
TRUE_WORDS = ("on", "true", "1", "yes")
FALSE_WORDS = ("off", "false", "0", "no")
_DIGITS = frozenset("0123456789")
#: Longer digit strings (after leading zeros) are above every bound in this
#: package, and int() refuses more than 4300 digits.
_MAX_SIGNIFICANT_DIGITS = 18
HUGE: int = 10**_MAX_SIGNIFICANT_DIGITS


def strip(raw: str) -> str:
    return raw.strip(WHITESPACE)


def is_blank(raw: str) -> bool:
    """True for an empty value or one of ASCII whitespace only ("unset")."""
    return not strip(raw)


def word(raw: str) -> str | None:
    """The stripped value lowercased when it is ASCII, else None (no look-alikes match)."""
    text = strip(raw)
    return text.lower() if text.isascii() else None


def is_digits(text: str) -> bool:
    """Only ASCII 0-9, at least one (str.isdigit also accepts '١٢' and '²')."""
    return bool(text) and all(c in _DIGITS for c in text)


def digits_value(text: str) -> int:
    """The value of an ASCII digit string, capped at HUGE."""
    significant = text.lstrip("0")
    if len(significant) > _MAX_SIGNIFICANT_DIGITS:
        return HUGE
    return int(significant or "0")


def is_decimal(text: str) -> bool:
    """Digits with at most one '.', at least one digit: '2', '1.5', '.5', '2.'."""
    whole, _, fraction = text.partition(".")
    digits = whole + fraction
    return bool(digits) and is_digits(digits)


def odd_space_reason(text: str) -> str:
    """A reason for a value with non-ASCII whitespace in it, else ''."""
    if any(c.isspace() and c not in WHITESPACE for c in text):
        return "contains a non-ASCII space such as a no-break space"
    return ""


def not_whole_reason(text: str, subject: str = "") -> str:
    """Why ``text`` failed the digits check, about ``subject`` when given."""
    is_ = f"{subject} is " if subject else ""
    if text.startswith("-") and is_decimal(text[1:]):
        return f"{is_}negative"
    if odd := odd_space_reason(text):
        return f"{subject} {odd}" if subject else odd
    return f"{is_}not a whole number written with digits 0-9"


def show(text: str, limit: int = 0) -> str:
    """``text`` made safe to print inside a sentence (escaped), cut to ``limit`` if given."""
    try:
        text.encode("utf-8")
        safe = text.isprintable()
    except UnicodeEncodeError:  # lone surrogates from undecodable bytes
        safe = False
    if not safe:
        text = ascii(text)[1:-1]
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def say(message: str) -> None:
    """One line on stderr, prefixed; never raises (stderr may be closed or None)."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"{PREFIX} {message}\n")
        stream.flush()
    except Exception:  # noqa: BLE001, S110 - a closed stderr is not ours to report
        pass
