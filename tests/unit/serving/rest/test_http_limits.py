"""The bounds on an HTTP request's head (rest/http_limits.py), with or without httptools."""

from __future__ import annotations

import asyncio

from tf_entrypoint.serving.rest import http_limits


def test_without_httptools_h11_bounds_the_head_to_the_same_size() -> None:
    options = http_limits.uvicorn_options()
    if options["http"] == "h11":  # this venv: no httptools (the image has it: container test)
        assert options["h11_max_incomplete_event_size"] == http_limits.MAX_HEAD
    else:
        assert options["http"].__name__ == "BoundedHead"


class Transport:
    """What OneWrite passes writes and everything else to."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


def gathering() -> tuple[Transport, http_limits.OneWrite, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    transport = Transport()
    return transport, http_limits.OneWrite(transport, loop), loop  # type: ignore[arg-type]


def test_the_writes_of_one_step_go_out_as_one() -> None:
    """A response's head and body, written in one step of the loop, are one write when
    the step ends; the next step's writes are the next write."""
    transport, one, loop = gathering()

    async def steps() -> None:
        one.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        one.write(b"{}")
        assert transport.writes == []
        assert one.get_write_buffer_size() == 7 + 40
        await asyncio.sleep(0)
        assert transport.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
        one.write(b"next")
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(steps())
    finally:
        loop.close()
    assert transport.writes[1:] == [b"next"]


def test_closing_sends_what_was_gathered_first_and_abort_drops_it() -> None:
    transport, one, loop = gathering()
    try:
        one.write(b"HTTP/1.1 431 ...\r\n\r\n")
        one.write(b"body")
        one.close()
        assert transport.writes == [b"HTTP/1.1 431 ...\r\n\r\nbody"]
        assert transport.closed
        one.write(b"lost")
        one.abort()
        assert transport.aborted
        loop.run_until_complete(asyncio.sleep(0))  # the flush scheduled by the write
        assert transport.writes == [b"HTTP/1.1 431 ...\r\n\r\nbody"]
    finally:
        loop.close()
    assert one.get_extra_info("peername") == "info peername"
