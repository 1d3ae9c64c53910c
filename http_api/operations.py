"""GET/HEAD /health: for load balancers and people, the state of every model."""

from __future__ import annotations

from aiohttp import web

from .state import core_of

routes = web.RouteTableDef()


@routes.get("/health")  # HEAD too: aiohttp answers it from the GET route
async def health(request: web.Request) -> web.Response:
    core = core_of(request)
    asr = {
        name: {"state": "loaded" if engine.loaded else "unloaded", "pending": engine.scheduler.pending}
        for name, engine in core.asr.items()
    }
    tts = {
        engine.name: {"state": "loaded", "pending": engine.scheduler.pending}
        for engine in core.engines
        if engine.name not in core.asr
    }
    return web.json_response({"status": "ok", "asr": asr, "tts": tts})
