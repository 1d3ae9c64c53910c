"""A bounded hand-off of items from one worker thread to the event loop: how a model call streams its output.

Use it through `Scheduler.stream`, which queues the call like any other and reads the pipe. A worker that
makes items faster than they are read blocks (never the loop), so a slow reader holds the model back instead
of piling up output, and a reader that leaves stops the worker at its next item.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Generator
from contextlib import closing
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_LOGGER = logging.getLogger(__name__)
_POLL = 0.1  # seconds a blocked worker waits between looks at whether its reader has gone


class _ReaderGone(Exception):
    """The pipe's reader has stopped; the worker should stop too."""


class Pipe(Generic[T]):
    """Items from one worker thread to the event loop, at most `size` of them waiting to be read.

    Items reach the loop through call_soon_threadsafe, in order, and always before the worker's completion
    does (its call's future is set after `fill` returns). None is not an item: `receive` returns it at the end.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int) -> None:
        self._loop = loop
        self._slots = threading.Semaphore(size)
        self._items: deque[T] = deque()
        self._ready = asyncio.Event()
        self._closed = threading.Event()
        self._finished = False

    # -- the worker's side --------------------------------------------------

    def fill(self, produce: Callable[..., Generator[T, None, None]], *args: Any) -> None:
        """Send each item of `produce(*args)`; once the reader has gone, close the generator and return.

        Closing it runs its `finally` and `with` blocks at once, so a lock it holds is released.
        """
        if self._closed.is_set():
            return  # the reader left while the call waited for a worker: do not start
        try:
            with closing(produce(*args)) as items:
                for item in items:
                    self._send(item)
        except _ReaderGone:
            _LOGGER.debug("A stream ended early: its reader has gone")

    def _send(self, item: T) -> None:
        """Wait for room, then pass the item on; raises _ReaderGone once the pipe is closed."""
        while not self._slots.acquire(timeout=_POLL):
            if self._closed.is_set():
                raise _ReaderGone
        if self._closed.is_set():
            raise _ReaderGone
        try:
            self._loop.call_soon_threadsafe(self._push, item)
        except RuntimeError as err:  # the loop has closed
            raise _ReaderGone from err

    # -- the event loop's side ----------------------------------------------

    def _push(self, item: T) -> None:
        self._items.append(item)
        self._ready.set()

    def finish(self) -> None:
        """The worker is done (or its call never ran): nothing more will come."""
        self._finished = True
        self._ready.set()

    async def receive(self) -> T | None:
        """The next item, or None once the worker is done and all was read."""
        while not self._items:
            if self._finished:
                return None
            self._ready.clear()
            await self._ready.wait()
        self._slots.release()
        return self._items.popleft()

    def close(self) -> None:
        """The reader has gone: the worker stops at its next item."""
        self._closed.set()
