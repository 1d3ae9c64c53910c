"""Server-Sent Events as OpenAI's streams use them: one JSON object with a `type` per event."""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

from aiohttp import web

from . import limits


class EventStream:
    """Opened on the first event, so anything that fails before it is still an ordinary error answer.

    A client that leaves is no error: later events are dropped; so is one that stops reading, after
    --send-timeout (`limits.send`).
    """

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self.gone = False

    async def send(self, event: dict[str, Any]) -> None:
        if self.gone:
            return
        try:
            await self._send(event)
        except ConnectionError:
            self.gone = True

    async def _send(self, event: dict[str, Any]) -> None:
        if self.response is None:
            self.response = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await self.response.prepare(self.request)
        await limits.send(self.request, self.response, f"data: {json.dumps(event)}\n\n".encode())

    async def end(self) -> web.StreamResponse:
        assert self.response is not None, "end() after at least one event"
        if not self.gone:
            with suppress(ConnectionError):
                await limits.send(self.request, self.response)
        return self.response
