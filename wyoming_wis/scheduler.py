"""Run blocking model calls in worker threads, behind a bounded queue, most urgent first.

Each engine owns one Scheduler. At most `workers` calls run at once; up to
`queue_size` more wait. Past that, `run` raises `Busy` at once, so overload is a
clear answer to the client rather than a backlog that grows without end. `run`
gives a call's result; `stream` gives a call's output in pieces as it is made.

Waiting calls start in order of their deadline: the moment their client gives up
(see below; earliest deadline first), else the moment they were submitted, or, for
speech, the moment a listener's playback would run dry (see `Pace`). So a Willow
device, which waits 10 s, goes before an HTTP client queued a little earlier that
waits 30 s, and a reply that has not started yet goes before the third sentence of
a reply that is already playing.

The queue is shared fairly by owner (shares.py: a client's address): Home Assistant's
calls start first, then each other owner's earliest call before any owner's second,
and so on. A lone owner may take every place; when the queue is full, a newcomer
takes the place of the last waiting call of an owner holding at least two more than
its own (that call is refused as busy: nothing started is cut), and Home Assistant
takes any stranger's, or a place past the end. One host that queues twenty uploads
delays Home Assistant's next command by none of them, another client's by one call,
not twenty, and cannot keep anyone out of the queue. And while Home Assistant has a
call waiting or running in any scheduler, no other client's call starts in any (the
server's own work aside): a model call cannot be interrupted, but one not started can
wait, and on a small machine the CPU, not the queue, is what Home Assistant would
otherwise wait for (`_Household`). The frontends hold a stranger's input on the event loop
meanwhile too (`household_first`): the loop is a core's worth of that CPU.

A client gives up after a while (a Willow device after 10 s), and work done after
that is wasted and delays everyone behind it. So each frontend says how long its
clients wait (`patience`): a call that would not be answered within that, by the
work queued ahead of it (shared by the workers) and how long recent calls took, is
refused as busy at once, and one that a worker reaches too late to finish in time
(allowing for how much recent calls varied) is dropped rather than run. The first
is the expected wait, not a cautious one: a client refused at 18 s that would have
been answered in 4 s (one in eight at four clients, before) lost its answer for
nothing, where one admitted and late is dropped before it costs a worker anything.
A listener's patience runs from each turn's end (`patience_from_now`, turns/listening.py), not from when it connected:
a Realtime session older than --http-max-wait had every turn that queued refused.

An engine whose work may wait for others' (the turn model) runs its workers at a lower CPU priority (`nice`),
so that on a busy CPU the threads a client is waiting on go first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from . import metrics, shares
from .errors import Busy
from .pipe import Pipe

T = TypeVar("T")
_LOGGER = logging.getLogger(__name__)
_SMOOTHING = 0.2  # weight of the latest call in the running estimates of call times
_GATED_POLL = 0.02  # seconds between a held worker's looks at whether Home Assistant's calls are done
_CAUTION = 2.0  # deviations above the mean a cautious estimate allows for


class _Patience(NamedTuple):
    gives_up: float  # time.monotonic() when the client leaves
    seconds: float  # how long it waits, from when this was set


_GIVES_UP: ContextVar[_Patience | None] = ContextVar("gives_up", default=None)


@contextmanager
def patience(seconds: float | None) -> Iterator[None]:
    """Calls made inside (and in tasks started inside) are for a client that gives up `seconds` from now,
    whatever stages (scoring speech, decoding it) its answer passes through."""
    token = _GIVES_UP.set(None if seconds is None else _Patience(time.monotonic() + seconds, seconds))
    try:
        yield
    finally:
        _GIVES_UP.reset(token)


@contextmanager
def patience_from_now() -> Iterator[None]:
    """The caller's patience, counted again from now: a listener waits for each turn's transcript from that turn's
    end, however long ago it connected or sent the event that opened the turn."""
    current = _GIVES_UP.get()
    with patience(None if current is None else current.seconds):
        yield


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


@dataclass
class _Estimate:
    """A running mean and mean deviation of a time, and a cautious figure from both (as TCP times its
    retransmissions, RFC 6298): calls on a shared CPU vary, and an estimate that is right only on average
    lets every other client past its deadline."""

    mean: float = 0.0
    deviation: float = 0.0
    samples: int = 0

    def add(self, sample: float) -> None:
        if not self.samples:
            self.mean, self.deviation = sample, sample / 2
        else:
            self.deviation += _SMOOTHING * (abs(sample - self.mean) - self.deviation)
            self.mean += _SMOOTHING * (sample - self.mean)
        self.samples += 1

    @property
    def cautious(self) -> float:
        return self.mean + _CAUTION * self.deviation


@dataclass
class _Fit:
    """Seconds from coming to done as `fixed + rate * units`, fitted to the recent calls by least squares, older
    calls weighing less and less (by 1 - _SMOOTHING a call), each weighed by how long it took so that a short
    call's error counts as much as a long one's. A call costs something whatever its size (a Whisper decode's
    set-up): time per unit alone, learnt mostly from long calls, had short ones done in twice their estimate."""

    weight: float = 0.0  # sums over the calls, each call's terms times its weight
    units: float = 0.0
    units2: float = 0.0
    seconds: float = 0.0
    product: float = 0.0  # units * seconds

    def add(self, units: float, seconds: float) -> None:
        if seconds <= 0:
            return
        keep, weight = 1 - _SMOOTHING, 1 / seconds**2  # least relative error
        self.weight = keep * self.weight + weight
        self.units = keep * self.units + weight * units
        self.units2 = keep * self.units2 + weight * units**2
        self.seconds = keep * self.seconds + weight * seconds
        self.product = keep * self.product + weight * units * seconds

    def __call__(self, units: float) -> float:
        """Expected seconds for this many units; 0 before any call has ended."""
        if not self.units:
            return 0.0
        scale = self.weight * self.units2
        spread = scale - self.units**2  # 0 when every call had the same units: no rate can be told from them
        rate = (self.weight * self.product - self.units * self.seconds) / spread if spread > 1e-9 * scale else 0
        fixed = (self.seconds - rate * self.units) / self.weight
        if rate <= 0 or fixed < 0:  # calls all alike, or a fit that runs backwards: time per unit alone
            fixed, rate = 0.0, self.product / self.units2
        return fixed + rate * units


@dataclass
class _RunTime:
    """How long a call of some cost runs, cautiously: a fit by cost, times how far runs strayed from it. One figure
    for calls of every size took a command queued behind minute-long uploads to run as long as an upload, and
    dropped it as too late to finish, where it needed a fraction of that."""

    fit: _Fit = field(default_factory=_Fit)
    strayed: _Estimate = field(default_factory=_Estimate)  # each run over its fitted time, before it was added

    def add(self, cost: float, seconds: float) -> None:
        fitted = self.fit(cost)
        self.strayed.add(seconds / fitted if fitted > 0 else 1.0)
        self.fit.add(cost, seconds)

    def cautious(self, cost: float) -> float:
        """Seconds a call of `cost` may run, allowing for how much recent calls varied; 0 before any has run."""
        return self.fit(cost) * self.strayed.cautious


@dataclass(eq=False)
class _Call:
    """A call in the queue."""

    deadline: float
    order: int  # when it came, among the scheduler's calls
    owner: str  # whose request it serves (shares.owner)
    left: Callable[[], float]  # its cost still to pay (another call may pay part of it)
    ahead: float  # cost of the calls running or queued ahead of it when it came
    cost: float  # its own cost when it came
    queued: float  # time.perf_counter() when it came
    expected: float  # seconds from coming to done, as the recent calls went (the mean estimate)
    latest: float  # time.monotonic() after which it is dropped unstarted
    future: Future[Any]
    call: Callable[[], Any]
    first: bool  # its request's first: not a later call of a reply that is playing, which is never refused


class _Queue:
    """Waiting calls, started Home Assistant's first (shares.trusted), then in rounds: in each, every owner with calls
    waiting starts one, its earliest deadline first; within a round, the earliest deadline goes first. An owner that
    starts waiting joins the round now going, so it waits one call of each other owner at most, however many those
    have queued."""

    def __init__(self) -> None:
        self._calls: list[_Call] = []
        self._rounds: dict[str, int] = {}  # of each owner with calls waiting: the round its next call starts in

    def __len__(self) -> int:
        return len(self._calls)

    def push(self, call: _Call) -> None:
        self._rounds.setdefault(call.owner, self._now(call.owner))
        self._calls.append(call)

    def next(self) -> _Call:
        """The call to start next."""
        return self._ordered()[0][-1]

    def pop(self) -> _Call:
        """The call to start next, out of the queue: its owner's next call starts in the next round."""
        call = self.next()
        self.remove(call)
        if call.owner in self._rounds:
            self._rounds[call.owner] += 1
        return call

    def remove(self, call: _Call) -> None:
        """Take `call` out of the queue (a call refused unstarted: its owner's last to start, or only)."""
        self._calls.remove(call)
        if not any(other.owner == call.owner for other in self._calls):
            del self._rounds[call.owner]

    def ahead(self, owner: str, deadline: float) -> list[_Call]:
        """The waiting calls that would start before a new one of `owner` with this deadline."""
        mine = sum(1 for call in self._calls if call.owner == owner and call.deadline <= deadline)
        key = (_rank(owner), self._rounds.get(owner, self._now(owner)) + mine, deadline)
        return [call for *its, _, call in self._ordered() if tuple(its) <= key]

    def make_room(self, newcomer: str, held: Counter[str]) -> _Call | None:
        """The waiting call whose place goes to a call of `newcomer` in a full queue (`held`: each owner's calls,
        running or waiting), or None: the last to start of the owner holding most, of those holding at least two
        more than the newcomer's (of any stranger, for Home Assistant); never a later call of a playing reply."""
        mine, home = held[newcomer], shares.trusted(newcomer)

        def may_give(call: _Call) -> bool:
            theirs = held[call.owner]
            return call.first and not shares.trusted(call.owner) and (home or theirs > mine + 1)

        places = {call: place for place, (*_, call) in enumerate(self._ordered())}
        return max(filter(may_give, self._calls), key=lambda call: (held[call.owner], places[call]), default=None)

    def clear(self) -> list[_Call]:
        calls, self._calls = self._calls, []
        self._rounds.clear()
        return calls

    def _now(self, owner: str) -> int:
        """The round going now among the owners ranked as `owner` is."""
        rank = _rank(owner)
        return min((turn for who, turn in self._rounds.items() if _rank(who) == rank), default=0)

    def _ordered(self) -> list[tuple[int, int, float, int, _Call]]:
        """(rank, round, deadline, when it came, the call) of each waiting call, in the order they start."""
        places: Counter[str] = Counter()  # of each owner's calls, by deadline
        keyed = []
        for call in sorted(self._calls, key=lambda call: (call.deadline, call.order)):
            turn = self._rounds[call.owner] + places[call.owner]
            keyed.append((_rank(call.owner), turn, call.deadline, call.order, call))
            places[call.owner] += 1
        return sorted(keyed, key=lambda key: key[:4])


