"""A stand-in for Home Assistant's websocket API, as much of it as the server's names need (wyoming_wis/hass_api.py).

The answers have the shapes Home Assistant 2026.11 sends (tests/ha/test_names.py runs the same client against a
real one): auth_required / auth_ok, results by id, events to each subscription's id. Tests change `registry` and
call `announce(...)` as Home Assistant fires a registry event; `reads` counts how often the names were read. It
also answers as the add-on's Supervisor does (/core/websocket, and /core/info with `core_address`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

TOKEN = "test-token-3f9a1c0e5b7d"  # what the fake accepts; a test looks for it in the server's log


@dataclass
class Registry:
    """What the fake Home Assistant knows: entity ids to (name, aliases, exposed, area), areas and floors."""

    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    areas: list[dict[str, Any]] = field(default_factory=list)
    floors: list[dict[str, Any]] = field(default_factory=list)

    def entity(
        self,
        entity_id: str,
        name: str,
        *,
        aliases: list[Any] | None = None,
        exposed: bool = True,
        area: str | None = None,
        disabled: bool = False,
    ) -> None:
        entity = {"name": name, "aliases": aliases or [], "exposed": exposed, "area": area, "disabled": disabled}
        self.entities[entity_id] = entity


@dataclass
class FakeHass:
    registry: Registry = field(default_factory=Registry)
    reads: int = 0  # expose_entity/list commands answered: one per reading of the names
    logins: int = 0
    delay: float = 0.0  # seconds before each answer
    broken: Callable[[dict[str, Any]], Any] | None = None  # a command's answer in place of the real one
    filler: bytes = b""  # JSON of more states (`filler_states`), sent after the registry's in get_states' answer
    hold_states: asyncio.Event | None = None  # get_states is answered once this is set
    holding: int = 0  # get_states answers made and held
    core_address: str = "172.30.32.1"  # what /core/info says, as the Supervisor says it of Home Assistant
    connections: int = 0  # websocket handshakes answered
    redirect: str | None = None  # while set, a websocket's handshake is answered 302 Found, to this URL
    redirected: int = 0
    _subscribers: list[tuple[web.WebSocketResponse, int, str]] = field(default_factory=list)
    _sockets: set[web.WebSocketResponse] = field(default_factory=set)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/websocket", self._websocket)
        app.router.add_get("/core/websocket", self._websocket)  # the Supervisor's proxy
        app.router.add_get("/core/info", self._core_info)
        return app

    async def announce(self, event_type: str, data: dict[str, Any] | None = None) -> None:
        """Fire a registry event to every connection subscribed to it."""
        for ws, subscription, kind in list(self._subscribers):
            if kind == event_type and not ws.closed:
                event = {"event_type": kind, "data": data or {}, "origin": "LOCAL", "time_fired": "now"}
                await ws.send_json({"id": subscription, "type": "event", "event": event})

    async def drop_connections(self) -> None:
        """As Home Assistant restarting does."""
        for ws in list(self._sockets):
            await ws.close()

    async def _core_info(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"result": "error", "message": "Unauthorized"}, status=401)
        return web.json_response({"result": "ok", "data": {"version": "2026.11.0", "ip_address": self.core_address}})

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        if self.redirect is not None:
            self.redirected += 1
            raise web.HTTPFound(self.redirect)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self._sockets.add(ws)
        try:
            await ws.send_json({"type": "auth_required", "ha_version": "2026.11.0"})
            auth = await ws.receive_json()
            if auth.get("access_token") != TOKEN:
                await ws.send_json({"type": "auth_invalid", "message": "Invalid access token or password"})
                return ws
            self.logins += 1
            await ws.send_json({"type": "auth_ok", "ha_version": "2026.11.0"})
            async for message in ws:
                if message.type is not WSMsgType.TEXT:
                    break
                command = json.loads(message.data)
                await self._answer(ws, command)
        finally:
            self._sockets.discard(ws)
            self._subscribers[:] = [s for s in self._subscribers if s[0] is not ws]
        return ws

    async def _answer(self, ws: web.WebSocketResponse, command: dict[str, Any]) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        kind = command["type"]
        if self.broken is not None and (broken := self.broken(command)) is not None:
            await ws.send_json(broken)
            return
        if kind == "get_states" and (self.filler or self.hold_states is not None):
            # (made in a thread, and before it is held: the loop is the test's, too)
            large = await asyncio.to_thread(self._large_states, command["id"]) if self.filler else None
            if self.hold_states is not None:
                self.holding += 1
                await self.hold_states.wait()
            if large is not None:
                await ws.send_frame(large, WSMsgType.TEXT)
                return
        answers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "subscribe_events": lambda c: self._subscribers.append((ws, c["id"], c["event_type"])),
            "homeassistant/expose_entity/list": self._exposed,
            "get_states": lambda c: self._states(),
            "config/entity_registry/get_entries": self._entries,
            "config/device_registry/list": lambda c: [],
            "config/area_registry/list": lambda c: self.registry.areas,
            "config/floor_registry/list": lambda c: self.registry.floors,
        }
        if kind not in answers:
            error = {"code": "unknown_command", "message": "Unknown command."}
            await ws.send_json({"id": command["id"], "type": "result", "success": False, "error": error})
            return
        result = answers[kind](command)
        await ws.send_json({"id": command["id"], "type": "result", "success": True, "result": result})

    def _large_states(self, key: int) -> bytes:
        head = f'{{"id":{key},"type":"result","success":true,"result":{json.dumps(self._states())[:-1]}'.encode()
        comma = b"," if self.registry.entities else b""
        return b"".join((head, comma, memoryview(self.filler)[1:], b"}"))  # (one copy of the filler, not three)

    def _exposed(self, command: dict[str, Any]) -> dict[str, Any]:
        self.reads += 1
        listed = {eid: {"conversation": e["exposed"]} for eid, e in self.registry.entities.items()}
        return {"exposed_entities": listed}

    def _states(self) -> list[dict[str, Any]]:
        return [
            {"entity_id": eid, "state": "on", "attributes": {"friendly_name": e["name"]}}
            for eid, e in self.registry.entities.items()
        ]

    def _entries(self, command: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for eid in command["entity_ids"]:
            e = self.registry.entities.get(eid)
            out[eid] = e and {
                "entity_id": eid,
                "name": None,
                "original_name": e["name"],
                "aliases": e["aliases"],
                "area_id": e["area"],
                "device_id": None,
                "disabled_by": "user" if e["disabled"] else None,
            }
        return out


async def serve(hass: FakeHass, port: int = 0, host: str = "127.0.0.1") -> tuple[web.AppRunner, int]:
    """Start `hass` on `host`; returns its runner (cleanup() to stop) and port."""
    runner = web.AppRunner(hass.app(), handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> float:
    """Seconds until `check()` holds; AssertionError after `timeout`."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return loop.time() - started
        assert loop.time() - started < timeout, f"not within {timeout} s"
        await asyncio.sleep(0.02)


