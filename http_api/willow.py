"""Willow Inference Server's API, for Willow devices: text to speech and ping (speech to text: to come).

A Willow device plays `GET /api/tts?text=...` as it arrives, so the answer is a
WAV streamed as it is made. Parameters that older firmware sends and this server
has no use for (`format=WAV`, `speaker=CLB`) are tolerated, as WIS does:
`speaker` picks a voice only if one has that name.
"""

from __future__ import annotations

import logging

from aiohttp import web

from . import fields
from .errors import bad_field
from .openai_speech import MAX_INPUT, send_speech
from .state import core_of

_LOGGER = logging.getLogger(__name__)
routes = web.RouteTableDef()


@routes.get("/api/ping")
async def ping(_: web.Request) -> web.Response:
    return web.json_response({"message": "pong"})


@routes.get("/api/tts")
async def tts(request: web.Request) -> web.StreamResponse:
    """Speech as a streamed WAV; `nocache` (any value) skips the speech cache, `X-Cache` tells which it was."""
    query = request.query
    core = core_of(request)
    text = query.get("text", "")
    if not text.strip():
        raise bad_field("text", "'text' is required: the text to speak")
    if len(text) > MAX_INPUT:
        raise bad_field("text", f"'text' is {len(text)} characters; the limit is {MAX_INPUT}")
    await core.refresh_voices()
    voice = query.get("voice") or query.get("speaker")
    if voice and not core.voices.taken(voice):
        _LOGGER.debug("Willow TTS: no voice %r, speaking with the default", voice)  # e.g. legacy speaker=CLB
        voice = None
    language = fields.text(query.get("language"), "language")
    stream = await core.speech_stream(voice, None, language, None, "nocache" not in query)
    stream.write(text)
    stream.close()
    return await send_speech(request, stream, "wav")
