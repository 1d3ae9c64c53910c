"""The Realtime API (/v1/realtime) under hostile clients (issue 49): a ping flood, large and costly events, a
session that only answers pings, appends faster than real time, and updates without end.

Each attack is made over a real socket against one server with a short idle timeout and send timeout; meanwhile
`/health` (from 127.0.0.2) and Wyoming's `describe` (from 127.0.0.3) must be answered within STALL_TARGET.
Attackers come from 127.0.0.1 and 127.0.1.1 (half the sessions each may hold), and open a new session when the
server closes one (a session that sends no event is closed after the idle timeout).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from helpers import Server, assert_stops_cleanly, start_server
from realtime_client import PING, frame, pongs, raw_session
from test_wyoming_fairness import describe_seconds

from http_api.openai_realtime import MAX_FRAME_BYTES, RECEIVE_ALLOWANCE
from openai_audio.realtime import (
    AUDIO_BURST,
    AUDIO_PACE,
    CONTROL_COST,
    EVENT_BYTES_PER_SECOND,
    MAX_EVENT_BYTES,
    RealtimeSession,
)
from wyoming_wis.shares import IDLE_AFTER_SECONDS

IDLE_SECONDS = 4.0
SEND_SECONDS = 2.0
STALL_TARGET = 0.25  # seconds: /health and describe, throughout every attack (the target)
ATTACK_SECONDS = 4.0
SESSIONS = 16  # --realtime-max-sessions' default: 8 from each attacking address
ATTACKERS = ("127.0.0.1", "127.0.1.1")
RATE = 24000
MANUAL = {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
          "turn_detection": None}}}  # fmt: skip


@pytest.fixture(scope="module")
def realtime(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = {"--realtime-idle-timeout": IDLE_SECONDS, "--send-timeout": SEND_SECONDS}
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en"]
    running = start_server(
        [*args, *(str(part) for pair in flags.items() for part in pair)], tmp_path_factory.mktemp("realtime-bounds")
    )
    yield running
    assert_stops_cleanly(running)


def url(server: Server) -> str:
    return f"ws://{server.host}:{server.http_port}/v1/realtime?intent=transcription"


@asynccontextmanager
async def session(server: Server, source: str = "127.0.0.1", **options: Any) -> Any:
    """An aiohttp WebSocket from `source`, its session.created read."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as http, http.ws_connect(url(server), **options) as ws:
        assert json.loads((await ws.receive(timeout=10)).data)["type"] == "session.created"
        yield ws


async def next_event(ws: aiohttp.ClientWebSocketResponse, timeout: float = 30) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.receive(), timeout)  # (receive's own timeout restarts at each pong)
    assert message.type == aiohttp.WSMsgType.TEXT, (message.type, message.data, ws.close_code)
    return json.loads(message.data)


# pings, and an event now and then (one a second at the pace pings are read: the session is not idle)
PINGS = (frame(b"", PING) * 31 + frame(json.dumps({"type": "input_audio_buffer.clear"}).encode())) * 128


async def waits(server: Server, seconds: float) -> tuple[float, float]:
    """The longest /health (from 127.0.0.2) and describe (from 127.0.0.3, a connection each) took over `seconds`."""
    health, describe = 0.0, 0.0
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            began = time.perf_counter()
            (await http.get(server.http_url + "/health")).raise_for_status()
            health = max(health, time.perf_counter() - began)
            describe = max(describe, await describe_seconds(server))
            await asyncio.sleep(0.05)
    return health, describe


@dataclass
class Attacked:
    health: float  # the longest wait for /health, seconds
    describe: float  # ... for describe
    pongs: int = 0  # read by the attackers
    sessions: int = 0  # opened
    seconds: float = 0.0  # from the first session opened to the last closed