def filler_states(total_bytes: int) -> bytes:
    """JSON of states of thermostats nobody exposed, about `total_bytes` of it, as a large home's get_states holds
    thousands: 1.7 kB each, of a hundred small values (json.loads of 15 MiB takes about 1 s)."""
    state = {
        "entity_id": "climate.filler_{n}",
        "state": "heat",
        "attributes": {
            "friendly_name": "Filler {n}",
            "hvac_modes": ["off", "heat", "cool", "auto", "dry", "fan_only"],
            "min_temp": 7,
            "max_temp": 35,
            "target_temp_step": 0.5,
            "fan_modes": ["auto", "low", "medium", "high"],
            "preset_modes": ["none", "eco", "away", "boost", "comfort", "home", "sleep"],
            "current_temperature": 21.5,
            "temperature": 22,
            "schedule": [
                {"day": day, "from": hour, "to": hour + 1, "temperature": 21.5} for day in range(3) for hour in range(6)
            ],
            "supported_features": 401,
        },
        "last_changed": "2026-12-01T10:00:00.000000+00:00",
        "last_reported": "2026-12-01T10:00:00.000000+00:00",
        "last_updated": "2026-12-01T10:00:00.000000+00:00",
        "context": {"id": "01JABCDEFGHJKMNPQRSTVWXYZ0", "parent_id": None, "user_id": None},
    }
    one = json.dumps(state)
    count = max(1, total_bytes // (len(one) + 1))
    return ("[" + ",".join(one.replace("{n}", str(n)) for n in range(count)) + "]").encode()
