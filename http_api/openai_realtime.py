"""`GET /v1/realtime?intent=transcription`: OpenAI's Realtime API, transcription sessions, over a WebSocket.

The session is openai_audio/realtime.py's `RealtimeSession` (the protocol, whatever carries it); this is its
WebSocket. The beta shape is asked for by the `OpenAI-Beta: realtime=v1` header, or from a browser by the
subprotocol `openai-beta.realtime-v1`.

A frame of over MAX_FRAME_BYTES closes the WebSocket unread (1009); every other is handed to the session, which
paces its client (a text frame is an event, a binary one is refused; pings and pongs are paced too, and answered
here), and the loop yields between frames. Sessions are counted (--realtime-max-sessions, shared by address as
WebRTC's: shares.Slots), what a session's socket may hold is counted in the memory budget (RECEIVE_ALLOWANCE) as
its turns' audio is, and a session that sends no event for --realtime-idle-timeout is closed (pings and pongs are
no event).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress

from aiohttp import WSCloseCode, WSMsgType, web

from openai_audio.realtime import RealtimeSession
from openai_audio.realtime_config import Config
from wyoming_wis.errors import Busy
from wyoming_wis.scheduler import household_first
from wyoming_wis.shares import Place, Slots, owner

from .errors import ApiError
from .limits import SEND_TIMEOUT
from .security import subprotocols
from .state import core_of

_LOGGER = logging.getLogger(__name__)
routes = web.RouteTableDef()
SESSIONS = web.AppKey("realtime_sessions", Slots)
IDLE_TIMEOUT = web.AppKey("realtime_idle_timeout", float)
MAX_FRAME_BYTES = 1024 * 1024  # a client's frame (16 s of 24 kHz PCM in base64); larger: closed (1009), unread
# Held for each WebSocket in the memory budget, from its upgrade to its end: what aiohttp may hold of its frames (one
# being read; whole ones queued, up to 512 KiB and one past it; a socket read of 256 KiB not parsed yet) and the
# frame being handled with its audio decoded (3/4 of its size): 4.5 frames, at most
RECEIVE_ALLOWANCE = 5 * MAX_FRAME_BYTES
SUBPROTOCOL = "realtime"  # what a browser asks for (with its key as another subprotocol: security.py)
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"  # a browser's OpenAI-Beta: realtime=v1
HEARTBEAT_SECONDS = 30.0
CLOSE_FRAME = WSCloseCode.OK.to_bytes(2, "big")  # a close frame's payload: its code, no reason


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
    # control frames come to `_serve` (autoping off: aiohttp would answer pings in a loop that never yields), and
    # text frames as their bytes (decode_text off: their size is checked in bytes, and UTF-8 where they are parsed)
    socket = web.WebSocketResponse(
        protocols=(SUBPROTOCOL,),
        max_msg_size=MAX_FRAME_BYTES + 1,  # (aiohttp refuses a frame of max_msg_size itself)
        compress=False,
        heartbeat=HEARTBEAT_SECONDS,
        autoping=False,
        decode_text=False,
    )
    if not socket.can_prepare(request).ok:
        raise ApiError(400, "Connect with a WebSocket (Upgrade: websocket)", None, "invalid_request")
    slots = request.app[SESSIONS]
    place: Place[RealtimeSession] = Place(owner(request.remote))
    try:
        victim = slots.take(place)
    except Busy as err:
        raise ApiError(429, err.message, None, "too_many_sessions") from None
    if victim is not None and victim.holder is not None:
        victim.holder.end(slots.evicted(victim))
    try:
        with core.budget.hold() as allowance:
            allowance.set(RECEIVE_ALLOWANCE)  # Busy: 429, before the upgrade
            await socket.prepare(request)
            beta = request.headers.get("OpenAI-Beta", "").replace(" ", "") == "realtime=v1" or (
                BETA_SUBPROTOCOL in subprotocols(request.headers)
            )
            outbox = _Outbox(socket, request)
            session = RealtimeSession(
                core, outbox.event, request.remote or "local", beta=beta, config=config, hang_up=outbox.close
            )
            place.holder = session
            await _serve(session, socket, outbox, request.app[IDLE_TIMEOUT])
    finally:
        slots.give(place)
    return socket


async def _serve(session: RealtimeSession, socket: web.WebSocketResponse, outbox: _Outbox, idle: float) -> None:
    """The WebSocket's frames into the session (`_read`) until the client goes, sends no event for `idle` seconds,
    or the session is ended: then at once, whatever it was waiting for (its pace, a decode), so that a session
    closed to make room gives its place and memory to the newcomer, not after the frames its client had queued."""
    await session.start()
    reading = asyncio.create_task(_read(session, socket, outbox, idle))
    outbox.reading = reading
    try:
        await asyncio.wait([reading])
        if not reading.cancelled():
            reading.result()  # (its error, if any)
    finally:
        session.close()
        await outbox.close()  # (which stops `reading`, where the caller was cancelled)


async def _read(session: RealtimeSession, socket: web.WebSocketResponse, outbox: _Outbox, idle: float) -> None:
    """Each frame in turn, control frames too (a ping is answered here), each paced by the session; the loop yields
    to every other connection between them, and a stranger's event waits while Home Assistant's calls run."""
    who = owner(session.remote)
    try:
        while not socket.closed and not outbox.gone:  # (frames still queued from a client gone are not handled)
            left = session.last_event + idle - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                message = await socket.receive(timeout=left)
            except TimeoutError:
                await session.error(f"No event for {idle:g} s (--realtime-idle-timeout); closing", "idle_timeout")
                break
            if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                await household_first(who)
                await session.handle(message.data, text=message.type == WSMsgType.TEXT)
            elif message.type in (WSMsgType.PING, WSMsgType.PONG):
                await session.control_frame()
                if message.type == WSMsgType.PING:
                    await outbox.send(message.data, WSMsgType.PONG)
            elif message.type == WSMsgType.ERROR:
                _LOGGER.debug("Realtime client %s: %s", session.remote, message.data)
                break
            else:  # closing or closed
                break
            await asyncio.sleep(0)  # the next buffered frame waits for every other connection's turn
    except ConnectionError:
        pass  # the client left, or stopped reading


class _Outbox:
    """What goes out on a session's WebSocket: sent if the client takes it within --send-timeout; one that stops
    reading is cut off (its pongs, like its events, wait in the socket's buffers, not in ours)."""

    def __init__(self, socket: web.WebSocketResponse, request: web.Request) -> None:
        self._socket = socket
        self._request = request
        self._seconds = request.app[SEND_TIMEOUT]
        self.reading: asyncio.Task[None] | None = None  # the session's frames (`_read`), stopped by `close`

    async def event(self, payload: str) -> None:
        """A server event's JSON (the session's `Send`)."""
        await self.send(payload.encode(), WSMsgType.TEXT)

    @property
    def gone(self) -> bool:
        """Whether the client's connection is lost."""
        return self._request.transport is None or self._request.transport.is_closing()

    async def close(self) -> None:
        """End the WebSocket: where the client has not (its close frame was answered as it came), with our close
        frame, not waiting for its answer. aiohttp's `close` would wait up to 10 s for it, reading whatever comes
        before it in a loop that yields only between socket reads: 16 sessions flooding pings held the loop 11 s.
        No more of the client's frames is handled."""
        if self.reading is not None:
            self.reading.cancel()
        if not self._socket.closed:
            with suppress(ConnectionError):
                await self.send(CLOSE_FRAME, WSMsgType.CLOSE)
            if self._request.transport is not None:
                self._request.transport.close()  # (after what is written; unread frames are dropped)
        await self._socket.close()

    async def send(self, data: bytes, kind: WSMsgType) -> None:
        if self._socket.closed:
            raise ConnectionResetError("the Realtime client left")
        try:
            async with asyncio.timeout(self._seconds):
                await self._socket.send_frame(data, kind)
        except TimeoutError:
            remote, seconds = self._request.remote, self._seconds
            _LOGGER.warning("Realtime client %s read nothing for %g s (--send-timeout); closing", remote, seconds)
            if self._request.transport is not None:
                self._request.transport.abort()
            raise ConnectionResetError("the Realtime client stopped reading") from None
