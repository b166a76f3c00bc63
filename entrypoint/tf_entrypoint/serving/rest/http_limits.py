"""The HTTP server's bound on a request's head: its request line and headers.

uvicorn's httptools protocol (the one it picks when httptools is installed, as
in the image) keeps a request's URL and headers for as long as they keep
coming: one header that never ended filled a 1 GiB container within seconds,
before the application saw the request. Here a head may take at most
MAX_HEAD bytes (plus what arrived with its first bytes, one read); a longer
one is answered 431 and its connection closed. uvicorn's h11 protocol, used
when httptools is not installed, has its own bound (h11_max_incomplete_event_size),
set to the same size.

The same protocol writes a response in one piece (:class:`OneWrite`):
uvicorn writes its head and its body with a call each, so each answer was
two send() calls and two packets.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: Most bytes of a request line and headers. TF Serving's clients send well
#: under 1 kB; browsers and proxies allow 8-16 kB per header.
MAX_HEAD = 64 * 1024


class OneWrite:
    """A connection's transport that gathers what one step of the event loop writes
    into one write.

    uvicorn's httptools protocol writes a response's head, then its body, each
    at once: two send() calls and two packets for every answer, and on the
    loopback interface each send() runs the receiver's side of TCP too. Here the
    writes of one step (a handler sends its head and whole body in one) go out
    together when the step ends; closing sends what is gathered first.
    Everything else is the transport's own.
    """

    __slots__ = ("_gathered", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._gathered: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._gathered is None:
            self._gathered = [data]
            self._loop.call_soon(self._flush)
        else:
            self._gathered.append(data)

    def _flush(self) -> None:
        gathered, self._gathered = self._gathered, None
        if gathered:
            self._transport.write(gathered[0] if len(gathered) == 1 else b"".join(gathered))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._gathered = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        gathered = self._gathered or ()
        return self._transport.get_write_buffer_size() + sum(len(d) for d in gathered)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def uvicorn_options() -> dict[str, Any]:
    """uvicorn.Config's protocol options that bound a request's head."""
    try:
        from uvicorn.protocols.http.httptools_impl import (  # noqa: PLC0415 - needs httptools
            HttpToolsProtocol,
        )
    except ImportError:
        return {"http": "h11", "h11_max_incomplete_event_size": MAX_HEAD}

    class BoundedHead(HttpToolsProtocol):
        """HttpToolsProtocol that refuses a request head longer than MAX_HEAD."""

        #: Bytes of the head read so far; -1: it began in the current read; None: read.
        _head: int | None = -1

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            gathering: Any = OneWrite(transport, asyncio.get_running_loop())
            super().connection_made(gathering)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head = -1

        def on_headers_complete(self) -> None:
            self._head = None
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            head = self._head
            if head is None or self.transport.is_closing():
                return
            # The read a head began in may hold the previous request's body: not counted.
            self._head = head = 0 if head < 0 else head + len(data)
            if head > MAX_HEAD:
                self._refuse()

        def _refuse(self) -> None:
            body = (
                f'{{"error":"Request line and headers exceed the limit of {MAX_HEAD} bytes"}}'
            ).encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
            )
            self.transport.close()

    return {"http": BoundedHead}
