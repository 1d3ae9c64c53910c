"""Fair shares of the Wyoming frontend (issue 36): connection slots by address, a transcription that never ends,
a connection that floods events. Each test is the attack itself, from loopback addresses of its own (127.0.0.x:
the slots are shared by address), against one server with a few slots and short timeouts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest
from helpers import CORPUS, Server, assert_stops_cleanly, load_audio, read_until, start_server, transcribe
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe
from wyoming.ping import Ping
from wyoming.tts import Synthesize
from wyoming.wake import Detect

from wyoming_wis.shares import IDLE_AFTER_SECONDS

MAX_CONNECTIONS = 8
QUEUE_SIZE = 2  # Whisper calls waiting: with one running, three places, one an address's share
IDLE_SECONDS = 5.0  # past IDLE_AFTER_SECONDS: idle connections are taken, not timed out
SEND_SECONDS = 3.0
HOME_ASSISTANT = "127.0.0.9"  # --hass-address
SPOKEN = CORPUS / "LJ001-0004.flac"
CHUNK = AudioChunk(16000, 2, 1, audio=bytes(3200)).event()  # 100 ms of silence, as a satellite streams it


@pytest.fixture(scope="module")
def fair(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = {"--max-connections": MAX_CONNECTIONS, "--idle-timeout": IDLE_SECONDS, "--send-timeout": SEND_SECONDS}
    flags |= {"--asr-workers": 1, "--queue-size": QUEUE_SIZE}  # Whisper: one call at a time, two waiting
    flags |= {"--hass-address": HOME_ASSISTANT}
    # what these tests judge is the queue's order, not a client's patience: a command may wait behind two minute-long
    # uploads, 16 s on a busy 2-core machine, past Wyoming's default 15 s (then refused, rightly, as too late)
    flags |= {"--wyoming-max-wait": 120}
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en"]
    running = start_server(
        [*args, *(str(part) for pair in flags.items() for part in pair)], tmp_path_factory.mktemp("fair")
    )
    yield running
    assert_stops_cleanly(running)


class Connection:
    """A Wyoming connection from a chosen loopback address (with `wyoming`'s client methods, for the helpers)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.streaming: asyncio.Task[None] | None = None

    async def write_event(self, event: Event) -> None:
        await async_write_event(event, self.writer)

    async def read_event(self) -> Event | None:
        return await async_read_event(self.reader)

    async def answers(self) -> bool:
        """Whether it is still served: a ping gets its pong."""
        with suppress(ConnectionError, AssertionError, TimeoutError):
            await self.write_event(Ping(text="there?").event())
            return (await read_until(self, "pong", timeout=10))[-1].type == "pong"  # type: ignore[arg-type]
        return False

    async def closed_with(self, timeout: float = 10) -> Event:
        """The `error` event that ended the connection."""
        event = await asyncio.wait_for(self.read_event(), timeout)
        assert event is not None and event.type == "error", event
        assert await asyncio.wait_for(self.reader.read(), 5) == b"", "the connection stayed open"
        return event

    def close(self) -> None:
        if self.streaming is not None:
            self.streaming.cancel()
        self.writer.close()


async def connect(server: Server, source: str) -> Connection:
    return Connection(*await asyncio.open_connection(server.host, server.port, local_addr=(source, 0)))


@asynccontextmanager
async def connected(server: Server, source: str) -> AsyncIterator[Connection]:
    connection = await connect(server, source)
    try:
        yield connection
    finally:
        connection.close()


async def satellite(server: Server, source: str) -> Connection:
    """A wake word stream from `source`."""
    connection = await connect(server, source)
    await listen(connection)
    return connection


async def listen(connection: Connection) -> None:
    """Start a wake word stream on the connection, as Home Assistant keeps one open per satellite: silence, 100 ms
    every 100 ms."""
    await connection.write_event(Detect(names=["okay_nabu"]).event())
    await connection.write_event(AudioStart(16000, 2, 1).event())
    await connection.write_event(CHUNK)
    assert await connection.answers()  # the stream is open

    async def stream() -> None:
        with suppress(ConnectionError):
            while True:
                await connection.write_event(CHUNK)
                await asyncio.sleep(0.1)

    connection.streaming = asyncio.create_task(stream())


# -- slots -----------------------------------------------------------------------------------------------------------


async def test_wake_streams_from_one_address_make_room_for_another(fair: Server) -> None:
    """Every slot holds a wake word stream from one address: Home Assistant, from another, is still served (a
    describe, then a wake word stream of its own on that connection, and a transcription meanwhile), each time in
    place of the hog's longest-running stream, which is told why; the hog takes none of them back."""
    hog = [await satellite(fair, "127.0.0.1") for _ in range(MAX_CONNECTIONS)]
    try:
        async with connected(fair, "127.0.0.2") as home, connected(fair, "127.0.0.2") as second:
            await home.write_event(Describe().event())
            assert (await read_until(home, "info", timeout=10))[-1].type == "info"  # type: ignore[arg-type]
            evicted = await hog[0].closed_with()
            assert evicted.data["code"] == "busy" and "--max-connections" in evicted.data["text"], evicted
            assert f"{MAX_CONNECTIONS} of them from 127.0.0.1" in evicted.data["text"], evicted
            await listen(home)

            heard = await transcribe(second, load_audio(SPOKEN))  # type: ignore[arg-type]
            assert heard.type == "transcript" and "block books" in heard.data["text"].lower(), heard
            assert (await hog[1].closed_with()).data["code"] == "busy"
            await listen(second)
            assert all([await connection.answers() for connection in hog[2:]])  # the others stream on

            async with connected(fair, "127.0.0.1") as more:  # all 8 open, 6 and 2: the hog takes none back
                refused = await more.closed_with()
            assert refused.data["code"] == "busy" and "6 of them from 127.0.0.1" in refused.data["text"], refused
            assert all([await connection.answers() for connection in [home, second, *hog[2:]]])
    finally:
        for connection in hog:
            connection.close()


async def test_idle_connections_from_many_addresses_make_room_for_a_new_one(fair: Server) -> None:
    """One idle connection from each of as many addresses as there are slots: a client from one more address is
    served, in place of the longest-idle of them, and so is its second connection while the first is open (Home
    Assistant's wake word stream and a transcription), though it then holds more than any of them."""
    idle = [await connect(fair, f"127.0.0.{10 + n}") for n in range(MAX_CONNECTIONS)]
    try:
        for connection in idle:
            assert await connection.answers()
        await asyncio.sleep(IDLE_AFTER_SECONDS)
        async with connected(fair, "127.0.0.30") as newcomer, connected(fair, "127.0.0.30") as second:
            await newcomer.write_event(Describe().event())
            assert (await read_until(newcomer, "info", timeout=10))[-1].type == "info"  # type: ignore[arg-type]
            await listen(newcomer)
            assert await second.answers()
        assert [(await connection.closed_with()).data["code"] for connection in idle[:2]] == ["busy", "busy"]
        assert all([await connection.answers() for connection in idle[2:]])
    finally:
        for connection in idle:
            connection.close()


async def test_wake_streams_without_audio_from_many_addresses_make_room_for_home_assistant(fair: Server) -> None:
    """Issue 49's lock-out: a `detect` from each of as many addresses as there are slots, with no audio and a `ping`
    now and then. A stream that brings no audio owes nothing: it is idle as any connection, so Home Assistant's
    describe and transcription, from another address, are served in place of the longest idle of them."""
    squatters = [await connect(fair, f"127.0.1.{1 + n}") for n in range(MAX_CONNECTIONS)]
    try:
        for connection in squatters:
            await connection.write_event(Detect(names=["okay_nabu"]).event())
            assert await connection.answers()  # the stream is open; the ping is its last event
        await asyncio.sleep(IDLE_AFTER_SECONDS)
        async with connected(fair, "127.0.0.2") as home, connected(fair, "127.0.0.2") as second:
            await home.write_event(Describe().event())
            assert (await read_until(home, "info", timeout=10))[-1].type == "info"  # type: ignore[arg-type]
            heard = await transcribe(second, load_audio(SPOKEN))  # type: ignore[arg-type]
            assert heard.type == "transcript" and "block books" in heard.data["text"].lower(), heard
        evicted = [await connection.closed_with() for connection in squatters[:2]]
        assert [event.data["code"] for event in evicted] == ["busy", "busy"], evicted
        assert all([await connection.answers() for connection in squatters[2:]])
    finally:
        for connection in squatters:
            connection.close()


async def test_home_assistant_takes_a_strangers_place_whatever_it_holds(fair: Server) -> None:
    """Every slot holds a wake word stream with its audio flowing, each from an address of its own: no stranger may
    take one (none holds two more than it), but Home Assistant (--hass-address), through which every satellite
    speaks, is never refused: its describe and transcription are served in place of two of them."""
    streams = [await satellite(fair, f"127.0.1.{1 + n}") for n in range(MAX_CONNECTIONS)]
    try:
        async with connected(fair, "127.0.0.2") as stranger:
            assert (await stranger.closed_with()).data["code"] == "busy"
        async with connected(fair, HOME_ASSISTANT) as home, connected(fair, HOME_ASSISTANT) as second:
            await home.write_event(Describe().event())
            assert (await read_until(home, "info", timeout=10))[-1].type == "info"  # type: ignore[arg-type]
            heard = await transcribe(second, load_audio(SPOKEN))  # type: ignore[arg-type]
            assert heard.type == "transcript" and "block books" in heard.data["text"].lower(), heard
        answering = [await connection.answers() for connection in streams]
        assert answering.count(False) == 2, answering
    finally:
        for connection in streams:
            connection.close()


async def test_an_idle_connection_makes_room_before_a_stream(fair: Server) -> None:
    """Two wake word streams from one address, and idle connections from others: a newcomer takes an idle one's
    slot, though the streams' address holds the most."""
    streams = [await satellite(fair, "127.0.0.2") for _ in range(2)]
    idle = [await connect(fair, f"127.0.0.{10 + n}") for n in range(MAX_CONNECTIONS - len(streams))]
    try:
        for connection in idle:
            assert await connection.answers()
        await asyncio.sleep(IDLE_AFTER_SECONDS)
        async with connected(fair, "127.0.0.30") as newcomer:
            assert await newcomer.answers()
        assert (await idle[0].closed_with()).data["code"] == "busy"
        assert all([await connection.answers() for connection in streams + idle[1:]])
    finally:
        for connection in streams + idle:
            connection.close()


async def test_a_connection_just_opened_is_not_taken_for_idle(fair: Server) -> None:
    """Home Assistant has just connected (its request is on its way) when the slots fill: a newcomer takes a
    stream of the address holding the most, not that connection."""
    hog = [await satellite(fair, "127.0.0.1") for _ in range(MAX_CONNECTIONS - 1)]
    try:
        async with connected(fair, "127.0.0.2") as home:
            await asyncio.sleep(0.2)  # accepted, nothing sent yet
            async with connected(fair, "127.0.0.3") as newcomer:
                assert await newcomer.answers()
            assert (await hog[0].closed_with()).data["code"] == "busy"
            assert await home.answers()
    finally:
        for connection in hog:
            connection.close()


async def test_uploads_from_one_address_leave_home_assistant_its_place_in_the_queue(fair: Server) -> None:
    """Uploads of a minute and more from one address at once: Whisper decodes one at a time, the address may fill
    the queue while no one else wants a place (the one past it is refused `busy`, saying so), and Home Assistant's
    command from another address, sent while one is decoded, takes the place of the address's last waiting upload
    (refused instead: nothing started is cut) and is transcribed. They filled the queue, and it was refused."""
    spoken = load_audio(SPOKEN)
    minute = dataclasses.replace(spoken, audio=spoken.audio * math.ceil(60 / spoken.seconds))
    uploaders = [await connect(fair, "127.0.0.5") for _ in range(MAX_CONNECTIONS // 2)]
    try:
        uploads = [asyncio.create_task(transcribe(connection, minute)) for connection in uploaders]  # type: ignore[arg-type]
        deadline = time.monotonic() + 60
        while (  # one decoded, the queue full behind it
            fair.metric("wis_inference_in_progress", engine="whisper", model="tiny.en") != 1
            or fair.metric("wis_queue_depth", engine="whisper", model="tiny.en") != QUEUE_SIZE
        ):
            assert time.monotonic() < deadline and not all(upload.done() for upload in uploads)
            await asyncio.sleep(0.02)
        async with connected(fair, "127.0.0.6") as home:
            heard = await transcribe(home, spoken)  # type: ignore[arg-type]
        assert heard.type == "transcript" and "block books" in heard.data["text"].lower(), heard
        answers = await asyncio.gather(*uploads)
    finally:
        for connection in uploaders:
            connection.close()
    refused = [answer for answer in answers if answer.type == "error"]
    assert refused and all(answer.data["code"] == "busy" for answer in refused), answers
    assert any("of them from 127.0.0.5" in answer.data["text"] for answer in refused), refused
    assert any("gave its place in the queue to another address" in answer.data["text"] for answer in refused), refused


@pytest.fixture(scope="module")
def roomy(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the default slots and queues."""
    running = start_server(["--data-dir", str(data_dir), "--asr-model", "tiny.en"], tmp_path_factory.mktemp("roomy"))
    yield running
    assert_stops_cleanly(running)


async def test_a_big_household_through_one_address_is_served_without_busy(roomy: Server) -> None:
    """Sixteen transcriptions, sixteen syntheses and eight wake word streams at once, all from one address, as a big
    household's satellites come through one Home Assistant: none is refused `busy`, since no one else wants a place
    (each queue held half its places for others: the ninth of eight transcriptions and eight syntheses was busy)."""
    streams = [await satellite(roomy, "127.0.0.2") for _ in range(8)]
    spoken = load_audio(SPOKEN)

    async def transcription() -> Event:
        async with connected(roomy, "127.0.0.2") as connection:
            return await transcribe(connection, spoken)  # type: ignore[arg-type]

    async def synthesis() -> Event:
        async with connected(roomy, "127.0.0.2") as connection:
            await connection.write_event(Synthesize(text="The kitchen lights are on.").event())
            return (await read_until(connection, "audio-stop"))[-1]  # type: ignore[arg-type]

    try:
        answers = await asyncio.gather(*(transcription() for _ in range(16)), *(synthesis() for _ in range(16)))
        assert all([await connection.answers() for connection in streams])
    finally:
        for connection in streams:
            connection.close()
    assert [answer.type for answer in answers] == ["transcript"] * 16 + ["audio-stop"] * 16, [
        answer.data for answer in answers if answer.type == "error"
    ]
    assert all("block books" in answer.data["text"].lower() for answer in answers[:16]), answers[:16]


# -- a transcription that never ends ---------------------------------------------------------------------------------


async def test_a_trickled_transcription_is_closed(fair: Server) -> None:
    """A transcription whose audio comes a sample at a time, never silent long enough to be idle, held its slot
    and its session for ever: once its audio is --idle-timeout behind the time it took, it ends with `timeout`."""
    async with connected(fair, "127.0.0.4") as trickle:
        await trickle.write_event(Transcribe(language="en").event())
        await trickle.write_event(AudioStart(16000, 2, 1).event())
        began = time.monotonic()

        async def drip() -> None:
            with suppress(ConnectionError):
                while True:
                    await trickle.write_event(AudioChunk(16000, 2, 1, audio=bytes(2)).event())
                    await asyncio.sleep(IDLE_SECONDS / 4)

        dripping = asyncio.create_task(drip())
        try:
            error = await trickle.closed_with(timeout=IDLE_SECONDS * 4)
        finally:
            dripping.cancel()
        took = time.monotonic() - began
    print(f"trickled transcription closed after {took:.1f} s")
    assert error.data["code"] == "timeout" and "--idle-timeout" in error.data["text"], error
    assert IDLE_SECONDS * 0.9 < took < IDLE_SECONDS + 3


# -- a flood of events -----------------------------------------------------------------------------------------------


FLOOD_SECONDS = 5.0
FLOODERS = 4
PINGS = b"".join(json.dumps({"type": "ping", "data": {"text": str(n)}}).encode() + b"\n" for n in range(4096))


async def describe_seconds(server: Server) -> float:
    began = time.perf_counter()
    async with connected(server, "127.0.0.3") as probe:
        await probe.write_event(Describe().event())
        assert (await read_until(probe, "info", timeout=30))[-1].type == "info"  # type: ignore[arg-type]
    return time.perf_counter() - began


async def test_pipelined_pings_do_not_hold_the_loop(fair: Server) -> None:
    """Pings written back to back without waiting for their pongs (read in bulk, so the server never waits on
    its writes), from several connections: `describe` on another connection is answered within its usual time.
    Answered back to back, they held the loop for a reader's buffer of them at a time."""
    quiet = [await describe_seconds(fair) for _ in range(5)]
    stop = asyncio.Event()
    answered = [0]

    async def flood() -> None:
        async with connected(fair, "127.0.0.1") as flooder:

            async def drain() -> None:
                with suppress(ConnectionError):
                    while data := await flooder.reader.read(1 << 20):
                        answered[0] += data.count(b'"pong"')

            draining = asyncio.create_task(drain())
            with suppress(ConnectionError):
                while not stop.is_set():
                    flooder.writer.write(PINGS)
                    await flooder.writer.drain()
            draining.cancel()

    flooders = [asyncio.create_task(flood()) for _ in range(FLOODERS)]
    await asyncio.sleep(0.5)
    delays = []
    deadline = time.monotonic() + FLOOD_SECONDS
    while time.monotonic() < deadline:
        delays.append(await describe_seconds(fair))
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*flooders)
    print(
        f"describe: quiet max {max(quiet) * 1000:.0f} ms; under {answered[0]} pings from {FLOODERS} connections, "
        f"max {max(delays) * 1000:.0f} ms, median {sorted(delays)[len(delays) // 2] * 1000:.0f} ms"
    )
    assert answered[0] > 10_000, "the flood was not answered: nothing was measured"
    assert max(delays) < 0.5, delays


async def test_event_data_that_is_slow_to_parse_is_refused_unparsed(roomy: Server) -> None:
    """Event data of a megabyte of empty lists (within --max-event-data-bytes) held the loop 60 ms to parse, where a
    megabyte of names or text takes 1-2 ms: from 24 connections at once, `describe` waited for all of them. Counted
    first (its separators and brackets), such data is refused unparsed, as bad-request."""
    data = json.dumps({"text": [[]] * 340_000}, separators=(",", ":")).encode()  # just under 1 MiB
    event = json.dumps({"type": "ping", "data_length": len(data)}).encode() + b"\n" + data
    attackers = [await connect(roomy, f"127.0.1.{20 + n}") for n in range(24)]
    try:
        for attacker in attackers:
            attacker.writer.write(event)
        delays = [await describe_seconds(roomy) for _ in range(10)]
        refusals = [await attacker.closed_with() for attacker in attackers]
    finally:
        for attacker in attackers:
            attacker.close()
    assert all(refusal.data["code"] == "bad-request" for refusal in refusals), refusals
    assert all("JSON separators and brackets" in refusal.data["text"] for refusal in refusals), refusals
    assert max(delays) < 0.25, delays


async def test_pings_never_read_are_cut_off_at_the_send_timeout(fair: Server) -> None:
    """A client that writes pings and never reads a pong: once the send buffers are full the server stops reading
    it, and drops it within --send-timeout; its own pile of answers is what the buffers hold."""
    reader, writer = await asyncio.open_connection(fair.host, fair.port, local_addr=("127.0.0.5", 0))
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    began = time.monotonic()
    sent = 0
    with suppress(ConnectionError, TimeoutError):
        while time.monotonic() - began < SEND_SECONDS + 10:
            writer.write(PINGS)
            await asyncio.wait_for(writer.drain(), SEND_SECONDS + 10)
            sent += 4096
    dropped = time.monotonic() - began
    writer.close()
    print(f"a client that never reads: {sent} pings written, dropped after {dropped:.1f} s")
    assert dropped < SEND_SECONDS + 5, f"still served after {dropped:.1f} s"
    async with connected(fair, "127.0.0.5") as again:
        assert await again.answers()
