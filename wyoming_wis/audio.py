"""Audio formats and conversion, all through PyAV (libswresample).

Whisper wants 16 kHz mono float32; clients send whatever rate, width and channel
count they have. `PcmConverter` is stateful so audio that arrives in pieces is
resampled as one continuous signal.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

from .errors import UnsupportedAudioFormat

WHISPER_RATE = 16000
MIN_RATE = 1000
MAX_RATE = 384000
MAX_CHANNELS = 16

# Sample width in bytes -> PyAV packed sample format (WAV conventions: 8-bit is unsigned).
_SAMPLE_FORMATS = {1: ("u8", np.uint8), 2: ("s16", np.int16), 4: ("s32", np.int32)}


@dataclass(frozen=True)
class AudioFormat:
    """Raw PCM layout: samples per second, bytes per sample, channels."""

    rate: int
    width: int
    channels: int

    @property
    def bytes_per_frame(self) -> int:
        return self.width * self.channels

    def seconds(self, num_bytes: int) -> float:
        return num_bytes / (self.bytes_per_frame * self.rate)

    def validate(self) -> AudioFormat:
        """Raise UnsupportedAudioFormat unless PCM in this format can be converted."""
        problems = []
        if not MIN_RATE <= self.rate <= MAX_RATE:
            problems.append(f"rate {self.rate} Hz (supported: {MIN_RATE}-{MAX_RATE})")
        if self.width not in _SAMPLE_FORMATS:
            problems.append(f"width {self.width} bytes (supported: 1, 2, 4)")
        if not 1 <= self.channels <= MAX_CHANNELS:
            problems.append(f"{self.channels} channels (supported: 1-{MAX_CHANNELS})")
        if problems:
            raise UnsupportedAudioFormat("Unsupported audio format: " + ", ".join(problems))
        return self


class PcmConverter:
    """Convert a stream of PCM bytes in one format to 16 kHz mono float32."""

    def __init__(self, source: AudioFormat, rate: int = WHISPER_RATE) -> None:
        self.source = source.validate()
        self._sample_format, self._dtype = _SAMPLE_FORMATS[source.width]
        self._layout = av.AudioLayout("mono" if source.channels == 1 else f"{source.channels}c")
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        self._remainder = b""  # bytes of an incomplete frame, kept for the next piece

    def convert(self, pcm: bytes) -> np.ndarray:
        data = self._remainder + pcm
        usable = len(data) - len(data) % self.source.bytes_per_frame
        self._remainder = data[usable:]
        if usable == 0:
            return np.zeros(0, dtype=np.float32)
        samples = np.frombuffer(data[:usable], dtype=self._dtype).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format=self._sample_format, layout=self._layout)
        frame.sample_rate = self.source.rate
        return self._collect(self._resampler.resample(frame))

    def flush(self) -> np.ndarray:
        """Return what the resampler still holds; call once at the end of the stream."""
        return self._collect(self._resampler.resample(None))

    @staticmethod
    def _collect(frames: list[av.AudioFrame]) -> np.ndarray:
        if not frames:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([frame.to_ndarray()[0] for frame in frames])


def chunks(pcm: bytes, size: int) -> Iterator[bytes]:
    """Split PCM into pieces of at most `size` bytes."""
    for start in range(0, len(pcm), size):
        yield pcm[start : start + size]
