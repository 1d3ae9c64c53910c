"""HTTP security: API key, Basic auth as a Willow device sends it, CORS and HTTPS, on real servers."""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
import re
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import aiohttp
import httpx
import openai
import pytest
import trustme
from helpers import CORPUS, Server, assert_clean_log, assert_stops_cleanly, load_audio, start_server, wer
from multidict import CIMultiDict, CIMultiDictProxy
from test_http_openai import decode
from test_http_willow import DEVICE, esp32_post

from http_api import openapi, security
from http_api.security import server_ssl
from wis_server.serve import http_app
from wyoming_wis.config import Settings
from wyoming_wis.errors import StartupError

KEY = "sk-test-3f9a1c77e2"
USER, PASSWORD = "willow", "s3cret:pass"  # Basic auth splits at the first colon only
ALLOWED = "https://app.example.com"
SPOKEN = CORPUS / "LJ001-0004.flac"  # 5.1 s
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()


@pytest.fixture(scope="module")
def spool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The secured server's TMPDIR: where aiohttp spools uploaded files."""
    return tmp_path_factory.mktemp("spool")


@pytest.fixture(scope="module")
def secured(data_dir: Path, spool: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Key and Basic credentials from the environment (not on the command line), one allowed web origin."""
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--cors-origin", ALLOWED]
    env = {"WIS_API_KEY": KEY, "WIS_API_USER": USER, "WIS_API_PASSWORD": PASSWORD, "TMPDIR": str(spool)}
    running = start_server(args, tmp_path_factory.mktemp("secured"), env=env)
    yield running
    assert_stops_cleanly(running)
    assert KEY not in running.log and PASSWORD not in running.log


def error_of(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def challenges(response: httpx.Response) -> list[str]:
    return [value.split()[0] for value in response.headers.get_list("www-authenticate")]


# -- API key -------------------------------------------------------------------------


def test_the_key_stays_off_the_command_line(secured: Server) -> None:
    cmdline = Path(f"/proc/{secured.process.pid}/cmdline").read_bytes()
    assert KEY.encode() not in cmdline and PASSWORD.encode() not in cmdline


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/models"), ("POST", "/v1/audio/speech"), ("GET", "/api/tts?text=hi"), ("GET", "/no/such/route")],
)
def test_without_credentials_it_is_401_in_the_envelope_with_both_challenges(
    secured: Server, method: str, path: str
) -> None:
    response = httpx.request(method, secured.http_url + path, json={"input": "hi"} if method == "POST" else None)
    assert response.status_code == 401, response.text
    error = error_of(response)
    assert error["code"] == "missing_api_key" and error["type"] == "invalid_request_error"
    assert challenges(response) == ["Bearer", "Basic"]


@pytest.mark.parametrize("header", ["Authorization", "X-API-Key"])
def test_the_key_passes_as_bearer_or_x_api_key_and_a_wrong_one_does_not(secured: Server, header: str) -> None:
    def ask(key: str) -> httpx.Response:
        value = f"Bearer {key}" if header == "Authorization" else key
        return httpx.get(secured.http_url + "/v1/models", headers={header: value})

    good = ask(KEY)
    assert good.status_code == 200 and "tiny.en" in [m["id"] for m in good.json()["data"]], good.text
    wrong = ask(KEY + "x")
    assert wrong.status_code == 401 and error_of(wrong)["code"] == "invalid_api_key"
    assert ask(KEY[:-1]).status_code == 401


async def test_a_websocket_may_show_the_key_as_a_subprotocol(secured: Server) -> None:
    """A browser's WebSocket cannot send Authorization: on a handshake the key passes as the subprotocol
    `openai-insecure-api-key.KEY` (OpenAI's convention for browsers), and the server chooses `realtime`, never
    echoing the key. A wrong key or none is 401; on a request that is no handshake the subprotocol shows nothing."""
    url = f"ws://{secured.host}:{secured.http_port}/v1/realtime?intent=transcription"
    shown = f"{security.KEY_SUBPROTOCOL}{KEY}"
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url, protocols=("realtime", shown)) as socket:
            assert socket.protocol == "realtime"
            assert json.loads((await socket.receive(timeout=10)).data)["type"] == "session.created"
        # A browser's beta client offers `openai-beta.realtime-v1` for the OpenAI-Beta header it cannot send.
        async with http.ws_connect(url, protocols=("realtime", "openai-beta.realtime-v1", shown)) as socket:
            assert json.loads((await socket.receive(timeout=10)).data)["type"] == "transcription_session.created"
        for protocols in (("realtime", shown + "x"), ("realtime",), ()):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url, protocols=protocols)
            assert refused.value.status == 401, protocols
    handshake = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    handshake["Sec-WebSocket-Key"] = base64.b64encode(os.urandom(16)).decode()
    for protocols, code in (
        (f"realtime, {shown}x", "invalid_api_key"),
        (f"realtime, {shown[:-1]}", "invalid_api_key"),
        ("realtime", "missing_api_key"),
    ):
        refused = httpx.get(url.replace("ws:", "http:"), headers={**handshake, "Sec-WebSocket-Protocol": protocols})
        assert refused.status_code == 401 and error_of(refused)["code"] == code, (protocols, refused.text)
        assert challenges(refused) == ["Bearer", "Basic"]
    plain = httpx.get(secured.http_url + "/v1/models", headers={"Sec-WebSocket-Protocol": shown})
    assert plain.status_code == 401 and error_of(plain)["code"] == "missing_api_key"


@pytest.mark.parametrize("header", ["Authorization", "X-API-Key"])
def test_a_key_not_in_utf8_or_ascii_is_a_wrong_key(secured: Server, header: str) -> None:
    """Issue 36: `\\xff` arrives as a surrogate escape, which UTF-8 cannot encode: comparing it with the key was a 500
    with a traceback, before authentication. It is a wrong key like any other."""
    before = len(secured.log)
    for key in (b"\xff", KEY.encode() + b"\xff", "é".encode()):
        value = b"Bearer " + key if header == "Authorization" else key
        response = httpx.get(secured.http_url + "/v1/models", headers={header: value})
        assert response.status_code == 401 and error_of(response)["code"] == "invalid_api_key", response.text
    time.sleep(0.2)
    assert_clean_log(secured.log[before:])


def test_the_openai_sdk_with_the_key_works_end_to_end(secured: Server) -> None:
    client = openai.OpenAI(base_url=secured.http_url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    with SPOKEN.open("rb") as file:
        result = client.audio.transcriptions.create(file=file, model="whisper-1")
    assert wer([SPOKEN_TEXT], [result.text]) < 0.2, result.text
    speech = client.audio.speech.create(
        model="tts-1", voice="alloy", input="The door is locked.", response_format="wav"
    )
    assert speech.content[:4] == b"RIFF" and len(speech.content) > 24000

    wrong = openai.OpenAI(base_url=secured.http_url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        wrong.models.list()
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"


def test_health_and_the_docs_stay_open(secured: Server) -> None:
    assert httpx.get(secured.http_url + "/health").json()["asr"]["tiny.en"]["state"] == "loaded"
    assert httpx.head(secured.http_url + "/health").status_code == 200
    assert httpx.get(secured.http_url + "/api/docs").status_code == 200
    assert httpx.get(secured.http_url + "/api/docs/swagger-ui.css").status_code == 200
    spec = httpx.get(secured.http_url + "/api/openapi.json").json()
    # The description says how to authenticate, and what is open.
    assert set(spec["components"]["securitySchemes"]) == {"bearer", "apiKey", "basic"}
    assert spec["security"] == [{"bearer": []}, {"apiKey": []}, {"basic": []}]
    assert spec["paths"]["/health"]["get"]["security"] == []
    assert "401" in spec["paths"]["/v1/audio/speech"]["post"]["responses"]
    assert "security" not in spec["paths"]["/v1/audio/speech"]["post"]


OPEN = {"/health", "/api/docs", "/api/docs/{asset}", "/api/openapi.json", "/", "/rtc", "/realtime", "/static/{asset}"}


def test_every_registered_route_but_the_open_ones_needs_credentials(secured: Server) -> None:
    """Taken from the router, so a new route cannot slip by; the open ones are the documented few."""
    assert OPEN == security.OPEN_RESOURCES
    routes = openapi.registered(http_app(Settings.from_args(["--cors-origin", ALLOWED], environ={})))
    assert len(routes) > 20
    with httpx.Client(base_url=secured.http_url, timeout=30) as http:
        for method, path in sorted(routes):
            url = re.sub(r"\{[^}]+\}", "x", path)
            response = http.request(method.upper(), url)
            if path in OPEN:
                assert response.status_code != 401, (method, path)
            else:
                assert response.status_code == 401, (method, path, response.status_code)
                assert challenges(response) == ["Bearer", "Basic"], (method, path)


def test_secrets_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every comparison with the key, user or password goes through hmac.compare_digest (timing is too noisy
    to measure in CI)."""
    compared: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def spy(given: bytes, expected: bytes) -> bool:
        compared.append((given, expected))
        return compare(given, expected)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    creds = security.Credentials(KEY, USER, PASSWORD)
    assert creds.accepts(CIMultiDictProxy(CIMultiDict({"X-API-Key": KEY})))
    assert not creds.accepts(CIMultiDictProxy(CIMultiDict({"Authorization": "Bearer nope"})))
    shown = f"realtime, {security.KEY_SUBPROTOCOL}{KEY}"
    assert creds.accepts(CIMultiDictProxy(CIMultiDict({"Upgrade": "websocket", "Sec-WebSocket-Protocol": shown})))
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert creds.accepts(CIMultiDictProxy(CIMultiDict({"Authorization": basic})))
    assert {expected for _, expected in compared} == {KEY.encode(), USER.encode(), PASSWORD.encode()}


def spooled(server: Server, spool: Path) -> list[str]:
    """Files in the server's TMPDIR, and files it holds open there (deleted or not)."""
    held = []
    for fd in Path(f"/proc/{server.process.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(spool)):
            held.append(target)
    return [str(path) for path in spool.rglob("*")] + held


async def test_uploads_leave_nothing_in_the_temp_dir(secured: Server, spool: Path) -> None:
    """Whole, broken and abandoned uploads: afterwards the TMPDIR is empty and no file there is held open."""
    already = set(spooled(secured, spool))  # what the libraries keep there from startup
    key = {"X-API-Key": KEY}
    wav = (CORPUS / "LJ001-0004.flac").read_bytes()
    async with httpx.AsyncClient(base_url=secured.http_url, headers=key, timeout=120) as http:
        ok = await http.post("/v1/audio/transcriptions", files={"file": ("a.flac", wav)}, data={"model": "whisper-1"})
        assert ok.status_code == 200, ok.text
        bad = await http.post("/api/asr", files={"audio_file": ("a.wav", b"RIFF not audio" * 1000)})
        assert bad.status_code in (400, 415) and bad.json()["error"]["code"] == "bad-audio", bad.text
        clone = await http.post("/api/tts", params={"speaker": "../x"}, files={"audio_file": ("a.flac", wav)})
        assert clone.status_code == 400, clone.text
    # An upload abandoned half-way: the client says 1 MB and leaves after 100 kB.
    boundary = "fuzzboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(secured.host, secured.http_port)
    writer.write(
        (
            f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 1000000\r\n\r\n"
        ).encode()
        + head
        + bytes(100_000)
    )
    await writer.drain()
    await asyncio.sleep(0.5)
    writer.close()
    for _ in range(50):  # the server notices the close
        if not set(spooled(secured, spool)) - already:
            break
        await asyncio.sleep(0.1)
    assert not set(spooled(secured, spool)) - already


# -- Basic auth, as a Willow device sends it ---------------------------------------------


def device_url(server: Server, password: str) -> str:
    """What a user types into Willow's settings: user:password@ in the URL."""
    return f"http://{USER}:{quote(password, safe='')}@{server.host}:{server.http_port}/api/willow?stats=true"


async def test_a_willow_device_authenticates_with_basic_from_its_url(secured: Server) -> None:
    pcm = load_audio(SPOKEN)
    answer = await esp32_post(secured, "stats=true", pcm.audio, "pcm", pcm.seconds / 2, httpx.BasicAuth(USER, PASSWORD))
    assert answer.status == 200, answer.body
    assert wer([SPOKEN_TEXT], [answer.json()["text"]]) < 0.2, answer.body
    refused = await esp32_post(secured, "", pcm.audio[:6400], "pcm", 0.0, httpx.BasicAuth(USER, "wrong"))
    assert refused.status == 401 and refused.json()["error"]["code"] == "invalid_api_key"


async def test_the_saved_recording_needs_credentials_too(secured: Server) -> None:
    """What a device said is no public file on a server with credentials."""
    pcm = load_audio(SPOKEN)
    saved = await esp32_post(secured, "save_audio=true", pcm.audio, "pcm", 0.0, httpx.BasicAuth(USER, PASSWORD))
    assert saved.status == 200, saved.body
    async with httpx.AsyncClient(base_url=secured.http_url, timeout=30) as client:
        for method in ("GET", "HEAD"):
            refused = await client.request(method, "/audio/willow.wav")
            assert refused.status_code == 401 and challenges(refused) == ["Bearer", "Basic"], method
            assert refused.headers["content-type"] != "audio/x-wav", method
        for credentials in ({"auth": (USER, PASSWORD)}, {"headers": {"Authorization": f"Bearer {KEY}"}}):
            answer = await client.get("/audio/willow.wav", **credentials)  # type: ignore[arg-type]
            assert answer.status_code == 200 and answer.headers["content-type"] == "audio/x-wav", credentials
            assert len(decode(answer.content)[0]) * pcm.width == len(pcm.audio)  # what the device sent


async def test_a_wrong_password_is_401(secured: Server) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        for password in (PASSWORD + "x", "s3cret"):
            response = await client.post(device_url(secured, password), content=b"\0" * 3200, headers=DEVICE)
            assert response.status_code == 401 and error_of(response)["code"] == "invalid_api_key", response.text
            assert "Basic" in challenges(response)
        # The Basic password is no API key, and the key is no Basic password.
        as_key = await client.get(secured.http_url + "/v1/models", headers={"X-API-Key": PASSWORD})
        assert as_key.status_code == 401
        as_password = await client.get(secured.http_url + "/v1/models", auth=(USER, KEY))
        assert as_password.status_code == 401


# -- CORS ------------------------------------------------------------------------------


def preflight(server: Server, origin: str) -> httpx.Response:
    return httpx.options(
        server.http_url + "/v1/audio/speech",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )


def test_a_preflight_from_an_allowed_origin_needs_no_key(secured: Server) -> None:
    response = preflight(secured, ALLOWED)
    assert response.status_code == 204, response.text
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "authorization" in response.headers["access-control-allow-headers"].lower()


def test_another_origin_gets_no_cors_headers(secured: Server) -> None:
    response = preflight(secured, "https://evil.example.com")
    assert response.status_code != 204 and "access-control-allow-origin" not in response.headers
    answer = httpx.get(
        secured.http_url + "/v1/models", headers={"Origin": "https://evil.example.com", "X-API-Key": KEY}
    )
    assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


def test_answers_and_errors_carry_cors_headers_for_an_allowed_origin(secured: Server) -> None:
    origin = {"Origin": ALLOWED}
    ok = httpx.get(secured.http_url + "/v1/models", headers=origin | {"X-API-Key": KEY})
    refused = httpx.get(secured.http_url + "/v1/models", headers=origin)
    bad = httpx.post(secured.http_url + "/v1/audio/speech", headers=origin | {"X-API-Key": KEY}, json={})
    for response in (ok, refused, bad):
        assert response.headers["access-control-allow-origin"] == ALLOWED, response.text
        assert "origin" in response.headers["vary"].lower()
    assert (ok.status_code, refused.status_code, bad.status_code) == (200, 401, 400)
    # A web app can read the 401's challenge: the header is exposed.
    assert "www-authenticate" in refused.headers["access-control-expose-headers"].lower()
    # A streamed answer too, and the web app can read X-Cache.
    with httpx.stream(
        "GET", secured.http_url + "/api/tts", params={"text": "Hello there."}, headers=origin | {"X-API-Key": KEY}
    ) as speech:
        speech.read()
    assert speech.status_code == 200 and speech.headers["transfer-encoding"] == "chunked"
    assert speech.headers["access-control-allow-origin"] == ALLOWED
    assert "x-cache" in speech.headers["access-control-expose-headers"].lower()


def test_only_an_allowed_origin_may_post(secured: Server) -> None:
    """A web app of --cors-origin posts as before; a page of another origin is refused before the key is checked,
    so even a key it somehow holds does nothing."""
    speech = {"model": "tts-1", "voice": "alloy", "input": "Hello there.", "response_format": "wav"}
    for origin, status in ((ALLOWED, 200), ("https://evil.example.com", 403)):
        answer = httpx.post(
            secured.http_url + "/v1/audio/speech", json=speech, headers={"Origin": origin, "X-API-Key": KEY}
        )
        assert answer.status_code == status, answer.text
    assert error_of(answer)["code"] == "origin_not_allowed"


def test_the_log_shows_the_settings_with_the_key_and_password_hidden(secured: Server) -> None:
    (line,) = [line for line in secured.log.splitlines() if "Settings: " in line]
    assert "--api-key *** " in line and "--api-password ***" in line and f"--api-user {USER}" in line, line
    assert f"--cors-origin {ALLOWED}" in line, line


# -- HTTPS -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls(data_dir: Path, tmp_path_factory: pytest.TempPathFactory, authority: trustme.CA) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("tls")
    cert = authority.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(workdir / "cert.pem"))
    cert.private_key_pem.write_to_path(str(workdir / "key.pem"))
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en"]
    running = start_server([*args, "--ssl-cert", "cert.pem", "--ssl-key", "key.pem"], workdir)
    yield running
    assert_stops_cleanly(running)


def trusting(authority: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return context


def test_https_with_a_verified_certificate(tls: Server, authority: trustme.CA) -> None:
    base = f"https://localhost:{tls.http_port}"
    assert f"HTTP API listening on https://127.0.0.1:{tls.http_port}" in tls.log
    with httpx.Client(verify=trusting(authority), timeout=120) as http:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, http_client=http)
        with SPOKEN.open("rb") as file:
            result = client.audio.transcriptions.create(file=file, model="whisper-1")
        assert wer([SPOKEN_TEXT], [result.text]) < 0.2, result.text
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(base + "/health")  # a client that does not trust the certificate's issuer
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{tls.http_port}/health")  # no plain HTTP on that port


async def test_aiohttp_talks_https_too(tls: Server, authority: trustme.CA) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"https://localhost:{tls.http_port}/health", ssl=trusting(authority)) as response:
            assert response.status == 200 and (await response.json())["status"] == "ok"


def test_a_missing_certificate_stops_the_server_with_a_clear_message(tmp_path: Path) -> None:
    running = start_server(["--ssl-cert", "nowhere.pem", "--asr-model", "tiny.en"], tmp_path, wait=False)
    assert running.process.wait(30) == 1
    assert "--ssl-cert nowhere.pem: no such file" in running.log
    assert "Traceback" not in running.log


def test_certificate_files_are_checked_before_use(tmp_path: Path, authority: trustme.CA) -> None:
    cert, other = authority.issue_cert("localhost"), authority.issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    other.private_key_pem.write_to_path(str(tmp_path / "other-key.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "both.pem"))
    assert server_ssl(tmp_path / "both.pem", None) is not None  # the key may sit in the certificate file
    assert server_ssl(None, None) is None
    with pytest.raises(StartupError, match="not a PEM certificate with its matching private key"):
        server_ssl(tmp_path / "cert.pem", tmp_path / "other-key.pem")
    with pytest.raises(StartupError, match="--ssl-key .*missing.pem: no such file"):
        server_ssl(tmp_path / "cert.pem", tmp_path / "missing.pem")
    with pytest.raises(StartupError, match="not a PEM certificate"):
        server_ssl(tmp_path / "cert.pem", None)  # no key anywhere


# -- what a client sent, in answers and the log ----------------------------------------------------------------------

BIG = "v" * 60_000  # under the JSON limit (64 KiB): it reaches the check that names it


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("POST", "/v1/audio/speech", {"json": {"model": "tts-1", "input": "Hi.", "voice": BIG}}, 400),
        ("POST", "/v1/audio/speech", {"json": {"model": BIG, "input": "Hi.", "voice": "alloy"}}, 404),
        ("POST", "/v1/audio/speech", {"json": {"model": "tts-1", "input": "Hi.", "response_format": BIG}}, 400),
        ("GET", "/api/tts", {"params": {"text": "Hi.", "language": BIG[:4000]}}, 404),  # a request line: 8 KB at most
        ("POST", "/v1/audio/transcriptions", {"files": {"file": ("a.wav", b"RIFF"), "model": (None, BIG)}}, 404),
        (
            "POST",
            "/v1/audio/transcriptions",
            {"files": {"file": ("a.wav", b"RIFF"), "timestamp_granularities[]": (None, BIG)}},
            400,
        ),
        ("GET", "/v1/models/" + BIG[:4000], {}, 404),
        ("GET", "/v1/%0a2026-12-04 INFO forged: line%0d", {}, 404),
    ],
    ids=["voice", "speech-model", "format", "language", "asr-model", "granularities", "model-path", "newline-path"],
)
def test_a_client_value_is_quoted_not_echoed(
    server: Server, method: str, path: str, kwargs: dict[str, object], status: int
) -> None:
    """Values come back, and go to the log, cut short with their control characters escaped (values.quote): 60 KB of
    voice name once made a 60,075-character error message, and a path's %0a forged a log line of its own."""
    logged = server.log_path.stat().st_size
    response = httpx.request(method, server.http_url + path, timeout=60, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status, response.text[:300]
    assert len(response.json()["error"]["message"]) < 400, response.text[:500]
    with open(server.log_path, "rb") as log:
        log.seek(logged)
        written = log.read().decode()
    assert len(written) < 2000, written[:500]
    assert "\n2026-12-04 INFO forged" not in written and "\r" not in written, written  # no line of its own
