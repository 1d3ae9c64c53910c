"""Text in, whole or in pieces as an LLM writes it; speech out, phrase by phrase.

Every frontend speaks through a SpeechStream: write text, close, and iterate the
PCM. Each complete sentence is synthesised as soon as it is known, so the first
audio leaves before the rest of the text has even arrived. The first sentence
goes faster still: its first clause ("Okay, I turned on the kitchen lights,")
is spoken as soon as it is written, while the rest of the sentence is still
coming, because a listener waits for the first sound and not for the last.
Engines hand each phrase back in pieces as they make it, and the stream's
`Pace` (audio sent so far) tells them how urgently the next piece is needed.

Text is cut into phrases (phrasing.py) in a worker thread, a batch of written
text at a time and in order, so `write` only counts and queues: however the
text comes, the event loop does no work that grows with it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .. import metrics
from ..audio import AudioFormat
from ..errors import EmptyText, TextTooLong
from ..scheduler import Pace
from ..served import Calls, Entry
from .cache import SpeechCache, cache_key
from .params import SpeechParams
from .phrasing import Phrase, Phrasing, refuse_unspeakable

AHEAD = 2  # phrases in the making at once: the one being sent and the next
URGENT = 0.3  # seconds of audio left to play below which a phrase is needed at once


@dataclass(frozen=True)
class Utterance:
    """What a stream asks an engine to say, a phrase at a time, and how."""

    text: str
    speaker: str | None
    params: SpeechParams
    pace: Pace  # the listener's: engine calls queue by when they need the audio
    urgent: bool = False  # the listener is waiting for this text
    language: str | None = None  # the request's; engines may ignore it


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

    def stream(self, utterance: Utterance) -> AsyncIterator[bytes]:
        """PCM in `format`, in pieces, as it is made."""


if TYPE_CHECKING:
    from ..catalog import Found
    from ..scheduler import Scheduler


class SpeechModel(Protocol):
    """What the core's view reads of a TTS model."""

    name: str
    found: Found
    languages: list[str]
    speakers: list[str]
    description: str
    scheduler: Scheduler


def speech_model_entry(model: SpeechModel, engine: str) -> Entry:
    """A TTS model as the core's view lists it (served.py): in memory for as long as the server runs."""
    calls = (Calls.of(model.scheduler),)
    languages, speakers = tuple(model.languages), tuple(model.speakers)
    return Entry(
        model.name, engine, languages, True, model.found.version, model.description, speakers=speakers, calls=calls
    )


@dataclass(frozen=True)
class Piece:
    """Some audio of a phrase; the last piece of each phrase has `ends_phrase` (and may be empty)."""

    audio: bytes
    ends_phrase: bool = False


class _Making:
    """A phrase being made in its own task, its pieces queued in order; None ends them, an error replaces them."""

    def __init__(self, speech: AsyncIterator[bytes]) -> None:
        self.pieces: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self.begun = False  # its first audio is out
        self.task = asyncio.ensure_future(self._make(speech))

    async def _make(self, speech: AsyncIterator[bytes]) -> None:
        try:
            async for audio in speech:
                self.begun = True
                self.pieces.put_nowait(audio)
            self.pieces.put_nowait(None)
        except Exception as err:  # the reader raises it in order, after the audio before it
            self.pieces.put_nowait(err)


