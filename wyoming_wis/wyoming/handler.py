"""One Wyoming connection: translate events into core sessions and back.

A connection carries any number of requests in turn (the peers close after
each). A request that fails gets an `error` event with a stable code, then the
end of the connection: Home Assistant's client reads past `error` and waits for
the transcript or the audio-stop it asked for, so only the closed stream ends its
wait. A failed `describe`, `ping` or `select-program` leaves the connection open.

Unless --external-vad, the server ends each speaker's turn itself: the transcript
goes out as soon as the core's turn controller (`Core.listen`, one turn) judges the turn over, before any
`audio-stop`; the rest of that turn's audio is dropped, and its `audio-stop`, if
one comes, has nothing left to answer.

A transcription's life is bounded by its audio: the time spent waiting for its
client's events may run ahead of the audio they bring by at most --idle-timeout
(`_patience`). A satellite or Home Assistant streams at the pace it is spoken (or
faster, for what it buffered) and never comes near it; a client that trickles a few
bytes at a time just under the idle timeout is as good as silent, and is closed as
if it were. The whole wait is then at most --max-audio-seconds plus --idle-timeout.
The time spent answering does not count, so an overloaded server cuts no one off.
A wake word stream is not bounded so: Home Assistant streams to it until a
detection, all day if no one speaks; the connection slots' fairness (server.py)
keeps such streams from locking other addresses out.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from enum import Enum
from typing import Any

from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, Eventable, async_write_event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice
from wyoming.wake import Detect, Detection, NotDetected

from .. import metrics
from ..audio import AudioFormat, chunks
from ..config import WyomingSettings
from ..core import Core, Heard, SpeechStream, WakeStream
from ..errors import BadRequest, Busy, ShuttingDown, Timeout, UnknownProgram, WisError
from ..requests import AsrRequest, SpeechRequest, WakeRequest
from ..scheduler import household_first, patience
from ..served import ASR
from ..shares import client, owner
from ..turns.listening import Failed, Final, Listening, Partial, TurnEvent
from ..values import quote
from .info import PROGRAM_NAME, build_info
from .reader import EventLimits, Idle, read_event

_LOGGER = logging.getLogger(__name__)
SAMPLES_PER_CHUNK = 1024  # audio-chunk size we send, as wyoming-piper does
LAST_ERROR_SECONDS = 5.0  # to send the error before closing a connection
# After a failed request, what the client still sends of it is read and dropped, up to the request's end or this
# long: the longest Home Assistant streams a command before its audio-stop (it reads only after sending it).
HANG_UP_SECONDS = 15.0
EVICT_SECONDS = 1.0  # to tell an evicted idle connection why, before its slot goes to another address


async def send(event: Event, writer: asyncio.StreamWriter) -> None:
    """Write one event; a connection already closing (the client hung up) raises ConnectionResetError.

    Python 3.12 and 3.13 (3.13.5 at least: the add-on's Debian trixie) raise TypeError instead, from a write to a
    transport whose connection was lost (CPython gh-136234). Nothing can close it between this check and the write:
    the library's write starts without waiting.
    """
    if writer.transport.is_closing():
        raise ConnectionResetError("the client hung up")
    await async_write_event(event, writer)


class WyomingHandler(AsyncEventHandler):
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, core: Core, settings: WyomingSettings
    ) -> None:
        super().__init__(reader, writer)
        self.core = core
        self.settings = settings
        self._streams_transcripts = core.served().partial_results  # transcript-start/chunk/stop around the text
        self.peer = _peer(writer)
        self.host = host_of(writer)
        self.owner = owner(self.host)  # connection slots are shared fairly by owner (server.py)
        self.last_event = time.monotonic()
        self.evicted = False  # closed to give its slot to another owner: no longer counted as holding it
        # Chosen with select-program for the rest of the connection.
        self.asr_model: str | None = None
        self.voice_name: str | None = None
        # Speech-to-text request in progress: its one turn (the core's turn controller ends it, or audio-stop does).
        self._listening: Listening | None = None
        self._transcript_started = False  # transcript-start sent for this request
        self._waited = 0.0  # seconds spent waiting for the client's events since the request opened
        # Wake word detection: the names of the last detect, until a transcribe; the stream of the audio now.
        self._wake_names: tuple[str, ...] | None = None
        self._wake: WakeStream | None = None
        # Streaming synthesis in progress (synthesize-start .. synthesize-stop).
        self._in_stream = False
        self._stream: SpeechStream | None = None  # None inside a stream that failed
        self._speaking: asyncio.Task[None] | None = None
        # Open requests by kind (see _KINDS), for metrics: in progress until answered.
        self._requests: dict[str, metrics.Request] = {}
        self._answering = False  # inside handle_event
        self._stopping = False  # the server shuts down: close once the event being answered is answered
        self._hung_up: asyncio.TimerHandle | None = None  # a request failed: the connection is ending

    async def stop(self) -> None:
        """The server shuts down: an event being answered is answered first; a request still open gets an error."""
        self._stopping = True
        if self._answering:
            return  # run() closes the connection after this event
        if self._transcribing or self._in_stream or self._wake is not None:
            await self._send_last_error(ShuttingDown("The server is shutting down; try again shortly"))
        self.writer.close()
        self.reader.feed_eof()

    async def run(self) -> None:
        """Answer the connection's events in turn, yielding to the event loop after each.

        Events a client sends without waiting for the answers are buffered, and answered back to back they held the
        loop (pings from four connections delayed `describe` on another by 7 s); with the yield, about 2 µs an
        event, each connection answers one in turn. What one connection may queue is bounded both ways: unread
        bytes by the stream reader (past twice its limit, --max-event-line-bytes, it stops reading the socket, but
        for the data and payload of the event being read, up to --max-event-data-bytes and
        --max-event-payload-bytes), and answers by the send buffers (SEND_BUFFER_BYTES and the transport's own):
        once they are full the next answer waits, and nothing more is read, until the client takes some, or
        --send-timeout drops it.
        """
        settings = self.settings
        limits = EventLimits(settings.max_event_data_bytes, settings.max_event_payload_bytes, settings.event_timeout)
        try:
            while True:
                patience = self._patience()
                began = time.monotonic()
                try:
                    event = await read_event(self.reader, limits, patience)
                except Idle:  # counted while waiting for the next event, not while one is answered
                    if patience < settings.idle_timeout:  # a transcription fell behind: it fails, as any request
                        await self._fall_behind()
                        continue
                    _LOGGER.debug("Closing a connection idle for %s s", settings.idle_timeout)
                    await self._send_last_error(Timeout(f"Idle for {settings.idle_timeout:g} s (--idle-timeout)"))
                    break
                except (BadRequest, Timeout) as err:
                    if not self._hung_up:
                        await self._send_last_error(err)
                    break
                if event is None or self._stopping:
                    break
                self.last_event = time.monotonic()
                if self._listening is not None:
                    self._waited += self.last_event - began
                if self._hung_up:  # closing now would reset the connection and lose the error with it
                    if AudioStop.is_type(event.type) or SynthesizeStop.is_type(event.type):
                        break
                    continue
                if not Describe.is_type(event.type):  # (what health checks and Home Assistant ask: answered at once)
                    await household_first(self.owner)  # a stranger's work waits while Home Assistant's calls run
                self._answering = True
                try:
                    if not await self.handle_event(event):
                        break
                finally:
                    self._answering = False
                if self._stopping:
                    break
                await asyncio.sleep(0)  # the next event buffered waits for every other connection's turn
        except ConnectionError:
            pass  # the client went away while we wrote to it
        finally:
            if self._hung_up:
                self._hung_up.cancel()
            await self.disconnect()
            self.writer.close()

    def _patience(self) -> float:
        """How long the next event may take to start: --idle-timeout, less what an open transcription's audio is
        behind the time spent waiting for it (see the module's docstring)."""
        idle = self.settings.idle_timeout
        if self._listening is None or self._listening.over:
            return idle
        return max(0.0, idle - max(0.0, self._waited - self._listening.seconds))

    async def _fall_behind(self) -> None:
        """End the open transcription, whose audio fell --idle-timeout behind, as a failed request ends: the
        client, still sending, reads the error and then the end of the stream."""
        idle = self.settings.idle_timeout
        err = Timeout(
            f"Transcription closed: its audio fell {idle:g} s behind the time taken to send it (--idle-timeout); "
            "send audio at least as fast as it plays"
        )
        self._request("transcribe").failed(err)
        await self._fail(err, "transcribe")

    async def handle_event(self, event: Event) -> bool:
        route = next(((cls, method) for cls, method in _ROUTES.items() if cls.is_type(event.type)), None)
        if route is None:
            _LOGGER.debug("Ignoring unknown event %s", quote(event.type))
            return True
        event_class, method = route
        kind = _KINDS[event_class]
        if kind == "transcribe" and self._wake_names is not None and event_class is not Transcribe:
            kind = "detect"  # audio after a detect is heard for wake words

        async def answer() -> None:
            try:
                message = event_class.from_event(event)
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                raise BadRequest(f"Malformed {event.type} event: {quote(repr(err))}") from err
            # also for the tasks a request starts
            with patience(self.settings.wyoming_max_wait), client(self.host):
                await method(self, message)

        await self._answering_errors(kind, event.type, answer)
        return True

    async def _answering_errors(self, kind: str, what: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work`; an error answers the request of this kind (and ends it, see `_fail`)."""
        try:
            await work()
        except WisError as err:
            self._request(kind).failed(err)
            await self._fail(err, kind)
        except ConnectionError:
            raise
        except Exception as err:  # a bug: report it, keep serving
            _LOGGER.exception("Error handling %s", what)
            self._request(kind).failed(err)
            await self._fail(WisError(f"Internal error handling {what}; see the server log"), kind)

    @property
    def idle(self) -> bool:
        """Waiting for a next request, with none open: a slot that may be given to another address."""
        busy = self._answering or self._transcribing or self._in_stream or self._wake or self._hung_up
        return not busy

    @property
    def _transcribing(self) -> bool:
        """A transcription is open: its turn is being heard, or answered."""
        listening = self._listening
        return listening is not None and (not listening.over or listening.answering)

    @property
    def idle_for(self) -> float:
        """Seconds since the client's last event while nothing is owed either way; 0 while something is (an event
        being answered, a transcription being heard or answered, a synthesis). A wake word stream owes nothing
        until its audio comes: one that brings none is idle as any other connection."""
        if self._answering or self._transcribing or self._in_stream or self._hung_up:
            return 0.0
        return time.monotonic() - self.last_event

    @property
    def busy_since(self) -> float:
        """When the oldest request still open on it began (`time.perf_counter()`); infinity if none is."""
        return min((request.started for request in self._requests.values() if not request.finished), default=math.inf)

    async def evict(self, err: Busy) -> None:
        """Close this connection to make room for a client from another address, telling it why: an idle one at
        once; one with a request in progress (a wake word stream) as a failed request ends (`_hang_up`), so that
        the error reaches a client still sending."""
        self.evicted = True
        if not self.idle:  # the error is logged as it is sent
            for request in self._requests.values():
                request.failed(err)  # counted once: the disconnect that follows counts nothing more
            try:
                await self._hang_up(err)
            except ConnectionError:  # the client is gone already
                self.writer.close()
            return
        _LOGGER.warning("Closing idle Wyoming connection %s to make room for another address", self.peer)
        with suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(EVICT_SECONDS):
                await send(Error(text=err.message, code=err.code).event(), self.writer)
        self.writer.close()
        self.reader.feed_eof()

    async def disconnect(self) -> None:
        if self._speaking is not None:
            self._speaking.cancel()
        self._end_listening()
        self._end_wake()
        for request in self._requests.values():
            request.done("disconnected")  # those already answered are not counted again

    def _request(self, kind: str) -> metrics.Request:
        """The open request of this kind, or a new one (counted in progress until it is answered)."""
        request = self._requests.get(kind)
        if request is None or request.finished:
            request = self._requests[kind] = metrics.Request("wyoming", kind)
        return request

    # -- general --------------------------------------------------------------

    async def _describe(self, _: Describe) -> None:
        await self.core.refresh_voices()  # voices and wake words added or removed on disk show up
        await self.core.refresh_wake_words()
        info = build_info(self.core, self.settings.external_vad, self.settings.processed_audio).event()
        self._request("describe").done()
        await self.write_event(info)

    async def _ping(self, ping: Ping) -> None:
        self._request("ping").done()
        await self.write_event(Pong(text=ping.text).event())

    async def _select_program(self, select: SelectProgram) -> None:
        """Pick a program, or (our extension) a model or voice, for this connection."""
        name = _text(select.name, "name")
        await self.core.refresh_voices()
        served = self.core.served()
        if name in {model.name for model in served.of_kind(ASR)}:
            self.asr_model = name
        elif name in {voice.name for voice in served.voices}:
            self.voice_name = name
        elif name != PROGRAM_NAME:
            raise UnknownProgram(f"Unknown program {quote(name)} (programs: {PROGRAM_NAME})")
        self._request("select-program").done()

    # -- speech to text -------------------------------------------------------

    async def _transcribe(self, request: Transcribe) -> None:
        self._end_wake()
        self._wake_names = None
        await self._settle_turn()
        self._end_listening()
        if (unfinished := self._requests.pop("transcribe", None)) is not None:
            unfinished.done("cancelled")  # its audio never ended; this request replaces it
        self._listen(
            AsrRequest(
                model=_text(request.name, "name") or self.asr_model,
                language=_text(request.language, "language"),
                names=_texts(request.transcript_names, "transcript_names"),
                terms=_texts(request.transcript_terms, "transcript_terms"),
                end_of_turn=self._end_of_turn(request.vad_sensitivity),
            )
        )

    async def _audio_start(self, start: AudioStart) -> None:
        _audio_format(start).validate()
        if self._wake_names is not None:
            if self._wake is None:  # more audio after an audio-stop: heard for the same wake words
                self._open_wake()
            return
        await self._settle_turn()
        if self._listening is None:  # audio without a transcribe event: defaults
            self._listen()

    async def _audio_chunk(self, chunk: AudioChunk) -> None:
        if self._wake_names is not None:
            wake = self._wake or self._open_wake()
            await wake.feed(chunk.audio or b"", _audio_format(chunk).validate())
            return
        listening = self._listening or self._listen()
        await listening.feed(chunk.audio or b"", _audio_format(chunk).validate())  # dropped once the turn is over

    async def _audio_stop(self, _: AudioStop) -> None:
        if self._wake_names is not None:
            await self._stop_wake()
            return
        ended = time.perf_counter()
        listening = self._listening or self._listen()
        await listening.finish(ended)  # answered already if the server ended the turn; a failure by `_on_turn`
        self._end_listening()

    async def _settle_turn(self) -> None:
        """Let the answer to a turn the server ended go out before the next event of the connection is answered."""
        if self._listening is not None and self._listening.over:
            await self._listening.drain()
            self._end_listening()

    async def _on_turn(self, event: TurnEvent) -> None:
        """What the core's turn controller says: partial text, the transcript, or why there is none."""
        if isinstance(event, Partial):
            await self._send_transcript_chunk(event.text)
        elif isinstance(event, Final):
            self._request("transcribe").done()
            transcript = event.transcript
            await self._start_transcript(transcript.language)
            await self.write_event(Transcript(text=transcript.text, language=transcript.language).event())
            if self._streams_transcripts:
                await self.write_event(TranscriptStop().event())
        elif isinstance(event, Failed):
            self._request("transcribe").failed(event.error)
            await self._fail(event.error, "transcribe")

    def _end_of_turn(self, sensitivity: Any) -> str | None:
        """Who ends the turn: the client's audio-stop with --external-vad, else the server, this soon."""
        if self.settings.external_vad:
            return None
        if isinstance(sensitivity, Enum):  # the wyoming package makes the names it knows a VadSensitivity
            sensitivity = sensitivity.value
        return _text(sensitivity, "vad_sensitivity") or self.settings.vad_sensitivity

    def _listen(self, request: AsrRequest | None = None) -> Listening:
        """One turn for `request`, or for the connection's defaults: audio may come without a transcribe event."""
        self._transcript_started, self._waited = False, 0.0
        self._request("transcribe")  # in progress from its first event
        request = request or AsrRequest(model=self.asr_model, end_of_turn=self._end_of_turn(None))
        self._listening = self.core.listen(request, frontend="wyoming", on_event=self._on_turn)
        return self._listening

    async def _start_transcript(self, language: str | None) -> None:
        if self._streams_transcripts and not self._transcript_started:
            self._transcript_started = True
            await self.write_event(TranscriptStart(language=language).event())

    async def _send_transcript_chunk(self, text: str) -> None:
        await self._start_transcript(self._listening.decoding.options.language if self._listening else None)
        await self.write_event(TranscriptChunk(text=text).event())

    def _end_listening(self) -> None:
        if self._listening is not None:
            self._listening.close()
        self._listening = None

    # -- wake words -----------------------------------------------------------

    async def _detect(self, detect: Detect) -> None:
        """Listen for these wake words in the audio that follows, until a transcribe; `names` None: the default."""
        await self._settle_turn()
        self._end_listening()
        self._end_wake()
        self._wake_names = _texts(detect.names, "names")
        await self.core.refresh_wake_words()
        self._open_wake()

    def _open_wake(self) -> WakeStream:
        self._request("detect")  # in progress from its first event
        self._wake = self.core.open_wake(WakeRequest(names=self._wake_names or ()), self._send_detection)
        return self._wake

    async def _send_detection(self, heard: Heard) -> None:
        name = quote(heard.name)
        _LOGGER.debug("Heard %s at %d ms from %s (%.2f)", name, heard.milliseconds, self.peer, heard.probability)
        await self.write_event(Detection(name=heard.name, timestamp=heard.milliseconds).event())

    async def _stop_wake(self) -> None:
        """The audio ended: once all of it is heard, `not-detected` if no wake word was."""
        wake = self._wake or self._open_wake()
        try:
            heard = await wake.drain()
        finally:
            self._end_wake()
        self._request("detect").done()
        if not heard:
            await self.write_event(NotDetected().event())

    def _end_wake(self) -> None:
        if self._wake is not None:
            self._wake.close()
        self._wake = None

    # -- text to speech -------------------------------------------------------

    async def _synthesize(self, request: Synthesize) -> None:
        if self._in_stream:
            return  # the compatibility copy of a streamed text; its audio is already on its way
        received = time.perf_counter()
        self._request("synthesize")
        stream = await self._open_stream(request.voice)
        stream.write(_text(request.text, "text") or "")
        stream.close()
        await self._speak(stream, cycle_per_sentence=False, since=received)
        self._request("synthesize").done()

    async def _synthesize_start(self, start: SynthesizeStart) -> None:
        await self._end_stream()
        self._in_stream = True
        request = self._request("synthesize-stream")
        self._stream = await self._open_stream(start.voice)
        self._speaking = asyncio.create_task(self._speak_stream(self._stream, request))

    async def _synthesize_chunk(self, chunk: SynthesizeChunk) -> None:
        if self._stream is None:
            return  # not streaming, or the stream already failed
        try:
            self._stream.write(_text(chunk.text, "text") or "")
        except WisError:
            self._stream = None
            if self._speaking is not None:
                self._speaking.cancel()
            raise

    async def _synthesize_stop(self, _: SynthesizeStop) -> None:
        await self._end_stream()
        await self.write_event(SynthesizeStopped().event())  # always, even after an error

    async def _open_stream(self, voice: SynthesizeVoice | None) -> SpeechStream:
        name = _text(voice.name, "voice.name") if voice else None
        language = _text(voice.language, "voice.language") if voice else None
        speaker = _text(voice.speaker, "voice.speaker") if voice else None
        voice_name = name or (None if language else self.voice_name)
        return await self.core.speech_stream(SpeechRequest(voice_name=voice_name, speaker=speaker, language=language))

    async def _end_stream(self) -> None:
        """Finish the open stream's audio, if any."""
        stream, speaking = self._stream, self._speaking
        self._in_stream, self._stream, self._speaking = False, None, None
        if stream is not None:
            stream.close()
        if speaking is not None:
            await asyncio.gather(speaking, return_exceptions=True)  # it reports its own errors

    async def _speak_stream(self, stream: SpeechStream, request: metrics.Request) -> None:
        try:
            await self._speak(stream, cycle_per_sentence=True)
            request.done()
        except WisError as err:
            request.failed(err)
            if self._stream is stream:  # later text for this stream is dropped
                self._stream = None
            await self._fail(err, "synthesize-stream")
        except ConnectionError as err:
            request.failed(err)
        except Exception as err:
            request.failed(err)
            _LOGGER.exception("Error in streaming synthesis")
            await self._fail(WisError("Internal error in synthesis; see the server log"), "synthesize-stream")
        except asyncio.CancelledError as err:  # the client left, or its text failed (counted then)
            request.failed(err)
            raise

    async def _speak(self, stream: SpeechStream, cycle_per_sentence: bool, since: float | None = None) -> None:
        """Send the stream's audio: one audio-start/stop pair, or one per sentence.

        Nothing is sent before the first audio, so a text with nothing to say is only an error.
        The time to the first audio counts from `since`, or else from the stream's first text.
        """
        audio = stream.format
        sent = metrics.SpeechSent("wyoming", stream, since)
        start = AudioStart(rate=audio.rate, width=audio.width, channels=audio.channels).event()
        started = False
        async for piece in stream:
            if piece.audio and not started:
                await self.write_event(start)
                started = True
            for pcm in chunks(piece.audio, SAMPLES_PER_CHUNK * audio.bytes_per_frame):
                await self.write_event(
                    AudioChunk(rate=audio.rate, width=audio.width, channels=audio.channels, audio=pcm).event()
                )
                sent.sent(len(pcm))
            if piece.ends_phrase and started and cycle_per_sentence:
                await self.write_event(AudioStop().event())
                started = False
        if not cycle_per_sentence:
            if not started:
                await self.write_event(start)
            await self.write_event(AudioStop().event())

    async def write_event(self, event: Event) -> None:
        """Send an event, if the client takes it within --send-timeout; one that stops reading is cut off."""
        if self._hung_up:  # once hung up, the error was the answer
            return
        seconds = self.settings.send_timeout
        try:
            async with asyncio.timeout(seconds):
                await send(event, self.writer)
        except TimeoutError:
            _LOGGER.warning("Wyoming client %s read nothing for %g s (--send-timeout); closing", self.peer, seconds)
            self.writer.transport.abort()
            raise ConnectionResetError(f"{self.peer} stopped reading") from None

    async def _send_last_error(self, err: WisError) -> None:
        """The error that ends the connection, if the client takes it soon: one that reads nothing cannot hold us."""
        try:
            async with asyncio.timeout(LAST_ERROR_SECONDS):
                await self._send_error(err)
        except TimeoutError:
            pass

    async def _fail(self, err: WisError, kind: str) -> None:
        """Answer with the error; if it answers a request (not describe, ping or select-program), hang up."""
        if kind not in _REQUESTS:
            await self._send_error(err)
        else:
            await self._hang_up(err)

    async def _hang_up(self, err: WisError) -> None:
        """End the connection with the error: the client reads it, then the end of the stream, while what it still
        sends of its request is read and dropped (see HANG_UP_SECONDS)."""
        if not self._hung_up:
            await self._send_last_error(err)
            self._end_listening()
            self._end_wake()
            with suppress(OSError, RuntimeError):  # the client reads the end of the stream after the error
                if self.writer.can_write_eof():
                    self.writer.write_eof()
            self._hung_up = asyncio.get_running_loop().call_later(HANG_UP_SECONDS, self.writer.close)

    async def _send_error(self, err: WisError) -> None:
        if isinstance(err, ShuttingDown) or type(err) is WisError:  # not the client's doing; bugs are logged already
            _LOGGER.debug("Sending error %s to %s: %s", err.code, self.peer, err.message)
        else:
            _LOGGER.warning("Wyoming client %s: %s (%s)", self.peer, err.message, err.code)
        await self.write_event(Error(text=err.message, code=err.code).event())


def _peer(writer: asyncio.StreamWriter) -> str:
    """host:port for TCP clients, for the log; a Unix socket or stdio client is "local"."""
    address = writer.get_extra_info("peername")
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{host_of(writer)}:{address[1]}"
    return "local"


def host_of(writer: asyncio.StreamWriter) -> str:
    """The client's address (IPv6 in brackets), or "local" for a Unix socket or stdio client."""
    address = writer.get_extra_info("peername")
    if isinstance(address, tuple) and len(address) >= 2:
        return f"[{address[0]}]" if ":" in str(address[0]) else str(address[0])
    return "local"


def _audio_format(event: AudioStart | AudioChunk) -> AudioFormat:
    values = (event.rate, event.width, event.channels)
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        raise BadRequest(f"Audio rate, width and channels must be integers, got {quote(values)}")
    return AudioFormat(*values)


def _texts(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadRequest(f"{field} must be a list of strings")
    return tuple(value)


def _text(value: Any, field: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{field} must be a string, got {type(value).__name__}")
    return value


_Route = Callable[[WyomingHandler, Any], Awaitable[None]]
# The request each event belongs to, as counted in metrics (audio after a detect: "detect").
_KINDS: dict[type[Eventable], str] = {
    Describe: "describe",
    Ping: "ping",
    SelectProgram: "select-program",
    Detect: "detect",
    Transcribe: "transcribe",
    AudioStart: "transcribe",
    AudioChunk: "transcribe",
    AudioStop: "transcribe",
    Synthesize: "synthesize",
    SynthesizeStart: "synthesize-stream",
    SynthesizeChunk: "synthesize-stream",
    SynthesizeStop: "synthesize-stream",
}
_REQUESTS = ("transcribe", "detect", "synthesize", "synthesize-stream")  # kinds a client waits on an answer for
_ROUTES: dict[type[Eventable], _Route] = {
    Describe: WyomingHandler._describe,
    Ping: WyomingHandler._ping,
    SelectProgram: WyomingHandler._select_program,
    Detect: WyomingHandler._detect,
    Transcribe: WyomingHandler._transcribe,
    AudioStart: WyomingHandler._audio_start,
    AudioChunk: WyomingHandler._audio_chunk,
    AudioStop: WyomingHandler._audio_stop,
    Synthesize: WyomingHandler._synthesize,
    SynthesizeStart: WyomingHandler._synthesize_start,
    SynthesizeChunk: WyomingHandler._synthesize_chunk,
    SynthesizeStop: WyomingHandler._synthesize_stop,
}
