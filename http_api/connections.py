"""How many HTTP connections: at most --max-http-connections open at once, no address holding more than its share.

aiohttp accepts any number, each holding a socket until its client's --http-read-timeout. Here a connection is
counted as it is accepted, before a byte of it is read, where aiohttp itself keeps count (`web.Server`'s
`connection_made` and `connection_lost`), against `shares.Slots`. One past the limit, or past its owner's share, is
answered 503 in the API's envelope, written straight to the socket, and closed; whatever it sends is read and
dropped until then, so that its client reads the answer rather than a reset. The idle keep-alive connections of
the address holding most are not closed to make room: aiohttp does not tell which are idle, and each is closed
after --http-read-timeout anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from aiohttp import web

from wyoming_wis.config import HttpSettings
from wyoming_wis.errors import Busy
from wyoming_wis.shares import Slots

from .errors import RETRY_AFTER_SECONDS, ApiError

_LOGGER = logging.getLogger(__name__)
SLOTS = web.AppKey("http_connections", Slots)
LINGER_SECONDS = 1.0  # a refused connection is closed this long after its answer, the client's request read by then
LOG_EVERY_SECONDS = 10.0  # a flood of refusals logs a warning this often, the rest at debug


def setup(app: web.Application, settings: HttpSettings) -> None:
    app[SLOTS] = Slots(settings.max_http_connections, "HTTP connections", "--max-http-connections")


class Runner(web.AppRunner):
    """aiohttp's AppRunner, serving with `Counted`: start the application with it instead."""

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # the application started and frozen, as aiohttp does it
        return Counted(
            self.app[SLOTS],
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            **made._kwargs,  # the protocol's settings (timeouts, header limits), as the runner was given them
        )


class Counted(web.Server):
    """aiohttp's server, each connection holding a slot from its accept to its close."""

    def __init__(self, slots: Slots, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = slots
        self._owners: dict[web.RequestHandler, str] = {}
        self._logged = -LOG_EVERY_SECONDS

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        try:
            self._owners[handler] = self.slots.take(peer[0] if isinstance(peer, tuple) else None)
        except Busy as err:
            self._refuse(handler, transport, err)
            return
        super().connection_made(handler, transport)

    def connection_lost(self, handler: web.RequestHandler, exc: BaseException | None = None) -> None:
        if (who := self._owners.pop(handler, None)) is not None:
            self.slots.give(who)
        super().connection_lost(handler, exc)

    def _refuse(self, handler: web.RequestHandler, transport: asyncio.Transport, err: Busy) -> None:
        """503 and close, without aiohttp ever reading a request of it."""
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY_SECONDS:
            self._logged = now
            _LOGGER.warning("Refusing an HTTP connection: %s", err.message)
        else:
            _LOGGER.debug("Refusing an HTTP connection: %s", err.message)
        handler.close()  # what the client sends from now on is dropped unread
        transport.write(refusal(err))
        if transport.can_write_eof():
            transport.write_eof()  # the client sees the answer end; it hangs up, and so the connection closes
        asyncio.get_running_loop().call_later(LINGER_SECONDS, handler.force_close)


def refusal(err: Busy) -> bytes:
    """A whole HTTP answer: 503 with the error in OpenAI's envelope, closing the connection."""
    body = json.dumps(ApiError(503, err.message, None, err.code).body()).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Retry-After: {RETRY_AFTER_SECONDS}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body
