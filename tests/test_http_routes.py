"""The HTTP routes in-process, on the application the server builds, before any model is loaded.

aiohttp's test client on `wis_server.serve.http_app` (the HTTP API with WebRTC mounted on it) and no core,
as in the seconds after start-up: what a route refuses before it asks the core is answered as a client sees
it (status, OpenAI's envelope, the field named), and what passes every check meets the 503 of models still
loading. The speech fields are checked on a core that fails any use, so they must be refused before the core
is asked. Key, CORS and the signalling route come from the same flags as on a real server. The end-to-end
tier checks the same routes on real servers with real models.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import test_utils

import http_api
from http_api.fields import MAX_JSON_BYTES
from http_api.openai_speech import MAX_INPUT
from wis_server.serve import http_app
from wyoming_wis.budget import MemoryBudget
from wyoming_wis.config import Settings

pytestmark = pytest.mark.fast

KEY = "sk-test-routes"
_THRESHOLD = "chunking_strategy[threshold]"
_SILENCE = "chunking_strategy[silence_duration_ms]"
_PADDING = "chunking_strategy[prefix_padding_ms]"
ORIGIN = "https://app.example"


class _Untouchable:
    """A loaded core that fails any use (a 500), for checks that must come before the core is asked; but for its
    memory budget, which counts a body's bytes as they arrive, before any check."""

    budget = MemoryBudget(2**30)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the route asked the core for {name!r} before checking the request")


@asynccontextmanager
async def _client(*flags: str, core: object = None) -> AsyncIterator[test_utils.TestClient]:
    """A client of the server's HTTP application with these flags, on a loopback port; no core unless given."""
    app = http_app(Settings.from_args(list(flags), environ={}))
    if core is not None:
        http_api.loaded(app, core)  # type: ignore[arg-type]
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        yield client


@pytest.fixture(scope="module")
async def loading() -> AsyncIterator[test_utils.TestClient]:
    """The default settings, models not loaded yet."""
    async with _client() as client:
        yield client


@pytest.fixture(scope="module")
async def untouchable() -> AsyncIterator[test_utils.TestClient]:
    """The default settings, on a core that fails any use."""
    async with _client(core=_Untouchable()) as client:
        yield client


@pytest.fixture(scope="module")
async def secured() -> AsyncIterator[test_utils.TestClient]:
    """--api-key and --cors-origin, models not loaded yet."""
    async with _client("--api-key", KEY, "--cors-origin", ORIGIN) as client:
        yield client


async def _error(response: aiohttp.ClientResponse, status: int, param: str | None = None) -> dict[str, Any]:
    """The error in OpenAI's envelope, after checking its status and the field it names."""
    body = await response.json()
    assert response.status == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["type"] == ("server_error" if status >= 500 else "invalid_request_error"), body
    assert body["error"]["param"] == param, body
    return body["error"]


def _form(fields: dict[str, str], file: bytes | None = b"RIFF") -> aiohttp.FormData:
    form = aiohttp.FormData(default_to_multipart=True)
    for name, value in fields.items():
        form.add_field(name, value)
    if file is not None:
        form.add_field("file", file, filename="audio.wav", content_type="audio/wav")
    return form


