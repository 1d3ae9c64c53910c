"""Wyoming listeners with two limits the `wyoming` library's servers lack, and a graceful stop.

The header line's length is the stream reader's `limit`, which its servers leave at
asyncio's 64 KiB; and they accept any number of connections. These pass
`--max-event-line-bytes` to the reader, and answer a connection past
`--max-connections` with an `error` event (code `busy`) and close it, so a flood of
idle sockets cannot use up the server. The slots are shared fairly by address: when
they are full, a client from an address holding fewer of them than another takes the
slot of that other address's longest-idle connection, so one host (a broken or
hostile device) cannot lock Home Assistant out. On SIGTERM an event being answered (a
transcript, a synthesis) is still answered, within SHUTDOWN_SECONDS.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from urllib.parse import urlparse

from wyoming.error import Error
from wyoming.server import AsyncEventHandler, AsyncServer, AsyncTcpServer, AsyncUnixServer, HandlerFactory

from ..config import WyomingSettings
from ..errors import Busy
from ..memory import cap_send_buffer
from .handler import WyomingHandler, host_of, send

_LOGGER = logging.getLogger(__name__)
REFUSAL_SECONDS = 5.0  # at most this long to tell a refused client why
SHUTDOWN_SECONDS = 10.0  # for requests in progress to be answered when the server stops


class _Limits:
    """Mixed into the library's TCP and Unix servers."""

    line_bytes: int
    max_connections: int
    _handlers: dict[asyncio.Task[None], AsyncEventHandler]

    async def _handler_callback(
        self, handler_factory: HandlerFactory, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if len(self._handlers) >= self.max_connections and not await self._make_room(host_of(writer)):
            _LOGGER.warning("Refusing a Wyoming connection: %s already open (--max-connections)", len(self._handlers))
            busy = Busy(f"Too many connections: {self.max_connections} already open (--max-connections)")
            try:
                async with asyncio.timeout(REFUSAL_SECONDS):
                    await send(Error(text=busy.message, code=busy.code).event(), writer)
            except (ConnectionError, TimeoutError):
                pass
            writer.close()
            return
        cap_send_buffer(writer.transport)
        await super()._handler_callback(handler_factory, reader, writer)  # type: ignore[misc]

    async def _make_room(self, host: str) -> bool:
        """Evict the longest-idle connection of the address holding the most slots, if that is not `host` and
        it holds more than `host` would; returns whether a slot was freed."""
        by_host: dict[str, list[WyomingHandler]] = {}
        for handler in self._handlers.values():
            if isinstance(handler, WyomingHandler):
                by_host.setdefault(handler.host, []).append(handler)
        if not by_host:
            return False
        hog, held = max(by_host.items(), key=lambda item: len(item[1]))
        idle = [handler for handler in held if handler.idle]
        if hog == host or len(held) <= len(by_host.get(host, [])) + 1 or not idle:
            return False
        await min(idle, key=lambda handler: handler.last_event).evict()
        return True

    async def stop(self) -> None:
        """Take no new connections; let events being answered finish for up to SHUTDOWN_SECONDS, then cancel."""
        server: asyncio.AbstractServer | None = self._server  # type: ignore[attr-defined]
        if server is not None:
            server.close()
        await asyncio.gather(*(handler.stop() for handler in self._handlers.values()), return_exceptions=True)
        running = list(self._handlers)
        if running:
            _, late = await asyncio.wait(running, timeout=SHUTDOWN_SECONDS)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)


class TcpServer(_Limits, AsyncTcpServer):
    def __init__(self, host: str, port: int, line_bytes: int, max_connections: int) -> None:
        super().__init__(host, port)
        self.line_bytes, self.max_connections = line_bytes, max_connections

    async def start(self, handler_factory: HandlerFactory) -> None:
        callback = partial(self._handler_callback, handler_factory)
        self._server = await asyncio.start_server(callback, host=self.host, port=self.port, limit=self.line_bytes)
        await self._server.start_serving()


class UnixServer(_Limits, AsyncUnixServer):
    def __init__(self, path: str, line_bytes: int, max_connections: int) -> None:
        super().__init__(path)
        self.line_bytes, self.max_connections = line_bytes, max_connections

    async def start(self, handler_factory: HandlerFactory) -> None:
        self.socket_path.unlink(missing_ok=True)
        callback = partial(self._handler_callback, handler_factory)
        self._server = await asyncio.start_unix_server(callback, path=self.socket_path, limit=self.line_bytes)
        await self._server.start_serving()

    async def stop(self) -> None:
        await super().stop()
        self.socket_path.unlink(missing_ok=True)


def server_for(uri: str, settings: WyomingSettings) -> AsyncServer:
    """The listener for a --uri, with the configured limits (stdio:// is one trusted pipe and has none)."""
    parsed = urlparse(uri)
    if parsed.scheme == "tcp" and parsed.hostname is not None and parsed.port is not None:
        return TcpServer(parsed.hostname, parsed.port, settings.max_event_line_bytes, settings.max_connections)
    if parsed.scheme == "unix":
        return UnixServer(parsed.path, settings.max_event_line_bytes, settings.max_connections)
    return AsyncServer.from_uri(uri)
