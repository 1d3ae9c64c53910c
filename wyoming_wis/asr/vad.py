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
# The least silence after speech that may be a pause (a sentence's end, a turn's): two windows. The VAD finds
# one-window gaps between words all the time.
PAUSE = 2 * WINDOW
LEAD = int(1.0 * WHISPER_RATE)  # kept before speech: Whisper hears the first word better with its run-up
MIN_GAP = int(0.5 * WHISPER_RATE)  # a pause at least this long may split long audio
MAX_JOIN_GAP = int(2 * WHISPER_RATE)  # stretches further apart are decoded apart, so silence costs nothing
MAX_PIECE = int(25 * WHISPER_RATE)  # longest piece decoded at once, leaving Whisper's window room to spare
_SPLIT_SEARCH = int(10 * WHISPER_RATE)  # a piece without pauses is cut at its quietest point in its last 10 s
# A stream that starts in speech, before its speaker has begun (they have just said the wake word), hears someone
# else: a TV or a conversation across the room, which Silero hears as speech, and goes on hearing after the speaker
# has stopped. Silero starts a stream cold and scores a talker across the room low in its first windows, so one
# lead-in window at LEAD_IN_VOICE says someone is there (pink, brown or hum noise, even at 5 dB, never reach it).
# Where the speaker is FOREGROUND_DB louder than that background, the speaker's own speech is told from it by
# level: windows louder than the background by FOREGROUND_SHARE of the way (in dB) to the loudest speech. Levels
# are averaged over LEVEL_SPAN windows (about 0.3 s), so that the soft syllables inside a speaker's words do not
# count as someone else's. Measured on bench/endpoint.py's corpus in bench/rooms.py's rooms (BENCHMARKS.md): never
# on in clean speech, fan noise, hum or reverb; under a TV at 10 dB in a 0.8 s room, 68 of 69 turns ended a median
# 1.6 s after the last word (before, 9 of 10 waited for the 15 s), none of them cut.
LEAD_IN = 8  # windows (0.26 s) at the start of a stream: the background's level
LEAD_IN_VOICE = 0.2  # (two at THRESHOLD missed 30 of 138 turns under a TV in a 0.8 s room, this 1)
FOREGROUND_DB = 10.0
FOREGROUND_SHARE = 0.45  # of 141 such turns, 0.55 would end 4 before their last word, 0.35 18 more than 4 s after
LEVEL_SPAN = 10

Piece = tuple[int, int]  # [start, end) in samples


class SpeechDetector:
    """Speech probabilities for a buffer that only grows; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probs = np.zeros(0, dtype=np.float32)
        self._power = np.zeros(0, dtype=np.float32)  # each window's mean square
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
            windows = audio[done * WINDOW : total * WINDOW].astype(np.float32, copy=False).reshape(-1, WINDOW)
            power = np.mean(np.square(windows), axis=1, dtype=np.float32)
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
            self._power = np.concatenate([self._power, power])

    def speech_end(self) -> int | None:
        """End of the last window of speech scored so far; None if there was none."""
        speech = np.flatnonzero(self._probs >= THRESHOLD)
        return None if len(speech) == 0 else int(speech[-1] + 1) * WINDOW

    def foreground_end(self) -> int | None:
        """End of the last window of the speaker's own speech, where someone else spoke from the stream's start
        (LEAD_IN) and the speaker is louder (FOREGROUND_DB); None where nobody else did, or the speaker is not.

        Silero goes on hearing a TV after the speaker's last word; this does not. A stream that starts in silence
        (the speaker alone, or a quiet room) gets None: `speech_end()` is the end there.
        """
        probs, power = self._probs, self._power  # (without the lock: `update` may be replacing them, one at a time)
        scored = min(len(probs), len(power))
        speech, power = probs[:scored] >= THRESHOLD, power[:scored]
        if scored <= LEAD_IN or probs[:LEAD_IN].max() < LEAD_IN_VOICE or not speech.any():
            return None
        level = _centred_mean(power, LEVEL_SPAN)
        background, loud = float(np.median(power[:LEAD_IN])), float(np.max(level[speech]))
        if background <= 0 or loud < background * 10 ** (FOREGROUND_DB / 10):
            return None
        own = np.flatnonzero(speech & (level >= background * (loud / background) ** FOREGROUND_SHARE))
        return None if len(own) == 0 else int(own[-1] + 1) * WINDOW

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


def _centred_mean(values: np.ndarray, span: int) -> np.ndarray:
    """Each value's mean with its neighbours, `span` in all; at the ends, of those there are."""
    kernel, offset = np.ones(span), span // 2
    sums = np.convolve(values, kernel)[offset : offset + len(values)]
    counts = np.convolve(np.ones(len(values)), kernel)[offset : offset + len(values)]
    return sums / counts


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
