"""`GET /v1/realtime?intent=transcription`: OpenAI's Realtime API, transcription sessions, over a WebSocket.

The client streams audio (`input_audio_buffer.append`, base64 PCM at 24 kHz or G.711) and hears back, per turn,
`speech_started`, transcript deltas while the speaker talks, `speech_stopped` and `committed` when the turn ends,
then `conversation.item.input_audio_transcription.completed`. Turns are the core's (`wyoming_wis/listening.py`,
the same as Wyoming's and WebRTC's): with `server_vad` or `semantic_vad` the server ends each on what was said and
the pause after it, with `turn_detection: null` the client's `commit` does. Both shapes of the protocol are served:
GA, and beta (the `OpenAI-Beta: realtime=v1` header, or from a browser the subprotocol `openai-beta.realtime-v1`;
`transcription_session.*`). See realtime_config.py for the
session's fields.

`RealtimeSession` is the protocol, whatever carries it: it is handed each client event's text (`handle`) and sends
each server event through a callable. Here a WebSocket carries them; rtc/realtime_call.py serves the same session
over WebRTC (`POST /v1/realtime/calls`), where the audio comes on the call's track (`feed_samples`) instead of in
appends.

Every client event is hostile until parsed: a frame of over MAX_EVENT_BYTES, invalid JSON, an unknown event, bad
base64 or a bad value is answered with an `error` event naming it, and the session goes on. Sessions are counted
(--realtime-max-sessions, half of them at most per address, as WebRTC's), a session silent for
--realtime-idle-timeout is closed, and each turn is an ASR session under the audio limit and the memory budget.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import av
import numpy as np
from aiohttp import WSMsgType, web

from wyoming_wis.core import Core, Delta, TokenLogprob
from wyoming_wis.errors import Busy, WisError
from wyoming_wis.listening import Failed, Final, Listening, Partial, SpeechStarted, TurnEnded, TurnEvent
from wyoming_wis.shares import Slots
from wyoming_wis.values import quote

from .errors import ApiError
from .limits import SEND_TIMEOUT
from .realtime_config import PCM, PCMU, BadEvent, Config
from .security import subprotocols
from .state import core_of
from .transcript_formats import token_logprobs

_LOGGER = logging.getLogger(__name__)
routes = web.RouteTableDef()
SESSIONS = web.AppKey("realtime_sessions", Slots)
IDLE_TIMEOUT = web.AppKey("realtime_idle_timeout", float)
MAX_EVENT_BYTES = 1024 * 1024  # a client event; 10 s of 24 kHz PCM is 640 KB in base64. Larger: an error event
MAX_FRAME_BYTES = 4 * MAX_EVENT_BYTES  # larger still: the WebSocket is closed (1009), unread
MIN_COMMIT_SECONDS = 0.1  # OpenAI's least audio for a commit
# An append up to this (base64 characters: 1 s of 24 kHz PCM) is decoded on the event loop, in at most 0.2 ms;
# a larger one in a worker thread. A 20 ms append decodes in 3 us, the thread hop costs 126 us.
INLINE_AUDIO_CHARS = 64 * 1024
MAX_EVENT_ID_CHARS = 64  # of a client's event_id, echoed in its errors
SUBPROTOCOL = "realtime"  # what a browser asks for (with its key as another subprotocol: security.py)
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"  # a browser's OpenAI-Beta: realtime=v1
HEARTBEAT_SECONDS = 30.0
Send = Callable[[str], Awaitable[None]]  # a server event's JSON to the client; raises ConnectionError once it left


def setup(app: web.Application, max_sessions: int, idle_timeout: float) -> None:
    app[SESSIONS] = Slots(max_sessions, "Realtime sessions", "--realtime-max-sessions")
    app[IDLE_TIMEOUT] = idle_timeout


@routes.get("/v1/realtime")
async def realtime(request: web.Request) -> web.StreamResponse:
    """Open a transcription session; a conversation session (no intent) is answered 400: this server has no
    language model."""
    core = core_of(request)
    intent = request.query.get("intent")
    if intent != "transcription":
        raise ApiError(
            400,
            "This server serves transcription sessions only: connect to /v1/realtime?intent=transcription",
            "intent",
            "invalid_value",
        )
    # the beta SDK (and speaches' clients) name the model in the query: the session's transcription model
    config = Config(model=model) if (model := request.query.get("model")) else Config()
    core.resolve(config.request())  # an unknown model: 404, before the upgrade
    socket = web.WebSocketResponse(
        protocols=(SUBPROTOCOL,), max_msg_size=MAX_FRAME_BYTES, compress=False, heartbeat=HEARTBEAT_SECONDS
    )
    if not socket.can_prepare(request).ok:
        raise ApiError(400, "Connect with a WebSocket (Upgrade: websocket)", None, "invalid_request")
    slots = request.app[SESSIONS]
    try:
        owner = slots.take(request.remote)
    except Busy as err:
        raise ApiError(429, err.message, None, "too_many_sessions") from None
    try:
        await socket.prepare(request)
        beta = request.headers.get("OpenAI-Beta", "").replace(" ", "") == "realtime=v1" or (
            BETA_SUBPROTOCOL in subprotocols(request.headers)
        )
        session = RealtimeSession(core, _sender(socket, request), request.remote or "local", beta=beta, config=config)
        await _serve(session, socket, request.app[IDLE_TIMEOUT])
    finally:
        slots.give(owner)
    return socket


async def _serve(session: RealtimeSession, socket: web.WebSocketResponse, idle: float) -> None:
    """The WebSocket's frames into the session until the client goes, or sends nothing for `idle` seconds."""
    await session.start()
    try:
        while not socket.closed:
            try:
                message = await socket.receive(timeout=idle)
            except TimeoutError:
                await session.error(f"No event for {idle:g} s (--realtime-idle-timeout); closing", "idle_timeout")
                break
            if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                await session.handle(message.data)
            elif message.type == WSMsgType.ERROR:
                _LOGGER.debug("Realtime client %s: %s", session.remote, message.data)
                break
            else:  # closing or closed
                break
            await asyncio.sleep(0)  # the next buffered event waits for every other connection's turn
    except ConnectionError:
        pass  # the client left, or stopped reading
    finally:
        session.close()
        await socket.close()


