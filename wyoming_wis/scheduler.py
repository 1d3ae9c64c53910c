"""Run blocking model calls in worker threads, behind a bounded queue.

Each engine owns one Scheduler. At most `workers` calls run at once; up to
`queue_size` more wait. Past that, `run` raises `Busy` at once, so overload is a
clear answer to the client rather than a backlog that grows without end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .errors import Busy

T = TypeVar("T")


class Scheduler:
    def __init__(self, name: str, workers: int, queue_size: int) -> None:
        self.name = name
        self.workers = workers
        self.capacity = workers + queue_size
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._pending = 0  # running + waiting; only touched on the event loop thread

    @property
    def pending(self) -> int:
        return self._pending

    async def run(self, func: Callable[..., T], *args: Any) -> T:
        """Run `func(*args)` in a worker thread and return its result.

        If the caller is cancelled while the call waits, the call is dropped;
        once running it finishes in its thread, and its slot is freed only then.
        """
        if self._pending >= self.capacity:
            raise Busy(f"{self.name} is busy: {self._pending} requests are running or waiting; try again shortly")
        loop = asyncio.get_running_loop()
        self._pending += 1
        future: Future[T] = self._executor.submit(func, *args)
        future.add_done_callback(lambda _: _call_soon(loop, self._release))
        return await asyncio.wrap_future(future)

    def _release(self) -> None:
        self._pending -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # the loop has closed during shutdown; nothing left to count
        pass
