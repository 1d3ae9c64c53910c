"""Willow Inference Server's API as a Willow device uses it, on the shared server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from helpers import CORPUS, Server, amr_wb, load_audio, start_server, wav_bytes, wer
from test_http_openai import assert_speech, decode
from willow_client import DEVICE, esp32_post

from http_api.willow import SAVED_AUDIO

SPOKEN = CORPUS / "LJ001-0004.flac"  # 5.1 s
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()


@pytest.mark.parametrize("codec", ["pcm", "wav", "amrwb"])
async def test_willow_streams_speech_in_and_answers_soon_after_the_last_chunk(server: Server, codec: str) -> None:
    pcm = load_audio(SPOKEN)
    body = {"pcm": pcm.audio, "wav": wav_bytes(pcm), "amrwb": amr_wb(pcm)}[codec]
    answer = await esp32_post(server, "stats=true", body, codec, pcm.seconds)
    assert answer.status == 200, answer.body
    result = answer.json()
    assert result["language"] == "en" and wer([SPOKEN_TEXT], [result["text"]]) < 0.15, result
    assert result["audio_duration"] == pytest.approx(5140, abs=60)
    assert result["infer_time"] < 5000 and answer.after_last_chunk < 5.0  # the device gives up after 10 s
    assert len(answer.body) < 2048


async def test_save_audio_keeps_what_the_server_heard(keeper: Server, keeper_auth: httpx.BasicAuth) -> None:
    pcm = load_audio(SPOKEN)
    sent = amr_wb(pcm)
    answer = await esp32_post(keeper, "save_audio=true", sent, "amrwb", 0.5, keeper_auth)
    assert answer.status == 200, answer.body
    async with httpx.AsyncClient(timeout=30, auth=keeper_auth) as client:
        saved = await client.get(keeper.http_url + "/audio/willow.wav")
    assert saved.status_code == 200 and saved.headers["Content-Type"] == "audio/x-wav"
    heard, rate = decode(saved.content)
    assert rate == 16000 and len(heard) / rate == pytest.approx(pcm.seconds, abs=0.05)
    decoded, _ = decode(sent)  # the AMR-WB file read whole, here
    assert len(heard) == len(decoded) and np.abs(heard - decoded).max() < 1e-3


async def test_without_credentials_save_audio_keeps_nothing(server: Server, data_dir: Path) -> None:
    """A household's last recording is no file for anyone on the network: a server without credentials answers the
    device as usual, keeps nothing, says why once in its log, and refuses GET /audio/willow.wav saying why."""
    recording = data_dir / SAVED_AUDIO
    recording.parent.mkdir(parents=True, exist_ok=True)
    recording.write_bytes(b"kept before")
    pcm = load_audio(SPOKEN)
    for _ in range(2):
        answer = await esp32_post(server, "save_audio=true", pcm.audio, "pcm", 0.0)
        assert answer.status == 200 and wer([SPOKEN_TEXT], [answer.json()["text"]]) < 0.15, answer.body
    assert recording.read_bytes() == b"kept before"  # today's main: the 5.1 s just sent
    assert server.log.count("save_audio=true ignored") == 1
    url = server.http_url + "/" + SAVED_AUDIO
    async with httpx.AsyncClient(timeout=30) as client:
        head, get = await client.head(url), await client.get(url)
    assert head.status_code == get.status_code == 403 and head.headers["content-type"] != "audio/x-wav"
    error = get.json()["error"]
    assert error["code"] == "recording_not_kept" and "--api-key" in error["message"], error


async def test_willow_takes_beam_size_and_refuses_a_bad_one(server: Server) -> None:
    pcm = load_audio(SPOKEN)
    answer = await esp32_post(server, "beam_size=5&model=base", pcm.audio, "pcm", 0.2)
    assert answer.status == 200 and wer([SPOKEN_TEXT], [answer.json()["text"]]) < 0.15, answer.body
    for bad in ("0", "11", "2.5", "wide"):
        refused = await esp32_post(server, f"beam_size={bad}", pcm.audio[:3200], "pcm", 0.0)
        assert refused.status == 400 and refused.json()["error"]["param"] == "beam_size", refused.body


async def test_amrwb_that_is_not_amrwb_is_refused(server: Server) -> None:
    for body in (wav_bytes(load_audio(SPOKEN))[:8000], b"#!AMR-WB\n" + bytes(range(256)) * 8):
        refused = await esp32_post(server, "", body, "amrwb", 0.0)
        assert refused.status == 415 and "AMR-WB" in refused.json()["error"]["message"], refused.body
    assert (await esp32_post(server, "", amr_wb(load_audio(SPOKEN)), "amrwb", 0.0)).status == 200


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
                server.http_url + "/api/asr?beam_size=2", files={"audio_file": ("speech.flac", file)}
            )
        answer = response.json()
        assert response.status_code == 200 and wer([SPOKEN_TEXT], [answer["text"]]) < 0.15, answer
        assert answer["language"] == "en" and answer["audio_duration"] == pytest.approx(5140, abs=60)
        broken = await client.post(server.http_url + "/api/asr", files={"audio_file": ("x.flac", b"not audio")})
        assert broken.status_code == 415 and "audio_file" in broken.json()["error"]["message"], broken.text


@pytest.fixture(scope="module")
def german(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server told that everyone speaks German (--language de), as WIS's `language` setting does."""
    args = ["--data-dir", str(data_dir), "--asr-model", "base", "--language", "de"]
    running = start_server(args, tmp_path_factory.mktemp("german"))
    yield running
    assert running.stop() == 0, running.log


async def test_detect_language_overrides_the_servers_language(german: Server) -> None:
    async def asr(query: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=60) as client:
            files = {"audio_file": ("speech.flac", SPOKEN.read_bytes())}
            response = await client.post(german.http_url + "/api/asr" + query, files=files)
        assert response.status_code == 200, response.text
        return response.json()

    assert (await asr(""))["language"] == "de"
    for query in ("?detect_language=true", "?force_language=en"):
        answer = await asr(query)
        assert answer["language"] == "en" and wer([SPOKEN_TEXT], [answer["text"]]) < 0.15, answer
