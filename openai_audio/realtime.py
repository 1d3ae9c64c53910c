"""OpenAI's Realtime API, transcription sessions, whatever carries them: `RealtimeSession` is the protocol.

The client streams audio (`input_audio_buffer.append`, base64 PCM at 24 kHz or G.711) and hears back, per turn,
`speech_started`, transcript deltas while the speaker talks, `speech_stopped` and `committed` when the turn ends,
then `conversation.item.input_audio_transcription.completed`. Turns are the core's (`wyoming_wis/turns/listening.py`,
the same as Wyoming's and WebRTC's): with `server_vad` or `semantic_vad` the server ends each on what was said and
the pause after it, with `turn_detection: null` the client's `commit` does; an update that changes how turns are
decoded changes the session's one listening (`Listening.change`). Both shapes of the protocol are served: GA, and
beta (`transcription_session.*`). See realtime_config.py for the session's fields.

The session is handed each client event's bytes (`handle`) and sends each server event through a callable. Two
transports carry it: a WebSocket (http_api/openai_realtime.py, `GET /v1/realtime`) and a WebRTC call
(rtc/realtime_call.py, `POST /v1/realtime/calls`), where the audio comes on the call's track (`feed_samples`)
instead of in appends.

Every client event is hostile until parsed. Its size is checked in bytes before anything is parsed: an event whose
JSON is over MAX_EVENT_BYTES (an append's audio aside: `_cut_audio`) is answered with an `error` event, as are
invalid JSON, an unknown event, bad base64 and a bad value, and the session goes on. What a client makes the event
loop do is paced per session (`Pace`): the JSON it has parsed (each event counted as EVENT_COST at least, a ping or
pong as CONTROL_COST), and the audio it appends, at AUDIO_PACE times real time; past either's burst the session
returns only once the cost is due, and its transport reads nothing more meanwhile (TCP backpressure: the client's
sends wait, nothing is refused).
"""

from __future__ import annotations

import asyncio
import binascii
import itertools
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import av
import numpy as np

from wyoming_wis.core import Core, Delta, TokenLogprob
from wyoming_wis.errors import WisError
from wyoming_wis.turns.listening import (
    MIN_COMMIT_SECONDS,
    Failed,
    Final,
    Listening,
    Partial,
    SpeechStarted,
    TurnEnded,
    TurnEvent,
)
from wyoming_wis.values import quote

from .errors import error_object
from .names import token_logprobs
from .realtime_config import PCM, PCMU, BadEvent, Config

_LOGGER = logging.getLogger(__name__)
MAX_EVENT_BYTES = 64 * 1024  # of an event's JSON, an append's audio aside; larger: an error event
# What a session's client may make the event loop do, paced (`Pace`): bytes of JSON parsed a second, each event
# counted as EVENT_COST at least, each ping or pong as CONTROL_COST. The costliest 64 KiB of JSON (numbers) takes
# 1.5-3 ms to parse: a session sending them flat out costs the loop 3-6 ms a second. A ping costs about what an
# event does (50-80 us: its pong, the loop's turn), but no client needs more than one every few seconds.
EVENT_BYTES_PER_SECOND = 128 * 1024  # two events of the largest size at once, after a pause
EVENT_COST = 512  # 256 events a second: appends of 5 ms at real time, of 20 ms at 12 times
CONTROL_COST = 4096  # 32 pings a second
# Audio a second, in seconds: a client streaming a file as fast as it can (an SDK's example) is read at twice real
# time (a minute's recording in 25 s), once past a burst that takes a command or a short recording whole; a
# microphone's live audio is never held back. 16 sessions cannot make the models hear more than twice what 16 live
# microphones would: at 4 times, Home Assistant's transcription took up to 2.8 times as long on 2 cores.
AUDIO_PACE = 2.0
AUDIO_BURST = 10.0
# An append up to this (base64 characters: 1 s of 24 kHz PCM) is decoded on the event loop, in at most 0.2 ms;
# a larger one in a worker thread. A 20 ms append decodes in 3 us, the thread hop costs 126 us.
INLINE_AUDIO_CHARS = 64 * 1024
MAX_EVENT_ID_CHARS = 64  # of a client's event_id, echoed in its errors
Send = Callable[[str], Awaitable[None]]  # a server event's JSON to the client; raises ConnectionError once it left
# Where an append's audio begins: the first "audio" of its JSON, a key (a few spaces allowed around the colon)
AUDIO_KEY = b'"audio"'
AUDIO_VALUE = re.compile(rb'[ \t\r\n]{0,16}:[ \t\r\n]{0,16}"')
AUDIO_MARK = "audio:" + secrets.token_hex(16)  # what a cut append's audio is replaced with: no client can write it
APPEND = "input_audio_buffer.append"