async def attacked(server: Server, writes: Sequence[bytes], sessions: int = SESSIONS) -> Attacked:
    """`sessions` write `writes[n % len(writes)]` over and over for ATTACK_SECONDS (each opened again if the server
    closes it), reading what comes back in bulk; meanwhile /health and describe are timed."""
    stop, began = asyncio.Event(), time.monotonic()
    result = Attacked(0.0, 0.0)

    async def attack(n: int) -> None:
        while not stop.is_set():
            with suppress(OSError, asyncio.IncompleteReadError):
                async with raw_session(server.host, server.http_port, ATTACKERS[n % 2]) as (reader, writer):
                    result.sessions += 1

                    async def drain() -> None:
                        while data := await reader.read(1 << 20):
                            result.pongs += pongs(data)

                    draining = asyncio.create_task(drain())
                    try:
                        while not stop.is_set() and not draining.done():
                            writer.write(writes[n % len(writes)])
                            await writer.drain()
                    finally:
                        draining.cancel()
            await asyncio.sleep(0.1)  # (refused: all the places are taken)

    attackers = [asyncio.create_task(attack(n)) for n in range(sessions)]
    await asyncio.sleep(0.5)
    try:
        result.health, result.describe = await waits(server, ATTACK_SECONDS)
    finally:
        stop.set()
        for attacker in attackers:
            attacker.cancel()
        await asyncio.gather(*attackers, return_exceptions=True)
    result.seconds = time.monotonic() - began
    return result


# -- audio -----------------------------------------------------------------------------------------------------------


async def test_appends_faster_than_real_time_are_paced_and_counted(realtime: Server) -> None:
    """Appends sent as fast as they are taken (which made Home Assistant's transcription 6.7 times as long): the
    server takes AUDIO_BURST seconds at once, then AUDIO_PACE times real time, and reads nothing more meanwhile (the
    client's sends wait; nothing is refused). What the session may hold is in the memory budget from the start."""
    seconds = 20  # 1 s appends: (20 - 10) / 2 = 5 s of pacing
    chunk = base64.b64encode(bytes(RATE * 2)).decode()
    async with session(realtime, "127.0.0.6") as ws:
        held = realtime.metric("wis_memory_budget_used_bytes")  # before any audio
        await ws.send_str(json.dumps({"type": "session.update", "session": MANUAL}))
        assert (await next_event(ws))["type"] == "session.updated"
        began = time.monotonic()
        for _ in range(seconds):
            await ws.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        await ws.send_str(json.dumps({"type": "input_audio_buffer.clear"}))  # answered once every append is taken
        assert (await next_event(ws))["type"] == "input_audio_buffer.cleared"
        took = time.monotonic() - began
    least = (seconds - AUDIO_BURST) / AUDIO_PACE
    print(f"{seconds} s of audio taken in {took:.2f} s (no sooner than {least:g} s)")
    assert least * 0.9 <= took < least + 10
    assert held >= RECEIVE_ALLOWANCE
    deadline = time.monotonic() + 10
    while realtime.metric("wis_memory_budget_used_bytes") and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert realtime.metric("wis_memory_budget_used_bytes") == 0


# -- idle ------------------------------------------------------------------------------------------------------------


