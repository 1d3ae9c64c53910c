"""Wake words for many streams at once: the streams' audio is heard in rounds, in the engine's worker threads.

A stream does not wait for its own audio to be heard: `feed` keeps the audio and returns. A round takes every
stream with audio kept (up to ROUND_SECONDS of each) to a worker in one call, and at most one round per worker
runs or waits. While the CPU keeps up, a round starts as soon as a piece comes, so a piece is heard at once; when
it does not, rounds grow and there are fewer of them: the server degrades by hearing later, its queue holds a
round per worker however many streams there are, and a stream sent faster than real time (a file) gets a
second's hearing a round, not the CPU. openWakeWord's cost per second of audio falls as a stream's share of a
round grows (oww.py), so its rounds grow less than the load does. A detection goes to its client as soon as it is
heard, not when its round ends. What a stream may keep unheard is bounded (`MAX_KEPT_BYTES`): past it, `feed`
waits until its audio has been heard, so a client that sends faster than it is heard is slowed down by TCP instead
of held in memory.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import numpy as np

from ..audio import NATIVE, AudioFormat, s16
from ..budget import Hold
from ..config import WakeSettings
from ..errors import AudioTooLong, BadRequest, Busy, UnknownWakeWord
from ..scheduler import Scheduler
from ..served import Entry
from ..values import quote
from .listener import Heard, Listener, footprint
from .models import MICRO, OPEN, WakeModel, WakeModels

_LOGGER = logging.getLogger(__name__)

MAX_KEPT_BYTES = 256 * 1024  # of a stream's audio waiting to be heard (8 s at 16 kHz); past it, `feed` waits
ROUND_SECONDS = 1.0  # of a stream's audio heard in one round: a file delays the others in its round little
DEFAULT_WAKE_WORD = "okay_nabu"  # for a `detect` that names none, as both peers do (if offered)
# Names one request may list: a satellite names one or two, and the bundled models are nine, each with a few
# spellings. Each name costs a lookup (a model only one detector, however it is named); a longer list is refused
# before any is looked up.
MAX_NAMES = 64

OnHeard = Callable[[Heard], Awaitable[None]]


class WakeEngine:
    """The wake word models and the threads that run them for every stream."""

    def __init__(self, models: WakeModels, settings: WakeSettings, *, workers: int) -> None:
        self.models = models
        self.settings = settings
        # microWakeWord streams are heard in one thread: its many short calls into TensorFlow Lite each let go of
        # the GIL, and two threads hearing them took 2.4 times the CPU of one (BENCHMARKS.md). openWakeWord's
        # long embedding calls run in parallel, in every worker.
        self.micro_rounds = _Rounds(Scheduler("wake-micro", 1, 1, engine="wake", model=MICRO))
        self.open_rounds = _Rounds(Scheduler("wake-open", workers, workers, engine="wake", model=OPEN))
        self.schedulers = (self.micro_rounds.scheduler, self.open_rounds.scheduler)
        self._listening: Counter[str] = Counter()  # streams open for each model, read by /metrics' thread
        self._listening_lock = threading.Lock()

    def refresh(self) -> None:
        """Pick up model files and manifest changes (blocking: reads a folder)."""
        self.models.refresh()

    def resolve(self, names: Sequence[str]) -> list[tuple[str, WakeModel]]:
        """The models a request names, or else okay_nabu, or else the first offered; a name not offered is an error.

        One detector per model, however many spellings name it (`okay_nabu`, `OKAY_NABU`, `ok_nabu_v0.1`): its
        detections carry the name the request gave it first.
        """
        if len(names) > MAX_NAMES:
            raise BadRequest(f"Too many wake words: {len(names)} named, at most {MAX_NAMES} may be")
        offered = self.models.models
        if not names:
            names = [DEFAULT_WAKE_WORD if DEFAULT_WAKE_WORD in offered or not offered else next(iter(offered))]
        chosen: dict[str, tuple[str, WakeModel]] = {}  # by model
        for name in names:
            found = self.models.find(name)
            if found is None:
                loaded = ", ".join(offered) or "none (--wake-model)"
                raise UnknownWakeWord(f"Unknown wake word {quote(name)} (loaded: {loaded})")
            chosen.setdefault(found[1].name, found)
        if self.settings.wake_cutoff is not None:
            return [(name, replace(model, cutoff=self.settings.wake_cutoff)) for name, model in chosen.values()]
        return list(chosen.values())

    def open(self, names: Sequence[str], hold: Hold, on_heard: OnHeard, max_seconds: float = math.inf) -> WakeStream:
        chosen = self.resolve(names)
        stream = WakeStream(self, chosen, hold, on_heard, max_seconds=max_seconds)
        stream.reserve(0)  # its detectors and the audio it may keep, counted before anything is loaded for it
        self._count(stream, 1)
        return stream

    def _count(self, stream: WakeStream, change: int) -> None:
        with self._listening_lock:
            self._listening.update({model.name: change for _, model in stream.chosen})

    def entries(self) -> list[Entry]:
        """The models offered, with the streams listening for each; their calls are counted by family in /metrics,
        under `wake`."""
        with self._listening_lock:
            listening = dict(self._listening)
        return [
            Entry(
                model.name,
                model.family,
                model.languages,
                True,
                model.version,
                model.description,
                phrase=model.phrase,
                streams=listening.get(model.name, 0),
            )
            for model in self.models.models.values()
        ]

    def close(self) -> None:
        for scheduler in self.schedulers:
            scheduler.close()


class _Rounds:
    """The rounds of one scheduler: at most one per worker, so its queue never refuses one (the streams are
    bounded by the memory budget and the connection limits, not by --queue-size)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.ready: dict[WakeStream, None] = {}  # streams with audio kept and in no round, oldest first
        self._rounds = 0  # running or queued

    def hear_soon(self, stream: WakeStream) -> None:
        """On the loop: a stream has audio kept; a round will take it, started now if a worker is free."""
        self.ready[stream] = None
        if self._rounds < self.scheduler.workers:
            self._rounds += 1
            # not on any request's deadline: a stream that lasts all day is not late
            contextvars.Context().run(asyncio.create_task, self._round())

    async def _round(self) -> None:
        try:
            while self.ready:
                streams = list(self.ready)
                self.ready.clear()
                work = [(stream, stream._take()) for stream in streams]
                cost = sum(audio_format.seconds(len(pcm)) for _, pieces in work for pcm, audio_format in pieces)
                errors: list[BaseException | None]
                try:
                    errors = await self.scheduler.run(_hear_round, asyncio.get_running_loop(), work, cost=cost)
                except Exception as err:  # the engine is closing: every stream in the round ends with it
                    errors = [err] * len(work)
                except asyncio.CancelledError as err:  # the loop is stopping
                    for stream, pieces in work:
                        stream._heard(pieces, err)
                    raise
                for (stream, pieces), error in zip(work, errors, strict=True):
                    stream._heard(pieces, error)
        finally:
            self._rounds -= 1


