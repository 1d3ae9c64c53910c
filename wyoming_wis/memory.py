"""Keep the server's resident size following what it uses, not the busiest moment it has had.

glibc gives each new thread a heap of its own, up to 8 per core (16 on a 2-core machine). Whisper
batches, Piper phrases and codec buffers of every size, allocated and freed by the worker threads,
leave every heap full of free holes, each as large as the busiest moment its threads have had; a
busy server's resident size climbs as more heaps reach their peak, which looks like a leak in every
memory graph. The soak (bench/soak.py) found 335 MiB of a 950 MiB server free in 16 heaps.

Two remedies, both glibc's own: one heap per core (more cannot be in use at the same moment, and
Whisper and Piper ran as fast with 2 heaps as with 16 on 2 cores), and `malloc_trim(0)` every 30 s,
which hands the free pages of every heap back in milliseconds. `MALLOC_ARENA_MAX` in the
environment still wins. Other C libraries (musl, macOS) have neither call, and nothing is done there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable

_LOGGER = logging.getLogger(__name__)
TRIM_SECONDS = 30.0  # between passes
M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h


def _libc() -> ctypes.CDLL | None:
    """The C library, if it is glibc (the two calls used here are glibc's own)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def limit_heaps(heaps: int | None = None) -> int | None:
    """Cap glibc's heaps at `heaps` (default: one per core, at least 2) before the worker threads start.

    Returns the cap, or None where it was left alone: not glibc, or `MALLOC_ARENA_MAX` set by the user.
    """
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return None
    heaps = heaps or max(2, len(os.sched_getaffinity(0)))
    return heaps if libc.mallopt(M_ARENA_MAX, heaps) == 1 else None


def trimmer() -> Callable[[], None] | None:
    """glibc's `malloc_trim(0)` as a blocking call, or None where the C library has none."""
    libc = _libc()
    if libc is None:
        return None
    malloc_trim = libc.malloc_trim
    malloc_trim.argtypes, malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: malloc_trim(0)


async def trim_forever(trim: Callable[[], None], every: float = TRIM_SECONDS) -> None:
    """A pass every `every` seconds, in a worker thread (it walks every heap), until cancelled."""
    while True:
        await asyncio.sleep(every)
        began = time.perf_counter()
        await asyncio.to_thread(trim)
        _LOGGER.debug("Returned free memory to the system in %.1f ms", (time.perf_counter() - began) * 1000)


SEND_BUFFER_BYTES = 256 * 1024  # per connection: 3 s of 22 kHz speech, or a few of a compressed answer
RECEIVE_BUFFER_BYTES = 256 * 1024  # per connection: 5 s of 24 kHz audio at once, 5 MB/s over a 50 ms round trip


def cap_send_buffer(transport: asyncio.BaseTransport | None) -> None:
    """Fix a client connection's kernel send buffer at SEND_BUFFER_BYTES.

    Linux grows it up to 4 MB for a client that does not read (tcp_wmem), memory no limit of ours counts,
    and a client that stops reading is only noticed (--send-timeout) once it is full: small, it fills at once.
    """
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)


def cap_receive_buffers(listeners: Iterable[socket.socket]) -> None:
    """Fix the kernel receive buffer of every connection `listeners` accept at RECEIVE_BUFFER_BYTES (a connection
    takes its listener's, and sizes its TCP window from it).

    Linux grows it up to 32 MB (tcp_rmem) for a client that sends faster than it is read: memory no limit of
    ours counts, and what a client queued there comes before its next message, however urgent (a Realtime
    client's keepalive ping waited behind 80 s of audio read at twice real time, and the client gave up).
    """
    for sock in listeners:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
