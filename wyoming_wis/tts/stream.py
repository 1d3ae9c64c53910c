"""Text in, whole or in pieces as an LLM writes it; speech out, sentence by sentence.

Every frontend speaks through a SpeechStream: write text, close, and iterate the
PCM. Each complete sentence is synthesised as soon as it is known, so the first
audio leaves before the rest of the text has even arrived.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sentence_stream import SentenceBoundaryDetector

from ..errors import TextTooLong
from .piper import PiperEngine


class SpeechStream:
    def __init__(self, voice: PiperEngine, speaker: str | None, max_chars: int) -> None:
        self.voice = voice
        self.format = voice.format  # one format for the whole stream
        self._speaker_id = voice.speaker_id(speaker)
        self._max_chars = max_chars
        self._chars = 0
        self._detector = SentenceBoundaryDetector()
        self._sentences: asyncio.Queue[str | None] = asyncio.Queue()

    def write(self, text: str) -> None:
        """Add text; raises TextTooLong once the stream passes the limit."""
        self._chars += len(text)
        if self._chars > self._max_chars:
            raise TextTooLong(f"Text is longer than the limit of {self._max_chars} characters")
        for sentence in self._detector.add_chunk(text):
            self._put(sentence)

    def close(self) -> None:
        """No more text: what is left becomes the last sentence."""
        self._put(self._detector.finish())
        self._sentences.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """PCM of each sentence, in order, as soon as it is synthesised."""
        while (sentence := await self._sentences.get()) is not None:
            yield await self.voice.synthesize(sentence, self._speaker_id)

    def _put(self, sentence: str) -> None:
        if sentence.strip():
            self._sentences.put_nowait(sentence.strip())