def _rank(owner: str) -> int:
    """Home Assistant's calls (0) start before anyone else's (1)."""
    return 0 if shares.trusted(owner) else 1


class _Household:
    """Home Assistant's calls waiting or running, in every scheduler; safe from any thread."""

    def __init__(self) -> None:
        self._calls = 0
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._calls > 0

    def begin(self, future: Future[Any]) -> None:
        """A call of Home Assistant's is queued: counted until `future` is done."""
        with self._lock:
            self._calls += 1
        future.add_done_callback(self._end)

    def _end(self, _: Future[Any]) -> None:
        with self._lock:
            self._calls -= 1


_HOUSEHOLD = _Household()


def _holds_back(owner: str) -> bool:
    """Whether `owner`'s work waits because Home Assistant has calls waiting or running: a client's, not Home
    Assistant's own nor the server's (the wake word rounds serve every stream, its satellites' too)."""
    return _HOUSEHOLD.busy and owner != shares.LOCAL and not shares.trusted(owner)


async def household_first(owner: str) -> None:
    """Before the event loop reads or handles more of `owner`'s input: while Home Assistant has calls waiting or
    running, a stranger's waits, as a stranger's calls do. The loop is as much a part of the CPU as a model's
    threads: 20 uploads' audio handled while Home Assistant's transcription ran took most of a core from it (its
    Whisper call took 1.19 s instead of 0.62 s)."""
    while _holds_back(owner):
        await asyncio.sleep(_GATED_POLL)


