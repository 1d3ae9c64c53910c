"""Freed memory goes back to the system (wyoming_wis/memory.py)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from wyoming_wis import memory

pytestmark = pytest.mark.fast


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


# Eight threads that allocate at the same moment, then the number of heaps glibc made for them.
_CHURN = """
import ctypes, os, sys, tempfile, threading
from wyoming_wis import memory

print(memory.limit_heaps(int(sys.argv[1])) if sys.argv[1] != "none" else None)
start = threading.Barrier(8)
def churn():
    start.wait()
    for _ in range(200):
        blocks = [bytearray(8192) for _ in range(50)]
threads = [threading.Thread(target=churn) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
libc = ctypes.CDLL(None)
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes, libc.fclose.argtypes = [ctypes.c_int, ctypes.c_void_p], [ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
out = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
print(open(path).read().count("<heap nr="))
"""


def _heaps_after_churn(limit: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    """(what `limit_heaps` answered, heaps made) in a fresh interpreter: a process's heaps cannot be undone."""
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | (env or {})
    done = subprocess.run(
        [sys.executable, "-c", _CHURN, limit], env=environ, capture_output=True, text=True, check=True, timeout=60
    )
    answer, heaps = done.stdout.split()
    return answer, int(heaps)


def test_worker_threads_share_one_heap_per_core() -> None:
    assert _heaps_after_churn("none")[1] >= 8  # glibc's own default: a heap for each new thread
    assert _heaps_after_churn("2") == ("2", 2)


def test_the_users_malloc_arena_max_wins() -> None:
    assert _heaps_after_churn("2", {"MALLOC_ARENA_MAX": "4"}) == ("None", 4)
