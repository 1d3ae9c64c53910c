"""`POST /api/rtc/asr`: a browser's SDP offer in, the answer out, as Willow Inference Server's client expects.

The body is `{"sdp", "type": "offer"}`, the answer `{"sdp", "type": "answer"}`
with every candidate in it (no trickle ICE). Query parameters `model`,
`language`, `beam_size`, `detect_language`, `partials`, `hands_free` and
`vad_sensitivity` are the connection's defaults for its utterances (WIS
ignored them). Errors come in the HTTP API's envelope: 400 for a bad body,
offer or parameter, 413 for a body over MAX_OFFER (refused before it is read
past that), 404 for an unknown model, 429 with Retry-After at
`--rtc-max-sessions` where no connection may give its place up (shares.Slots:
an idle one, or one of an address holding two more, does), 503 while the models
load or when `--rtc-ports` has no free port.

Everything that can be checked is checked before a connection takes a place;
a connection that fails to be answered, or whose client leaves meanwhile, is
closed before the handler returns, so its place is free again at once.
`connect` does that for every kind of connection: OpenAI's Realtime API calls
(rtc/realtime_call.py) take their places among the same `Peers`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.exceptions import InternalError, InvalidAccessError, InvalidStateError, OperationError

from http_api import bodies
from http_api.errors import ApiError, bad_field
from http_api.state import CODEC_THREADS, core_of
from wyoming_wis.errors import Busy
from wyoming_wis.shares import Place, Slots, owner
from wyoming_wis.values import quote

from . import ice
from .messages import BadMessage, Params
from .offers import BadOffer, aiortc_error, check_offer
from .peer import Connection, Limits, Peer, Setup

_LOGGER = logging.getLogger(__name__)
routes = web.RouteTableDef()
MAX_OFFER = 64 * 1024  # bytes; a browser's offer is a few KB
OFFER_LIMIT = bodies.Limit(MAX_OFFER, "An offer", "sdp")
_UNANSWERABLE = (ValueError, BadOffer, InvalidAccessError, InvalidStateError, OperationError, InternalError)


@dataclass
class Peers:
    """The open connections, at most `limit`, shared by owner (shares.Slots); what every connection shares."""

    limit: int
    configuration: RTCConfiguration
    limits: Limits
    open: dict[Connection, Place[Connection]] = field(default_factory=dict)
    slots: Slots[Place[Connection]] = field(init=False)

    def __post_init__(self) -> None:
        self.slots = Slots(self.limit, "WebRTC connections", "--rtc-max-sessions")

    def take(self, address: str | None) -> Place[Connection]:
        """A place for a connection from `address`, in that of an idle one or one of an address holding more
        (closed now) if every place is taken; 429 when none may give its place up."""
        place: Place[Connection] = Place(owner(address))
        try:
            victim = self.slots.take(place)
        except Busy as err:
            raise ApiError(429, err.message, None, "too_many_sessions") from None
        if victim is not None and victim.holder is not None:
            why = self.slots.evicted(victim).message
            _LOGGER.warning("WebRTC connection of %s: %s", victim.owner, why)
            victim.holder.close_soon(why)
        return place

    def closed(self, peer: Connection) -> None:
        """A connection has ended (its `on_closed`): its place is free again."""
        place = self.open.pop(peer, None)
        if place is not None:
            self.slots.give(place)

    async def close_all(self) -> None:
        await asyncio.gather(*(peer.close("the server is stopping") for peer in list(self.open)))


PEERS = web.AppKey("rtc_peers", Peers)


@routes.post("/api/rtc/asr")
async def offer(request: web.Request) -> web.Response:
    """Answer a browser's offer; the connection then lives on its own until the browser goes."""
    core = core_of(request)
    defaults = _defaults(request)
    offered = await _offer(request)
    answer = await connect(request, offered, lambda setup: Peer(core, defaults, setup))
    return web.json_response({"sdp": answer.sdp, "type": answer.type})


async def connect(request: web.Request, offered: str, make: Callable[[Setup], Connection]) -> RTCSessionDescription:
    """Answer an offer `check_offer` passed with a connection `make` builds, in a place of `Peers`; the connection
    then lives on its own until the browser goes. 429 with no place left, 400 for an offer that cannot be answered
    after all, 503 with no free port."""
    peers = request.app[PEERS]
    allowed = await ice.reachable(request.remote, peers.configuration)
    description = RTCSessionDescription(ice.admit(offered, allowed), "offer")  # STUN only where it belongs
    place = peers.take(request.remote)  # given back by `peers.closed` once the peer ends, or here if none is made
    ice.install(asyncio.get_running_loop())
    try:
        pc = RTCPeerConnection(peers.configuration)
        peer = make(Setup(pc, peers.limits, request.app[CODEC_THREADS], peers.closed, request.remote or "local"))
    except BaseException:
        peers.slots.give(place)
        raise
    place.holder = peer
    peers.open[peer] = place
    try:
        answer = await peer.answer(description)
    except BaseException as err:
        refusal = _refusal(err)
        await peer.close(refusal.message if refusal else "signalling failed")
        if refusal is None:
            raise
        raise refusal from None
    if request.transport is None or request.transport.is_closing():
        await peer.close("the client left before the answer")
        raise ConnectionResetError("the client left before the answer")
    return answer


def _refusal(err: BaseException) -> ApiError | None:
    """The client's answer for an offer that failed to be answered; None for what is no fault of the offer."""
    if isinstance(err, ice.PortsExhausted):
        return ApiError(503, str(err), None, "no_free_port")
    if isinstance(err, _UNANSWERABLE):
        return unanswerable(err)
    return None


def unanswerable(err: Exception) -> ApiError:
    why = str(err) if isinstance(err, BadOffer) else aiortc_error(err)
    return bad_field("sdp", f"Cannot answer this offer: {why}")


def _defaults(request: web.Request) -> Params:
    """The query's parameters, checked now (an unknown model or language fails here, not at the first start)."""
    try:
        params = Params.parse(request.query, "the query")
    except BadMessage as err:
        raise ApiError(400, err.message, None, "invalid_value") from None
    core_of(request).resolve(params.request())
    return params


async def _offer(request: web.Request) -> str:
    """The offer's SDP, checked (check_offer) before any connection is made for it."""
    body = await bodies.read(request, OFFER_LIMIT)
    try:
        offer = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested too deep for the decoder
        raise bad_field("sdp", 'The body must be JSON: {"sdp": "...", "type": "offer"}') from None
    if not isinstance(offer, dict) or not isinstance(offer.get("sdp"), str) or not offer["sdp"].strip():
        raise bad_field("sdp", '"sdp" is required: the browser\'s offer (RTCPeerConnection.localDescription.sdp)')
    if offer.get("type") != "offer":
        raise bad_field("type", f'"type" must be "offer"; got {quote(offer.get("type"))}')
    try:
        check_offer(offer["sdp"])
    except BadOffer as err:
        raise unanswerable(err) from None
    return offer["sdp"]
