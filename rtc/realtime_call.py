"""`POST /v1/realtime/calls`: OpenAI's Realtime API (transcription sessions) over WebRTC.

The client posts its offer as OpenAI's SDK does (`client.realtime.calls.create(sdp=..., session=...)`):
multipart/form-data with the part `sdp` and, optionally, `session` (JSON: what a `session.update` would say,
applied before any audio), or the offer alone as an application/sdp body. The answer is the SDP answer
(201, application/sdp, `Location: /v1/realtime/calls/{call_id}`). The microphone is the offer's audio track; the
events (those of the WebSocket at `/v1/realtime`, but for `input_audio_buffer.append`) go both ways on the data
channel the client names "oai-events", `session.created` first as soon as it opens (a call whose client opens
another data channel is closed: its events could not be heard). `POST
/v1/realtime/calls/{call_id}/hangup` ends the call.

Everything else is WebRTC's (`signalling.connect`): the offer is checked as `/api/rtc/asr`'s (an audio track and
a data channel), the call takes a place among the same connections (--rtc-max-sessions, shared by address),
and `peer.Connection` holds it to the same ports, idle timeout and data channel bounds, and ends it.
Errors before the answer come in the HTTP API's envelope: 400 for a bad body, offer or session (its `param` as a
`session.update`'s error would name it), 404 for an unknown model, 413, 415 for another content type, 429, 503.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import av
from aiohttp import web
from aiortc import RTCDataChannel
from aiortc.exceptions import InvalidStateError

from http_api import bodies
from http_api.errors import ApiError, bad_field
from http_api.state import core_of
from openai_audio.realtime import MAX_EVENT_BYTES, RealtimeSession
from openai_audio.realtime_config import BadEvent, Config
from wyoming_wis.core import Core
from wyoming_wis.scheduler import patience
from wyoming_wis.shares import client, owner
from wyoming_wis.values import quote

from .offers import BadOffer, check_offer
from .peer import Connection, Setup
from .signalling import MAX_OFFER, OFFER_LIMIT, PEERS, connect, unanswerable
from .track import Listener

_LOGGER = logging.getLogger(__name__)
routes = web.RouteTableDef()
EVENTS = "oai-events"  # the data channel's label, as OpenAI's clients name it
SDP = "application/sdp"
CALL_LIMIT = bodies.Limit(MAX_OFFER + bodies.MAX_TEXT_BYTES, "A call's offer and session")
MAX_WAITING = 64  # client events received and not yet handled; more: the client sends faster than it could need
MAX_WAITING_BYTES = 4 * MAX_EVENT_BYTES  # ... and their bytes: a few of the largest events (no append comes here)


@routes.post("/v1/realtime/calls")
async def create(request: web.Request) -> web.Response:
    """Answer the offer; the call then lives on its own until the client hangs up or goes."""
    core = core_of(request)
    offered, session = await _read(request)
    config = _config(session)
    core.resolve(config.request())  # an unknown model or language: 404 or 400, before any connection
    try:
        check_offer(offered)
    except BadOffer as err:
        raise unanswerable(err) from None
    call_id = "rtc_" + secrets.token_hex(16)
    answer = await connect(request, offered, lambda setup: RealtimeCall(call_id, core, config, setup))
    headers = {"Location": f"/v1/realtime/calls/{call_id}"}
    return web.Response(status=201, text=answer.sdp, content_type=SDP, headers=headers)


@routes.post("/v1/realtime/calls/{call_id}/hangup")
async def hangup(request: web.Request) -> web.Response:
    """End a call, as OpenAI's `client.realtime.calls.hangup(call_id)`; only from the address that made it."""
    call_id = request.match_info["call_id"]
    peers = request.app[PEERS]
    calls = [
        peer
        for peer, place in peers.open.items()
        if isinstance(peer, RealtimeCall) and peer.call_id == call_id and place.owner == owner(request.remote)
    ]
    if not calls:
        raise ApiError(404, f"No call {quote(call_id)} is open from this address", "call_id", "call_not_found")
    await calls[0].close("hung up")
    return web.Response(status=200)


async def _read(request: web.Request) -> tuple[str, str | None]:
    """The offer's SDP and the session's JSON text (None where none was sent)."""
    if request.content_type == SDP:
        return _utf8(await bodies.read(request, OFFER_LIMIT), "sdp"), None
    if request.content_type != "multipart/form-data":
        got = quote(request.content_type) if request.content_type else "no content type"
        message = f"Send multipart/form-data (sdp, session) or the offer as {SDP} (got {got})"
        raise ApiError(415, message, None, "bad_content_type")
    form = await bodies.read_form(request, CALL_LIMIT)
    sdp, session = (_part(form.get(name), name) for name in ("sdp", "session"))
    if not sdp or not sdp.strip():
        raise bad_field("sdp", "The part sdp is required: the client's offer (RTCPeerConnection.localDescription.sdp)")
    return sdp, session


