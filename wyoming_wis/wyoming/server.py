"""Wyoming listeners with two limits the `wyoming` library's servers lack, and a graceful stop.

The header line's length is the stream reader's `limit`, which its servers leave at
asyncio's 64 KiB; and they accept any number of connections. These pass
`--max-event-line-bytes` to the reader, and answer a connection past
`--max-connections` with an `error` event (code `busy`) and close it, so a flood of
idle sockets cannot use up the server. The slots are shared by owner (shares.py):
one owner may hold them all while no one else wants one; when they are full, a
newcomer takes the slot of an idle connection (a wake word stream that brings no audio
included), else of a request in progress of an owner holding at least two more, and
Home Assistant takes any stranger's (`shares.make_room`). So one host (a broken or
hostile device, many wake word streams) cannot lock Home Assistant out, nor can many
hosts with an idle connection each. On SIGTERM an event being answered (a transcript,
a synthesis) is still answered, within SHUTDOWN_SECONDS.
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
from ..memory import cap_receive_buffers, cap_send_buffer
from ..shares import make_room, owner
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
        newcomer = owner(host_of(writer))
        eviction = None
        if len(self._holding()) >= self.max_connections:
            eviction = self._make_room(newcomer)
            if eviction is None:
                await self._refuse(newcomer, writer)
                return
        cap_send_buffer(writer.transport)
        await super()._handler_callback(handler_factory, reader, writer)  # type: ignore[misc]
        if eviction is not None:  # told once the newcomer is served: it may take its time to read
            victim, why = eviction
            await victim.evict(why)

    async def _refuse(self, newcomer: str, writer: asyncio.StreamWriter) -> None:
        mine = sum(handler.owner == newcomer for handler in self._holding())
        _LOGGER.warning("Refusing a Wyoming connection from %s, which holds %d (--max-connections)", newcomer, mine)
        busy = Busy(
            f"Too many connections: all {self.max_connections} (--max-connections) are open, {mine} of them "
            f"from {newcomer}, and no other address holds enough of them to give one up; try again later"
        )
        try:
            async with asyncio.timeout(REFUSAL_SECONDS):
                await send(Error(text=busy.message, code=busy.code).event(), writer)
        except (ConnectionError, TimeoutError):
            pass
        writer.close()

    def _holding(self) -> list[WyomingHandler]:
        """The connections holding a slot: one evicted is closing, and holds none."""
        return [h for h in self._handlers.values() if isinstance(h, WyomingHandler) and not h.evicted]

    def _make_room(self, newcomer: str) -> tuple[WyomingHandler, Busy] | None:
        """The connection whose slot goes to a client of `newcomer` (an owner), marked evicted, and what to tell
        it; None if none may give its slot up (shares.make_room: an idle one first, whatever its owner; else a
        request in progress, a wake word stream or a transcription, of an owner holding at least two more)."""
        holding = self._holding()
        victim = make_room(holding, newcomer)
        if victim is None:
            return None
        victim.evicted = True  # its slot is the newcomer's from now on
        theirs = sum(handler.owner == victim.owner for handler in holding)
        why = Busy(
            f"Connection closed to make room for a client from another address: all {self.max_connections} "
            f"(--max-connections) were open, {theirs} of them from {victim.owner}"
        )
        return victim, why

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
        self._server = await asyncio.start_server(
            callback, host=self.host, port=self.port, limit=self.line_bytes, start_serving=False
        )
        cap_receive_buffers(self._server.sockets)
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