class SpeechStream:
    def __init__(
        self,
        engine: SpeechEngine,
        speaker: str | None,
        max_chars: int,
        params: SpeechParams | None = None,
        *,
        cache: SpeechCache | None = None,
        language: str | None = None,
    ) -> None:
        self.engine = engine  # what speaks: a voice's model, with `speaker` choosing among its speakers
        self.language = language  # the request's; None means the engine's own
        self.format = engine.format  # one format for the whole stream
        self.params = params or engine.params
        self.cache = cache
        self.cache_hits = 0  # phrases of this stream that came from the cache
        self.text_at: float | None = None  # when its first text came (time.perf_counter()), for metrics
        self.pace = Pace()
        self._speaker = speaker
        self._speaker_id = engine.speaker_id(speaker)  # an unknown speaker fails here, before any text
        self._max_chars = max_chars
        self._chars = 0
        self._said = False  # a phrase with something to say was found
        self._phrasing = Phrasing(language or engine.languages[0])
        self._written: list[str] = []  # text not yet taken to be cut into phrases
        self._closed = False
        self._more = asyncio.Event()  # text was written, or the stream closed
        self._phrases: asyncio.Queue[Phrase | BaseException | None] = asyncio.Queue()

    def write(self, text: str) -> None:
        """Add text; raises TextTooLong once the stream passes the limit, BadRequest for what is not text.

        Cheap, on the event loop: the text is cut into phrases in a worker thread.
        """
        self._chars += len(text)
        if self._chars > self._max_chars:
            raise TextTooLong(f"Text is longer than the limit of {self._max_chars} characters")
        refuse_unspeakable(text)
        if self.text_at is None and text.strip():
            self.text_at = time.perf_counter()
        if text:
            self._written.append(text)
            self._more.set()

    def close(self) -> None:
        """No more text: what is left becomes the last sentence, whether or not it ends in a full stop."""
        self._closed = True
        self._more.set()

    async def __aiter__(self) -> AsyncIterator[Piece]:
        """PCM, phrase by phrase in order, each in pieces as soon as they are made.

        Once a phrase's first audio is out, the next is made while it is sent
        (AHEAD phrases at most), so a free core works on it instead of waiting.
        Raises EmptyText, before any audio, if the text had nothing to say: never a reply of silence.
        """
        making: deque[_Making] = deque()
        reading = asyncio.ensure_future(self._read())
        ended = False
        try:
            while True:
                while not ended and len(making) < AHEAD:
                    if making and (self._phrases.empty() or not making[-1].begun):
                        break  # no new text yet, or the listener still waits for the phrase before
                    phrase = await self._phrases.get()
                    if isinstance(phrase, BaseException):
                        raise phrase
                    if phrase is None:
                        ended = True
                    else:  # the listener waits for it if nothing is ahead and little is left to play
                        making.append(_Making(self._speak(phrase, not making and self.pace.in_hand < URGENT)))
                if not making:
                    if not self._said:
                        raise EmptyText("The text has nothing to say: no letters or digits")
                    return
                audio = await making[0].pieces.get()
                if isinstance(audio, BaseException):
                    raise audio
                if audio is None:
                    making.popleft()
                    yield Piece(b"", ends_phrase=True)
                else:
                    self.pace.seconds += self.format.seconds(len(audio))
                    yield Piece(audio)
        finally:
            reading.cancel()
            for made in making:
                made.task.cancel()

    async def _read(self) -> None:
        """Cut the written text into phrases, all that is written at a time, in a worker thread; None ends them."""
        try:
            while True:
                await self._more.wait()
                self._more.clear()
                text, closed, self._written = "".join(self._written), self._closed, []
                for phrase in await asyncio.to_thread(self._phrasing.add, text, closed):
                    self._said = True
                    self._phrases.put_nowait(phrase)
                if closed:
                    self._phrases.put_nowait(None)
                    return
        except Exception as err:  # raised in order, after the phrases before it
            self._phrases.put_nowait(err)

    async def _speak(self, phrase: Phrase, urgent: bool) -> AsyncIterator[bytes]:
        # Within a sentence there is no pause between phrases: the listener hears one sentence.
        params = self.params if phrase.ends_sentence else self.params.but(sentence_silence=0.0)
        if self.cache is None:
            metrics.cache_lookup("bypass")
            async for audio in self._engine_stream(phrase.text, params, urgent):
                yield audio
            return
        key = cache_key(
            engine=type(self.engine).__name__,
            voice=self.engine.identity,  # the parts keep their names: speech cached before stays found
            speaker=self._speaker_id,
            params=params,
            format=self.format,
            language=self.language,
            text=phrase.text,
        )
        audio = await self.cache.get(key)
        if audio is not None:
            self.cache_hits += 1
            metrics.cache_lookup("hit")
            yield audio
            return
        metrics.cache_lookup("miss")
        pieces = []
        async for audio in self._engine_stream(phrase.text, params, urgent):
            pieces.append(audio)
            yield audio
        await self.cache.put(key, b"".join(pieces))

    def _engine_stream(self, text: str, params: SpeechParams, urgent: bool) -> AsyncIterator[bytes]:
        return self.engine.stream(Utterance(text, self._speaker, params, self.pace, urgent, self.language))
