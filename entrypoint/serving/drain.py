"""The end of the grace period, and the timeouts asyncio raises."""

from __future__ import annotations

import asyncio

#: What asyncio raises when a wait_for() times out. Before Python 3.11
#: asyncio.TimeoutError is not the builtin TimeoutError (an `except
#: TimeoutError` misses it there); from 3.11 on it is an alias of it. The
#: package supports Python 3.10 (requires-python >= 3.10), so catch both;
#: written as a tuple so that ruff's UP041 never rewrites it to the builtin
#: alone when its target version is raised.
TIMEOUT_ERRORS: tuple[type[Exception], ...] = (TimeoutError, asyncio.TimeoutError)
