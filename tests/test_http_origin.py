"""What a web page can make the server do, on the shared server (no key): the attacks of issue 36 over real sockets.

DNS rebinding: a page of evil.example, its name then pointed at the server's address, sends requests that carry
`Host: evil.example` and read the answers as its own. A plain cross-site form posts to the server with no
preflight. Both are refused before anything is done; the same requests from clients that are not browsers, by
any name, are served as before.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import httpx
import pytest
from helpers import CORPUS, Server, load_audio, wav_bytes, wer
from prometheus_client.parser import text_string_to_metric_families

from http_api.origin import Names
from http_api.willow import SAVED_AUDIO

SPOKEN = CORPUS / "LJ001-0004.flac"  # 5.1 s
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
EVIL = "evil.example"
# What Chromium sends with a page's fetch() over HTTPS (over plain HTTP: only the User-Agent and, but for a
# same-origin GET, Origin)
BROWSER = {
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Sec-Fetch-Site": "same-origin",
    "Sec-Fetch-Mode": "cors",
    "Sec-Fetch-Dest": "empty",
}
HOUSEHOLD = b"RIFF the household's last recording"


def transcribed_seconds(server: Server) -> float:
    """Seconds of audio the server's HTTP frontend has transcribed, every model together."""
    text = httpx.get(server.http_url + "/metrics", timeout=10).raise_for_status().text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "wis_asr_audio_seconds_total" and sample.labels.get("frontend") == "http"
    )


@pytest.fixture
def recording(data_dir: Path) -> Path:
    """The household's last recording, where /api/willow?save_audio=true keeps it (the first data dir)."""
    path = data_dir / SAVED_AUDIO
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(HOUSEHOLD)
    return path


def test_a_rebound_page_can_neither_rewrite_nor_read_the_recording(server: Server, recording: Path) -> None:
    """The issue's attack: refused 403 before the body is read; the file in the data dir as it was (today's main
    rewrote it, then served it to the page)."""
    pcm = load_audio(SPOKEN)
    device = {"x-audio-sample-rate": "16000", "x-audio-bits": "16", "x-audio-channel": "1", "x-audio-codec": "pcm"}
    rebound = {"Host": f"{EVIL}:{server.http_port}", "Origin": f"http://{EVIL}:{server.http_port}"}
    seconds = transcribed_seconds(server)
    with httpx.Client(base_url=server.http_url, timeout=60) as http:
        posted = http.post("/api/willow?save_audio=true", content=pcm.audio, headers=BROWSER | device | rebound)
        read = http.get("/" + SAVED_AUDIO, headers=BROWSER | {"Host": rebound["Host"]})
        # Chromium and Safari over plain HTTP: a same-origin GET carries neither Origin nor Sec-Fetch-*
        plain = http.get("/" + SAVED_AUDIO, headers={"Host": rebound["Host"], "User-Agent": BROWSER["User-Agent"]})
    for answer in (posted, read, plain):
        assert answer.status_code == 403, answer.text
        error = answer.json()["error"]
        assert error["code"] == "host_not_allowed" and f"'{EVIL}'" in error["message"], error
        assert "--allowed-host" in error["message"]
    assert posted.headers["Connection"] == "close"  # what the page sent was never read
    assert recording.read_bytes() == HOUSEHOLD
    assert transcribed_seconds(server) == seconds  # nothing transcribed


def test_a_cross_site_form_cannot_post_to_the_api(server: Server) -> None:
    """`<form method=post enctype=multipart/form-data action=http://SERVER/v1/audio/transcriptions>` on another
    site: 403, and nothing transcribed (today's main: 200 and the transcript)."""
    upload = {"file": ("speech.wav", wav_bytes(load_audio(SPOKEN)), "audio/wav")}
    form = {"model": "whisper-1"}
    cross_site = BROWSER | {"Origin": f"http://{EVIL}", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    seconds = transcribed_seconds(server)
    refused = httpx.post(
        server.http_url + "/v1/audio/transcriptions", files=upload, data=form, headers=cross_site, timeout=60
    )
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "origin_not_allowed" and "--cors-origin" in error["message"], error
    assert transcribed_seconds(server) == seconds


async def test_a_page_of_another_site_cannot_open_a_realtime_session(server: Server) -> None:
    """A WebSocket is opened with a GET and no preflight: a page of evil.example could make the server transcribe
    for it. Its handshake is refused 403; the server's own page (same origin) opens one."""
    url = f"ws://{server.host}:{server.http_port}/v1/realtime?intent=transcription"
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url, headers={"User-Agent": BROWSER["User-Agent"], "Origin": f"http://{EVIL}"})
        assert refused.value.status == 403
        own = {"User-Agent": BROWSER["User-Agent"], "Origin": f"http://{server.host}:{server.http_port}"}
        async with http.ws_connect(url, headers=own) as socket:
            assert (await socket.receive_json(timeout=10))["type"] == "session.created"


def test_clients_that_are_not_browsers_are_served_by_any_name(server: Server) -> None:
    """A Willow device, the OpenAI SDK or curl, by a name of the LAN the server cannot know: served as before;
    and the server's own pages, by its address."""
    pcm = load_audio(SPOKEN)
    lan_name = {"Host": f"speech.example.net:{server.http_port}"}
    device = {"x-audio-sample-rate": "16000", "x-audio-bits": "16", "x-audio-channel": "1", "User-Agent": "Willow/2.0"}
    upload = {"file": ("speech.wav", wav_bytes(pcm), "audio/wav")}
    with httpx.Client(base_url=server.http_url, timeout=60) as http:
        willow = http.post("/api/willow", content=pcm.audio, headers=device | lan_name)
        sdk = http.post("/v1/audio/transcriptions", files=upload, data={"model": "whisper-1"}, headers=lan_name)
        page = http.post(  # a page of the server itself, by its address
            "/v1/audio/transcriptions",
            files=upload,
            data={"model": "whisper-1"},
            headers=BROWSER | {"Origin": server.http_url},
        )
    for answer in (willow, sdk, page):
        assert answer.status_code == 200 and wer([SPOKEN_TEXT], [answer.json()["text"]]) < 0.15, answer.text


@pytest.mark.fast
@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("192.168.1.20:19000", True),
        ("[2001:db8::20]:19000", True),
        ("[::1]", True),
        ("localhost:19000", True),
        ("homeassistant.local:19000", True),  # Home Assistant's own name, and the add-on's
        ("homeassistant:19000", True),
        ("a0d7b954-wyoming-wis:19000", True),  # an add-on's host name on Home Assistant's network
        ("nas.lan", True),
        ("box.home.arpa", True),
        ("wis.internal", True),
        ("Nas.Local.", True),
        (f"{EVIL}:19000", False),
        ("192.168.1.20.nip.io", False),  # a public name that resolves to a LAN address
        ("localhost.evil.example", False),
        ("", False),
        ("[::1", False),
    ],
)
def test_the_names_a_browser_may_use(host: str, allowed: bool) -> None:
    assert Names.of([]).allow(host) is allowed
    assert Names.of(["*"]).allow(host)
