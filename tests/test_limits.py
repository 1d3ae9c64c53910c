"""Every configurable limit crossed, each answered with its documented error, and faults that leave the server serving.

One server with small limits serves the whole module; the last test stops it with SIGTERM while requests are in
flight, so it runs last (pytest keeps file order).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from helpers import (
    CORPUS,
    Pcm,
    Server,
    assert_clean_log,
    free_port,
    load_audio,
    read_until,
    start_server,
    stream,
    transcribe,
)
from wyoming.asr import Transcribe
from wyoming.audio import AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart

import http_api
from wis_server.serve import http_app
from wyoming_wis.config import Settings
from wyoming_wis.core import CLOSE_SECONDS, Core
from wyoming_wis.tts.cache import SpeechCache
from wyoming_wis.wyoming import WyomingHandler
from wyoming_wis.wyoming.server import SHUTDOWN_SECONDS, TcpServer

MAX_CONNECTIONS = 3
IDLE_SECONDS = 2.0
EVENT_SECONDS = 1.0
LINE_BYTES = 1024
DATA_BYTES = 2048
PAYLOAD_BYTES = 4096
HTTP_READ_SECONDS = 1.5
SPOKEN = CORPUS / "LJ001-0004.flac"


@pytest.fixture(scope="module")
def tight(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    limits = {
        "--max-connections": MAX_CONNECTIONS,
        "--idle-timeout": IDLE_SECONDS,
        "--event-timeout": EVENT_SECONDS,
        "--max-event-line-bytes": LINE_BYTES,
        "--max-event-data-bytes": DATA_BYTES,
        "--max-event-payload-bytes": PAYLOAD_BYTES,
        "--http-read-timeout": HTTP_READ_SECONDS,
    }
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en"]
    running = start_server(
        [*args, *(str(part) for pair in limits.items() for part in pair)], tmp_path_factory.mktemp("tight")
    )
    yield running
    running.stop()
    assert_clean_log(running.log)


async def raw_connection(server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(server.host, server.port)


async def closing_error(reader: asyncio.StreamReader, timeout: float) -> Event:
    """The `error` event a closing connection gets, then its end."""
    event = await asyncio.wait_for(async_read_event(reader), timeout)
    assert event is not None and event.type == "error", event
    assert await asyncio.wait_for(reader.read(), 5) == b"", "the connection stayed open"
    return event


async def assert_serving(server: Server) -> None:
    async with server.client() as client:
        await client.write_event(Ping(text="still").event())
        assert (await read_until(client, "pong", timeout=10))[-1].data.get("text") == "still"


# -- Wyoming event framing ------------------------------------------------------------------------------------------


async def test_header_line_over_the_limit(tight: Server) -> None:
    reader, writer = await raw_connection(tight)
    header = {"type": "describe", "data": {"padding": "x" * LINE_BYTES}}  # inline data, as old clients send it
    writer.write(json.dumps(header).encode() + b"\n")
    error = await closing_error(reader, 10)
    writer.close()
    assert error.data["code"] == "bad-request" and "header line too long" in error.data["text"]
    await assert_serving(tight)


@pytest.mark.parametrize(
    ("key", "limit", "flag"),
    [
        ("data_length", DATA_BYTES, "--max-event-data-bytes"),
        ("payload_length", PAYLOAD_BYTES, "--max-event-payload-bytes"),
    ],
)
async def test_announced_length_over_the_limit(tight: Server, key: str, limit: int, flag: str) -> None:
    """Refused from the header alone: nothing of the announced block is sent, and none is waited for."""
    reader, writer = await raw_connection(tight)
    writer.write(json.dumps({"type": "audio-chunk", key: limit + 1}).encode() + b"\n")
    error = await closing_error(reader, 5)
    writer.close()
    assert error.data["code"] == "bad-request" and flag in error.data["text"] and str(limit) in error.data["text"]
    await assert_serving(tight)


async def test_blocks_at_the_limits_are_accepted(tight: Server) -> None:
    """The limits are the configured ones, not the defaults: exactly at them is fine."""
    reader, writer = await raw_connection(tight)
    data = json.dumps({"rate": 16000, "width": 2, "channels": 1, "pad": ""}).encode()
    data = data.replace(b'""', b'"' + b"x" * (DATA_BYTES - len(data)) + b'"')
    assert len(data) == DATA_BYTES
    await async_write_event(Transcribe().event(), writer)
    await async_write_event(AudioStart(16000, 2, 1).event(), writer)
    header = {"type": "audio-chunk", "data_length": len(data), "payload_length": PAYLOAD_BYTES}
    writer.write(json.dumps(header).encode() + b"\n" + data + bytes(PAYLOAD_BYTES))
    writer.write(b'{"type": "audio-stop"}\n')
    await writer.drain()
    event = await asyncio.wait_for(async_read_event(reader), 30)
    while event is not None and event.type != "transcript":
        assert event.type != "error", event
        event = await asyncio.wait_for(async_read_event(reader), 30)
    assert event is not None
    writer.close()


@pytest.mark.parametrize(
    "start",
    [b'{"type": "describe"', b'{"type": "audio-chunk", "payload_length": 4000}\n' + bytes(100)],
    ids=["header-line-cut", "payload-cut"],
)
async def test_half_sent_event_times_out(tight: Server, start: bytes) -> None:
    reader, writer = await raw_connection(tight)
    writer.write(start)
    began = time.monotonic()
    error = await closing_error(reader, EVENT_SECONDS + 5)
    writer.close()
    assert error.data["code"] == "timeout" and "--event-timeout" in error.data["text"]
    assert EVENT_SECONDS * 0.9 <= time.monotonic() - began < EVENT_SECONDS + 3
    await assert_serving(tight)


# -- Wyoming connections --------------------------------------------------------------------------------------------


async def test_idle_connection_is_closed(tight: Server) -> None:
    async with tight.client() as client:
        await client.write_event(Describe().event())
        assert (await read_until(client, "info", timeout=10))[-1].type == "info"
        began = time.monotonic()
        error = await asyncio.wait_for(client.read_event(), IDLE_SECONDS + 5)
        assert error is not None and error.type == "error" and error.data["code"] == "timeout", error
        assert "--idle-timeout" in error.data["text"]
        assert IDLE_SECONDS * 0.9 <= time.monotonic() - began < IDLE_SECONDS + 3
        assert await asyncio.wait_for(client.read_event(), 5) is None


async def test_audio_streamed_longer_than_the_idle_timeout_is_not_cut(tight: Server) -> None:
    """Idle means silent, not slow: audio sent at the pace it is spoken for longer than the timeout is transcribed."""
    pcm = load_audio(SPOKEN)
    seconds = IDLE_SECONDS + 1.5
    part = Pcm(pcm.audio[: int(seconds * pcm.rate) * pcm.width], pcm.rate, pcm.width, pcm.channels)
    async with tight.client() as client:
        heard = await stream(client, part)
    assert heard.transcript.type == "transcript" and heard.transcript.data["text"].strip(), heard.transcript


async def test_connections_past_the_limit_are_told_busy(tight: Server) -> None:
    clients = [tight.client() for _ in range(MAX_CONNECTIONS)]
    for client in clients:
        await client.connect()
        await client.write_event(Ping().event())
        await read_until(client, "pong", timeout=10)  # its handler is running
    try:
        reader, writer = await raw_connection(tight)
        error = await closing_error(reader, 5)
        writer.close()
        assert error.data["code"] == "busy" and "--max-connections" in error.data["text"]
    finally:
        for client in clients:
            await client.disconnect()
    deadline = time.monotonic() + 5
    while True:  # the closed ones are given back
        try:
            await assert_serving(tight)
            break
        except (AssertionError, ConnectionError):
            assert time.monotonic() < deadline, "connections were not released after their clients left"
            await asyncio.sleep(0.1)


# -- HTTP slow clients ----------------------------------------------------------------------------------------------


def http_head(path: bytes, extra: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: wis\r\n%s\r\n" % (path, extra)


async def answer_of(reader: asyncio.StreamReader, timeout: float) -> bytes:
    return await asyncio.wait_for(reader.read(), timeout)


@pytest.mark.parametrize("route", ["upload", "willow", "json"])
async def test_http_body_that_stalls_is_408(tight: Server, route: str) -> None:
    head, first = {
        "upload": (
            http_head(
                b"/v1/audio/transcriptions",
                b"Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 100000\r\n",
            ),
            b'--XX\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF',
        ),
        "willow": (
            http_head(b"/api/willow", b"x-audio-codec: pcm\r\nTransfer-Encoding: chunked\r\n"),
            b"800\r\n" + bytes(2048) + b"\r\n",
        ),
        "json": (
            http_head(b"/v1/audio/speech", b"Content-Type: application/json\r\nContent-Length: 1000\r\n"),
            b'{"input": "Hel',
        ),
    }[route]
    reader, writer = await asyncio.open_connection(tight.host, tight.http_port)
    writer.write(head + first)
    await writer.drain()
    began = time.monotonic()
    answer = await answer_of(reader, HTTP_READ_SECONDS + 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert HTTP_READ_SECONDS * 0.9 <= time.monotonic() - began < HTTP_READ_SECONDS + 3
    body = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert body["error"]["code"] == "timeout" and "--http-read-timeout" in body["error"]["message"]
    assert httpx.get(tight.http_url + "/health", timeout=10).status_code == 200


async def test_http_headers_that_trickle_are_cut(tight: Server) -> None:
    reader, writer = await asyncio.open_connection(tight.host, tight.http_port)
    began = time.monotonic()
    writer.write(b"GET /health HTTP/1.1\r\n")

    async def trickle() -> None:
        for _ in range(40):  # a header byte every 0.2 s: never silent for long, never done
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(0.2)

    trickling = asyncio.create_task(trickle())
    try:
        answer = await answer_of(reader, HTTP_READ_SECONDS + 5)
    finally:
        trickling.cancel()
        await asyncio.gather(trickling, return_exceptions=True)
        writer.close()
    assert answer == b"" and time.monotonic() - began < HTTP_READ_SECONDS + 3


async def test_willow_audio_at_speaking_pace_longer_than_the_read_timeout(tight: Server) -> None:
    """A device streams for longer than --http-read-timeout; each piece comes soon enough, so it is served."""
    pcm = load_audio(SPOKEN)
    seconds = HTTP_READ_SECONDS + 1.5
    audio = pcm.audio[: int(seconds * pcm.rate) * pcm.width]
    step = len(audio) // 10

    async def body() -> AsyncIterator[bytes]:
        for at in range(0, len(audio), step):
            yield audio[at : at + step]
            await asyncio.sleep(seconds / 10)

    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(tight.http_url + "/api/willow", content=body(), headers={"x-audio-codec": "pcm"})
    assert response.status_code == 200 and response.json()["text"].strip(), response.text


# -- faults ---------------------------------------------------------------------------------------------------------


async def test_client_vanishing_mid_stream_synthesis_stops_it(tight: Server) -> None:
    """Streamed text (as from an LLM), the first audio heard, then the client is gone: its synthesis stops."""
    text = " ".join(f"Sentence number {n} of a long answer nobody will hear, {os.getpid()}." for n in range(25))
    reader, writer = await raw_connection(tight)
    await async_write_event(SynthesizeStart().event(), writer)
    await async_write_event(SynthesizeChunk(text=text).event(), writer)
    event = await asyncio.wait_for(async_read_event(reader), 30)
    while event is not None and event.type != "audio-chunk":
        event = await asyncio.wait_for(async_read_event(reader), 30)
    assert event is not None
    writer.transport.abort()  # gone, without a goodbye
    deadline = time.monotonic() + 3
    async with httpx.AsyncClient(timeout=10) as client:
        while (await client.get(tight.http_url + "/health")).json()["tts"]["en_US-joe-medium"]["pending"]:
            assert time.monotonic() < deadline, "synthesis went on for a client that left"
            await asyncio.sleep(0.1)
    async with tight.client() as client:
        await client.write_event(Synthesize(text="Still speaking to others.").event())
        assert (await read_until(client, "audio-stop", timeout=30))[-1].type == "audio-stop"


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB file system: a real 'No space left on device'."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


async def test_speech_cache_on_a_full_disk(tiny_disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = SpeechCache(tiny_disk / "speech", max_bytes=10 << 20, ttl_seconds=60)
    with caplog.at_level(logging.WARNING, logger="wyoming_wis.tts.cache"):
        await cache.put("a" * 64, bytes(20_000))  # fits
        for key in "bcd":
            await cache.put(key * 64, bytes(100_000))  # does not: no error, no half-written file
    assert await cache.get("a" * 64) == bytes(20_000) and await cache.get("b" * 64) is None
    leftovers = [path.name for path in (tiny_disk / "speech").rglob("*") if path.is_file()]
    assert leftovers == ["a" * 64 + ".pcm"], leftovers
    warnings = [record for record in caplog.records if "cannot be written" in record.getMessage()]
    assert len(warnings) == 1, caplog.text


async def test_speech_cache_where_a_folder_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    cache = SpeechCache(tmp_path / "cache" / "speech", max_bytes=1 << 20, ttl_seconds=60)
    await cache.put("a" * 64, bytes(1000))
    assert await cache.get("a" * 64) is None


def served_over_http(settings: Settings, core: Core) -> web.Application:
    """The server's HTTP application, on `core` from the start."""
    app = http_app(settings)
    http_api.loaded(app, core)
    return app


