"""Wake words for many streams at once: each stream's audio is heard in the engine's worker threads.

A stream does not wait for its own audio to be heard: `feed` keeps the audio and returns, and the stream's one
pump takes everything kept so far to a worker at once. A stream whose audio comes in 10 ms pieces costs one call
per piece while the CPU keeps up and fewer, larger calls when it does not, so the server degrades by hearing
later, not by queueing a call per piece. What a stream may keep unheard is bounded (`MAX_KEPT_BYTES`): past it,
`feed` waits until the pump has caught up, so a client that sends faster than it is heard (a file, or a CPU
that cannot keep up) is slowed down by TCP instead of held in memory.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import numpy as np

from ..audio import NATIVE, AudioFormat, s16
from ..budget import Hold
from ..config import WakeSettings
from ..errors import AudioTooLong, Busy, UnknownWakeWord
from ..scheduler import Scheduler
from ..served import Entry
from .listener import Heard, Listener, footprint
from .models import WakeModel, WakeModels

_LOGGER = logging.getLogger(__name__)

MAX_STREAMS = 4096  # streams heard at once, at most (each holds half a megabyte of the memory budget at least)
MAX_KEPT_BYTES = 256 * 1024  # of a stream's audio waiting to be heard (8 s at 16 kHz); past it, `feed` waits
DEFAULT_WAKE_WORD = "okay_nabu"  # for a `detect` that names none, as both peers do (if offered)

OnHeard = Callable[[Heard], Awaitable[None]]


class WakeEngine:
    """The wake word models and the threads that run them for every stream."""

    def __init__(self, models: WakeModels, settings: WakeSettings, *, workers: int) -> None:
        self.models = models
        self.settings = settings
        # A stream has at most one call queued (its pump's), so the queue holds a call per stream: the streams
        # themselves are bounded by the memory budget and the connection limits, not by --queue-size.
        self.scheduler = Scheduler("wake", workers, MAX_STREAMS, engine="wake")

    def refresh(self) -> None:
        """Pick up model files and manifest changes (blocking: reads a folder)."""
        self.models.refresh()

    def resolve(self, names: Sequence[str]) -> list[tuple[str, WakeModel]]:
        """The models a request names (each as named), or else okay_nabu, or else the first offered; a name not
        offered is an error."""
        offered = self.models.models
        if not names:
            names = [DEFAULT_WAKE_WORD if DEFAULT_WAKE_WORD in offered or not offered else next(iter(offered))]
        chosen: list[tuple[str, WakeModel]] = []
        for name in dict.fromkeys(names):
            found = self.models.find(name)
            if found is None:
                loaded = ", ".join(offered) or "none (--wake-model)"
                raise UnknownWakeWord(f"Unknown wake word {name!r} (loaded: {loaded})")
            chosen.append(found)
        if self.settings.wake_cutoff is not None:
            chosen = [(name, replace(model, cutoff=self.settings.wake_cutoff)) for name, model in chosen]
        return chosen

    def open(self, names: Sequence[str], hold: Hold, on_heard: OnHeard, max_seconds: float = math.inf) -> WakeStream:
        chosen = self.resolve(names)
        stream = WakeStream(self, chosen, hold, on_heard, max_seconds)
        stream.reserve(0)  # its detectors and the audio it may keep, counted before anything is loaded for it
        return stream

    def entries(self) -> list[Entry]:
        """The models offered; their one queue is the engine's, in /metrics under `wake`."""
        return [
            Entry(
                model.name,
                model.family,
                model.languages,
                True,
                model.version,
                model.description,
                phrase=model.phrase,
            )
            for model in self.models.models.values()
        ]

    def close(self) -> None:
        self.scheduler.close()


class WakeStream:
    """One client's audio, heard for the wake words it asked for until it closes."""

    def __init__(
        self,
        engine: WakeEngine,
        chosen: list[tuple[str, WakeModel]],
        hold: Hold,
        on_heard: OnHeard,
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
        self._kept_bytes = 0  # of audio kept, not heard yet
        self._caught_up = asyncio.Event()  # set each time the pump has heard what it took
        self._pump: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None
        self._state = threading.Lock()  # guards _closed and _busy, between the loop and the worker thread
        self._closed = False
        self._busy = False  # a worker thread is using the detectors
        self.opened = time.monotonic()

    async def feed(self, pcm: bytes, audio_format: AudioFormat) -> None:
        """Keep a piece of audio to be heard, once there is room; raises the error that ended the stream, if one did."""
        while self._kept_bytes and self._kept_bytes + len(pcm) > MAX_KEPT_BYTES and self._failed is None:
            self._caught_up.clear()
            await self._caught_up.wait()
        if self._failed is not None:
            raise self._failed
        self._keep(pcm, audio_format)

    def feed_samples(self, samples: np.ndarray) -> None:
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
        if self._pump is None or self._pump.done():
            # not on the request's deadline: a stream that lasts all day is not late
            self._pump = contextvars.Context().run(asyncio.create_task, self._hear())

    def reserve(self, size: int) -> None:
        """Count a buffer the frontend keeps for this stream (a decoded upload) in its share of the memory budget,
        before it is allocated; raises Busy if the budget cannot take it."""
        self._hold.set(footprint(self.chosen) + MAX_KEPT_BYTES + size)

    async def drain(self) -> list[Heard]:
        """Wait until everything fed is heard; returns every detection of the stream."""
        while self._pump is not None and not self._pump.done():
            await asyncio.shield(self._pump)
        if self._failed is not None:
            raise self._failed
        return self.heard

    def close(self) -> None:
        """Stop hearing. The detectors are freed now, or by the worker thread using them when its call ends."""
        self._kept.clear()
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()  # a call still queued is dropped; one running ends in its thread
        with self._state:
            if self._closed:
                return
            self._closed = True
            if not self._busy:
                self._free()
        self._hold.close()

    def _free(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    async def _hear(self) -> None:
        scheduler = self.engine.scheduler
        try:
            while self._kept and not self._closed:
                pieces, self._kept = self._kept, []
                seconds = sum(audio_format.seconds(len(pcm)) for pcm, audio_format in pieces)
                heard = await scheduler.run(self._listen, pieces, cost=seconds)
                self._kept_bytes -= sum(len(pcm) for pcm, _ in pieces)
                self._caught_up.set()
                for detection in heard:
                    self.heard.append(detection)
                    await self._on_heard(detection)
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # the next feed or drain raises it to the client
            self._failed = err
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
            heard: list[Heard] = []
            for pcm, audio_format in pieces:
                heard += self._listener.feed(pcm, audio_format)
            return heard
        finally:
            with self._state:
                self._busy = False
                if self._closed:  # closed while this call ran: nobody else may free them
                    self._free()
