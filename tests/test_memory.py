"""Freed memory goes back to the system (wyoming_wis/memory.py)."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

from wyoming_wis import memory


def _rss_mib() -> float:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) / 1024


def _fragment(kept: list[bytes]) -> None:
    """Fill a heap with 2 KB blocks, as worker threads do, and free all but every 50th: holes stay resident."""
    blocks = [bytes(2048) for _ in range(150_000)]  # about 300 MiB
    kept += blocks[::50]
    del blocks


def test_a_trim_returns_the_holes_freed_memory_leaves() -> None:
    trim = memory.trimmer()
    assert trim is not None  # glibc here, as in the images
    kept: list[bytes] = []
    worker = threading.Thread(target=_fragment, args=(kept,))
    worker.start()
    worker.join()
    held = _rss_mib()
    trim()
    assert held - _rss_mib() > 100, (held, _rss_mib())
    assert len(kept) == 3000  # what is still used stays


async def test_trims_repeat_until_cancelled() -> None:
    calls: list[str] = []
    task = asyncio.create_task(memory.trim_forever(lambda: calls.append(threading.current_thread().name), 0.01))
    while len(calls) < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert threading.main_thread().name not in calls  # off the event loop's thread
