"""How many HTTP connections: at most --max-http-connections open at once, shared by owner (shares.py).

aiohttp accepts any number, each holding a socket until its client's --http-read-timeout. Here a connection is
counted as it is accepted, before a byte of it is read, where aiohttp itself keeps count (`web.Server`'s
`connection_made` and `connection_lost`), against `shares.Slots`. When every place is taken, a newcomer takes the
place of a connection idle for shares.IDLE_AFTER_SECONDS (a keep-alive with no request in progress: the longest idle
of the address holding most), which is closed; else of a request in progress of an address holding at least two
more. Only where none may give its place up is a connection answered 503 in the API's envelope, written straight to
the socket, and closed; whatever it sends is read and dropped until then, so that its client reads the answer rather
than a reset. So two addresses that keep every connection open with a request now and then lock no one out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from wyoming_wis.config import HttpSettings
from wyoming_wis.errors import Busy
from wyoming_wis.shares import Slots, owner

from .errors import RETRY_AFTER_SECONDS, ApiError

_LOGGER = logging.getLogger(__name__)
LINGER_SECONDS = 1.0  # a refused connection is closed this long after its answer, the client's request read by then
LOG_EVERY_SECONDS = 10.0  # a flood of refusals logs a warning this often, the rest at debug


class Connection:
    """One accepted connection, as its place is shared: whose it is, and whether a request is in progress on it."""

    def __init__(self, handler: web.RequestHandler, address: str | None) -> None:
        self.handler = handler
        self.owner = owner(address)
        self.requests = 0  # in progress (more than one: pipelined, answered in turn)
        self.last = time.monotonic()  # when it was accepted, or its last request ended
        self.started = math.inf  # when its request in progress began

    @property
    def idle_for(self) -> float:
        return 0.0 if self.requests else time.monotonic() - self.last

    @property
    def busy_since(self) -> float:
        return self.started if self.requests else math.inf


SLOTS = web.AppKey("http_connections", Slots[Connection])


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
    """aiohttp's server, each connection holding a place from its accept to its close."""

    def __init__(
        self, slots: Slots[Connection], handler: Callable[[BaseRequest], Awaitable[web.StreamResponse]], **kwargs: Any
    ) -> None:
        super().__init__(self._handle, **kwargs)
        self.slots = slots
        self._handler = handler
        self._held: dict[web.RequestHandler, Connection] = {}
        self._logged: dict[str, float] = {}  # of each kind of message, when a warning last said it

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        connection = Connection(handler, peer[0] if isinstance(peer, tuple) else None)
        try:
            victim = self.slots.take(connection)
        except Busy as err:
            self._refuse(handler, transport, err)
            return
        self._held[handler] = connection
        super().connection_made(handler, transport)
        if victim is not None:
            self._log("Closing an HTTP connection of", f"{victim.owner}: {self.slots.evicted(victim).message}")
            victim.handler.force_close()  # a request in progress on it ends as if its client had left

    def connection_lost(self, handler: web.RequestHandler, exc: BaseException | None = None) -> None:
        if (connection := self._held.pop(handler, None)) is not None:
            self.slots.give(connection)
        super().connection_lost(handler, exc)

    async def _handle(self, request: BaseRequest) -> web.StreamResponse:
        """The application's handler, with the connection counted busy meanwhile."""
        connection = self._held.get(request.protocol)
        if connection is None:
            return await self._handler(request)
        if not connection.requests:
            connection.started = time.monotonic()
        connection.requests += 1
        try:
            return await self._handler(request)
        finally:
            connection.requests -= 1
            connection.last = time.monotonic()

    def _refuse(self, handler: web.RequestHandler, transport: asyncio.Transport, err: Busy) -> None:
        """503 and close, without aiohttp ever reading a request of it."""
        self._log("Refusing an HTTP connection:", err.message)
        handler.close()  # what the client sends from now on is dropped unread
        transport.write(refusal(err))
        if transport.can_write_eof():
            transport.write_eof()  # the client sees the answer end; it hangs up, and so the connection closes
        asyncio.get_running_loop().call_later(LINGER_SECONDS, handler.force_close)

    def _log(self, kind: str, message: str) -> None:
        """A warning, at most every LOG_EVERY_SECONDS of each kind; the rest at debug, so that a flood cannot fill
        the log."""
        now = time.monotonic()
        if now - self._logged.get(kind, -LOG_EVERY_SECONDS) >= LOG_EVERY_SECONDS:
            self._logged[kind] = now
            _LOGGER.warning("%s %s", kind, message)
        else:
            _LOGGER.debug("%s %s", kind, message)


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