class Pace:
    """A token bucket: `rate` a second, with at most `burst` saved up. `take` counts a cost and returns once it is due,
    at once while the burst lasts: whoever awaits it reads nothing more of its client meanwhile."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._saved = burst  # below 0: owed, for a cost larger than what was saved
        self._at = time.monotonic()

    async def take(self, cost: float) -> None:
        now = time.monotonic()
        self._saved = min(self.burst, self._saved + (now - self._at) * self.rate) - cost
        self._at = now
        if self._saved < 0:
            await asyncio.sleep(-self._saved / self.rate)


class RealtimeSession:
    """One client's transcription session: its configuration, its listening, and the ids it has been told.

    Its transport is the caller's: `send` takes each server event, `handle` each client event (`control_frame` each
    of the transport's pings and pongs), and `feed_samples` audio that comes otherwise than in appends
    (`appends=False`: the client may not send them). `handle` and `control_frame` return once what the client sent
    is due (`Pace`): the transport reads nothing more of the client meanwhile."""

    def __init__(
        self,
        core: Core,
        send: Send,
        remote: str,
        *,
        beta: bool = False,
        config: Config | None = None,
        appends: bool = True,
        hang_up: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.core = core
        self.remote = remote  # the client's address, for the log
        self.beta = beta
        self.appends = appends
        self._transport = send
        self._hang_up = hang_up  # ends the transport (the WebSocket), for `end`
        self._ending: asyncio.Task[None] | None = None
        self.id = "sess_" + secrets.token_hex(12)
        self.config = config or Config()
        self._events = itertools.count(1)
        self._listening: Listening | None = None  # opened by the first audio or update; its times are the session's
        self._items: dict[int, str] = {}  # turn -> item id
        self._told: set[str] = set()  # items the client has been told of (speech_started or committed)
        self._held: dict[str, list[str]] = {}  # text of items not told of yet, as it came
        self._last_item: str | None = None  # the last committed item
        self._warned = False  # the client's first mistake has been logged as a warning
        self._parsing = Pace(EVENT_BYTES_PER_SECOND, 2 * MAX_EVENT_BYTES)
        self._audio = Pace(AUDIO_PACE, AUDIO_BURST)
        self.last_event = time.monotonic()  # when the client's last event came, or was handled
        self._began = self.last_event

    async def start(self) -> None:
        """Tell the client its session: the first server event."""
        await self._send({"type": self._kind("created"), "session": self._render()})

    def close(self) -> None:
        """Stop listening: turns not answered yet are dropped."""
        if self._listening is not None:
            self._listening.close()

    @property
    def idle_for(self) -> float:
        """Seconds since the client's last event, pings and pongs aside (shares.Holder)."""
        return time.monotonic() - self.last_event

    @property
    def busy_since(self) -> float:
        """When it began: a session serves its client from its start (shares.Holder)."""
        return self._began

    def end(self, why: WisError) -> None:
        """Tell the client why its session ends (its place given to another's), then end its transport. Its turns
        are dropped at once: the memory they held is the newcomer's."""
        if self._ending is None:
            self.close()
            self._ending = asyncio.create_task(self._end(why))

    async def _end(self, why: WisError) -> None:
        _LOGGER.warning("Realtime client %s: %s", self.remote, why.message)
        with suppress(ConnectionError):
            await self._send({"type": "error", "error": error_object(why) | {"event_id": None}})
        if self._hang_up is not None:
            await self._hang_up()

    # -- client events ------------------------------------------------------------

    async def handle(self, data: bytes, *, text: bool = True) -> None:
        """A client event: the UTF-8 of its JSON text, or (`text` False) binary data, refused. One over MAX_EVENT_BYTES
        may only be an append, its audio cut out unparsed (`_cut_audio`); the rest is parsed once its cost is due
        (what is refused unparsed costs as much as the largest event). A mistake in it is answered with an `error`
        event."""
        self.last_event = time.monotonic()
        event_id = None
        try:
            cut = _cut_audio(data) if text and len(data) > MAX_EVENT_BYTES else None
            parsed = data if cut is None else cut[0]
            await self._parsing.take(
                max(EVENT_COST, len(parsed)) if text and len(parsed) <= MAX_EVENT_BYTES else MAX_EVENT_BYTES
            )
            if not text:
                raise BadEvent("Send events as JSON text, not binary data", "invalid_event")
            if len(parsed) > MAX_EVENT_BYTES:
                raise _too_large(len(data))
            event = _parse(parsed)
            if isinstance(event.get("event_id"), str):
                event_id = event["event_id"][:MAX_EVENT_ID_CHARS]
            if cut is not None:
                if event["type"] != APPEND or event.get("audio") != AUDIO_MARK:
                    raise _too_large(len(data))  # the cut was not an append's own audio: too large to read whole
                event["audio"] = cut[1]
            handler = _HANDLERS.get(event["type"])
            if handler is None:
                raise BadEvent(
                    f"Unknown event type {quote(event['type'])}: this server takes session.update, "
                    "transcription_session.update and input_audio_buffer.append, .commit and .clear",
                    "unknown_event",
                    "type",
                )
            await handler(self, event)
        except BadEvent as err:
            await self.error(err.message, err.code, err.param, event_id)
        except WisError as err:
            await self._send({"type": "error", "error": error_object(err) | {"event_id": event_id}})
        finally:
            self.last_event = time.monotonic()

    async def control_frame(self) -> None:
        """A ping or pong of the client's: paced as an event is, but no event for the idle timeout."""
        await self._parsing.take(CONTROL_COST)

    async def feed_samples(self, samples: np.ndarray) -> None:
        """Audio that came otherwise than in appends (16 kHz mono float32: WebRTC's track), into the listening,
        opened as an append opens it; an error (e.g. past --max-audio-seconds) goes to the client as an event."""
        try:
            await self._listen().feed_samples(samples)
        except WisError as err:
            await self._send({"type": "error", "error": error_object(err) | {"event_id": None}})

    async def _update(self, event: dict[str, Any]) -> None:
        config = self.config.updated(event.get("session"), beta=event["type"] == "transcription_session.update")
        request = config.request()
        if self._listening is None:
            self._listen(config)  # an unknown model or language: an error, the session unchanged
        elif request != self.config.request():
            await self._listening.change(request)  # (the same: the turn being heard is answered as it began)
        self.config = config
        await self._send({"type": self._kind("updated"), "session": self._render()})

    async def _append(self, event: dict[str, Any]) -> None:
        if not self.appends:
            raise BadEvent("The audio of this session is its call's track: it takes no appends", "invalid_event")
        audio = event.get("audio")
        if not isinstance(audio, str | memoryview):  # (a memoryview: cut from a large append, `_cut_audio`)
            raise BadEvent("audio must be a base64 string", param="audio")
        config = self.config
        if len(audio) <= INLINE_AUDIO_CHARS:
            pcm = _decode(audio, config.format)
        else:
            pcm = await asyncio.to_thread(_decode, audio, config.format)
        if pcm:
            listening = self._listen()
            turn = listening.turn
            try:
                await listening.feed(pcm, config.audio_format)
            except WisError:
                self._forget(turn)  # the listening dropped the turn: no event comes for it
                raise
            await self._audio.take(config.audio_format.seconds(len(pcm)))

    async def _commit(self, event: dict[str, Any]) -> None:
        listening = self._listening
        seconds = 0.0 if listening is None else listening.seconds
        if listening is None or seconds < MIN_COMMIT_SECONDS:
            raise BadEvent(
                "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer"
                f" only has {seconds * 1000:.2f}ms of audio.",
                "input_audio_buffer_commit_empty",
            )
        await listening.commit()

    async def _clear(self, event: dict[str, Any]) -> None:
        if self._listening is not None:
            turn = self._listening.turn
            await self._listening.clear()
            self._forget(turn)
        await self._send({"type": "input_audio_buffer.cleared"})

    def _listen(self, config: Config | None = None) -> Listening:
        """The session's listening, opened for `config` (by default the session's) if it is not open yet."""
        if self._listening is None:
            request = (config or self.config).request()
            self._listening = self.core.listen(request, frontend="realtime", on_event=self._on_turn, many=True)
        return self._listening

    # -- turn events --------------------------------------------------------------

    async def _on_turn(self, event: TurnEvent) -> None:
        item = self._items.setdefault(event.turn, "item_" + secrets.token_hex(12))
        if isinstance(event, SpeechStarted):
            start = max(0, round(event.at * 1000) - self._prefix_ms())
            await self._send({"type": "input_audio_buffer.speech_started", "audio_start_ms": start, "item_id": item})
            self._told.add(item)
        elif isinstance(event, Partial):
            if item in self._told:
                await self._delta(item, event.text)
            else:
                self._held.setdefault(item, []).append(event.text)
        elif isinstance(event, TurnEnded):
            if event.by == "server":
                end = round(event.end * 1000)
                await self._send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": end, "item_id": item})
            previous, self._last_item = self._last_item, item
            await self._send({"type": "input_audio_buffer.committed", "previous_item_id": previous, "item_id": item})
            self._told.add(item)
            for held in self._held.pop(item, []):
                await self._delta(item, held)
        else:
            self._forget(event.turn)
            if isinstance(event, Final):
                await self._completed(item, event)
            elif isinstance(event, Failed):
                await self._failed(item, event.error)

    def _forget(self, turn: int | None) -> None:
        """A turn is answered, or dropped unanswered: its item is no longer the session's to tell of."""
        item = self._items.pop(turn, None) if turn is not None else None
        if item is not None:
            self._told.discard(item)
            self._held.pop(item, None)

    async def _delta(self, item: str, text: str) -> None:
        delta = {"type": "conversation.item.input_audio_transcription.delta", "item_id": item, "content_index": 0}
        await self._send(delta | {"delta": text} | self._logprobs(text.logprobs if isinstance(text, Delta) else ()))

    async def _completed(self, item: str, final: Final) -> None:
        transcript = final.transcript
        completed = {"type": "conversation.item.input_audio_transcription.completed", "item_id": item}
        usage = {"type": "duration", "seconds": round(transcript.duration, 3)}
        answer = {"content_index": 0, "transcript": transcript.text, "usage": usage}
        await self._send(completed | answer | self._logprobs(transcript.logprobs))

    def _logprobs(self, tokens: tuple[TokenLogprob, ...]) -> dict[str, Any]:
        """The tokens' log-probabilities, where the session's `include` asks for them."""
        return {"logprobs": token_logprobs(tokens)} if self.config.logprobs else {}

    async def _failed(self, item: str, err: WisError) -> None:
        failed = "conversation.item.input_audio_transcription.failed"
        await self._send({"type": failed, "item_id": item, "content_index": 0, "error": error_object(err)})

    # -- sending ------------------------------------------------------------------

    def _kind(self, what: str) -> str:
        return f"transcription_session.{what}" if self.beta else f"session.{what}"

    def _render(self) -> dict[str, Any]:
        return self.config.render(self.id, self.beta)

    def _prefix_ms(self) -> int:
        detection = self.config.turn_detection
        return 0 if detection is None else detection.prefix_padding_ms

    async def error(self, message: str, code: str, param: str | None = None, event_id: str | None = None) -> None:
        """The client's mistake: an `error` event (echoing its event_id), and in the log a warning (the session's
        first; the rest at debug, so that a client cannot fill the log)."""
        log = _LOGGER.debug if self._warned else _LOGGER.warning
        self._warned = True
        log("Realtime client %s: %s (%s)", self.remote, message, code)
        error = {"type": "invalid_request_error", "code": code, "message": message, "param": param}
        await self._send({"type": "error", "error": error | {"event_id": event_id}})

    async def _send(self, event: dict[str, Any]) -> None:
        await self._transport(json.dumps({"event_id": f"event_{next(self._events)}", **event}))