def _part(value: str | web.FileField | None, name: str) -> str | None:
    """A form part as text; sent as a file (a browser's Blob) it is read too, within the body's limit (in memory:
    the limit is under what bodies.py spools to disk)."""
    if isinstance(value, web.FileField):
        return _utf8(value.file.read(), name)
    return value


def _utf8(data: bytes, param: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise bad_field(param, f"{param} must be UTF-8 text") from None


def _config(session: str | None) -> Config:
    """The session's configuration: the part `session` read as a GA `session.update`'s session."""
    if session is None:
        return Config()
    try:
        value = json.loads(session)
    except (ValueError, RecursionError):
        raise bad_field("session", "The part session must be JSON: the session, as session.update sends it") from None
    try:
        return Config().updated(value, beta=False)
    except BadEvent as err:
        raise ApiError(400, err.message, err.param, err.code) from None


class RealtimeCall(Connection):
    """A connection that speaks OpenAI's Realtime API: its track into a `RealtimeSession`'s listening, its events
    on the data channel "oai-events"."""

    def __init__(self, call_id: str, core: Core, config: Config, setup: Setup) -> None:
        self.call_id = call_id
        self.session = RealtimeSession(core, self._send, setup.remote, config=config, appends=False)
        self._listener = Listener(self.session, setup.executor)
        self._channel: RTCDataChannel | None = None
        self._serving = False  # session.created has gone out: the track's audio is listened to from then on
        self._events: asyncio.Queue[tuple[bytes, bool]] = asyncio.Queue(MAX_WAITING)  # (data, whether text)
        self._waiting_bytes = 0
        super().__init__(setup)

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        label = channel.label
        if label != EVENTS or self._channel is not None:  # events that could not be heard: the call goes
            why = (
                f"a second {EVENTS} data channel"
                if label == EVENTS
                else f"a data channel named {quote(label)}, not {EVENTS}"
            )
            _LOGGER.warning("Realtime client %s (connection %d): %s; closing", self.remote, self.id, why)
            self.close_soon(why)
            return
        self._channel = channel
        super()._on_datachannel(channel)
        channel.on("close", lambda: self.close_soon(f"its {EVENTS} data channel closed"))
        if channel.readyState == "open":
            self._opened()
        else:
            channel.on("open", self._opened)

    def _opened(self) -> None:
        self._spawn(self._serve())

    async def _serve(self) -> None:
        """session.created, then each client event in turn, for the call's life."""
        try:
            await self.session.start()
            self._serving = True
            while True:
                data, text = await self._events.get()
                self._waiting_bytes -= len(data)
                with self._as_client():
                    await self.session.handle(data, text=text)  # paced: the queue fills for a client sending faster
        except ConnectionError:
            self.close_soon(f"its {EVENTS} data channel closed")
        except Exception:  # a bug: the call would go on deaf to its events
            _LOGGER.exception("WebRTC connection %d: unexpected error handling a Realtime event", self.id)
            self.close_soon("an internal error")

    def _on_message(self, channel: RTCDataChannel, data: str | bytes) -> None:
        event = (data.encode(), True) if isinstance(data, str) else (data, False)  # as a WebSocket's frame comes
        if self._events.full() or self._waiting_bytes + len(event[0]) > MAX_WAITING_BYTES:
            why = f"{self._events.qsize() + 1} events waiting, {self._waiting_bytes + len(event[0])} bytes"
            _LOGGER.warning("Realtime client %s: %s; closing its call", self.remote, why)
            self.close_soon(why)
            return
        self._waiting_bytes += len(event[0])
        self._events.put_nowait(event)

    async def _hear(self, frame: av.AudioFrame) -> None:
        if not self._serving or not self._listener.add(frame):
            return
        try:
            with self._as_client():
                await self._listener.feed()  # the session tells the client of its errors
        except ConnectionError:
            self.close_soon(f"its {EVENTS} data channel closed")

    def _release(self) -> None:
        self._listener.close()
        self.session.close()

    async def _send(self, payload: str) -> None:
        """A server event on the data channel; its SCTP association holds what the client has not acknowledged
        within bounds (rtc/sctp.py)."""
        channel = self._channel
        try:
            if channel is None or channel.readyState != "open":
                raise InvalidStateError
            channel.send(payload)
        except InvalidStateError:
            raise ConnectionResetError(f"the {EVENTS} data channel is closed") from None

    @contextmanager
    def _as_client(self) -> Iterator[None]:
        """What the call holds and queues is its client's (shares.client), and the client waits --http-max-wait from
        now for what it asks (a patience set once, at the offer, would run out during a long call)."""
        with client(self.remote), patience(self._limits.max_wait):
            yield
