"""What every handler reaches through the application: the core, and the threads that code audio."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from aiohttp import web

from wyoming_wis.core import Core

T = TypeVar("T")

CORE = web.AppKey("core", Core)
CODEC_THREADS = web.AppKey("codec_threads", ThreadPoolExecutor)


async def in_thread(request: web.Request, work: Callable[..., T], *args: object) -> T:
    """Run blocking audio work (decode, encode) in the app's codec threads, never on the event loop."""
    return await asyncio.get_running_loop().run_in_executor(request.app[CODEC_THREADS], work, *args)