def fail_once(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    """Make `owner.name` raise the first time it is called, as a model does on a bad day; returns the call count."""
    real, calls = getattr(owner, name), [0]

    def flaky(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("simulated model failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, flaky)
    return calls


async def test_a_model_call_that_raises(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """In process, to make a real model fail once: over a real socket (Wyoming and HTTP) the client gets an error,
    the next request on the same models is answered, and no task is left behind."""
    settings = Settings.from_args(["--data-dir", str(data_dir), "--asr-model", "tiny.en"], environ={})
    core = await asyncio.to_thread(Core.load, settings.core)
    tasks_before = asyncio.all_tasks()
    wyoming = settings.wyoming
    wyoming_server = TcpServer("127.0.0.1", free_port(), wyoming.max_event_line_bytes, wyoming.max_connections)
    await wyoming_server.start(lambda reader, writer: WyomingHandler(reader, writer, core, wyoming))
    runner = await http_api.start(served_over_http(settings, core), "127.0.0.1", http_port := free_port())
    try:
        pcm = load_audio(SPOKEN)
        piper = next(iter(core._piper.values()))
        whisper = core.asr["tiny.en"].decoder
        for owner, name in ((whisper, "decode"), (piper, "_whole"), (piper, "_latents")):
            fail_once(monkeypatch, owner, name)
        with caplog.at_level(logging.ERROR):
            async with AsyncTcpClient("127.0.0.1", wyoming_server.port) as client:
                failed = await transcribe(client, pcm)
                assert failed.type == "error" and failed.data["code"] == "internal-error", failed
            async with AsyncTcpClient("127.0.0.1", wyoming_server.port) as client:
                assert (await transcribe(client, pcm)).type == "transcript"  # the same model answers
                await client.write_event(Synthesize(text="This one fails.").event())
                failed = (await read_until(client, "audio-stop", timeout=30))[-1]
                assert failed.type == "error" and failed.data["code"] == "internal-error", failed
            async with httpx.AsyncClient(timeout=30) as http:
                url = f"http://127.0.0.1:{http_port}"
                fail_once(monkeypatch, whisper, "decode")
                files = {"file": ("a.flac", SPOKEN.read_bytes())}
                answer = await http.post(url + "/v1/audio/transcriptions", files=files, data={"model": "tiny.en"})
                assert answer.status_code == 500 and answer.json()["error"]["type"] == "server_error", answer.text
                answer = await http.post(url + "/v1/audio/transcriptions", files=files, data={"model": "tiny.en"})
                assert answer.status_code == 200 and answer.json()["text"].strip(), answer.text
                speech = await http.post(url + "/v1/audio/speech", json={"input": "And now it works."})
                assert speech.status_code == 200 and len(speech.content) > 1000
        assert "simulated model failure" in caplog.text  # logged, for whoever runs the server
    finally:
        await wyoming_server.stop()
        await runner.cleanup()
        await asyncio.to_thread(core.close)
    await asyncio.sleep(0.1)
    assert not [
        task for task in asyncio.all_tasks() - tasks_before if not task.done() and task is not asyncio.current_task()
    ]


def test_close_leaves_no_worker_thread_behind(data_dir: Path) -> None:
    """After serving over HTTP, `core.close()` with a model call still running: the call finishes and its caller
    gets the answer, and once close() returns no thread the core (or the HTTP app) started is alive."""
    before = set(threading.enumerate())
    settings = Settings.from_args(["--data-dir", str(data_dir), "--asr-model", "tiny.en"], environ={})
    core = Core.load(settings.core)
    workers = set(threading.enumerate()) - before
    assert workers, "the engines run no worker threads: nothing to check"
    whisper = core.asr["tiny.en"].scheduler

    def call_that_outlasts_close() -> str:
        """A model call that is still running when close() begins, and takes a while longer to finish."""
        while not whisper.closed:
            time.sleep(0.01)
        time.sleep(0.3)
        return "finished"

    async def serve_then_close() -> None:
        runner = await http_api.start(served_over_http(settings, core), "127.0.0.1", port := free_port())
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                files = {"file": ("a.flac", SPOKEN.read_bytes())}
                heard = await http.post("/v1/audio/transcriptions", files=files)
                assert heard.status_code == 200 and heard.json()["text"].strip(), heard.text
                speech = await http.post("/v1/audio/speech", json={"input": "Done.", "response_format": "flac"})
                assert speech.status_code == 200 and len(speech.content) > 1000
        finally:
            await runner.cleanup()
        running = asyncio.create_task(whisper.run(call_that_outlasts_close))
        deadline = time.monotonic() + 10
        while not whisper.running:
            assert time.monotonic() < deadline, "the call never started"
            await asyncio.sleep(0.01)
        await asyncio.to_thread(core.close)
        alive = [thread.name for thread in workers if thread.is_alive()]
        assert not alive, f"still running after close(): {alive}"
        assert await running == "finished"

    asyncio.run(serve_then_close())  # its own loop, whose default executor is shut down when it ends
    left = [thread.name for thread in set(threading.enumerate()) - before]
    assert not left, f"threads left after close(): {left}"


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(".tmp-") or p.suffix in (".part", ".tmp")]


async def test_sigterm_with_requests_in_flight(tight: Server, data_dir: Path) -> None:
    """Runs last: a transcription and a speech stream in flight get their answer (or an error), the process exits 0
    within its grace period, its model threads ended, and leaves no half-written file."""
    assert not temp_files(data_dir)
    pcm = load_audio(SPOKEN)

    async def wyoming() -> Event:
        async with tight.client() as client:
            return await transcribe(client, pcm)

    async def speech() -> tuple[int, bytes]:
        async with httpx.AsyncClient(timeout=30) as client:
            text = f"A long answer, number {os.getpid()}, spoken while the server is told to stop. " * 4
            async with client.stream(
                "POST", tight.http_url + "/v1/audio/speech", json={"input": text, "response_format": "pcm"}
            ) as response:
                audio = b"".join([piece async for piece in response.aiter_bytes()])
                return response.status_code, audio

    async def idle() -> Event | None:
        async with tight.client() as client:
            await client.write_event(Synthesize(text="Hello.").event())  # answered, then the connection waits
            await read_until(client, "audio-stop", timeout=30)
            return await asyncio.wait_for(client.read_event(), 15)

    tasks = [asyncio.create_task(job()) for job in (wyoming, speech, idle)]
    await asyncio.sleep(0.5)  # all three under way
    tight.process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    transcript, (status, audio), after_idle = await asyncio.gather(*tasks)
    assert transcript.type == "transcript" or transcript.data["code"] == "shutting-down", transcript
    assert status == 200 and len(audio) > 22050, (status, len(audio))  # more than half a second of speech
    assert after_idle is None  # an idle connection is simply closed
    grace = SHUTDOWN_SECONDS + CLOSE_SECONDS  # for answers in progress, then for model calls still running
    assert await asyncio.to_thread(tight.process.wait, grace + 5) == 0, tight.log
    assert time.monotonic() - stopped < grace
    assert "not waited for" not in tight.log  # every worker thread ended before the process did
    assert not temp_files(data_dir), temp_files(data_dir)
    assert_clean_log(tight.log)
