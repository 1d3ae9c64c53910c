"""Text in, whole or in pieces as an LLM writes it; speech out, phrase by phrase.

Every frontend speaks through a SpeechStream: write text, close, and iterate the
PCM. Each complete sentence is synthesised as soon as it is known, so the first
audio leaves before the rest of the text has even arrived. The first sentence
goes faster still: its first clause ("Okay, I turned on the kitchen lights,")
is spoken as soon as it is written, while the rest of the sentence is still
coming, because a listener waits for the first sound and not for the last.
Engines hand each phrase back in pieces as they make it, and the stream's
`Pace` (audio sent so far) tells them how urgently the next piece is needed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from sentence_stream import SentenceBoundaryDetector

from ..audio import AudioFormat
from ..errors import TextTooLong
from ..scheduler import Pace
from .cache import SpeechCache, cache_key
from .normalize import normalize
from .params import SpeechParams

# A clause of at least 4 words ending in , ; : or a dash, followed by more text.
_FIRST_CLAUSE = re.compile(r"^\s*((?:\S+\s+){3,}?\S*[,;:\u2013\u2014])\s+(?=\S)")
_SENTENCE_END = re.compile(r"[.!?\u3002](?:\s|$)")


class SpeechEngine(Protocol):
    """What a stream needs from a TTS engine."""

    name: str
    identity: str  # changes when the model behind the name changes
    format: AudioFormat
    params: SpeechParams
    languages: list[str]

    def speaker_id(self, speaker: str | None) -> object:
        """The speaker as the engine knows it, part of the cache key: it changes when the voice does.

        Raises UnknownSpeaker, so a stream fails before any text is written.
        """

    def stream(
        self, text: str, speaker: str | None, params: SpeechParams, pace: Pace, language: str | None = None
    ) -> AsyncIterator[bytes]:
        """PCM in `format`, in pieces, as it is made; `language` is the request's (engines may ignore it)."""


@dataclass(frozen=True)
class Piece:
    """Some audio of a phrase; the last piece of each phrase has `ends_phrase` (and may be empty)."""

    audio: bytes
    ends_phrase: bool = False


class SpeechStream:
    def __init__(
        self,
        voice: SpeechEngine,
        speaker: str | None,
        max_chars: int,
        params: SpeechParams | None = None,
        cache: SpeechCache | None = None,
        language: str | None = None,
    ) -> None:
        self.voice = voice
        self.language = language  # the request's; None means the voice's own
        self.format = voice.format  # one format for the whole stream
        self.params = params or voice.params
        self.cache = cache
        self.pace = Pace()
        self._speaker = speaker
        self._speaker_id = voice.speaker_id(speaker)  # an unknown speaker fails here, before any text
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

    async def __aiter__(self) -> AsyncIterator[Piece]:
        """PCM, phrase by phrase in order, each in pieces as soon as they are made."""
        while (phrase := await self._phrases.get()) is not None:
            async for audio in self._speak(phrase):
                self.pace.seconds += self.format.seconds(len(audio))
                yield Piece(audio)
            yield Piece(b"", ends_phrase=True)

    async def _speak(self, phrase: str) -> AsyncIterator[bytes]:
        if self.cache is None:
            async for audio in self._engine_stream(phrase):
                yield audio
            return
        key = cache_key(
            engine=type(self.voice).__name__,
            voice=self.voice.identity,
            speaker=self._speaker_id,
            params=self.params,
            format=self.format,
            language=self.language,
            text=phrase,
        )
        audio = await self.cache.get(key)
        if audio is not None:
            yield audio
            return
        pieces = []
        async for audio in self._engine_stream(phrase):
            pieces.append(audio)
            yield audio
        await self.cache.put(key, b"".join(pieces))

    def _engine_stream(self, phrase: str) -> AsyncIterator[bytes]:
        return self.voice.stream(phrase, self._speaker, self.params, self.pace, language=self.language)

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
            self._phrases.put_nowait(normalize(phrase.strip(), self.language or self.voice.languages[0]))
