"""Willow Inference Server's API as a Willow device uses it, on the shared server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from helpers import CORPUS, Server, load_audio, wav_bytes, wer
from test_http_openai import assert_speech, decode

SPOKEN = CORPUS / "LJ001-0004.flac"  # 5.1 s
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
DEVICE = {"x-audio-sample-rate": "16000", "x-audio-bits": "16", "x-audio-channel": "1"}


async def at_speaking_pace(body: bytes, piece: int = 3203) -> AsyncIterator[bytes]:
    """The body in odd-sized pieces (samples split across them), as fast as 16 kHz 16-bit audio is spoken."""
    for start in range(0, len(body), piece):
        yield body[start : start + piece]
        await asyncio.sleep(piece / 32000)


@pytest.mark.parametrize("codec", ["pcm", "wav"])
async def test_willow_streams_speech_in_and_answers_soon_after_the_last_chunk(server: Server, codec: str) -> None:
    pcm = load_audio(SPOKEN)
    body = pcm.audio if codec == "pcm" else wav_bytes(pcm)
    async with httpx.AsyncClient(timeout=30) as client:
        started = time.perf_counter()
        response = await client.post(
            server.http_url + "/api/willow?stats=true",
            content=at_speaking_pace(body),  # an async generator: chunked transfer encoding, like the device
            headers=DEVICE | {"x-audio-codec": codec},
        )
        sent = started + len(body) / 32000
    answer = response.json()
    assert response.status_code == 200, answer
    assert answer["language"] == "en" and wer([SPOKEN_TEXT], [answer["text"]]) < 0.15, answer
    assert answer["audio_duration"] == pytest.approx(5140, abs=60)
    assert time.perf_counter() - sent < 5.0  # the device gives up after 10 s
    assert len(response.content) < 2048


async def test_willow_refuses_bad_headers_with_json(server: Server) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        for headers, param in (
            ({"x-audio-codec": "mp4"}, "x-audio-codec"),
            ({"x-audio-sample-rate": "fast"}, "x-audio-sample-rate"),
            ({"x-audio-bits": "12"}, "x-audio-bits"),
        ):
            response = await client.post(
                server.http_url + "/api/willow", content=b"\0" * 3200, headers=DEVICE | headers
            )
            assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
        not_wav = await client.post(
            server.http_url + "/api/willow", content=b"\0" * 3200, headers=DEVICE | {"x-audio-codec": "wav"}
        )
        assert not_wav.status_code == 400
        klingon = await client.post(
            server.http_url + "/api/willow?force_language=tlh", content=b"\0" * 3200, headers=DEVICE
        )
        assert klingon.status_code == 400 and "tlh" in klingon.json()["error"]["message"], klingon.text


def willow_tts(server: Server, **query: str) -> httpx.Response:
    """GET /api/tts read as it streams in, as the device's player does."""
    with httpx.stream("GET", server.http_url + "/api/tts", params=query, timeout=60) as response:
        response.read()
    return response


def test_tts_streams_a_playable_wav_and_tells_the_cache_state(server: Server) -> None:
    # Legacy firmware adds format=WAV&speaker=CLB: tolerated; a new text each run starts uncached.
    text = f"The garage door is closed, code {uuid.uuid4().hex[:4]}."
    first = willow_tts(server, format="WAV", speaker="CLB", text=text)
    assert first.status_code == 200 and first.headers["Content-Type"] == "audio/wav", first.text
    assert first.headers["X-Cache"] == "MISS"
    assert first.headers.get("Transfer-Encoding") == "chunked"  # streamed, not held back to the end
    assert_speech(*decode(first.content))

    again = willow_tts(server, text=text)
    assert again.headers["X-Cache"] == "HIT"
    assert decode(again.content)[0].shape == decode(first.content)[0].shape

    bypass = willow_tts(server, text=text, nocache="1")
    assert bypass.headers["X-Cache"] == "BYPASS"
    assert_speech(*decode(bypass.content))


def test_tts_errors_are_json_and_ping_answers(server: Server) -> None:
    missing = willow_tts(server, speaker="CLB")
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "text"
    too_long = willow_tts(server, text="word " * 1000)
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "text"
    assert httpx.get(server.http_url + "/api/ping", timeout=10).json() == {"message": "pong"}


async def test_asr_takes_a_whole_recording_in_any_format(server: Server) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        with SPOKEN.open("rb") as file:
            response = await client.post(
                server.http_url + "/api/asr?stats=true&beam_size=2", files={"audio_file": ("speech.flac", file)}
            )
        answer = response.json()
        assert response.status_code == 200 and wer([SPOKEN_TEXT], [answer["text"]]) < 0.15, answer
        assert answer["language"] == "en" and answer["audio_duration"] == pytest.approx(5140, abs=60)
        broken = await client.post(server.http_url + "/api/asr", files={"audio_file": ("x.flac", b"not audio")})
        assert broken.status_code == 415 and "audio_file" in broken.json()["error"]["message"], broken.text
