"""Audio from a browser's track into an ASR session (or a wake word stream), resampled off the event loop.

aiortc hands over 20 ms frames of decoded Opus (48 kHz, s16, stereo). They are
kept until 60 ms have come, then resampled to 16 kHz mono float32 in a codec
thread and fed to the session: a thread hop per three frames rather than per
frame, and the session hears the end of speech about as soon as from a Wyoming
satellite (64 ms chunks), which is when it starts the final decode.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Protocol

import av
import numpy as np

from wyoming_wis.audio import WHISPER_RATE, mono_resampler

BATCH_SECONDS = 0.06


class Sink(Protocol):
    """Where the audio goes: an AsrSession, or a WakeStream."""

    async def feed_samples(self, samples: np.ndarray) -> None: ...


class Listener:
    """One utterance's audio: frames in as the track delivers them, samples into `session` in batches."""

    def __init__(self, session: Sink, executor: Executor | None = None) -> None:
        self.session = session
        self.stopped = False  # no more frames are taken once the utterance is stopped
        self._executor = executor
        self._resampler: av.AudioResampler | None = mono_resampler("flt", WHISPER_RATE)
        self._frames: list[av.AudioFrame] = []
        self._held = 0.0  # seconds in _frames
        self._lock = asyncio.Lock()  # one resampling at a time, in order

    def add(self, frame: av.AudioFrame) -> bool:
        """Keep a frame; True when a batch is due (then call `feed`)."""
        if self.stopped:
            return False
        self._frames.append(frame)
        self._held += frame.samples / frame.sample_rate
        return self._held >= BATCH_SECONDS

    async def feed(self) -> None:
        """Resample what is held and feed it; raises the session's WisError (e.g. audio too long)."""
        async with self._lock:
            await self._feed(flush=False)

    async def drain(self) -> None:
        """Take no more frames; feed everything held, in the resampler too."""
        self.stopped = True
        async with self._lock:
            await self._feed(flush=True)

    def close(self) -> None:
        """Free the resampler now: under PyAV before 18.1.1 its filter graph holds a thread per CPU (`mono_resampler`),
        and an utterance is only collected with its session (they refer to each other) when the garbage collector
        comes round."""
        self.stopped = True
        self._resampler = None

    async def _feed(self, flush: bool) -> None:
        frames, self._frames, self._held = self._frames, [], 0.0
        if not frames and not flush:
            return
        loop = asyncio.get_running_loop()
        samples = await loop.run_in_executor(self._executor, self._resample, frames, flush)
        if len(samples):
            await self.session.feed_samples(samples)

    def _resample(self, frames: list[av.AudioFrame], flush: bool) -> np.ndarray:
        resampler = self._resampler  # close() may come meanwhile; this call finishes with it
        out: list[av.AudioFrame] = []
        for frame in frames if resampler is not None else []:
            frame.pts = None  # a detached track leaves gaps in time; the session wants only the sound
            out += resampler.resample(frame)
        if flush and resampler is not None:
            out += resampler.resample(None)
        if not out:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([piece.to_ndarray()[0] for piece in out])
