"""WebRTC frontend: browsers send microphone audio over WebRTC and get transcripts on a data channel.

`signalling` answers the browser's offer at `POST /api/rtc/asr`; `peer` is one
connection (track, data channel, utterances, its end); `realtime_call` serves
OpenAI's Realtime API over WebRTC (`POST /v1/realtime/calls`) on the same
connections; `messages` the data
channel's JSON; `sctp` what the data channel may hold for a peer; `track` the
audio into an ASR session; `ice` the port range, STUN/TURN servers and the
address the answer names.

The composition root (wis_server/serve.py) mounts it on the HTTP API's application, so the
API's key, CORS and TLS apply to the signalling too. Imports run one way: rtc uses
http_api's error envelope and application state and openai_audio's Realtime session,
http_api never imports rtc, and both reach the models only through the core
(rtc -> http_api -> openai_audio -> core).
"""

from __future__ import annotations

from aiohttp import web

from wyoming_wis.config import RtcSettings

from . import ice, realtime_call, signalling
from .peer import Limits


def setup(app: web.Application, settings: RtcSettings, *, max_wait: float) -> None:
    """Serve `POST /api/rtc/asr` and `POST /v1/realtime/calls` on `app`, and close every connection when it shuts
    down.

    `max_wait` is the HTTP API's --http-max-wait: how long a browser waits for its transcript to start.
    """
    app[signalling.PEERS] = peers = signalling.Peers(
        settings.rtc_max_sessions,
        ice.configuration(settings),
        Limits(settings.rtc_idle_timeout, settings.rtc_ports, settings.rtc_public_address, max_wait),
    )
    app.add_routes(signalling.routes)
    app.add_routes(realtime_call.routes)

    async def close_all(_: web.Application) -> None:
        await peers.close_all()

    app.on_shutdown.append(close_all)