_HANDLERS = {
    "session.update": RealtimeSession._update,
    "transcription_session.update": RealtimeSession._update,
    "input_audio_buffer.append": RealtimeSession._append,
    "input_audio_buffer.commit": RealtimeSession._commit,
    "input_audio_buffer.clear": RealtimeSession._clear,
}


def _parse(data: bytes) -> dict[str, Any]:
    """An event's JSON (at most MAX_EVENT_BYTES: its parse is bounded), as an object with a type."""
    try:
        event = json.loads(data.decode())
    except (ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        raise BadEvent("The event is not valid JSON (UTF-8)", "invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise BadEvent('An event must be a JSON object with a "type"', "invalid_event", "type")
    return event


def _cut_audio(data: bytes) -> tuple[bytes, memoryview] | None:
    """An event as an append: its JSON with the first "audio" key's string replaced by AUDIO_MARK, and that string's
    bytes (base64 has no quote or backslash: its end is the next quote); None where there is no such string, or the
    JSON left is over MAX_EVENT_BYTES. Found by `bytes.find`, in time linear in the frame (0.5 ms a MiB at worst);
    the caller takes the cut as the audio only if the mark comes back as an append's own "audio": a mis-located cut
    (a nested "audio" key, an escape in the string) is never mis-read."""
    key = data.find(AUDIO_KEY)
    value = AUDIO_VALUE.match(data, key + len(AUDIO_KEY)) if key >= 0 else None
    end = data.find(b'"', value.end()) if value is not None else -1
    if value is None or end < 0 or data.find(b"\\", value.end(), end) >= 0:
        return None
    rest = data[: value.end() - 1] + json.dumps(AUDIO_MARK).encode() + data[end + 1 :]
    return (rest, memoryview(data)[value.end() : end]) if len(rest) <= MAX_EVENT_BYTES else None


def _too_large(size: int) -> BadEvent:
    return BadEvent(
        f'An event may be at most {MAX_EVENT_BYTES} bytes, the audio of an {APPEND} aside (its first key "audio",'
        f" plain base64); this one is {size}",
        "event_too_large",
    )


def _decode(audio: str | memoryview, audio_format: str) -> bytes:
    """An append's audio as 16-bit PCM (G.711 decoded); blocking: on the event loop up to INLINE_AUDIO_CHARS."""
    try:
        data = binascii.a2b_base64(audio, strict_mode=True)
    except (binascii.Error, ValueError):
        raise BadEvent("audio is not valid base64", "invalid_audio", "audio") from None
    if audio_format == PCM:
        if len(data) % 2:
            raise BadEvent("PCM audio must be whole 16-bit samples (an even number of bytes)", "invalid_audio", "audio")
        return data
    return _g711(data, "pcm_mulaw" if audio_format == PCMU else "pcm_alaw")


def _g711(data: bytes, codec: str) -> bytes:
    """G.711 (8 kHz, a byte a sample) as 16-bit PCM, by FFmpeg's decoder."""
    if not data:
        return b""
    context = av.CodecContext.create(codec, "r")
    context.sample_rate = 8000
    context.layout = "mono"
    return b"".join(frame.to_ndarray().tobytes() for frame in context.decode(av.Packet(data)))