class Scheduler:
    def __init__(
        self, name: str, workers: int, queue_size: int, *, engine: str = "", model: str = "", nice: int = 0
    ) -> None:
        """`engine` (whisper, vad, piper, xtts, turn) and `model` label its metrics; by default the name is the engine.
        `nice`: how many steps below the process's CPU priority its workers run (Linux only)."""
        self.name = name
        self.engine = engine or name
        self.model = model
        self.workers = workers
        self.capacity = workers + queue_size
        self.nice = nice
        self._pending = 0  # running + waiting; only touched on the event loop thread
        self._owners: Counter[str] = Counter()  # ... of each owner
        self._running: list[_Call] = []  # calls in worker threads; changed under `_ready`
        # Learnt from calls that ended: seconds from coming to done by the units of work waited for
        # (`_work_units`), and seconds a call runs by its cost.
        self._through = _Fit()
        self._run = _RunTime()
        self._waiting = _Queue()
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._queue_wait = metrics.QUEUE_WAIT.labels(self.engine, model)
        self._inference = metrics.INFERENCE.labels(self.engine, model)
        self._rejected = metrics.REJECTED.labels(self.engine, model)
        self._estimate = metrics.WAIT_ESTIMATE.labels(self.engine, model)
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{index}", daemon=True) for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()

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
        return len(self._running)

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(
        self,
        func: Callable[..., T],
        *args: Any,
        pace: Pace | None = None,
        at: float | None = None,
        cost: float | Callable[[], float] = 1.0,
    ) -> T:
        """Run `func(*args)` in a worker thread and return its result.

        With `pace`, the call is queued by when the listener will need its output:
        `at` seconds into their audio (by default, where they are now).
        `cost` is the call's size in the engine's own unit (Whisper: seconds of audio), for how long it and
        the calls behind it will take; a function gives what is left of it, where other calls may do part of
        its work (Whisper's batches).
        If the caller is cancelled while the call waits, the call is dropped;
        once running it finishes in its thread, and its slot is freed only then.
        """
        now = time.monotonic()
        gives_up = None if (patient := _GIVES_UP.get()) is None else patient.gives_up
        owner = shares.current()
        if pace is not None:
            deadline = pace.started + (pace.seconds if at is None else at)
        else:
            deadline = now if gives_up is None else gives_up
        loop = asyncio.get_running_loop()
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError(f"{self.name} has shut down")
            left = cost if callable(cost) else lambda: cost
            size = left()
            calls, ahead = self._ahead(deadline, owner)
            first = pace is None or not pace.admitted
            latest = math.inf  # a call of a reply already playing runs however late: never cut a reply halfway
            if first:
                latest = self._admit(calls, ahead, size, now=now, gives_up=gives_up, owner=owner)
            call = _Call(
                deadline,
                next(self._order),
                owner,
                left,
                ahead,
                size,
                time.perf_counter(),
                self._expected(ahead, size),
                latest,
                future,
                lambda: func(*args),
                first,
            )
            self._waiting.push(call)
            if shares.trusted(owner):
                _HOUSEHOLD.begin(future)
            self._ready.notify()
        if pace is not None:
            pace.admitted = True
        self._pending += 1
        self._owners[owner] += 1
        future.add_done_callback(lambda _: _call_soon(loop, lambda: self._release(owner)))
        return await asyncio.wrap_future(future)

    async def stream(
        self, produce: Callable[..., Generator[T, None, None]], *args: Any, ahead: int, pace: Pace | None = None
    ) -> AsyncIterator[T]:
        """The items of `produce(*args)`, each as soon as a worker thread makes it: `run` for output in pieces.

        The call is queued and admitted like `run`'s, as one call. At most `ahead` items wait to be read, so a
        slow reader holds the worker back instead of piling up output; a reader that stops early ends the call
        at its next item (see pipe.py).
        """
        pipe: Pipe[T] = Pipe(asyncio.get_running_loop(), ahead)
        job = asyncio.ensure_future(self.run(pipe.fill, produce, *args, pace=pace))
        job.add_done_callback(lambda _: pipe.finish())
        try:
            while (item := await pipe.receive()) is not None:
                yield item
            await job  # the worker's error, if it had one
        finally:
            pipe.close()
            if not job.done():
                job.cancel()  # drops it if it is still waiting for a worker
            elif not job.cancelled():
                job.exception()  # seen; it was raised above unless the reader left early

    def _ahead(self, deadline: float, owner: str) -> tuple[int, float]:
        """The calls a new one of `owner` with this deadline would wait behind (running, or queued before it in
        the fair order): how many, and the cost it waits for, none while a worker is free for it."""
        ahead = [*self._running, *self._waiting.ahead(owner, deadline)]
        if len(ahead) < self.workers:
            return len(ahead), 0.0
        return len(ahead), sum(item.left() for item in ahead)

    def _admit(self, calls: int, ahead: float, cost: float, *, now: float, gives_up: float | None, owner: str) -> float:
        """Raise Busy unless a new call can be answered before its client gives up; returns the latest it may start.

        A call that a free worker takes at once is never refused: nothing could answer it sooner. In a full queue
        it takes the place of another owner's waiting call (`_Queue.make_room`), which is refused instead; Home
        Assistant's takes a place past the end where no stranger's call can give its up.
        """
        victim = None
        if self._pending >= self.capacity:
            victim = self._waiting.make_room(owner, self._owners)
            if victim is None and not shares.trusted(owner):
                self._refuse(
                    f"{self._pending} requests are running or waiting, {self._owners[owner]} of them from {owner}, "
                    "and no other address has enough of them waiting to give one up",
                    self._wait(ahead),
                )
        latest = math.inf
        if gives_up is not None and calls >= self.workers:
            answered = self._expected(ahead, cost)
            if now + answered > gives_up:
                self._refuse(
                    f"a new request would be answered in about {answered:.1f} s, after its client gives up "
                    f"(in {max(0.0, gives_up - now):.1f} s)",
                    self._wait(ahead),
                )
            latest = gives_up - self._run.cautious(cost)  # started later, it would end after its client has left
        if victim is not None:
            self._waiting.remove(victim)
            self._rejected.inc()
            victim.future.set_exception(
                Busy(f"{self.name} is busy: the request gave its place in the queue to another address's; try again")
            )
        return latest

    def _wait(self, ahead: float) -> float:
        """Seconds until the calls ahead are done, as the recent calls went."""
        return self._expected(ahead, 0.0)

    def _expected(self, ahead: float, cost: float) -> float:
        """Seconds until a call of `cost`, with `ahead` to do before it, is done, as the recent calls went."""
        return self._through(self._work_units(ahead, cost))

    def _work_units(self, ahead: float, cost: float) -> float:
        """What a call waits for, in the engine's unit: its own cost, and its share of what is ahead of it (the
        workers take that in parallel)."""
        return ahead / self.workers + cost

    def _refuse(self, why: str, wait: float) -> None:
        self._rejected.inc()
        raise Busy(f"{self.name} is busy: {why}; try again shortly", retry_after=max(1.0, wait))

    def _work(self) -> None:
        if self.nice:
            _lower_priority(self.nice)
        while True:
            with self._ready:
                while not self._closed and (not self._waiting or _holds_back(self._waiting.next().owner)):
                    self._ready.wait(_GATED_POLL if self._waiting else None)
                if self._closed:
                    return
                item = self._waiting.pop()
            if not item.future.set_running_or_notify_cancel():
                continue  # its caller was cancelled while it waited
            left = item.left()
            if time.monotonic() > item.latest and left:  # its client would have left: running it only delays others
                self._rejected.inc()
                item.future.set_exception(Busy(f"{self.name} is busy: the request waited too long for its client"))
                continue
            started = time.perf_counter()
            self._queue_wait.observe(started - item.queued)
            with self._ready:
                self._running.append(item)
            try:
                result = item.call()
            except BaseException as err:  # handed to the caller, like concurrent.futures does
                self._ran(item, started, left)
                item.future.set_exception(err)
            else:
                self._ran(item, started, left)
                item.future.set_result(result)

    def _ran(self, item: _Call, started: float, left: float) -> None:
        """A call that had `left` to do when it started has ended: counted before its caller hears, so a scrape
        after the answer sees it."""
        ended = time.perf_counter()
        self._inference.observe(ended - started)
        with self._ready:
            self._running.remove(item)
            if left > 0:  # calls with work of their own: a batch may hold others' work too, so timed per call
                self._run.add(left, ended - started)
            if (units := self._work_units(item.ahead, item.cost)) > 0:
                self._through.add(units, ended - item.queued)
        if item.expected > 0:
            self._estimate.observe((ended - item.queued) / item.expected)
        _LOGGER.debug(
            "%s: a call of %s of cost %.1f, %.1f ahead: done in %.2f s (ran %.2f s), expected in %.2f s",
            self.name,
            item.owner,
            item.cost,
            item.ahead,
            ended - item.queued,
            ended - started,
            item.expected,
        )

    def _release(self, owner: str) -> None:
        self._pending -= 1
        self._owners[owner] -= 1
        if not self._owners[owner]:
            del self._owners[owner]

    def close(self) -> None:
        """Stop taking calls, drop those still waiting; running ones finish in their threads."""
        with self._ready:
            self._closed = True
            waiting = self._waiting.clear()
            self._ready.notify_all()
        for item in waiting:
            item.future.cancel()

    def join(self, timeout: float) -> list[str]:
        """After `close`: wait up to `timeout` s for the worker threads to end (a running call ends first).

        Returns the names of those still running, so no thread is left inside a model unnoticed while the
        interpreter shuts down around it.
        """
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread.name for thread in self._threads if thread.is_alive()]


def _lower_priority(steps: int) -> None:
    """Run the calling thread `steps` nice levels lower (at most 19). On Linux a thread has a priority of its own,
    set through its thread id; elsewhere that id could name another process, so it is left alone there."""
    if not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + steps))


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # the loop has closed during shutdown; nothing left to count
        pass
