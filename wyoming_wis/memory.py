"""Give memory the server has freed back to the system, so its resident size follows what it uses.

glibc keeps what threads free in its heaps for reuse and returns only the free space at a heap's
top. Whisper batches, Piper phrases and codec buffers of every size, allocated and freed by many
worker threads, leave the heaps full of free holes: a busy server's resident size climbs to its
busiest moment and stays there, which looks like a leak in every memory graph. The soak
(bench/soak.py) found 240 MiB of a 935 MiB server free in this way. `malloc_trim(0)` hands the
free pages of every heap back; a pass takes milliseconds. Other C libraries (musl, macOS) have no
such call, and nothing is done there.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import time
from collections.abc import Callable

_LOGGER = logging.getLogger(__name__)
TRIM_SECONDS = 30.0  # between passes


def trimmer() -> Callable[[], None] | None:
    """glibc's `malloc_trim(0)` as a blocking call, or None where the C library has none."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    malloc_trim.argtypes, malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: malloc_trim(0)


async def trim_forever(trim: Callable[[], None], every: float = TRIM_SECONDS) -> None:
    """A pass every `every` seconds, in a worker thread (it walks every heap), until cancelled."""
    while True:
        await asyncio.sleep(every)
        began = time.perf_counter()
        await asyncio.to_thread(trim)
        _LOGGER.debug("Returned free memory to the system in %.1f ms", (time.perf_counter() - began) * 1000)
