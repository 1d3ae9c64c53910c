"""What every handler reaches through the application: the core once loaded, and the threads that code audio."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from aiohttp import web

from wyoming_wis.core import Core

from .errors import ApiError

T = TypeVar("T")


@dataclass
class Loaded:
    """The core, once its models are loaded: the port opens before, so that load balancers see 503, not nothing."""

    core: Core | None = None


LOADED = web.AppKey("loaded", Loaded)
CODEC_THREADS = web.AppKey("codec_threads", ThreadPoolExecutor)


def core_of(request: web.Request) -> Core:
    """The core; 503 with Retry-After while the models still load."""
    core = request.app[LOADED].core
    if core is None:
        raise ApiError(503, "The models are still loading; try again shortly", None, "loading")
    return core


async def in_thread(request: web.Request, work: Callable[..., T], *args: object) -> T:
    """Run blocking audio work (decode, encode) in the app's codec threads, never on the event loop."""
    return await asyncio.get_running_loop().run_in_executor(request.app[CODEC_THREADS], work, *args)
