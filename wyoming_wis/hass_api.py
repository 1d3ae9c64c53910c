"""Home Assistant's names, kept current over one websocket (`--hass-api`, `--hass-token`).

Home Assistant sends no names with a Wyoming `transcribe`, so the server asks it, the way wyoming-faster-whisper
does (the same flags), but once rather than per utterance: it opens Home Assistant's websocket API, logs in with
the token, subscribes to the registries' change events, and reads the names (household.py) when it connects and
again QUIET seconds after the last change: a rename or a new alias is in the prompt seconds later, and no
utterance ever waits on Home Assistant. A change no event announces (the name or exposure of an entity that is
not in the entity registry) is read at the latest BACKSTOP seconds later. When Home Assistant restarts, answers
wrongly or not at all, the server keeps the names it has, warns once, and connects again after a back-off.

Without a token nothing here runs and the server opens no connection at all. The token is never logged, and
goes only where it should (`loopback_only`): over wss://, to the Supervisor, to a loopback address, or over plain
ws:// to the one host the user trusts by name (--hass-plain-host); never after a redirect, which is refused. What
Home Assistant sends is capped (MAX_MESSAGE_BYTES) before it is parsed, and a large message is parsed in a child
process (hass_answers.py), so that no parse holds the event loop. Once logged in, it tells `on_address` where Home
Assistant is: the websocket's peer, or through the Supervisor, Home Assistant's address on the Supervisor's network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from .hass_answers import AnswerError, parse_in_child
from .household import Household, exposed_to_assist, read_household
from .values import quote

_LOGGER = logging.getLogger(__name__)

HASS_API = "http://homeassistant.local:8123/api"  # --hass-api's default, as wyoming-faster-whisper's
# The registries whose changes change a name; an entity's exposure to Assist comes as its registry entry's options.
EVENTS = ("entity_registry_updated", "area_registry_updated", "floor_registry_updated", "device_registry_updated")
QUIET = 1.0  # seconds without a change before the names are read again: a rename in the UI is a burst of events
MAX_QUIET_WAIT = 4.0  # seconds from the first change of a burst, at most, before they are read anyway
BACKSTOP = 600.0  # seconds: read again this often even without an event (entities outside the registry)
ANSWER_SECONDS = 30.0  # the most one command's answer may take (get_states of a large home is megabytes)
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # seconds before each try to connect again; the last repeats
# One message from Home Assistant, refused past this before it is parsed. get_states is the largest: about 0.5 to
# 2 kB per entity (its attributes; the recorder keeps none over 16 kB), so a large home of 5,000 entities sends
# 3 to 10 MB; 16 MiB holds 8,000 entities of 2 kB. Past it the names stay as they were, with a warning.
MAX_MESSAGE_BYTES = 16 * 2**20
INLINE_BYTES = 64 * 2**10  # a message up to this is parsed on the event loop (0.3 ms); a longer one in a child
MAX_TOKEN_CHARS = 4096  # a long-lived token is about 180 characters
SUPERVISOR = "supervisor"  # the add-on's --hass-api host: the Supervisor's proxy, on the Supervisor's own network
MAX_INFO_BYTES = 64 * 2**10  # the Supervisor's answer to /core/info (a few hundred bytes)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class HassError(Exception):
    """Home Assistant refused, failed, or said something that is not its websocket API; the names stay."""


def websocket_url(api: str) -> str:
    """The websocket URL of --hass-api: http(s)://host/api -> ws(s)://host/api/websocket; ws(s):// as it is.

    ValueError for anything else (the flag's parser says so before the server starts).
    """
    parts = urlsplit(api.strip())
    if parts.scheme in ("ws", "wss") and parts.netloc:
        return urlunsplit(parts)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http(s):// or ws(s):// URL, got {quote(api)}")
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/websocket", "", ""))


def loopback_only(url: str, plain_host: str | None) -> bool:
    """Whether the token may go to the websocket `url` only once its peer proves a loopback address; ValueError,
    saying what to add, where it may not go there at all.

    It goes over wss:// (the certificate checked), to the Supervisor (the add-on's http://supervisor/core, on the
    Supervisor's own network), to a loopback address (127.0.0.1, ::1, localhost: checked on the connection), or
    over plain ws:// to the host --hass-plain-host names. No name is looked up to decide: the default,
    homeassistant.local, is a name any host on the network may answer for (mDNS), and so get the token.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    if parts.scheme == "wss" or host == SUPERVISOR or (plain_host is not None and host == plain_host):
        return False
    if host == "localhost" or _is_loopback(host):
        return True
    raise ValueError(
        f"the Home Assistant token would go unencrypted (ws://) to {host}, where any host on the network that "
        f"answers for it would get it. Give --hass-api an https:// URL, or Home Assistant's loopback address if it "
        f"runs on this machine; or, if you trust the network to {host}, add --hass-plain-host {host} "
        f"(WIS_HASS_PLAIN_HOST={host})"
    )


def _is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return _unmapped(address).is_loopback


def _unmapped(address: Address) -> Address:
    """An IPv4 address written as IPv6 (::ffff:127.0.0.1) as the IPv4 address it is."""
    return (address.ipv4_mapped or address) if isinstance(address, ipaddress.IPv6Address) else address


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """The token from --hass-token or --hass-token-file (which keeps it out of the process list); None: neither."""
    if token_file is not None:
        try:
            with token_file.open(encoding="utf-8", errors="strict") as file:
                token = file.read(MAX_TOKEN_CHARS + 1)
        except (OSError, UnicodeError) as err:
            raise ValueError(f"--hass-token-file {token_file}: {err}") from err
    token = (token or "").strip()
    if len(token) > MAX_TOKEN_CHARS or any(not char.isprintable() for char in token):
        raise ValueError("the Home Assistant token is not a token (too long, or not one line)")
    return token or None


class HassNames:
    """Keeps `on_names` told of the household's names, and `on_address` of Home Assistant's IP address, for as long
    as `run` runs. `plain_host`: --hass-plain-host. ValueError where the token may not go to `api`."""

    def __init__(
        self,
        api: str,
        token: str,
        on_names: Callable[[Household], None],
        *,
        on_address: Callable[[str], None],
        plain_host: str | None = None,
    ) -> None:
        self.url = websocket_url(api)
        self._loopback_only = loopback_only(self.url, plain_host)
        self._supervisor = urlsplit(self.url).hostname == SUPERVISOR
        self._token = token
        self._on_names = on_names
        self._on_address = on_address
        self._address: str | None = None  # as last told to on_address
        self._changed = asyncio.Event()  # a registry event came: read the names again
        self._answers: dict[int, asyncio.Future[Any]] = {}  # commands sent, by id, until their result comes
        self._login: asyncio.Future[Any] | None = None  # the next auth_* message, while logging in
        self._cut: tuple[str | None, list[str] | None] = (None, None)  # the command waited for, and its wanted ids
        self._next_id = 0
        self._failures = 0  # in a row: the first is a warning, the rest debug, until names are read again

    def __repr__(self) -> str:  # never the token
        return f"HassNames({self.url})"

    async def run(self) -> None:
        """Connect, keep the names current, connect again after a failure; until cancelled."""
        while True:
            try:
                async with aiohttp.ClientSession(trace_configs=[_no_redirects()]) as http:
                    async with asyncio.timeout(ANSWER_SECONDS):
                        ws = await http.ws_connect(
                            self.url, max_msg_size=MAX_MESSAGE_BYTES, heartbeat=30.0, decode_text=False
                        )
                    async with ws:
                        peer = _peer(ws)
                        if self._loopback_only and (peer is None or not peer.is_loopback):
                            raise HassError(f"answered from {peer}, not a loopback address: the token was not sent")
                        await self._serve(ws, http, peer)
                raise HassError("closed the connection")
            except Exception as err:  # whatever Home Assistant did or sent, it costs a warning, never the server
                self._failed(err)
            delay = BACKOFF[min(self._failures, len(BACKOFF)) - 1]
            await asyncio.sleep(delay)

    async def _serve(
        self, ws: aiohttp.ClientWebSocketResponse[bool], http: aiohttp.ClientSession, peer: Address | None
    ) -> None:
        """One connection: the reader hands on what comes while the keeper logs in, subscribes and reads names;
        whichever ends first (the connection closed, an error) ends both."""
        self._login = asyncio.get_running_loop().create_future()
        tasks = {asyncio.create_task(self._read(ws)), asyncio.create_task(self._keep(ws, http, peer))}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._answers.clear()
        for task in done:
            task.result()  # why it ended

    async def _keep(
        self, ws: aiohttp.ClientWebSocketResponse[bool], http: aiohttp.ClientSession, peer: Address | None
    ) -> None:
        await self._log_in(ws)
        await self._learn_address(http, peer)
        for event in EVENTS:
            await self._command(ws, {"type": "subscribe_events", "event_type": event})
        while True:
            self._changed.clear()
            await self._refresh(ws)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wait_quiet(), BACKSTOP)

    async def _log_in(self, ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
        assert self._login is not None  # (made by `_serve` before the reader starts)
        first = await self._answer(self._login)
        if first.get("type") != "auth_required":
            raise HassError(f"sent {quote(first.get('type'))} where the websocket API says auth_required")
        self._login = asyncio.get_running_loop().create_future()
        await ws.send_json({"type": "auth", "access_token": self._token})
        answer = await self._answer(self._login)
        if answer.get("type") != "auth_ok":
            raise HassError(f"refused the token ({quote(answer.get('message') or answer.get('type'))})")

    async def _learn_address(self, http: aiohttp.ClientSession, peer: Address | None) -> None:
        """Tell `on_address` where Home Assistant is, where that changed: the peer, or (through the Supervisor,
        whose own address the peer is) what the Supervisor says. Without it Home Assistant is served as anyone."""
        address = peer
        if self._supervisor:
            try:
                address = await self._core_address(http)
            except (HassError, aiohttp.ClientError, TimeoutError, ValueError) as err:
                _LOGGER.warning("The Supervisor did not say Home Assistant's address: %s", err)
                return
        if address is not None and str(address) != self._address:
            self._address = str(address)
            self._on_address(self._address)

    async def _core_address(self, http: aiohttp.ClientSession) -> Address:
        """Home Assistant's address on the Supervisor's network (GET /core/info: the add-on needs hassio_api)."""
        url = urlunsplit(("http", urlsplit(self.url).netloc, "/core/info", "", ""))
        headers = {"Authorization": f"Bearer {self._token}"}
        async with asyncio.timeout(ANSWER_SECONDS):
            async with http.get(url, headers=headers, allow_redirects=False) as response:
                body = await response.content.read(MAX_INFO_BYTES + 1)
        if response.status != 200 or len(body) > MAX_INFO_BYTES:
            raise HassError(f"GET /core/info answered {response.status}")
        info = json.loads(body)
        data = info.get("data") if isinstance(info, dict) else None
        return _unmapped(ipaddress.ip_address(str(data.get("ip_address") if isinstance(data, dict) else None)))

    async def _refresh(self, ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
        """Read every name, build the household off the loop, and hand it on."""
        started = time.monotonic()
        listed = await self._command(ws, {"type": "homeassistant/expose_entity/list"})
        exposed = listed.get("exposed_entities") if isinstance(listed, dict) else None
        if not isinstance(exposed, dict):
            raise HassError("listed no exposed_entities")
        ids = exposed_to_assist(exposed)
        states = await self._command(ws, {"type": "get_states"}, wanted=ids)  # (a large one: only these are kept)
        entries = (
            await self._command(ws, {"type": "config/entity_registry/get_entries", "entity_ids": ids}) if ids else {}
        )
        devices = await self._command(ws, {"type": "config/device_registry/list"})
        areas = await self._command(ws, {"type": "config/area_registry/list"})
        floors = await self._command(ws, {"type": "config/floor_registry/list"}, missing_ok=True)
        household = await asyncio.to_thread(
            read_household, exposed, states, entries=entries, devices=devices, areas=areas, floors=floors
        )
        self._on_names(household)
        self._failures = 0
        _LOGGER.info(
            "Names from Home Assistant: %d names (%d areas and floors, %d entities and aliases) from %s in %.2f s",
            len(household.names),
            household.places,
            household.entities,
            self.url,
            time.monotonic() - started,
        )

    async def _wait_quiet(self) -> None:
        """Until a change has come and then QUIET seconds without another (or MAX_QUIET_WAIT since the first)."""
        await self._changed.wait()
        first = time.monotonic()
        while True:
            self._changed.clear()
            left = first + MAX_QUIET_WAIT - time.monotonic()
            try:
                await asyncio.wait_for(self._changed.wait(), min(QUIET, max(left, 0.0)))
            except TimeoutError:
                return

    async def _command(
        self,
        ws: aiohttp.ClientWebSocketResponse[bool],
        message: dict[str, Any],
        missing_ok: bool = False,
        wanted: list[str] | None = None,
    ) -> Any:
        """Send one command and wait for its result; HassError if it fails (`missing_ok`: an unknown command, which
        an older Home Assistant answers to floor_registry, is an empty list). A large answer is cut down to what
        household.py reads of it (`wanted`: the entity ids it reads, where the command lists entities)."""
        self._next_id += 1
        self._cut = (message["type"], wanted)
        answer = self._answers[self._next_id] = asyncio.get_running_loop().create_future()
        await ws.send_json({"id": self._next_id, **message})
        reply = await self._answer(answer)
        if reply.get("success") is True:
            return reply.get("result")
        error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        if missing_ok and error.get("code") == "unknown_command":
            return []
        raise HassError(f"answered {message['type']} with {quote(error.get('code'))}: {quote(error.get('message'))}")

    async def _answer(self, answer: asyncio.Future[Any]) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(answer, ANSWER_SECONDS)
        except TimeoutError:
            raise HassError(f"did not answer in {ANSWER_SECONDS:g} s") from None

    async def _read(self, ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
        """Every message: results to the command waiting for them, events to `_changed`; ends with the connection.

        A message is at most MAX_MESSAGE_BYTES (aiohttp refuses a longer one as it comes); one over INLINE_BYTES is
        parsed in a child process, which hands back only what household.py reads of it."""
        async for message in ws:
            if message.type is aiohttp.WSMsgType.ERROR:
                raise HassError(f"sent what is refused: {message.data}")
            if message.type is not aiohttp.WSMsgType.TEXT:
                raise HassError(f"sent a {message.type.name} message")
            data: bytes = message.data  # (as it came: decode_text=False)
            if len(data) <= INLINE_BYTES:
                parsed = json.loads(data.decode("utf-8"))
            else:
                try:
                    parsed = await parse_in_child(data, *self._cut, timeout=ANSWER_SECONDS)
                except AnswerError as err:
                    raise HassError(str(err)) from None
                del data, message  # (the message's megabytes go now, not at the next one)
            for item in parsed if isinstance(parsed, list) else [parsed]:  # (a list where it coalesces messages)
                self._take(item)
        raise HassError("closed the connection")

    def _take(self, message: object) -> None:
        if not isinstance(message, dict):
            raise HassError("sent a message that is not a JSON object")
        kind = message.get("type")
        if kind in ("auth_required", "auth_ok", "auth_invalid"):
            if self._login is not None and not self._login.done():
                self._login.set_result(message)
        elif kind == "event":
            self._changed.set()
        elif kind == "result" and isinstance(key := message.get("id"), int):
            answer = self._answers.pop(key, None)
            if answer is not None and not answer.done():
                answer.set_result(message)

    def _failed(self, err: BaseException) -> None:
        self._failures += 1
        level = logging.WARNING if self._failures == 1 else logging.DEBUG
        delay = BACKOFF[min(self._failures, len(BACKOFF)) - 1]
        _LOGGER.log(
            level,
            "Home Assistant at %s: %s; the names stay as they were, trying again in %g s%s",
            self.url,
            str(err) or type(err).__name__,
            delay,
            " (and on, quietly, until it answers)" if level == logging.WARNING else "",
        )


def _peer(ws: aiohttp.ClientWebSocketResponse[bool]) -> Address | None:
    """The IP address the websocket is connected to (an IPv4 one as IPv4), or None where it has none."""
    peername = ws.get_extra_info("peername")
    if not isinstance(peername, tuple) or not peername:
        return None
    try:
        return _unmapped(ipaddress.ip_address(str(peername[0]).partition("%")[0]))
    except ValueError:
        return None


def _no_redirects() -> aiohttp.TraceConfig:
    """A session's tracing that refuses every redirect: the token goes to --hass-api, never where it points."""

    async def refuse(session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestRedirectParams) -> None:
        location = params.response.headers.get("Location")
        raise HassError(f"redirected to {quote(location)}; the token goes only to --hass-api, so it was not followed")

    tracing = aiohttp.TraceConfig()
    tracing.on_request_redirect.append(refuse)
    return tracing
