"""No request parameter reaches the file system outside the data dir, and the Wyoming port binds only where told."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from helpers import Server, read_until, silence, wav_bytes
from wyoming.asr import Transcribe
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeVoice

from wyoming_wis.errors import BadRequest
from wyoming_wis.tts.voices import check_name

EVIL = [
    "../../etc/passwd",
    "..",
    "/etc/passwd",
    "..%2F..%2Fetc%2Fpasswd",
    "%2e%2e/%2e%2e/etc/passwd",
    "....//....//etc/passwd",
    "en_US-joe-medium/../../../x",
    "x\x00.onnx",
    "C:\\Windows\\win.ini",
    "~/.ssh/id_rsa",
]


def tree(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.suffix != ".log"}


@pytest.fixture
def nothing_new_outside(data_dir: Path) -> Iterator[None]:
    """No file appears anywhere around the data dir but inside it (server logs aside)."""
    around = data_dir.parent
    before = tree(around)
    yield
    new = {path for path in tree(around) - before if data_dir not in path.parents}
    assert not new, sorted(new)


@pytest.mark.parametrize("name", EVIL)
def test_a_voice_or_clone_name_is_never_a_path(name: str) -> None:
    with pytest.raises(BadRequest, match="Invalid voice name"):
        check_name(name)


@pytest.mark.usefixtures("nothing_new_outside")
def test_http_parameters_naming_files_are_refused_or_ignored(server: Server) -> None:
    base = server.http_url
    with httpx.Client(base_url=base, timeout=60) as http:
        default = http.get("/api/tts", params={"text": "Locked."})
        assert default.status_code == 200
        for name in EVIL:
            speech = http.post("/v1/audio/speech", json={"model": "tts-1", "voice": name, "input": "Hi."})
            assert 400 <= speech.status_code < 500 and speech.json()["error"]["code"], (name, speech.text)
            willow = http.get("/api/tts", params={"text": "Locked.", "speaker": name})
            assert willow.status_code == 400 and willow.json()["error"]["code"] == "bad-request", name
            upload = {"file": ("a.wav", wav_bytes(silence(0.3)), "audio/wav")}
            asr = http.post("/v1/audio/transcriptions", files=upload, data={"model": name})
            assert 400 <= asr.status_code < 500, (name, asr.text)
            model = http.get("/v1/models/" + quote(name, safe=""))
            assert model.status_code in (400, 404), (name, model.text)
            clone = http.post("/api/tts", params={"speaker": name}, files={"audio_file": upload["file"]})
            assert 400 <= clone.status_code < 500, (name, clone.text)
            for prefix in ("/static/", "/api/docs/"):
                for spelling in (quote(name, safe="/"), quote(name, safe="")):
                    answer = http.get(prefix + spelling)
                    if answer.request.url.raw_path.startswith(prefix.encode()):  # not normalised away by httpx
                        assert answer.status_code in (400, 404), (prefix + spelling, answer.status_code)
                    assert b"root:" not in answer.content


@pytest.mark.usefixtures("nothing_new_outside")
async def test_wyoming_voice_and_model_names_are_never_paths(server: Server) -> None:
    for name in EVIL:
        async with server.client() as client:
            await client.write_event(Synthesize(text="Hi.", voice=SynthesizeVoice(name=name)).event())
            error = (await read_until(client, "audio-stop"))[-1]
            assert error.type == "error" and error.data["code"] == "bad-request", (name, error)
        async with server.client() as client:
            await client.write_event(Transcribe(name=name).event())
            error = (await read_until(client, "transcript"))[-1]
            assert error.type == "error" and error.data["code"] in ("unknown-model", "bad-request"), (name, error)


def other_addresses() -> list[str]:
    """127.0.0.2 (loopback, but not 127.0.0.1) and this machine's outward address, if it has one."""
    addresses = ["127.0.0.2"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # UDP: no packet is sent; it picks the outward interface
            outward = probe.getsockname()[0]
        except OSError:
            outward = None
    if outward and not outward.startswith("127."):
        addresses.append(outward)
    return addresses


@pytest.mark.parametrize("address", other_addresses())
async def test_the_ports_bind_only_where_told(server: Server, address: str) -> None:
    """The shared server was told tcp://127.0.0.1: nothing answers on another address of this machine."""
    assert server.host == "127.0.0.1"
    for port in (server.port, server.http_port):
        with pytest.raises(OSError):
            _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), 5)
            writer.close()
    async with server.client() as client:  # and it does answer where it was told
        await client.write_event(Ping(text="here").event())
        assert (await read_until(client, "pong", timeout=30))[-1].data["text"] == "here"


def test_the_readme_says_wyoming_has_no_authentication() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "The Wyoming protocol has no authentication" in readme and "trusted network" in readme
