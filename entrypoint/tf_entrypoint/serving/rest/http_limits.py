"""The HTTP server's bound on a request's head: its request line and headers.

uvicorn's httptools protocol (the one it picks when httptools is installed, as
in the image) keeps a request's URL and headers for as long as they keep
coming: one header that never ended filled a 1 GiB container within seconds,
before the application saw the request. Here a head may take at most
MAX_HEAD bytes (plus what arrived with its first bytes, one read); a longer
one is answered 431 and its connection closed. uvicorn's h11 protocol, used
when httptools is not installed, has its own bound (h11_max_incomplete_event_size),
set to the same size.
"""

from __future__ import annotations

from typing import Any

#: Most bytes of a request line and headers. TF Serving's clients send well
#: under 1 kB; browsers and proxies allow 8-16 kB per header.
MAX_HEAD = 64 * 1024


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
