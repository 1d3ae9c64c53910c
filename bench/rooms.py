"""Far-field audio, made the same way on every run: speech in a simulated room, with noise.

Home Assistant 2026.11 tells a satellite that our speech-to-text prefers no auto gain and no noise suppression, so
a Voice PE sends its raw microphone channel: speech from across a room, with its reverb, and whatever else is
sounding. This makes such audio from close-talk recordings, for bench/farfield.py:

- rooms: pyroomacoustics' image-source method (no randomness), a 5 x 4 x 2.7 m room whose walls are set so the
  impulse response measures the asked RT60, the talker 2.8 m from a microphone on a shelf;
- noises from fixed seeds: pink and brown noise, mains hum (50 Hz and its harmonics), and babble (four other
  voices at once, as a TV in the room);
- levels: the speech at -26 dBFS (over its active 20 ms frames), each noise at the asked SNR against that, the
  noise running 0.3 s before the speech and 0.5 s after it, as a satellite streams from its wake word.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyroomacoustics as pra
from common import RATE, Pcm
from scipy.signal import fftconvolve

SPEECH_DBFS = -26.0
LEAD_S, TAIL_S = 0.3, 0.5  # noise before and after the speech
ROOM = (5.0, 4.0, 2.7)  # metres
TALKER, MICROPHONE = (3.6, 2.2, 1.6), (1.0, 1.5, 0.9)  # 2.8 m apart
FRAME = RATE // 50  # 20 ms, for the active speech level
HUM_HARMONICS = (1.0, 0.6, 0.4, 0.25, 0.15)  # relative amplitudes of 50, 100, ... 250 Hz
BABBLE_VOICES = 4


@dataclass(frozen=True)
class Condition:
    """One way a recording reaches the microphone: a room (its RT60; None: none), a noise and its SNR."""

    rt60: float | None = None
    noise: str | None = None  # pink, brown, hum, babble
    snr: float | None = None  # dB, speech over noise

    @property
    def name(self) -> str:
        parts = [f"room {self.rt60:g} s" if self.rt60 else "", f"{self.noise} {self.snr:g} dB" if self.noise else ""]
        return " + ".join(part for part in parts if part) or "clean"


NOISES = ("pink", "brown", "hum", "babble")
CONDITIONS = (
    Condition(),
    Condition(rt60=0.4),
    Condition(rt60=0.8),
    *(Condition(noise=noise, snr=snr) for noise in NOISES for snr in (20.0, 10.0, 5.0)),
    Condition(rt60=0.4, noise="brown", snr=10.0),
    Condition(rt60=0.4, noise="hum", snr=10.0),
    Condition(rt60=0.8, noise="pink", snr=10.0),
    Condition(rt60=0.8, noise="babble", snr=10.0),
)


def active_level(audio: np.ndarray) -> float:
    """RMS over the 20 ms frames within 40 dB of the loudest: the speech, not the silence around it."""
    frames = audio[: len(audio) // FRAME * FRAME].reshape(-1, FRAME)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    return float(np.sqrt(np.mean(rms[rms > rms.max() / 100] ** 2)))


@functools.cache
def impulse_response(rt60: float) -> np.ndarray:
    """The room's response from talker to microphone, its walls set so that it measures `rt60` (Sabine's formula
    gives image-source rooms a longer decay than asked: the asked time is corrected until it measures right)."""
    asked = rt60
    for _ in range(4):
        absorption, order = pra.inverse_sabine(asked, ROOM)
        room = pra.ShoeBox(list(ROOM), fs=RATE, materials=pra.Material(absorption), max_order=order)
        room.add_source(list(TALKER))
        room.add_microphone(list(MICROPHONE))
        room.compute_rir()
        response = np.asarray(room.rir[0][0])
        measured = pra.experimental.measure_rt60(response, fs=RATE)
        if abs(measured - rt60) < 0.02:
            break
        asked *= rt60 / measured
    return response / np.abs(response).max()


def noise(kind: str, length: int, seed: int, voices: Sequence[np.ndarray] = ()) -> np.ndarray:
    """`length` samples of a noise at an arbitrary level, the same for the same seed."""
    rng = np.random.default_rng(seed)
    if kind in ("pink", "brown"):
        spectrum = np.fft.rfft(rng.standard_normal(length))
        frequencies = np.maximum(np.fft.rfftfreq(length, 1 / RATE), 20.0)  # nothing below 20 Hz grows without end
        spectrum /= np.sqrt(frequencies) if kind == "pink" else frequencies
        return np.fft.irfft(spectrum, length)
    if kind == "hum":
        t = np.arange(length) / RATE
        tones = sum(
            a * np.sin(2 * np.pi * 50 * (k + 1) * t + rng.uniform(0, 2 * np.pi)) for k, a in enumerate(HUM_HARMONICS)
        )
        return tones + 0.05 * rng.standard_normal(length)  # the buzz is never a pure tone
    if kind == "babble":
        mix = np.zeros(length)
        for index in rng.choice(len(voices), size=min(BABBLE_VOICES, len(voices)), replace=False):
            voice = voices[index] / (active_level(voices[index]) or 1.0)
            looped = np.tile(voice, length // len(voice) + 2)
            start = rng.integers(len(voice))
            mix += looped[start : start + length]
        return mix
    raise ValueError(f"unknown noise {kind!r}")


def delay(condition: Condition) -> float:
    """Seconds from the talker to the microphone: how much later a rendered sound arrives (its direct path)."""
    if not condition.rt60:
        return 0.0
    response = impulse_response(condition.rt60)
    return int(np.argmax(np.abs(response) >= 0.5 * np.abs(response).max())) / RATE


def render(
    speech: Pcm,
    condition: Condition,
    name: str,
    others: Sequence[Pcm] = (),
    lead_s: float = LEAD_S,
    tail_s: float = TAIL_S,
) -> Pcm:
    """`speech` as a room microphone hears it under `condition`, with `lead_s` and `tail_s` more of the room (its
    noise) before and after its sound (the reverb's tail included); `others` are voices for babble (not
    `speech`). The noise's seed comes from `name` and the condition, so each clip gets its own noise, the same
    every run. A sound in `speech` is heard `lead_s` + `delay(condition)` later in the result."""
    audio = speech.floats(np.float64)
    if condition.rt60:
        audio = fftconvolve(audio, impulse_response(condition.rt60))
    audio = np.concatenate([np.zeros(int(lead_s * RATE)), audio, np.zeros(int(tail_s * RATE))])
    level = active_level(audio)
    audio *= 10 ** (SPEECH_DBFS / 20) / level
    if condition.noise:
        seed = zlib.crc32(f"{name}|{condition.name}".encode())
        added = noise(condition.noise, len(audio), seed, [other.floats(np.float64) for other in others])
        assert condition.snr is not None
        audio += added * (10 ** (SPEECH_DBFS / 20) / 10 ** (condition.snr / 20)) / np.sqrt(np.mean(added**2))
    return Pcm.from_floats(audio)