async def test_a_session_that_only_answers_pings_is_closed_when_idle(realtime: Server) -> None:
    """Pings kept a session alive however long it sent no event: 150 s with --realtime-idle-timeout 40. A client
    that pings twice a second and reads every pong (aiohttp's heartbeat, as client libraries keep a socket alive)
    is told why and closed after --realtime-idle-timeout."""
    began = time.monotonic()
    async with session(realtime, "127.0.0.5", heartbeat=0.5) as ws:
        event = await next_event(ws, timeout=IDLE_SECONDS + 5)
        assert event["type"] == "error" and event["error"]["code"] == "idle_timeout", event
        assert (await asyncio.wait_for(ws.receive(), 5)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert IDLE_SECONDS - 0.5 < time.monotonic() - began < IDLE_SECONDS + 3


async def test_sessions_that_send_no_event_lock_no_one_out(realtime: Server) -> None:
    """Eight sessions from each of two addresses, answering pings and sending no event, held every place: a third
    address got 429 for as long as they were kept. Idle, they make room: its session is opened in the place of the
    longest idle, which is told why, well before the idle timeout would have closed any."""
    async with AsyncExitStack() as stack:
        held = [
            await stack.enter_async_context(session(realtime, ATTACKERS[n % 2], heartbeat=0.5)) for n in range(SESSIONS)
        ]
        await asyncio.sleep(IDLE_AFTER_SECONDS + 0.2)
        began = time.monotonic()
        async with session(realtime, "127.0.0.4"):
            assert time.monotonic() - began < IDLE_SECONDS - IDLE_AFTER_SECONDS
        told = [event for event in [await next_event(held[0], timeout=5)] if event["type"] == "error"]
        assert told and "Closed to make room for another client" in told[0]["error"]["message"], told


def test_a_session_closed_to_make_room_gives_its_memory_to_the_newcomer(data_dir: Path, tmp_path: Path) -> None:
    """A session paced behind a long append (here 60 s of G.711: 25 s of pacing), more of its client's frames
    queued, kept the memory it held until its end task had run: a newcomer that took its place was refused by the
    memory budget first (three of 16 sessions in bench/abuse.py's realtime-fast-appends). Its turn's audio is the
    newcomer's at once: with one place and 11 MB, the newcomer's session opens, and the closed one is told why."""
    flags = ["--realtime-max-sessions", "1", "--memory-budget-mb", "11", "--asr-model", "tiny.en"]
    running = start_server(["--data-dir", str(data_dir), *flags], tmp_path)
    try:
        asyncio.run(_made_room(running))
    finally:
        assert_stops_cleanly(running)


async def _made_room(server: Server) -> None:
    update = {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": None}}}
    append = {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\xff" * 480_000).decode()}  # 60 s
    async with raw_session(server.host, server.http_port, ATTACKERS[1]) as (reader, writer):
        writer.write(b"".join(frame(json.dumps(event).encode()) for event in (update, append, append)))
        deadline = time.monotonic() + 30
        while (server.metric("wis_memory_budget_used_bytes") or 0) < RECEIVE_ALLOWANCE + 2**20:
            assert time.monotonic() < deadline, "the first append's audio was never counted"
            await asyncio.sleep(0.2)
        await asyncio.sleep(IDLE_AFTER_SECONDS)
        async with session(server, "127.0.0.4"):
            pass  # (a 429 fails `ws_connect`)
        told = await asyncio.wait_for(reader.read(1 << 16), 5)
        assert b"Closed to make room for another client" in told, told


# -- control frames ------------------------------------------------------------------------------------------------


async def test_a_ping_flood_neither_stalls_the_loop_nor_queues_pongs_without_bound(realtime: Server) -> None:
    """Sessions that write pings back to back (aiohttp answered each in a loop that never yielded: /health took
    2.3 s): /health and describe stay within target, the pings are answered at the session's pace (a ping costs
    CONTROL_COST of what its events may cost a second), and a client that reads none of its pongs is closed, its
    pongs held by nothing but the socket's buffers."""
    quiet = await waits(realtime, 1.0)
    began = time.monotonic()

    async def never_reads() -> float:
        """Pings of 125 bytes (pongs of 127) from a socket with a small receive buffer that is never read."""
        async with raw_session(realtime.host, realtime.http_port, "127.0.0.4") as (_, writer):
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            with suppress(ConnectionError):
                while not writer.is_closing():
                    writer.write(frame(bytes(125), PING) * 1024)
                    await writer.drain()
        return time.monotonic() - began

    cut_off = asyncio.create_task(never_reads())
    flood = await attacked(realtime, [PINGS], SESSIONS - 1)  # (the never-reader holds a place)
    most = (flood.sessions * 2 * MAX_EVENT_BYTES + SESSIONS * EVENT_BYTES_PER_SECOND * flood.seconds) / CONTROL_COST
    print(f"quiet: /health {quiet[0] * 1000:.0f} ms, describe {quiet[1] * 1000:.0f} ms; under {flood.pongs} pongs "
          f"(at most {most:.0f} at the pace): /health {flood.health * 1000:.0f} ms, describe "
          f"{flood.describe * 1000:.0f} ms")  # fmt: skip
    assert 500 < flood.pongs <= most, "nothing was measured, or the pings were answered faster than their pace"
    assert flood.health < STALL_TARGET and flood.describe < STALL_TARGET, flood
    # closed at its idle timeout (sooner at --send-timeout, if its pongs filled the buffers first)
    assert await asyncio.wait_for(cut_off, IDLE_SECONDS + SEND_SECONDS + 10) < IDLE_SECONDS + SEND_SECONDS + 5


# -- events' sizes ---------------------------------------------------------------------------------------------------


def numbers(size: int) -> str:
    """JSON of about `size` bytes that costs the most to parse (a number every two bytes)."""
    return "[" + ",".join(["1"] * (size // 2 - 1)) + "]"


COSTLY = json.dumps({"type": "session.update", "session": {"x": "y"}, "x": 0}).replace(
    "0", numbers(MAX_FRAME_BYTES - 100)
)
COSTLY_APPEND = json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (MAX_FRAME_BYTES - MAX_EVENT_BYTES),
                            "x": 0}).replace('"x": 0', '"x": ' + numbers(MAX_EVENT_BYTES - 200))  # fmt: skip


async def test_events_are_capped_in_bytes_and_large_ones_stall_nothing(realtime: Server) -> None:
    """Each costly event took 41-60 ms of the loop (1 Mi characters of numbers): sessions sending them flat out
    held /health for 1.55 s. Now every event but an append is at most MAX_EVENT_BYTES, in bytes; an append's audio
    is cut out of it unparsed; a frame over MAX_FRAME_BYTES bytes closes the session even under it in characters."""
    async with session(realtime, "127.0.0.7") as ws:
        over = json.dumps({"type": "session.update", "session": {"type": "transcription"}, "x": ""})
        await ws.send_str(over.replace('""', '"' + "x" * (MAX_EVENT_BYTES + 1 - len(over)) + '"'))
        assert (await next_event(ws))["error"]["code"] == "event_too_large"
        within = json.dumps({"type": "session.update", "session": MANUAL, "x": ""})
        await ws.send_str(within.replace('""', '"' + "x" * (MAX_EVENT_BYTES - len(within)) + '"'))
        assert (await next_event(ws))["type"] == "session.updated"
        # a large append is read, with its audio (16 s) cut out, its JSON's other keys parsed
        audio = base64.b64encode(bytes(RATE * 2 * 16)).decode()
        await ws.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": audio, "event_id": "big"}))
        # one whose first "audio" is not its own is refused, never mis-read
        nested = {"type": "input_audio_buffer.append", "x": {"audio": audio}, "audio": "AAAA", "event_id": "nested"}
        await ws.send_str(json.dumps(nested))
        refused = (await next_event(ws))["error"]
        assert refused["event_id"] == "nested" and refused["code"] == "event_too_large", refused
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        assert (await next_event(ws))["type"] == "input_audio_buffer.committed"
    async with session(realtime, "127.0.0.7") as ws:
        # 1.05 MiB of UTF-8 in 0.35 Mi characters: past the frame's limit, though not in characters
        wide = json.dumps(
            {"type": "session.update", "session": {"x": "€" * (MAX_FRAME_BYTES // 3 + 1000)}}, ensure_ascii=False
        )
        assert len(wide) < MAX_FRAME_BYTES < len(wide.encode())
        with suppress(ConnectionError):
            await ws.send_str(wide)
            while (await ws.receive(timeout=10)).type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                pass
        assert ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG

    costly = await attacked(realtime, [frame(COSTLY.encode()), frame(COSTLY_APPEND.encode())])
    print(f"under costly events: /health {costly.health * 1000:.0f} ms, describe {costly.describe * 1000:.0f} ms")
    assert costly.health < STALL_TARGET and costly.describe < STALL_TARGET, costly


# -- updates ---------------------------------------------------------------------------------------------------------


class Listening:
    """What a session asks of a listening with no audio yet."""

    heard = seconds = 0.0
    turn = None

    def __init__(self) -> None:
        self.changes: list[object] = []

    async def change(self, request: object) -> None:
        self.changes.append(request)

    def close(self) -> None:
        pass


class Core:
    def __init__(self) -> None:
        self.listenings: list[Listening] = []

    def resolve(self, request: object) -> None:
        pass

    def listen(self, *args: object, **kwargs: object) -> Listening:
        self.listenings.append(Listening())
        return self.listenings[-1]


@pytest.mark.fast
async def test_updates_that_change_the_prompt_keep_one_listening() -> None:
    """Each update that changes how a turn is decoded changes the session's one listening (turns/listening.py
    `change`), which counts its times on: the session keeps nothing per update. (It kept a listening's time offset
    and its retirement for each: 142 bytes an update, 1.5 GB an hour from four sessions.)"""

    async def send(payload: str) -> None:
        pass

    core = Core()
    realtime = RealtimeSession(core, send, "test")  # type: ignore[arg-type]
    for n in range(200):
        prompt = {"audio": {"input": {"transcription": {"prompt": f"prompt {n}"}}}}
        await realtime._update({"type": "session.update", "session": prompt})
    assert len(core.listenings) == 1 and len(core.listenings[0].changes) == 199
    assert not realtime._items