async def test_what_passes_every_check_waits_for_the_models(loading: test_utils.TestClient) -> None:
    """503 with Retry-After while loading: from /health (load balancers), the API and the signalling alike."""
    for method, path, data in (
        ("GET", "/health", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/audio/transcriptions", _form({"model": "whisper-1", "response_format": "srt"})),
        ("POST", "/api/rtc/asr", b"{}"),
    ):
        response = await loading.request(method, path, data=data)
        assert (await _error(response, 503))["code"] == "loading", path
        assert response.headers["Retry-After"] == "1"
    ping = await loading.get("/api/ping")  # needs no model
    assert ping.status == 200 and await ping.json() == {"message": "pong"}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": "xml"}, "response_format"),
        ({"temperature": "2"}, "temperature"),
        ({"temperature": "warm"}, "temperature"),
        ({"timestamp_granularities[]": "word"}, "timestamp_granularities[]"),  # needs verbose_json
        ({"timestamp_granularities[]": "char", "response_format": "verbose_json"}, "timestamp_granularities[]"),
        ({"stream": "perhaps"}, "stream"),
        ({"include[]": "logprobs", "response_format": "text"}, "include[]"),  # as OpenAI: json only
        ({"include": "logprobs", "response_format": "verbose_json"}, "include[]"),
        ({"include[]": "tokens"}, "include[]"),
        ({"chunking_strategy": "manual"}, "chunking_strategy"),
        ({"chunking_strategy": "auto", "chunking_strategy[type]": "server_vad"}, "chunking_strategy"),
        ({"chunking_strategy[type]": "semantic_vad"}, "chunking_strategy[type]"),
        ({"chunking_strategy[threshold]": "0.5"}, "chunking_strategy[type]"),  # the type is required
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[eagerness]": "high"}, "chunking_strategy"),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[": "1"}, "chunking_strategy"),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[threshold]": "1.5"}, _THRESHOLD),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[threshold]": "loud"}, _THRESHOLD),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[silence_duration_ms]": "20.5"}, _SILENCE),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[silence_duration_ms]": "10001"}, _SILENCE),
        ({"chunking_strategy": '{"type": "server_vad", "prefix_padding_ms": -1}'}, _PADDING),
        ({"chunking_strategy": '{"type": "server_vad", "threshold": true}'}, _THRESHOLD),
        ({"chunking_strategy": '{"type": "server_vad", "x": 1}'}, "chunking_strategy"),
        ({"chunking_strategy": '{"type": "server_vad"'}, "chunking_strategy"),  # not JSON
        ({"chunking_strategy": '{"type": "server_vad", "pad": "' + "x" * 2000 + '"}'}, "chunking_strategy"),
    ],
)
async def test_transcription_fields_are_refused_before_the_models_are_needed(
    loading: test_utils.TestClient, fields: dict[str, str], param: str
) -> None:
    error = await _error(await loading.post("/v1/audio/transcriptions", data=_form(fields)), 400, param)
    assert error["code"] == "invalid_value"


@pytest.mark.parametrize(
    "fields",
    [
        {"chunking_strategy": "auto"},
        {"chunking_strategy[type]": "server_vad"},
        {
            "chunking_strategy[type]": "server_vad",
            "chunking_strategy[threshold]": "0.7",
            "chunking_strategy[prefix_padding_ms]": "300",
            "chunking_strategy[silence_duration_ms]": "200",
        },
        {"chunking_strategy": '{"type": "server_vad", "threshold": 0.2, "silence_duration_ms": 500}'},
        {"include[]": "logprobs"},
        {"include": "logprobs", "response_format": "json", "stream": "true"},
    ],
)
async def test_chunking_strategies_and_logprobs_pass_every_check(
    loading: test_utils.TestClient, fields: dict[str, str]
) -> None:
    """Well-formed, they meet only the 503 of models still loading."""
    response = await loading.post("/v1/audio/transcriptions", data=_form({"model": "whisper-1", **fields}))
    assert (await _error(response, 503))["code"] == "loading"


async def test_bodies_that_are_not_what_the_route_takes(loading: test_utils.TestClient) -> None:
    not_multipart = await loading.post("/v1/audio/transcriptions", json={"file": "audio.wav"})
    assert (await _error(not_multipart, 415))["code"] == "bad_content_type"
    no_file = await loading.post("/v1/audio/transcriptions", data=_form({"model": "whisper-1"}, file=None))
    await _error(no_file, 400, "file")
    for body in (b"{", b"[]", b"[" * 60_000):
        response = await loading.post("/v1/audio/speech", data=body, headers={"Content-Type": "application/json"})
        assert (await _error(response, 400))["code"] == "bad_json", body[:8]
    too_large = await loading.post("/v1/audio/speech", json={"input": "x" * MAX_JSON_BYTES})
    assert (await _error(too_large, 413))["code"] == "request_entity_too_large"
    unknown = await loading.get("/v1/nothing")
    assert (await _error(unknown, 404))["code"] == "not_found"
    wrong_method = await loading.get("/v1/audio/speech")
    assert (await _error(wrong_method, 405))["code"] == "method_not_allowed"


async def test_an_upload_over_max_upload_mb_is_413_naming_the_file() -> None:
    async with _client("--max-upload-mb", "0.01") as client:  # 10 KiB
        response = await client.post("/v1/audio/transcriptions", data=_form({}, file=bytes(20_000)))
        await _error(response, 413, "file")


