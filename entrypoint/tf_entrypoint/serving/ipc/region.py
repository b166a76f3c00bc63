"""A lane's shared memory: one memfd that a front-end and the engine both map.

A memfd is anonymous memory with a file descriptor: it lives in no file
system, so Docker's 64 MB ``/dev/shm`` does not bound it, and it is gone when
the last descriptor and mapping are. The front-end creates it and hands the
descriptor to the engine over the lane's Unix socket (``SCM_RIGHTS``). Pages
are committed when first written, so a region's size is a bound, not a cost;
:meth:`Region.trim` gives back what a large request touched.
"""

from __future__ import annotations

import contextlib
import mmap
import os

#: Offsets in a region are multiples of this (a cache line; every item size divides it).
ALIGN = 64


def aligned(offset: int) -> int:
    """`offset` rounded up to :data:`ALIGN`."""
    return (offset + ALIGN - 1) & ~(ALIGN - 1)


class Region:
    """`size` bytes of shared memory behind descriptor `fd`, mapped read-write."""

    __slots__ = ("fd", "map", "size", "view")

    def __init__(self, fd: int, size: int) -> None:
        if size < mmap.PAGESIZE or size % mmap.PAGESIZE:
            raise ValueError(f"a region is whole pages: {size} bytes")
        self.fd = fd
        self.size = size
        self.map = mmap.mmap(fd, size)
        self.view = memoryview(self.map)

    @classmethod
    def create(cls, size: int, name: str = "tf-entrypoint-lane") -> Region:
        """A new memfd of `size` bytes (rounded up to whole pages), mapped."""
        size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            return cls(fd, size)
        except BaseException:
            os.close(fd)
            raise

    def trim(self, keep: int) -> None:
        """Give the pages past the first `keep` bytes back to the kernel (they read as zeros)."""
        start = -(-keep // mmap.PAGESIZE) * mmap.PAGESIZE
        if start < self.size:
            self.map.madvise(mmap.MADV_REMOVE, start, self.size - start)

    def close(self) -> None:
        """Unmap and close. A view still held elsewhere keeps the mapping until it is released."""
        self.view.release()
        with contextlib.suppress(BufferError):  # exported views: unmapped when they go
            self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
