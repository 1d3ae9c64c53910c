"""A session's audio: 16 kHz samples, counted in the memory budget before they are held.

The buffer grows by doubling, each size counted in the session's share of the budget (`Hold`) first, up to the
audio limit; a decoded file is kept as it is, not copied. It remembers when its recent audio arrived, so that a
turn's end can say when its last speech came (the wait a client feels runs from then). Once the server has ended
the turn, the turn's audio is what the session hears (`audio`); what came after is the start of a next turn.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from ..audio import WHISPER_RATE
from ..budget import Hold

_ARRIVALS = 256  # recent feeds remembered, to tell when the last speech arrived


class AudioBuffer:
    def __init__(self, hold: Hold, max_seconds: float) -> None:
        self.hold = hold
        self.max_seconds = max_seconds
        self.samples = 0  # kept so far
        self._array = np.zeros(0, dtype=np.float32)  # grows by doubling; the first `samples` are audio
        self._turn: np.ndarray | None = None  # the audio of a turn the session ended
        self._arrivals: deque[tuple[int, float]] = deque(maxlen=_ARRIVALS)  # (samples kept, when)

    def append(self, samples: np.ndarray) -> None:
        """Keep samples, growing the buffer (counted in the budget first) by doubling, up to the audio limit."""
        end = self.samples + len(samples)
        if self.samples == 0 and samples.dtype == np.float32 and samples.flags.owndata and samples.flags.writeable:
            self.hold.set(samples.nbytes)  # a decoded file: kept as it is, not copied
            self._array = samples
        else:
            if end > len(self._array):
                most = int(self.max_seconds * WHISPER_RATE) + WHISPER_RATE  # a resampler may add a few samples
                size = max(end, min(max(2 * len(self._array), WHISPER_RATE), most))
                self.hold.set(size * 4)
                grown = np.zeros(size, dtype=np.float32)
                grown[: self.samples] = self._array[: self.samples]
                self._array = grown
            self._array[self.samples : end] = samples
        self.samples = end

    def growth_bytes(self, more: int) -> int:
        """Bytes copied to grow the buffer for `more` samples: all of it where it must grow, else none."""
        return self.samples * self._array.itemsize if self.samples + more > len(self._array) else 0

    def arrived(self) -> None:
        """What is kept now has arrived now."""
        self._arrivals.append((self.samples, time.perf_counter()))

    def arrival(self, sample: int) -> float | None:
        """When `sample` arrived (`time.perf_counter()`), if it is recent enough to be remembered."""
        return next((when for kept, when in self._arrivals if kept >= sample), None)

    def end_turn(self, turn: np.ndarray) -> None:
        """The server has ended the turn: `turn` (the audio up to its end) is what the session hears from now."""
        self._turn = turn

    @property
    def turn_ended(self) -> bool:
        return self._turn is not None

    def audio(self) -> np.ndarray:
        """All audio so far, or the turn's once it has ended; a view that later audio does not change."""
        return self._array[: self.samples] if self._turn is None else self._turn

    def since(self, sample: int) -> np.ndarray:
        """A copy of the audio kept from `sample` on."""
        return self._array[sample : self.samples].copy()

    def until(self, sample: int) -> np.ndarray:
        """The audio kept up to `sample` (a view)."""
        return self._array[:sample]