@pytest.mark.parametrize(
    ("headers", "param"),
    [
        ({"x-audio-codec": "mp4"}, "x-audio-codec"),
        ({"x-audio-sample-rate": "fast"}, "x-audio-sample-rate"),
        ({"x-audio-bits": "12"}, "x-audio-bits"),
        ({"x-audio-channel": "two"}, "x-audio-channel"),
    ],
)
async def test_willow_headers_are_refused_before_the_models_are_needed(
    loading: test_utils.TestClient, headers: dict[str, str], param: str
) -> None:
    await _error(await loading.post("/api/willow", data=b"\0" * 3200, headers=headers), 400, param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": "  \n"}, "input"),
        ({"input": "x" * (MAX_INPUT + 1)}, "input"),
        ({"input": "Hello.", "response_format": "midi"}, "response_format"),
        ({"input": "Hello.", "stream_format": "video"}, "stream_format"),
        ({"input": "Hello.", "speed": 5}, "speed"),
        ({"input": "Hello.", "speed": "fast"}, "speed"),
        ({"input": "Hello.", "speed": True}, "speed"),
    ],
)
async def test_speech_fields_are_refused_before_the_core_is_asked(
    untouchable: test_utils.TestClient, body: dict[str, Any], param: str
) -> None:
    await _error(await untouchable.post("/v1/audio/speech", json=body), 400, param)


async def test_the_key_covers_the_api_and_the_signalling_but_not_health(secured: test_utils.TestClient) -> None:
    for path in ("/v1/audio/transcriptions", "/api/rtc/asr"):
        missing = await secured.post(path, data=b"{}")
        assert (await _error(missing, 401))["code"] == "missing_api_key", path
        assert missing.headers.getall("WWW-Authenticate") == ['Bearer realm="wyoming-wis"']
        wrong = await secured.post(path, data=b"{}", headers={"Authorization": "Bearer sk-wrong"})
        assert (await _error(wrong, 401))["code"] == "invalid_api_key", path
    # With the key, each goes on to its own checks: the signalling is mounted, not an unknown route.
    shown = await secured.post("/api/rtc/asr", data=b"{}", headers={"X-API-Key": KEY})
    assert (await _error(shown, 503))["code"] == "loading"
    shown = await secured.post("/v1/audio/transcriptions", data=b"{}", headers={"Authorization": f"Bearer {KEY}"})
    assert (await _error(shown, 415))["code"] == "bad_content_type"
    assert (await secured.get("/health")).status == 503  # open to load balancers, whatever the key


async def test_cors_answers_preflights_and_labels_errors_for_the_allowed_origin(
    secured: test_utils.TestClient,
) -> None:
    preflight = await secured.options(
        "/api/rtc/asr",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status == 204  # a browser's preflight carries no key
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    assert preflight.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    assert preflight.headers["Access-Control-Allow-Origin"] == ORIGIN
    refused = await secured.post("/api/rtc/asr", data=b"{}", headers={"Origin": ORIGIN})
    assert refused.status == 401 and refused.headers["Access-Control-Allow-Origin"] == ORIGIN  # the page reads it
    assert "WWW-Authenticate" in refused.headers["Access-Control-Expose-Headers"]
    # A page of another origin may not post at all: refused before the key is asked for.
    other = await secured.post("/api/rtc/asr", data=b"{}", headers={"Origin": "https://elsewhere.example"})
    assert (await _error(other, 403))["code"] == "origin_not_allowed"
    assert "Access-Control-Allow-Origin" not in other.headers and other.headers["Vary"] == "Origin"


BROWSER = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "User-Agent": "Mozilla/5.0 (X11; Linux)"}


async def test_a_browser_must_name_the_server_by_one_of_its_names(loading: test_utils.TestClient) -> None:
    """DNS rebinding: a page of evil.example, its name pointed at this server, is refused; a client that is not a
    browser may name it anything, and /health answers whatever the name."""
    for headers in (BROWSER, {"Origin": "http://evil.example"}, {"User-Agent": "Mozilla/5.0"}):
        rebound = await loading.get("/v1/models", headers=headers | {"Host": "evil.example:19000"})
        error = await _error(rebound, 403)
        assert error["code"] == "host_not_allowed" and "'evil.example'" in error["message"], headers
        assert "--allowed-host" in error["message"]
    for host in ("speech.example.net", "evil.example"):  # the OpenAI SDK, curl, a Willow device by a LAN name
        assert (await _error(await loading.get("/v1/models", headers={"Host": host}), 503))["code"] == "loading"
    for host in ("192.168.1.20:19000", "[fe80::1]:19000", "homeassistant.local", "wis-box", "nas.lan", "localhost"):
        named = await loading.get("/v1/models", headers=BROWSER | {"Host": host})
        assert (await _error(named, 503))["code"] == "loading", host
    health = await loading.get("/health", headers=BROWSER | {"Host": "evil.example"})
    assert health.status == 503  # loading, as a load balancer sees it: not refused


