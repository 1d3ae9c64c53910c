"""Each turn's deadline runs from that turn's end (issue 50), however long its client has been connected.

How long a client waits for its transcript (--http-max-wait, --wyoming-max-wait) decides whether a decode that has
to queue is worth starting. A Realtime session's deadline was set once, when its WebSocket opened: a session older
than --http-max-wait had every queued turn refused ("would be answered in about 0.9 s, after its client gives up (in
0.0 s)"), while a session opened just before got its transcript.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import aiohttp
import pytest
from helpers import CORPUS, Server, assert_stops_cleanly, load_audio, start_server, transcribe, wer
from wyoming.client import AsyncTcpClient

MAX_WAIT = 2.0  # --http-max-wait
RATE = 24000
MANUAL = {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
          "turn_detection": None}}}  # fmt: skip
CLIPS = ("LJ001-0001", "LJ001-0002", "LJ001-0003")


@pytest.fixture(scope="module")
def patient(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One Whisper worker, so that a turn's decode queues behind the Wyoming clients'."""
    flags = ["--asr-model", "tiny.en", "--asr-workers", "1", "--http-max-wait", str(MAX_WAIT)]
    running = start_server(["--data-dir", str(data_dir), *flags], tmp_path_factory.mktemp("deadlines"))
    yield running
    assert_stops_cleanly(running)


async def keep_busy(server: Server, stop: asyncio.Event) -> None:
    """A Wyoming client transcribing a recording after another until `stop`."""
    pcm = load_audio(CORPUS / "LJ001-0004.flac")
    client = AsyncTcpClient(server.host, server.port)
    await client.connect()
    try:
        while not stop.is_set():
            assert (await transcribe(client, pcm)).type == "transcript"
    finally:
        await client.disconnect()


async def test_a_realtime_session_older_than_its_clients_patience_gets_its_queued_turns_answered(
    patient: Server,
) -> None:
    """A session opened more than --http-max-wait ago commits three recordings while three Wyoming clients keep the
    one worker busy: each turn is transcribed, none refused as busy."""
    url = f"ws://{patient.host}:{patient.http_port}/v1/realtime?intent=transcription"
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as socket:
        assert json.loads((await socket.receive(timeout=10)).data)["type"] == "session.created"
        await socket.send_str(json.dumps({"type": "session.update", "session": MANUAL}))
        assert json.loads((await socket.receive(timeout=10)).data)["type"] == "session.updated"
        await asyncio.sleep(MAX_WAIT + 1)  # older than its client's patience
        stop = asyncio.Event()
        load = [asyncio.create_task(keep_busy(patient, stop)) for _ in range(3)]
        try:
            await asyncio.sleep(1)
            for name in CLIPS:
                audio = load_audio(CORPUS / f"{name}.flac", rate=RATE).audio
                for offset in range(0, len(audio), 48000):
                    chunk = base64.b64encode(audio[offset : offset + 48000]).decode()
                    await socket.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
                await socket.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
                while (event := json.loads((await socket.receive(timeout=60)).data))["type"] not in (
                    "conversation.item.input_audio_transcription.completed",
                    "conversation.item.input_audio_transcription.failed",
                    "error",
                ):
                    pass
                assert event["type"] == "conversation.item.input_audio_transcription.completed", event
                expected = (CORPUS / f"{name}.txt").read_text().strip()
                assert wer([expected], [event["transcript"]]) < 0.3, (expected, event["transcript"])
        finally:
            stop.set()
            for task in load:
                with suppress(Exception):
                    await task
