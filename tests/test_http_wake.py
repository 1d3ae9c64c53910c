"""POST /api/wake: the wake words in a recording (any format), or in a device's stream as /api/willow takes it."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from helpers import Pcm, Server, amr_wb, load_audio, silence, wav_bytes
from test_wyoming_wake import LEAD, join, say
from willow_client import esp32_post


@pytest.fixture(scope="module")
async def okay_nabu(server: Server) -> Pcm:
    """ "Okay Nabu" at 16 kHz, after LEAD s of silence, then "Hey Jarvis" 3 s later: two wake words in one take."""
    return join(await say(server, "Okay Nabu, turn on the kitchen light."), await say(server, "Hey Jarvis."))


def mp3(pcm: Pcm) -> bytes:
    return subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "wav", "-i", "pipe:", "-f", "mp3", "pipe:"],
        input=wav_bytes(pcm),
        capture_output=True,
        check=True,
    ).stdout


def assert_heard(answer: dict, pcm: Pcm, names: list[str]) -> None:
    """`names` heard in order: the first just after the lead, the second in the second take (3 s or more later)."""
    assert [found["name"] for found in answer["detections"]] == names, answer
    stamps = [found["timestamp"] for found in answer["detections"]]
    assert LEAD * 1000 < stamps[0] < (LEAD + 1.5) * 1000, answer
    assert all(stamps[0] + 3000 < stamp < pcm.seconds * 1000 for stamp in stamps[1:]), answer
    assert all(0.5 < found["probability"] <= 1 for found in answer["detections"]), answer
    assert answer["audio_duration"] == pytest.approx(pcm.seconds * 1000, abs=20), answer


@pytest.mark.parametrize("form", ["wav", "mp3"])
def test_a_recording_in_any_format(server: Server, okay_nabu: Pcm, form: str) -> None:
    body = wav_bytes(okay_nabu) if form == "wav" else mp3(okay_nabu)
    answer = httpx.post(
        server.http_url + "/api/wake",
        params={"names": "okay_nabu,hey_jarvis"},
        files={"file": (f"take.{form}", body)},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()
    if form == "mp3":  # the encoder's delay and padding shift the audio by a few ms
        result["audio_duration"] = round(okay_nabu.seconds * 1000)
    assert_heard(result, okay_nabu, ["okay_nabu", "hey_jarvis"])


@pytest.mark.parametrize("codec", ["pcm", "wav", "amrwb"])
async def test_a_device_stream_is_heard_as_it_arrives(server: Server, okay_nabu: Pcm, codec: str) -> None:
    """Chunked, at the pace it is spoken, as a Willow device streams to /api/willow: answered soon after the end."""
    body = {"pcm": okay_nabu.audio, "wav": wav_bytes(okay_nabu), "amrwb": amr_wb(okay_nabu)}[codec]
    answer = await esp32_post(server, "names=okay_nabu_oww", body, codec, okay_nabu.seconds, path="/api/wake")
    assert answer.status == 200, answer.body
    result = answer.json()
    assert [found["name"] for found in result["detections"]] == ["okay_nabu_oww"], result
    # stamped at the end of the piece that made it: an AMR-WB chunk decodes to a longer piece than raw PCM's
    assert LEAD * 1000 < result["detections"][0]["timestamp"] < (LEAD + 2.0) * 1000, result
    assert answer.after_last_chunk < 1.0, answer.after_last_chunk


def test_nothing_heard_is_an_empty_list(server: Server) -> None:
    answer = httpx.post(server.http_url + "/api/wake", files={"file": ("quiet.wav", wav_bytes(silence(2.0)))})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"detections": [], "audio_duration": 2000}


def test_what_is_wrong_is_refused_by_name(server: Server) -> None:
    url = server.http_url + "/api/wake"
    unknown = httpx.post(url, params={"names": "hey_siri"}, files={"file": ("a.wav", wav_bytes(silence(1.0)))})
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["code"] == "unknown-wake-word" and unknown.json()["error"]["param"] == "names"
    no_file = httpx.post(url, files={"audio_file": ("a.wav", wav_bytes(silence(1.0)))})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file", no_file.text
    not_audio = httpx.post(url, files={"file": ("a.wav", b"hello, not audio")})
    assert not_audio.status_code == 415 and not_audio.json()["error"]["code"] == "bad-audio", not_audio.text
    not_riff = httpx.post(url, content=b"hello" * 100, headers={"x-audio-codec": "wav"})
    assert not_riff.status_code == 400 and not_riff.json()["error"]["param"] == "x-audio-codec", not_riff.text
    bad_rate = httpx.post(url, content=bytes(100), headers={"x-audio-sample-rate": "0"})
    assert bad_rate.status_code in (400, 415), bad_rate.text


def test_a_recording_past_the_audio_limit_is_refused(server: Server) -> None:
    """The session server allows 60 s (--max-audio-seconds); a Wyoming satellite's stream has no limit."""
    long = load_audio(wav_bytes(silence(61.0)))
    answer = httpx.post(server.http_url + "/api/wake", files={"file": ("long.wav", wav_bytes(long))}, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "audio-too-long", answer.text
    streamed = httpx.post(server.http_url + "/api/wake", content=long.audio, timeout=60)
    assert streamed.status_code == 400 and streamed.json()["error"]["code"] == "audio-too-long", streamed.text
