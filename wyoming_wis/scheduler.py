"""Run blocking model calls in worker threads, behind a bounded queue, most urgent first.

Each engine owns one Scheduler. At most `workers` calls run at once; up to
`queue_size` more wait. Past that, `run` raises `Busy` at once, so overload is a
clear answer to the client rather than a backlog that grows without end.

Waiting calls start in order of their deadline: by default the moment they were
submitted (first come, first served), or, for speech, the moment a listener's
playback would run dry (see `Pace`). A reply that has not started yet then goes
before the third sentence of a reply that is already playing.

A client gives up after a while (a Willow device after 10 s), and work done after
that is wasted and delays everyone behind it. So each frontend says how long its
clients wait (`patience`): a call that would not be answered within that, by the
queue ahead of it and the recent time per call, is refused as busy at once, and one
that waited too long anyway is dropped rather than run.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import metrics
from .errors import Busy

T = TypeVar("T")
_GIVES_UP: ContextVar[float | None] = ContextVar("gives_up", default=None)  # time.monotonic() the client leaves
_SMOOTHING = 0.2  # weight of the latest call in the running mean of call times


@contextmanager
def patience(seconds: float | None) -> Iterator[None]:
    """Calls made inside (and in tasks started inside) are for a client that gives up `seconds` from now,
    whatever stages (scoring speech, decoding it) its answer passes through."""
    token = _GIVES_UP.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _GIVES_UP.reset(token)


@dataclass
class Pace:
    """One listener's request: when it started and how much audio it has been sent.

    Its calls queue by `deadline`; only its first call may be refused as busy,
    so a reply that has started is never cut off halfway.
    """

    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    admitted: bool = False

    @property
    def deadline(self) -> float:
        """When playback runs dry unless more audio comes."""
        return self.started + self.seconds

    @property
    def in_hand(self) -> float:
        """Seconds of audio the listener has yet to hear."""
        return self.deadline - time.monotonic()


class Scheduler:
    def __init__(self, name: str, workers: int, queue_size: int, *, engine: str = "", model: str = "") -> None:
        """`engine` (whisper, vad, piper, xtts) and `model` label its metrics; by default the name is the engine."""
        self.name = name
        self.engine = engine or name
        self.model = model
        self.workers = workers
        self.capacity = workers + queue_size
        self._pending = 0  # running + waiting; only touched on the event loop thread
        self._running = 0  # calls in worker threads; changed under `_ready`
        self._mean = 0.0  # recent seconds per call, for how long a new call would wait
        # (deadline, order, when queued, latest start (monotonic) or inf, future, call)
        self._waiting: list[tuple[float, int, float, float, Future[Any], Callable[[], Any]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._queue_wait = metrics.QUEUE_WAIT.labels(self.engine, model)
        self._inference = metrics.INFERENCE.labels(self.engine, model)
        self._rejected = metrics.REJECTED.labels(self.engine, model)
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{index}", daemon=True) for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()
        metrics.watch_scheduler(self)

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def waiting(self) -> int:
        """Calls queued, not yet taken by a worker."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Calls running in worker threads."""
        return self._running

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self, func: Callable[..., T], *args: Any, pace: Pace | None = None, at: float | None = None) -> T:
        """Run `func(*args)` in a worker thread and return its result.

        With `pace`, the call is queued by when the listener will need its output:
        `at` seconds into their audio (by default, where they are now).
        If the caller is cancelled while the call waits, the call is dropped;
        once running it finishes in its thread, and its slot is freed only then.
        """
        now = time.monotonic()
        deadline = now if pace is None else pace.started + (pace.seconds if at is None else at)
        latest = math.inf  # a call of a reply already playing runs however late: never cut a reply halfway
        if pace is None or not pace.admitted:
            latest = self._admit(deadline, now)
        if pace is not None:
            pace.admitted = True
        loop = asyncio.get_running_loop()
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError(f"{self.name} has shut down")
            item = (deadline, next(self._order), time.perf_counter(), latest, future, lambda: func(*args))
            heapq.heappush(self._waiting, item)
            self._ready.notify()
        self._pending += 1
        future.add_done_callback(lambda _: _call_soon(loop, self._release))
        return await asyncio.wrap_future(future)

    def _admit(self, deadline: float, now: float) -> float:
        """Raise Busy unless a new call can be answered before its client gives up; returns the latest it may start."""
        if self._pending >= self.capacity:
            self._refuse(f"{self._pending} requests are running or waiting", self._wait(deadline))
        gives_up = _GIVES_UP.get()
        if gives_up is None:
            return math.inf
        wait = self._wait(deadline)
        if wait and now + wait + self._mean > gives_up:  # with a queue ahead, answer before the client leaves
            self._refuse(
                f"a new request would be answered in about {wait + self._mean:.1f} s, after its client gives up "
                f"(in {max(0.0, gives_up - now):.1f} s)",
                wait,
            )
        return gives_up

    def _wait(self, deadline: float) -> float:
        """Seconds a call queued now with this deadline would wait: the calls ahead times the recent time per call."""
        with self._ready:
            ahead = self._running + sum(1 for item in self._waiting if item[0] <= deadline)
        return max(0, ahead - self.workers + 1) * self._mean / self.workers

    def _refuse(self, why: str, wait: float) -> None:
        self._rejected.inc()
        raise Busy(f"{self.name} is busy: {why}; try again shortly", retry_after=max(1.0, wait))

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                _, _, queued, latest, future, call = heapq.heappop(self._waiting)
            if not future.set_running_or_notify_cancel():
                continue  # its caller was cancelled while it waited
            if time.monotonic() > latest:  # its client has given up: running it would only delay the next
                self._rejected.inc()
                future.set_exception(Busy(f"{self.name} is busy: the request waited longer than its client waits"))
                continue
            started = time.perf_counter()
            self._queue_wait.observe(started - queued)
            with self._ready:
                self._running += 1
            try:
                result = call()
            except BaseException as err:  # handed to the caller, like concurrent.futures does
                self._ran(started)
                future.set_exception(err)
            else:
                self._ran(started)
                future.set_result(result)

    def _ran(self, started: float) -> None:
        """A call has ended: counted before its caller hears, so a scrape after the answer sees it."""
        took = time.perf_counter() - started
        self._inference.observe(took)
        with self._ready:
            self._running -= 1
            self._mean += _SMOOTHING * (took - self._mean) if self._mean else took

    def _release(self) -> None:
        self._pending -= 1

    def close(self) -> None:
        """Stop taking calls, drop those still waiting; running ones finish in their threads."""
        with self._ready:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._ready.notify_all()
        for *_, future, _ in waiting:
            future.cancel()

    def join(self, timeout: float) -> list[str]:
        """After `close`: wait up to `timeout` s for the worker threads to end (a running call ends first).

        Returns the names of those still running, so no thread is left inside a model unnoticed while the
        interpreter shuts down around it.
        """
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread.name for thread in self._threads if thread.is_alive()]


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # the loop has closed during shutdown; nothing left to count
        pass