async def test_a_page_of_another_origin_may_read_but_not_post(loading: test_utils.TestClient) -> None:
    """A plain HTML form posts across sites with no preflight: refused before anything reads its body."""
    here = f"http://{loading.host}:{loading.port}"
    form = aiohttp.FormData({"model": "whisper-1"})
    form.add_field("file", b"RIFF", filename="a.wav")
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://["},
        {"Sec-Fetch-Site": "cross-site"},
    ):
        posted = await loading.post("/v1/audio/transcriptions", data=form, headers=headers)
        assert (await _error(posted, 403))["code"] == "origin_not_allowed", headers
        assert posted.headers["Connection"] == "close"  # the body is never read
    for headers in ({"Origin": here}, {"Sec-Fetch-Site": "same-origin"}):  # the server's own pages
        posted = await loading.post("/api/rtc/asr", json={}, headers=headers)
        assert (await _error(posted, 503))["code"] == "loading", headers
    read = await loading.get("/v1/models", headers={"Origin": "http://evil.example"})  # no CORS header: unreadable
    assert (await _error(read, 503))["code"] == "loading" and "Access-Control-Allow-Origin" not in read.headers


async def test_allowed_hosts_and_origins_come_from_the_flags() -> None:
    async with _client("--allowed-host", "wis.example.com", "--cors-origin", ORIGIN) as client:
        named = await client.get("/v1/models", headers=BROWSER | {"Host": "WIS.example.com.:443"})
        assert (await _error(named, 503))["code"] == "loading"
        posted = await client.post("/api/rtc/asr", json={}, headers={"Origin": ORIGIN})
        assert (await _error(posted, 503))["code"] == "loading"
    async with _client("--allowed-host", "*") as client:
        anywhere = await client.get("/v1/models", headers=BROWSER | {"Host": "evil.example"})
        assert (await _error(anywhere, 503))["code"] == "loading"


def test_the_http_api_alone_has_no_signalling() -> None:
    """http_api knows nothing of WebRTC: the composition root mounts it (tests/test_layers.py keeps imports so)."""
    settings = Settings.from_args([], environ={})
    core = settings.core
    alone = http_api.make_app(
        settings.http,
        send_timeout=settings.wyoming.send_timeout,
        max_text_chars=core.max_text_chars,
        data_dir=core.data_dir[0],
    )
    paths = {resource.canonical for resource in alone.router.resources()}
    mounted = {resource.canonical for resource in http_app(settings).router.resources()}
    assert mounted - paths == {"/api/rtc/asr", "/v1/realtime/calls", "/v1/realtime/calls/{call_id}/hangup"}


@pytest.mark.parametrize(("path", "own"), [("/", "./"), ("/rtc", "rtc"), ("/realtime", "realtime")])
async def test_a_page_has_the_shared_header_and_is_revalidated(
    loading: test_utils.TestClient, path: str, own: str
) -> None:
    """Each page is served whole, its own link marked, open while models load; the same ETag again is a 304."""
    page = await loading.get(path)
    text = await page.text()
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html"), text
    assert "<!--" not in text and text.count("<header>") == 1 == text.count("<main>") and 'id="key-form"' in text
    assert re.findall(r'<a href="([^"]*)" aria-current="page">', text) == [own]
    again = await loading.get(path, headers={"If-None-Match": page.headers["ETag"]})
    assert again.status == 304 and again.headers["ETag"] == page.headers["ETag"]
    assert "default-src 'self'" in again.headers["Content-Security-Policy"]
    assert (await loading.get(path, headers={"If-None-Match": '"stale"'})).status == 200
    assert (await loading.get("/static/layout.html")).status == 404  # a part of the pages, not a file to fetch
