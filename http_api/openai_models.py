"""GET /v1/models and GET /v1/audio/voices: what a client may name in a request."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from openai_audio.names import OPENAI_ASR_MODELS
from wyoming_wis.core import Core
from wyoming_wis.served import WHISPER, XTTS
from wyoming_wis.values import quote

from .errors import ApiError
from .openai_speech import OPENAI_TTS_MODELS
from .state import core_of

routes = web.RouteTableDef()
OWNER = "wyoming-wis"


def _model_ids(core: Core) -> list[str]:
    """Our Whisper models and XTTS models (Piper models are voices), then the OpenAI names that map onto them."""
    ours = [model.name for model in core.served().models if model.engine in (WHISPER, XTTS)]
    return [*ours, *OPENAI_ASR_MODELS, *OPENAI_TTS_MODELS]


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": OWNER}


@routes.get("/v1/models")
async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [_model(i) for i in _model_ids(core_of(request))]})


@routes.get("/v1/models/{model_id}")
async def model(request: web.Request) -> web.Response:
    model_id = request.match_info["model_id"]
    if model_id not in _model_ids(core_of(request)):
        raise ApiError(404, f"The model {quote(model_id)} does not exist", "model", "model_not_found")
    return web.json_response(_model(model_id))


@routes.get("/v1/audio/voices")
async def voices(request: web.Request) -> web.Response:
    """Every voice with its languages and speakers, here (`installed`) or the hub's (fetched on first use with
    --allow-download; `downloads` says whether it is on), and the voice each OpenAI name means."""
    core = core_of(request)
    await core.refresh_voices()
    served = core.served()
    return web.json_response(
        {
            "voices": [
                {
                    "id": voice.name,
                    "name": voice.name,
                    "languages": list(voice.languages),
                    "speakers": list(voice.speakers),
                    "description": voice.description,
                    "engine": voice.engine,
                    "installed": voice.installed,
                }
                for voice in (*served.voices, *served.available_voices)
            ],
            "openai": dict(served.openai_voices),
            "downloads": served.downloads,
        }
    )