def _sender(socket: web.WebSocketResponse, request: web.Request) -> Send:
    """Send a server event, if the client takes it within --send-timeout; one that stops reading is cut off."""
    seconds = request.app[SEND_TIMEOUT]

    async def send(payload: str) -> None:
        if socket.closed:
            raise ConnectionResetError("the Realtime client left")
        try:
            async with asyncio.timeout(seconds):
                await socket.send_str(payload)
        except TimeoutError:
            _LOGGER.warning(
                "Realtime client %s read nothing for %g s (--send-timeout); closing", request.remote, seconds
            )
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("the Realtime client stopped reading") from None

    return send


class RealtimeSession:
    """One client's transcription session: its configuration, its listening, and the ids it has been told.

    Its transport is the caller's: `send` takes each server event, `handle` each client event, and `feed_samples`
    audio that comes otherwise than in appends (`appends=False`: the client may not send them)."""

    def __init__(
        self,
        core: Core,
        send: Send,
        remote: str,
        *,
        beta: bool = False,
        config: Config | None = None,
        appends: bool = True,
    ) -> None:
        self.core = core
        self.remote = remote  # the client's address, for the log
        self.beta = beta
        self.appends = appends
        self._transport = send
        self.id = "sess_" + secrets.token_hex(12)
        self.config = config or Config()
        self._events = itertools.count(1)
        self._listenings = itertools.count(1)
        self._listening: Listening | None = None
        self._listening_number = 0
        self._base = 0.0  # seconds of audio before the listening now open: audio_*_ms count from the session's start
        self._bases: dict[int, float] = {}
        self._items: dict[tuple[int, int], str] = {}  # (listening, turn) -> item id
        self._told: set[str] = set()  # items the client has been told of (speech_started or committed)
        self._held: dict[str, list[str]] = {}  # text of items not told of yet, as it came
        self._last_item: str | None = None  # the last committed item
        self._retiring: dict[Listening, asyncio.Task[None]] = {}  # of an earlier configuration, finishing turns
        self._warned = False  # the client's first mistake has been logged as a warning

    async def start(self) -> None:
        """Tell the client its session: the first server event."""
        await self._send({"type": self._kind("created"), "session": self._render()})

    def close(self) -> None:
        """Stop listening: turns not answered yet are dropped."""
        for retiring in self._retiring.values():
            retiring.cancel()  # which closes its listening
        if self._listening is not None:
            self._listening.close()

    # -- client events ------------------------------------------------------------

    async def handle(self, data: str | bytes) -> None:
        """A client event, as its transport received it; a mistake in it is answered with an `error` event."""
        event_id = None
        try:
            if not isinstance(data, str):
                raise BadEvent("Send events as JSON text, not binary data", "invalid_event")
            if len(data) > MAX_EVENT_BYTES:
                raise BadEvent(
                    f"An event may be at most {MAX_EVENT_BYTES} bytes; this one is {len(data)}", "event_too_large"
                )
            try:
                event = json.loads(data)
            except (ValueError, RecursionError):
                raise BadEvent("The event is not valid JSON", "invalid_json") from None
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise BadEvent('An event must be a JSON object with a "type"', "invalid_event", "type")
            if isinstance(event.get("event_id"), str):
                event_id = event["event_id"][:MAX_EVENT_ID_CHARS]
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
            await self._send({"type": "error", "error": _error_body(err) | {"event_id": event_id}})

    async def feed_samples(self, samples: np.ndarray) -> None:
        """Audio that came otherwise than in appends (16 kHz mono float32: WebRTC's track), into the listening,
        opened as an append opens it; an error (e.g. past --max-audio-seconds) goes to the client as an event."""
        try:
            listening = self._listening or await self._relisten(self.config)
            await listening.feed_samples(samples)
        except WisError as err:
            await self._send({"type": "error", "error": _error_body(err) | {"event_id": None}})

    async def _update(self, event: dict[str, Any]) -> None:
        config = self.config.updated(event.get("session"), beta=event["type"] == "transcription_session.update")
        request = config.request()
        if request != self.config.request() or self._listening is None:
            self.core.resolve(request)  # an unknown model or language: an error, the session unchanged
            await self._relisten(config)
        self.config = config
        await self._send({"type": self._kind("updated"), "session": self._render()})

    async def _append(self, event: dict[str, Any]) -> None:
        if not self.appends:
            raise BadEvent("The audio of this session is its call's track: it takes no appends", "invalid_event")
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise BadEvent("audio must be a base64 string", param="audio")
        config = self.config
        if len(audio) <= INLINE_AUDIO_CHARS:
            pcm = _decode(audio, config.format)
        else:
            pcm = await asyncio.to_thread(_decode, audio, config.format)
        if pcm:
            listening = self._listening or await self._relisten(config)
            await listening.feed(pcm, config.audio_format)

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
            await self._listening.clear()
        await self._send({"type": "input_audio_buffer.cleared"})

    async def _relisten(self, config: Config) -> Listening:
        """A listening for `config`'s request; the one before finishes its turns (the one being heard, committed
        if it holds enough audio, else dropped) and then closes."""
        old = self._listening
        number = next(self._listenings)

        async def on_event(event: TurnEvent) -> None:
            await self._on_turn(number, event)

        if old is not None:
            self._base += old.heard
        self._bases[number] = self._base
        self._listening = self.core.listen(config.request(), frontend="realtime", on_event=on_event, many=True)
        if old is not None:
            self._retiring[old] = asyncio.create_task(self._retire(old))
        return self._listening

    async def _retire(self, old: Listening) -> None:
        """The turn being heard under the old configuration is answered under it, if it holds enough audio."""
        try:
            if old.seconds >= MIN_COMMIT_SECONDS:
                with suppress(WisError):  # busy: that turn is dropped
                    await old.commit()
            await old.drain()
        finally:
            old.close()
            self._retiring.pop(old, None)

    # -- turn events --------------------------------------------------------------

    async def _on_turn(self, listening: int, event: TurnEvent) -> None:
        key = (listening, event.turn)
        item = self._items.setdefault(key, "item_" + secrets.token_hex(12))
        base = self._bases[listening]
        if isinstance(event, SpeechStarted):
            start = max(0, round((base + event.at) * 1000) - self._prefix_ms())
            await self._send({"type": "input_audio_buffer.speech_started", "audio_start_ms": start, "item_id": item})
            self._told.add(item)
        elif isinstance(event, Partial):
            if item in self._told:
                await self._delta(item, event.text)
            else:
                self._held.setdefault(item, []).append(event.text)
        elif isinstance(event, TurnEnded):
            if event.by == "server":
                end = round((base + event.end) * 1000)
                await self._send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": end, "item_id": item})
            previous, self._last_item = self._last_item, item
            await self._send({"type": "input_audio_buffer.committed", "previous_item_id": previous, "item_id": item})
            self._told.add(item)
            for held in self._held.pop(item, []):
                await self._delta(item, held)
        else:
            self._items.pop(key, None)
            self._told.discard(item)
            self._held.pop(item, None)
            if isinstance(event, Final):
                await self._completed(item, event)
            elif isinstance(event, Failed):
                await self._failed(item, event.error)

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
        await self._send({"type": failed, "item_id": item, "content_index": 0, "error": _error_body(err)})

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


def _error_body(err: WisError) -> dict[str, Any]:
    """The core's error as OpenAI's error object (its type by the HTTP status the API would answer)."""
    api = ApiError.from_wis(err)
    return {"type": api.type, "code": err.code, "message": err.message, "param": api.param}


def _decode(audio: str, audio_format: str) -> bytes:
    """An append's audio as 16-bit PCM (G.711 decoded); blocking: on the event loop up to INLINE_AUDIO_CHARS."""
    try:
        data = base64.b64decode(audio, validate=True)
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
