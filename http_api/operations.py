"""Operations: GET/HEAD /health for load balancers and people, GET /metrics for Prometheus, and request counting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from wyoming_wis import metrics
from wyoming_wis.served import ASR, TTS, Entry

from .state import core_of

routes = web.RouteTableDef()
REQUEST = web.RequestKey("wis_metrics_request", metrics.Request)  # the request's count in the metrics
CLIENT_LEFT = "499"  # the client left before the answer began (nginx's code for it)


@routes.get("/health")  # HEAD too: aiohttp answers it from the GET route
async def health(request: web.Request) -> web.Response:
    served = core_of(request).served()
    return web.json_response({"status": "ok", "asr": _states(served.of_kind(ASR)), "tts": _states(served.of_kind(TTS))})


def _states(models: Iterable[Entry]) -> dict[str, dict[str, str | int]]:
    """Each model's state and the calls in its queue, by name."""
    return {model.name: {"state": model.state, "pending": model.pending} for model in models}


@routes.get("/metrics")
async def prometheus(_: web.Request) -> web.Response:
    """Every frontend's metrics in Prometheus's text format; served while the models still load, too."""
    return web.Response(body=await metrics.scrape(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def count_requests(app: web.Application) -> None:
    """Count every request by route and status, and those in progress: errors and refusals included.

    The middleware goes outermost, so it sees the answer every other one gives.
    A request is counted when its answer starts (the on_response_prepare signal),
    so a client that has read a streamed answer sees it counted; it stays in
    progress until the handler returns.
    """
    app.middlewares.insert(0, _requests)
    app.on_response_prepare.append(_answer_starts)


def started(request: web.Request) -> float | None:
    """When the request began (`time.perf_counter()`), if it is being counted."""
    counted = request.get(REQUEST)
    return counted.started if counted is not None else None


@web.middleware
async def _requests(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    counted = request[REQUEST] = metrics.Request("http", _route(request))
    try:
        response = await handler(request)
    except web.HTTPException as err:  # what the other middlewares let through (redirects) becomes this answer
        counted.count(str(err.status))
        raise
    except (asyncio.CancelledError, ConnectionError):
        counted.count(CLIENT_LEFT)
        raise
    except BaseException:
        counted.count("500")  # aiohttp answers it so
        raise
    finally:
        counted.end()
    return response


async def _answer_starts(request: web.Request, response: web.StreamResponse) -> None:
    counted = request.get(REQUEST)
    if counted is not None:
        counted.count(str(response.status))


def _route(request: web.Request) -> str:
    """The route's path template (`/v1/models/{model_id}`), never the path itself: labels must stay few."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"
