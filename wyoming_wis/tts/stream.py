"""Text in, whole or in pieces as an LLM writes it; speech out, phrase by phrase.

Every frontend speaks through a SpeechStream: write text, close, and iterate the
PCM. Each complete sentence is synthesised as soon as it is known, so the first
audio leaves before the rest of the text has even arrived. The first sentence
goes faster still: its first clause ("Okay, I turned on the kitchen lights,")
is spoken as soon as it is written, while the rest of the sentence is still
coming, because a listener waits for the first sound and not for the last.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from sentence_stream import SentenceBoundaryDetector

from ..errors import TextTooLong
from .cache import SpeechCache, cache_key
from .normalize import normalize
from .params import SpeechParams
from .piper import PiperEngine

# A clause of at least 4 words ending in , ; : or a dash, followed by more text.
_FIRST_CLAUSE = re.compile(r"^\s*((?:\S+\s+){3,}?\S*[,;:\u2013\u2014])\s+(?=\S)")
_SENTENCE_END = re.compile(r"[.!?\u3002](?:\s|$)")


class SpeechStream:
    def __init__(
        self,
        voice: PiperEngine,
        speaker: str | None,
        max_chars: int,
        params: SpeechParams | None = None,
        cache: SpeechCache | None = None,
    ) -> None:
        self.voice = voice
        self.format = voice.format  # one format for the whole stream
        self.params = params or voice.params
        self.cache = cache
        self._speaker_id = voice.speaker_id(speaker)
        self._max_chars = max_chars
        self._chars = 0
        self._head: str | None = ""  # text before the first phrase is out; None once it is
        self._detector = SentenceBoundaryDetector()
        self._phrases: asyncio.Queue[str | None] = asyncio.Queue()

    def write(self, text: str) -> None:
        """Add text; raises TextTooLong once the stream passes the limit."""
        self._chars += len(text)
        if self._chars > self._max_chars:
            raise TextTooLong(f"Text is longer than the limit of {self._max_chars} characters")
        if self._head is not None:
            text = self._first_phrase(self._head + text)
        for sentence in self._detector.add_chunk(text):
            self._put(sentence)

    def close(self) -> None:
        """No more text: what is left becomes the last sentence."""
        if self._head:
            self._detector.add_chunk(self._head)
        self._head = None
        self._put(self._detector.finish())
        self._phrases.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """PCM of each phrase, in order, as soon as it is synthesised."""
        while (phrase := await self._phrases.get()) is not None:
            yield await self._speak(phrase)

    async def _speak(self, phrase: str) -> bytes:
        if self.cache is None:
            return await self.voice.synthesize(phrase, self._speaker_id, self.params)
        key = cache_key(
            engine="piper",
            voice=self.voice.identity,
            speaker=self._speaker_id,
            params=self.params,
            format=self.format,
            text=phrase,
        )
        audio = await self.cache.get(key)
        if audio is None:
            audio = await self.voice.synthesize(phrase, self._speaker_id, self.params)
            await self.cache.put(key, audio)
        return audio

    def _first_phrase(self, head: str) -> str:
        """Send the first clause on its own once it is written; returns the text for the sentence detector."""
        clause, end = _FIRST_CLAUSE.match(head), _SENTENCE_END.search(head)
        if end is not None and (clause is None or end.start() < clause.end(1)):
            self._head = None  # a short first sentence: sentences as usual
            return head
        if clause is not None:
            self._head = None
            self._put(clause.group(1))
            return head[clause.end() :]
        self._head = head
        return ""

    def _put(self, phrase: str) -> None:
        if phrase.strip():
            self._phrases.put_nowait(normalize(phrase.strip(), self.voice.languages[0]))