def _hear_round(
    loop: asyncio.AbstractEventLoop, work: list[tuple[WakeStream, list[tuple[bytes, AudioFormat]]]]
) -> list[BaseException | None]:
    """In a worker thread: each stream's pieces, heard, its detections handed to the loop at once (a round of many
    streams takes a while); a stream whose hearing fails gets its error, not the others."""
    errors: list[BaseException | None] = []
    for stream, pieces in work:
        try:
            heard = stream._listen(pieces)
        except Exception as err:  # noqa: BLE001  (it ends that stream, with its error for its client)
            errors.append(err)
            continue
        if heard:
            loop.call_soon_threadsafe(stream._announce, heard)
        errors.append(None)
    return errors


class WakeStream:
    """One client's audio, heard for the wake words it asked for until it closes."""

    def __init__(
        self,
        engine: WakeEngine,
        chosen: list[tuple[str, WakeModel]],
        hold: Hold,
        on_heard: OnHeard,
        *,
        max_seconds: float = math.inf,
    ) -> None:
        self.engine = engine
        self.max_seconds = max_seconds
        self.seconds = 0.0  # of audio fed
        self.chosen = chosen
        self.names = [name for name, _ in chosen]
        self.heard: list[Heard] = []
        self._hold = hold
        self._on_heard = on_heard
        self._listener: Listener | None = None
        self._kept: list[tuple[bytes, AudioFormat]] = []
        self._kept_bytes = 0  # of audio kept, not heard yet (in a round or waiting for one)
        self._caught_up = asyncio.Event()  # set each time a round has heard some of it
        self._in_round = False
        self._delivered: asyncio.Task[None] | None = None  # the detections last handed to on_heard
        self._failed: BaseException | None = None
        self._state = threading.Lock()  # guards _closed and _busy, between the loop and the worker thread
        self._closed = False
        self._busy = False  # a worker thread is using the detectors
        self.opened = time.monotonic()
        self._rounds = engine.micro_rounds if all(model.family == MICRO for _, model in chosen) else engine.open_rounds

    async def feed(self, pcm: bytes, audio_format: AudioFormat) -> None:
        """Keep a piece of audio to be heard, once there is room; raises the error that ended the stream, if one did."""
        while self._kept_bytes + len(pcm) > MAX_KEPT_BYTES and self._kept_bytes and self._failed is None:
            self._caught_up.clear()
            await self._caught_up.wait()
        if self._failed is not None:
            raise self._failed
        self._keep(pcm, audio_format)

    async def feed_samples(self, samples: np.ndarray) -> None:
        """Keep 16 kHz float32 audio from a live source (a browser's microphone), which cannot be made to wait:
        one the CPU has fallen MAX_KEPT_BYTES behind gets Busy."""
        if self._failed is not None:
            raise self._failed
        pcm = s16(samples)
        if self._kept_bytes and self._kept_bytes + len(pcm) > MAX_KEPT_BYTES:
            raise Busy("Wake word detection has fallen behind this stream: the server is overloaded")
        self._keep(pcm, NATIVE)

    def _keep(self, pcm: bytes, audio_format: AudioFormat) -> None:
        if not pcm or self._closed:
            return
        self.seconds += audio_format.seconds(len(pcm))
        if self.seconds > self.max_seconds:
            raise AudioTooLong(f"Audio is longer than the limit of {self.max_seconds:g} seconds")
        self._kept.append((pcm, audio_format))
        self._kept_bytes += len(pcm)
        if not self._in_round:
            self._rounds.hear_soon(self)

    def reserve(self, size: int) -> None:
        """Count a buffer the frontend keeps for this stream (a decoded upload) in its share of the memory budget,
        before it is allocated; raises Busy if the budget cannot take it."""
        self._hold.set(footprint(self.chosen) + MAX_KEPT_BYTES + size)

    async def drain(self) -> list[Heard]:
        """Wait until everything fed is heard and its detections handed on; returns every detection of the stream."""
        while self._kept_bytes and self._failed is None and not self._closed:
            self._caught_up.clear()
            await self._caught_up.wait()
        while self._delivered is not None and not self._delivered.done():
            await asyncio.shield(self._delivered)
        if self._failed is not None:
            raise self._failed
        return self.heard

    def close(self) -> None:
        """Stop hearing. The detectors are freed now, or by the worker thread using them when its call ends."""
        self._kept_bytes -= sum(len(pcm) for pcm, _ in self._kept)  # what a running round took is still counted
        self._kept.clear()
        self._caught_up.set()
        self._rounds.ready.pop(self, None)  # a round already running ends its call in its thread
        if self._delivered is not None:
            self._delivered.cancel()
        with self._state:
            if self._closed:
                return
            self._closed = True
            if not self._busy:
                self._free()
        self._hold.close()
        self.engine._count(self, -1)

    def _free(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _take(self) -> list[tuple[bytes, AudioFormat]]:
        """On the loop, for a round: the oldest pieces kept, up to ROUND_SECONDS of audio (one at least)."""
        self._in_round = True
        taken, seconds = 0, 0.0
        while taken < len(self._kept) and (not taken or seconds < ROUND_SECONDS):
            pcm, audio_format = self._kept[taken]
            seconds += audio_format.seconds(len(pcm))
            taken += 1
        pieces, self._kept = self._kept[:taken], self._kept[taken:]
        return pieces

    def _announce(self, heard: list[Heard]) -> None:
        """On the loop, as soon as a round has heard the phrase in this stream: hand the detections on."""
        if not self._closed:
            self.heard += heard
            self._delivered = asyncio.create_task(self._deliver(self._delivered, heard))

    def _heard(self, pieces: list[tuple[bytes, AudioFormat]], error: BaseException | None) -> None:
        """On the loop, when the round that heard this stream's pieces ends (its detections were announced): ask
        for the next round if more audio came meanwhile."""
        self._in_round = False
        self._kept_bytes -= sum(len(pcm) for pcm, _ in pieces)
        if error is not None:
            self._failed = self._failed or error  # the next feed or drain raises it to the client
            self._kept.clear()
            self._kept_bytes = 0
        self._caught_up.set()
        if self._kept and not self._closed and self._failed is None:
            self._rounds.hear_soon(self)

    async def _deliver(self, before: asyncio.Task[None] | None, heard: list[Heard]) -> None:
        """Hand detections to the frontend in order, each stream on its own: a client slow to take its detection
        holds up no other stream's round."""
        if before is not None:
            await asyncio.wait([before])  # its own error, if any, is the stream's already
        try:
            for detection in heard:
                await self._on_heard(detection)
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # the next feed or drain raises it to the client
            self._failed = self._failed or err
            self._caught_up.set()

    def _listen(self, pieces: list[tuple[bytes, AudioFormat]]) -> list[Heard]:
        """In a worker thread: load the detectors the first time, then hear the pieces."""
        with self._state:
            if self._closed:
                return []
            self._busy = True
        try:
            if self._listener is None:
                self._listener = Listener.open(self.chosen, self.engine.settings.wake_refractory_seconds)
            return self._listener.feed(pieces)
        finally:
            with self._state:
                self._busy = False
                if self._closed:  # closed while this call ran: nobody else may free them
                    self._free()
