"""The one ASR session type: audio in as it arrives, a transcript out at the end.

Wyoming audio chunks, an HTTP body and a WebRTC track all feed a session the
same way. Audio of any PCM format is converted to 16 kHz mono as it arrives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..audio import AudioFormat, PcmConverter
from ..errors import AudioTooLong

if TYPE_CHECKING:
    from .engine import Transcript, WhisperEngine


class AsrSession:
    def __init__(self, engine: WhisperEngine, language: str | None, max_seconds: float) -> None:
        self.engine = engine
        self.language = language  # None: detect
        self.max_seconds = max_seconds
        self.seconds = 0.0  # audio received so far
        self._converter: PcmConverter | None = None
        self._pieces: list[np.ndarray] = []

    def feed(self, pcm: bytes, audio_format: AudioFormat) -> None:
        """Add audio; the format may change between pieces."""
        if self._converter is None or self._converter.source != audio_format:
            self._flush()
            self._converter = PcmConverter(audio_format)
        self.seconds += audio_format.seconds(len(pcm))
        if self.seconds > self.max_seconds:
            raise AudioTooLong(f"Audio is longer than the limit of {self.max_seconds:g} seconds")
        self._pieces.append(self._converter.convert(pcm))

    async def finish(self) -> Transcript:
        """Transcribe everything fed so far."""
        self._flush()
        audio = np.concatenate(self._pieces) if self._pieces else np.zeros(0, dtype=np.float32)
        self._pieces = []
        return await self.engine.transcribe(audio, self.language)

    def _flush(self) -> None:
        if self._converter is not None:
            self._pieces.append(self._converter.flush())
            self._converter = None
