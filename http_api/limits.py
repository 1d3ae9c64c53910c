"""Slow clients: a request's headers and body may not stall the server (slow-loris).

Headers: aiohttp closes a connection whose request headers are not whole within its
`keepalive_timeout` of the connection opening (or of the previous answer), so that is
set to --http-read-timeout, and the header size limits are set explicitly.

Body: aiohttp has no read timeout on a server's request body, and handlers read it in
several ways (`request.post()`, `request.json()`, `iter_any()`). One watchdog per request
with a body fails the body's stream with `Timeout` once no byte has come for
--http-read-timeout seconds while it is unfinished, whichever way it is being read; the
client gets 408 in the usual envelope and the connection is closed. Silence counts, not
the whole request: a Willow device streams its audio at the pace it is spoken.

Answers: a client that asks for a streamed answer (speech, events) and stops reading would
hold the request, its synthesis and its audio, for ever: aiohttp waits on a full socket
with no timeout. Every streamed write goes through `send`, and one that makes no progress
for --send-timeout seconds drops the connection; the handler sees the client gone, and
leaving it stops the work.

Clients that wait: a Willow device gives up on an answer after 10 s, so a request that could not
be answered within --willow-max-wait (other routes: --http-max-wait) is refused with 429 at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader

from wyoming_wis.config import HttpSettings
from wyoming_wis.errors import Timeout
from wyoming_wis.memory import cap_send_buffer
from wyoming_wis.scheduler import patience
from wyoming_wis.shares import client

from .errors import ApiError, answer, described

_LOGGER = logging.getLogger(__name__)
READ_TIMEOUT = web.AppKey("read_timeout", float)
SEND_TIMEOUT = web.AppKey("send_timeout", float)
PATIENCE = web.AppKey("patience", dict)  # seconds a client waits for its answer: willow, http
WILLOW_ROUTES = ("/api/willow", "/api/tts")  # what a Willow device asks for
# aiohttp's defaults, stated here so that they are a decision: a request line or header field past
# MAX_LINE_BYTES, or more than MAX_HEADERS fields, is refused with 400 before any handler runs.
MAX_LINE_BYTES = 8190
MAX_HEADERS = 128


class ClientStalled(ConnectionResetError):
    """The client took nothing of the answer for --send-timeout seconds: its connection is dropped.

    A ConnectionError, so every handler already treats it as a client that left.
    """


def setup(app: web.Application, settings: HttpSettings, send_timeout: float) -> None:
    app[READ_TIMEOUT] = settings.http_read_timeout
    app[SEND_TIMEOUT] = send_timeout
    app[PATIENCE] = {"willow": settings.willow_max_wait, "http": settings.http_max_wait}
    app.middlewares.append(_body_timeout)
    app.middlewares.append(_patience)


def server_options(app: web.Application) -> dict[str, Any]:
    """Keyword arguments for aiohttp's `AppRunner`: the header-phase limits."""
    return {
        "keepalive_timeout": app[READ_TIMEOUT],
        "max_line_size": MAX_LINE_BYTES,
        "max_field_size": MAX_LINE_BYTES,
        "max_headers": MAX_HEADERS,
    }


@web.middleware
async def _body_timeout(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if not request.body_exists or request.content.is_eof():
        return await handler(request)
    seconds = request.app[READ_TIMEOUT]
    watchdog = asyncio.create_task(_watch(request.content, seconds), name="http body watchdog")
    try:
        return await handler(request)
    except Timeout as err:
        response = answer(request, ApiError.from_wis(err))
        response.force_close()  # the rest of the body may still come: never read it as a next request
        request.content.feed_eof()  # nor wait for it (aiohttp would linger, reading, before it closes)
        return response
    finally:
        watchdog.cancel()
        await asyncio.gather(watchdog, return_exceptions=True)


@web.middleware
async def _patience(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    waits = request.app[PATIENCE]["willow" if request.path in WILLOW_ROUTES else "http"]
    cap_send_buffer(request.transport)  # once per request, not per write
    with patience(waits), client(request.remote or "local"):  # the client's buffers count against its share
        return await handler(request)


async def _watch(content: StreamReader, seconds: float) -> None:
    """Fail `content` once it has been unfinished and silent for `seconds`."""
    loop = asyncio.get_running_loop()
    seen, since = content.total_bytes, loop.time()
    while not content.is_eof():
        await asyncio.sleep(min(1.0, seconds / 4))
        if content.total_bytes != seen:
            seen, since = content.total_bytes, loop.time()
        elif loop.time() - since >= seconds:
            content.set_exception(Timeout(f"No request body received for {seconds:g} s (--http-read-timeout)"))
            return


async def send(request: web.Request, response: web.StreamResponse, data: bytes | None = None) -> None:
    """Write `data` to a streamed answer, or end it when there is none; ClientStalled if the client takes none of
    it for --send-timeout seconds.

    aiohttp waits only while the socket's buffer is full, so the timeout counts the client's silence, not the time
    the answer takes: a device that plays speech as it comes reads it at its own pace.
    """
    seconds = request.app[SEND_TIMEOUT]
    try:
        async with asyncio.timeout(seconds):
            await (response.write_eof() if data is None else response.write(data))
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()  # close() would wait to flush what the client does not read
        message = f"The client took nothing of the answer for {seconds:g} s (--send-timeout); connection dropped"
        _LOGGER.warning("%s from %s: %s", described(request), request.remote, message)
        raise ClientStalled(message) from None
