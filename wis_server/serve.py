"""Load every model once, then serve all frontends from one event loop until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from functools import partial
from typing import Any

from aiohttp import web
from wyoming.server import AsyncServer, AsyncStdioServer, AsyncTcpServer

import http_api
import rtc
from wyoming_wis import __version__, memory, metrics
from wyoming_wis.config import OPTIONS, Settings
from wyoming_wis.core import Core
from wyoming_wis.discovery import Announcement, announce_address, stable_name
from wyoming_wis.errors import StartupError
from wyoming_wis.flags import described
from wyoming_wis.wyoming import WyomingHandler
from wyoming_wis.wyoming.server import server_for

_LOGGER = logging.getLogger("wyoming_wis")


async def serve(settings: Settings) -> None:
    """Load models, open every URI, announce, and run until SIGINT/SIGTERM."""
    _LOGGER.info("wyoming-wis %s starting", __version__)
    # What it runs with, from flags and the environment alike; keys and passwords hidden.
    _LOGGER.info("Settings: %s", described(settings, OPTIONS) or "the defaults")
    # HTTP opens first and answers 503 while the models load; Wyoming ports open once they are loaded.
    http = None if settings.http.no_http else http_app(settings)
    host, port = settings.http.http_host, settings.http.http_port
    try:
        runner = None if http is None else await http_api.start(http, host, port)
    except OSError as err:  # most often a second server on the same port
        raise _cannot_listen(f"http://{host}:{port}", err, "--http-port, --no-http") from err
    try:
        core = await asyncio.to_thread(Core.load, settings.core)  # the core gets its own settings, no frontend's
    except BaseException:
        if runner is not None:
            await runner.cleanup()
        raise
    metrics.watch(core)
    if http is not None:
        http_api.loaded(http, core)
    handler_factory = partial(WyomingHandler, core=core, settings=settings.wyoming)

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)

    # The announced name is settled before any port opens, so it is on disk once the server says it listens.
    wyoming = settings.wyoming
    name = None if wyoming.zeroconf is None else wyoming.zeroconf or stable_name(settings.core.data_dir[0])
    servers = [server_for(uri, wyoming) for uri in wyoming.uri]
    waiters: list[asyncio.Task[Any]] = [asyncio.create_task(stopping.wait())]
    if core.names_from_hass:
        waiters.append(asyncio.create_task(core.keep_household()))
    if settings.core.asr.unload_after:
        waiters.append(asyncio.create_task(core.unload_idle_models()))
    if (trim := memory.trimmer()) is not None:
        waiters.append(asyncio.create_task(memory.trim_forever(trim)))
    try:
        waiters += await _listen(servers, wyoming.uri, handler_factory)
    except StartupError:
        for waiter in waiters:
            waiter.cancel()
        if runner is not None:
            await runner.cleanup()
        core.close()
        raise

    tcp = next((s for s in servers if isinstance(s, AsyncTcpServer)), None)
    announcement = None if name is None else await _announce(name, tcp, wyoming.zeroconf_host)
    _log_how_to_connect(settings, tcp)

    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        _LOGGER.info("Shutting down")
        if announcement is not None:
            await announcement.stop()
        for waiter in waiters:
            waiter.cancel()
        # Both frontends let the answers in progress finish, side by side, while the models are still there.
        stops = [server.stop() for server in servers] + ([runner.cleanup()] if runner is not None else [])
        await asyncio.gather(*stops, return_exceptions=True)
        await asyncio.to_thread(core.close)  # waits for calls still running; the loop hands their results on


def http_app(settings: Settings) -> web.Application:
    """The HTTP API with the WebRTC signalling mounted on it: one application, so that the API's key, CORS and
    TLS cover the signalling too. Each gets its own settings, and what it shares with another group, by name."""
    app = http_api.make_app(
        settings.http,
        send_timeout=settings.wyoming.send_timeout,
        max_text_chars=settings.core.max_text_chars,
        data_dir=settings.core.data_dir[0],
    )
    rtc.setup(app, settings.rtc, max_wait=settings.http.http_max_wait)  # browsers: POST /api/rtc/asr, then WebRTC
    return app


async def _listen(
    servers: list[AsyncServer], uris: list[str], handler_factory: Callable[..., WyomingHandler]
) -> list[asyncio.Task[Any]]:
    """Open every Wyoming server; a stdio one runs as a task, which ends at the end of its input. If one cannot
    listen, those already open are closed again before the StartupError."""
    tasks: list[asyncio.Task[Any]] = []
    for server, uri in zip(servers, uris, strict=True):
        if isinstance(server, AsyncStdioServer):
            tasks.append(asyncio.create_task(server.run(handler_factory)))
        else:
            try:
                await server.start(handler_factory)
            except OSError as err:  # most often a second server on the same port
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*(started.stop() for started in servers), return_exceptions=True)
                raise _cannot_listen(uri, err, "--uri") from err
        _LOGGER.info("Wyoming server listening on %s", uri)
    return tasks


async def _announce(name: str, tcp: AsyncTcpServer | None, host: str | None) -> Announcement | None:
    """Announce the first TCP server to Home Assistant over zeroconf (--zeroconf)."""
    if tcp is None:
        _LOGGER.warning("--zeroconf needs a tcp:// URI to announce; not announcing")
        return None
    announcement = Announcement(name, announce_address(tcp.host, host), tcp.port)
    await announcement.start()
    return announcement


def _cannot_listen(where: str, err: OSError, flag: str) -> StartupError:
    return StartupError(f"cannot listen on {where}: {err.strerror or err}. Is another server running there? ({flag})")


def _log_how_to_connect(settings: Settings, tcp: AsyncTcpServer | None) -> None:
    """Say, with real addresses, what to type into Home Assistant and into HTTP clients."""
    if tcp is not None:
        host = announce_address(tcp.host, settings.wyoming.zeroconf_host)
        _LOGGER.info(
            "Add to Home Assistant: Settings > Devices & services > Add integration > Wyoming Protocol, "
            "host %s, port %s",
            host,
            tcp.port,
        )
    http = settings.http
    if not http.no_http:
        scheme = "https" if http.ssl_cert else "http"
        base = f"{scheme}://{announce_address(http.http_host, settings.wyoming.zeroconf_host)}:{http.http_port}"
        _LOGGER.info(
            "OpenAI clients: base URL %s/v1; Willow devices: %s/api/willow; API docs: %s/api/docs", *[base] * 3
        )
