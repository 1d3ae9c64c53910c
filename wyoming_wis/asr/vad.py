"""Where the speech is: Silero VAD (the copy faster-whisper ships) over a growing buffer.

Silero is a recurrent model: it scores each 32 ms window with the state left
by the windows before. Run that way, one window after the other, a buffer
that grows is scored once, as it arrives, and the scores do not depend on how
the audio was split. From the scores come the windows Whisper decodes:
speech with a little padding, silence before and after cut off, and long
audio split at pauses into pieces that fit one Whisper window.
"""

from __future__ import annotations

import threading

import numpy as np
from faster_whisper.vad import get_vad_model

from ..audio import WHISPER_RATE

WINDOW = 512  # samples Silero scores at a time
_CONTEXT = 64  # samples before a window that Silero also sees
THRESHOLD = 0.5  # a window at or above this is speech (faster-whisper's default)
PAD = int(0.3 * WHISPER_RATE)  # kept after speech; also the pause after which speech counts as ended
LEAD = int(1.0 * WHISPER_RATE)  # kept before speech: Whisper hears the first word better with its run-up
MIN_GAP = int(0.5 * WHISPER_RATE)  # a pause at least this long may split long audio
MAX_JOIN_GAP = int(2 * WHISPER_RATE)  # stretches further apart are decoded apart, so silence costs nothing
MAX_PIECE = int(25 * WHISPER_RATE)  # longest piece decoded at once, leaving Whisper's window room to spare
_SPLIT_SEARCH = int(10 * WHISPER_RATE)  # a piece without pauses is cut at its quietest point in its last 10 s

Piece = tuple[int, int]  # [start, end) in samples


class SpeechDetector:
    """Speech probabilities for a buffer that only grows; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probs = np.zeros(0, dtype=np.float32)
        self._state = np.zeros((2, 1, 1, 128), dtype=np.float32)  # Silero's h and c
        self._context = np.zeros(_CONTEXT, dtype=np.float32)

    @property
    def scored(self) -> int:
        """Samples scored so far (whole windows only)."""
        return len(self._probs) * WINDOW

    def update(self, audio: np.ndarray) -> None:
        """Score the windows of `audio` (the whole buffer so far) not scored yet; blocking."""
        with self._lock:
            session = get_vad_model().session
            done, total = len(self._probs), len(audio) // WINDOW
            probs = np.empty(max(0, total - done), dtype=np.float32)
            for index in range(done, total):
                window = audio[index * WINDOW : (index + 1) * WINDOW].astype(np.float32, copy=False)
                inputs = {
                    "input": np.concatenate([self._context, window])[None],
                    "h": self._state[0],
                    "c": self._state[1],
                }
                prob, self._state[0], self._state[1] = session.run(None, inputs)
                probs[index - done] = prob.item()
                self._context = window[-_CONTEXT:]
            self._probs = np.concatenate([self._probs, probs])

    def speech_end(self) -> int | None:
        """End of the last window of speech scored so far; None if there was none."""
        speech = np.flatnonzero(self._probs >= THRESHOLD)
        return None if len(speech) == 0 else int(speech[-1] + 1) * WINDOW

    def speech_start(self) -> int | None:
        """Start of the first window of speech scored so far; None if there was none."""
        speech = np.flatnonzero(self._probs >= THRESHOLD)
        return None if len(speech) == 0 else int(speech[0]) * WINDOW

    def pieces(self, length: int, joined: bool = True) -> list[Piece]:
        """The stretches of the first `length` samples worth decoding, each at most MAX_PIECE long.

        Pauses shorter than MIN_GAP stay inside a piece, and pieces are joined
        while they fit (unless not `joined`), so Whisper keeps as much context as it can.
        """
        probs = self._probs[: -(-length // WINDOW)]
        runs: list[Piece] = []  # speech, with its short pauses inside
        for first, last in _runs(probs >= THRESHOLD):
            start, end = first * WINDOW, last * WINDOW
            if runs and start - runs[-1][1] < MIN_GAP:
                start = runs.pop()[0]
            runs.append((start, end))
        stretches: list[Piece] = []
        for start, end in runs:
            stretches.append((max(start - LEAD, stretches[-1][1] if stretches else 0), min(length, end + PAD)))
        return _fit(stretches, probs, joined)

    def everything(self, length: int) -> list[Piece]:
        """The first `length` samples whole, in pieces that fit a Whisper window: what a transcript decodes where
        the detector heard no speech at all, so that Whisper, not the detector, says whether there was any (far
        from the microphone, in reverb and noise, Silero can score speech low)."""
        return _fit([(0, length)], self._probs[: -(-length // WINDOW)], joined=True)


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index ranges where `flags` is true."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _fit(stretches: list[Piece], probs: np.ndarray, joined: bool) -> list[Piece]:
    """Join close stretches up to MAX_PIECE (if `joined`); cut longer ones at their quietest window."""
    pieces: list[Piece] = []
    for start, end in stretches:
        while end - start > MAX_PIECE:
            first, last = (start + MAX_PIECE - _SPLIT_SEARCH) // WINDOW, (start + MAX_PIECE) // WINDOW
            cut = (first + int(np.argmin(probs[first:last]))) * WINDOW
            pieces.append((start, cut))
            start = cut
        if joined and pieces and start - pieces[-1][1] <= MAX_JOIN_GAP and end - pieces[-1][0] <= MAX_PIECE:
            start = pieces.pop()[0]
        pieces.append((start, end))
    return pieces
