"""Every client mistake gets an `error` with a stable code, then the end of the connection; service goes on.

Home Assistant's client ignores `error` events and waits for the transcript or the
audio-stop it asked for: only the end of the stream ends its wait, so a failed
request always ends its connection (a failed select-program does not).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import MAX_AUDIO_SECONDS, MAX_TEXT_CHARS
from helpers import corpus, load_audio, read_until, send_audio, silence, start_server, synthesize, transcribe, wer
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event, async_read_event
from wyoming.info import SelectProgram
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice
from wyoming.wake import Detect


async def assert_hung_up(client) -> None:
    """The connection ends within a second of the error: nothing more comes."""
    assert await asyncio.wait_for(client.read_event(), 1.0) is None


async def assert_still_serving(client) -> None:
    """A connection answers, and correctly."""
    path, reference = corpus()[1]
    heard = await transcribe(client, load_audio(path), name="tiny.en")
    assert heard.type == "transcript" and wer([reference], [heard.data["text"]]) < 0.2
    await client.write_event(Ping().event())
    assert (await read_until(client, "pong"))[-1].type == "pong"


async def test_unknown_model(server) -> None:
    async with server.client() as client:
        await client.write_event(Transcribe(name="large-v9").event())
        await send_audio(client, silence(0.5))
        events = await read_until(client, "transcript")
        assert events[-1].type == "error" and events[-1].data["code"] == "unknown-model"
        assert "large-v9" in events[-1].data["text"] and "base" in events[-1].data["text"]
        await assert_hung_up(client)  # no transcript follows: the failed request's audio was dropped
    warned = [line for line in server.log.splitlines() if "Wyoming client 127.0.0.1:" in line and "large-v9" in line]
    assert warned and "WARNING" in warned[0] and "(unknown-model)" in warned[0], "logged with the client's address"
    async with server.client() as client:
        await assert_still_serving(client)


async def test_no_voice_for_the_language(server) -> None:
    async with server.client() as client:
        await client.write_event(Synthesize(text="Bonjour.", voice=SynthesizeVoice(language="fr")).event())
        events = await read_until(client, "audio-stop")
        assert events[-1].type == "error" and events[-1].data["code"] == "unknown-voice"
        assert "en_US-joe-medium" in events[-1].data["text"]
        await assert_hung_up(client)


@pytest.mark.parametrize(("rate", "width", "channels"), [(16000, 3, 1), (0, 2, 1), (16000, 2, 0), (16000, 2, 64)])
async def test_unsupported_audio_format(server, rate: int, width: int, channels: int) -> None:
    async with server.client() as client:
        await client.write_event(Transcribe().event())
        await client.write_event(AudioStart(rate, width, channels).event())
        await client.write_event(AudioChunk(rate, width, channels, audio=bytes(1200)).event())
        await client.write_event(AudioStop().event())
        error = (await read_until(client, "transcript"))[-1]
        assert error.type == "error" and error.data["code"] == "unsupported-audio-format"
        await assert_hung_up(client)


async def test_audio_longer_than_the_limit(server) -> None:
    async with server.client() as client:
        await client.write_event(Transcribe().event())
        too_long = silence(MAX_AUDIO_SECONDS + 1)
        await send_audio(client, too_long, frames_per_chunk=16000)
        error = (await read_until(client, "transcript"))[-1]
        assert error.type == "error" and error.data["code"] == "audio-too-long"
        assert str(MAX_AUDIO_SECONDS) in error.data["text"]
        await assert_hung_up(client)


async def test_text_longer_than_the_limit(server) -> None:
    text = "This sentence is said again and again. " * (MAX_TEXT_CHARS // 30)
    assert len(text) > MAX_TEXT_CHARS
    async with server.client() as client:
        await client.write_event(Synthesize(text=text).event())
        error = (await read_until(client, "audio-stop"))[-1]
        assert error.type == "error" and error.data["code"] == "text-too-long"
        await assert_hung_up(client)

    async with server.client() as client:  # streamed text past the limit: the error ends the stream, and the wait
        await client.write_event(SynthesizeStart().event())
        for start in range(0, len(text), 500):
            await client.write_event(SynthesizeChunk(text=text[start : start + 500]).event())
        await client.write_event(SynthesizeStop().event())
        events: list[Event] = []
        while (event := await asyncio.wait_for(client.read_event(), 30)) is not None:
            events.append(event)
        errors = [event for event in events if event.type == "error"]
        assert len(errors) == 1 and errors[0].data["code"] == "text-too-long"
        assert "synthesize-stopped" not in [event.type for event in events]
    async with server.client() as client:
        await assert_still_serving(client)


@pytest.mark.parametrize(
    ("event", "waits_for"),
    [
        (Event(type="audio-chunk", data={"rate": "fast", "width": 2, "channels": 1}, payload=b"\0\0"), "transcript"),
        (Event(type="synthesize", data={"text": 42}), "audio-stop"),
        (Event(type="synthesize", data={}), "audio-stop"),  # no text at all
    ],
    ids=["rate-not-a-number", "text-not-a-string", "no-text"],
)
async def test_malformed_fields(server, event: Event, waits_for: str) -> None:
    async with server.client() as client:
        await client.write_event(event)
        error = (await read_until(client, waits_for))[-1]
        assert error.type == "error" and error.data["code"] == "bad-request"
        await assert_hung_up(client)
    async with server.client() as client:
        await assert_still_serving(client)


async def test_a_failed_select_program_keeps_the_connection(server) -> None:
    async with server.client() as client:
        await client.write_event(SelectProgram(name="nobody").event())
        error = (await read_until(client, "pong"))[-1]
        assert error.type == "error" and error.data["code"] == "unknown-program"
        await assert_still_serving(client)


@pytest.mark.parametrize(
    "raw",
    [
        b"this is not json\n",
        b'["a list"]\n',
        b'{"data": {}}\n',
        b'{"type": "audio-chunk", "payload_length": 10000000000}\n',
        b'{"type": "describe", "data_length": -1}\n',
        b'{"type": "describe", "data_length": 4}\n[12]',
    ],
    ids=["not-json", "not-object", "no-type", "huge-payload", "negative-length", "data-not-object"],
)
async def test_malformed_event_gets_an_error_then_the_connection_closes(server, raw: bytes) -> None:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(raw)
        await writer.drain()
        error = await asyncio.wait_for(async_read_event(reader), 10)
        assert error is not None and error.type == "error" and error.data["code"] == "bad-request"
        assert "Malformed event" in error.data["text"]
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed: the stream cannot be trusted
    finally:
        writer.close()
    async with server.client() as client:  # everyone else is still served
        await assert_still_serving(client)


async def test_client_vanishing_mid_request_does_not_hurt_others(server) -> None:
    pcm = load_audio(corpus()[0][0])
    for _ in range(3):
        reader, writer = await asyncio.open_connection(server.host, server.port)
        header = {"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1}, "payload_length": 64000}
        writer.write(json.dumps({"type": "transcribe", "data": {}}).encode() + b"\n")
        writer.write(json.dumps(header).encode() + b"\n" + pcm.audio[:1000])  # payload cut short
        await writer.drain()
        writer.close()
    async with server.client() as client:
        await client.write_event(Synthesize(text="Half a sentence and then gone.").event())
        await client.read_event()  # audio-start, then vanish mid-synthesis
    async with server.client() as client:
        await assert_still_serving(client)
        speech = await synthesize(client, "Still here.")
        assert speech.pcm.seconds > 0.3


async def test_busy_when_the_queue_is_full(tmp_path, data_dir) -> None:
    """One worker, no queue: a third simultaneous request is told `busy`, not made to wait."""
    busy_server = start_server(
        ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--asr-workers", "1", "--queue-size", "0"], tmp_path
    )
    try:
        pcm = load_audio(corpus()[0][0])

        async def one() -> Event:
            async with busy_server.client() as client:
                return await transcribe(client, pcm)

        results = await asyncio.gather(*(one() for _ in range(3)))
        codes = sorted(event.data.get("code", event.type) for event in results)
        assert "busy" in codes and "transcript" in codes, codes
        async with busy_server.client() as client:
            assert (await transcribe(client, pcm)).type == "transcript"
    finally:
        assert busy_server.stop() == 0


async def _read_like_home_assistant(client, until: str) -> list[str]:
    """Event types as Home Assistant's wyoming client reads them (homeassistant/components/wyoming/stt.py and
    tts.py, 2026.2.3): past any `error`, until the event it waits for or the end of the connection."""
    seen = []
    while (event := await client.read_event()) is not None:
        seen.append(event.type)
        if event.type == until:
            break
    return seen


@pytest.mark.parametrize("case", ["stt-unsupported-language", "tts-text-too-long", "streamed-tts-nothing-to-say"])
async def test_a_client_that_ignores_errors_is_not_left_waiting(server, case: str) -> None:
    async with server.client() as client:
        if case == "stt-unsupported-language":  # HA sends all its audio first, then reads
            await client.write_event(Transcribe(language="xx").event())
            await send_audio(client, silence(2.0))
            until = "transcript"
        elif case == "tts-text-too-long":
            await client.write_event(Synthesize(text="Go on. " * MAX_TEXT_CHARS).event())
            until = "audio-stop"
        else:  # HA's streaming path: chunks, the whole text again, stop; it reads until synthesize-stopped
            for event in (SynthesizeStart(), SynthesizeChunk(text=" ... "), Synthesize(text=" ... "), SynthesizeStop()):
                await client.write_event(event.event())
            until = "synthesize-stopped"
        seen = await asyncio.wait_for(_read_like_home_assistant(client, until), 1.0)
        assert seen == ["error"], seen


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (SelectProgram(name="p" * 1_000_000).event(), "unknown-program"),
        (Event(type="audio-chunk", data={"rate": "r" * 1_000_000, "width": 2, "channels": 1}), "bad-request"),
        (Detect(names=["w" * 1_000_000]).event(), "unknown-wake-word"),
        (Event(type="transcribe", data={"vad_sensitivity": "v" * 1_000_000}), "bad-request"),
    ],
    ids=["program", "audio-rate", "wake-word", "vad-sensitivity"],
)
async def test_a_client_value_is_quoted_not_echoed(server, event: Event, code: str) -> None:
    """A megabyte value comes back, and goes to the log, cut short (wyoming_wis.values.quote)."""
    logged = server.log_path.stat().st_size
    async with server.client() as client:
        await client.write_event(event)
        if event.type in ("detect", "transcribe"):
            await client.write_event(AudioStart(16000, 2, 1).event())
        await client.write_event(Ping().event())
        error = (await read_until(client, "pong"))[-1]
    assert error.type == "error" and error.data["code"] == code, error
    assert len(error.data["text"]) < 400, error.data["text"][:500]
    assert server.log_path.stat().st_size - logged < 2000
