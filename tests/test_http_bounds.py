"""HTTP inputs that could take the server's memory, its loop or its slots: each is refused or ended, and the server
serves on (issue 19)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote_plus

import httpx
import numpy as np
import openai
import pytest
from helpers import Server, assert_stops_cleanly, silence, start_server
from test_http_openai import decode
from test_http_willow import esp32_post

from http_api.fields import MAX_JSON_BYTES
from wyoming_wis.audio import write_wav

SEND_TIMEOUT = 2  # seconds; the server below drops a client that reads nothing of an answer for this long
# About four minutes of speech: megabytes of WAV, far more than the sockets' buffers hold.
LONG_TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the hills. " * 45)[:4000]


def error_of(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


# -- JSON bodies ---------------------------------------------------------------------


@pytest.mark.parametrize("nesting", ["[", '{"a":'])
def test_json_nested_too_deeply_is_a_400(server: Server, nesting: str) -> None:
    """json.loads raises RecursionError, not ValueError, past its depth limit: 1,000 levels on Python 3.11, 10,000 on
    3.13. The bodies go as deep as the size limit lets them."""
    closing = "]" if nesting == "[" else "}"
    depth = (MAX_JSON_BYTES - 64) // len(nesting + closing)  # 64: room for the second body's other fields
    bodies = (
        nesting * depth + closing * depth,
        '{"model": "tts-1", "input": "Hello.", "voice": ' + nesting * depth + "1" + closing * depth + "}",
    )
    for body in bodies:
        response = httpx.post(
            server.http_url + "/v1/audio/speech", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["code"] == "bad_json" and "nested too deeply" in str(error["message"]), error
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    assert client.audio.speech.create(model="tts-1", voice="alloy", input="Still here.").content  # and serving


def test_a_json_body_over_the_limit_is_413_before_it_is_parsed(server: Server) -> None:
    big = json.dumps({"model": "tts-1", "input": "Hello.", "voice": "x" * (MAX_JSON_BYTES + 1)}).encode()
    as_announced = httpx.post(
        server.http_url + "/v1/audio/speech", content=big, headers={"Content-Type": "application/json"}
    )
    chunked = httpx.post(  # no Content-Length: counted while it arrives
        server.http_url + "/v1/audio/speech",
        content=(big[at : at + 8192] for at in range(0, len(big), 8192)),
        headers={"Content-Type": "application/json"},
    )
    for response in (as_announced, chunked):
        assert response.status_code == 413, response.text
        assert str(MAX_JSON_BYTES) in str(error_of(response)["message"])


# -- Willow's saved recording --------------------------------------------------------


async def test_concurrent_saves_all_succeed_and_the_file_is_one_whole_recording(
    keeper: Server, keeper_auth: httpx.BasicAuth
) -> None:
    """Devices saving at once (on a server with credentials: only one keeps recordings): silence ends each request
    at once, so the saves meet. None fails, and what is kept is one recording, whole."""
    seconds = [30 - index / 10 for index in range(8)]  # each its own length, to tell which one was kept
    lengths = [len(silence(length).audio) for length in seconds]
    for _ in range(2):
        answers = await asyncio.gather(
            *(
                esp32_post(keeper, "save_audio=true", silence(length).audio, "pcm", 0.0, keeper_auth)
                for length in seconds
            )
        )
        assert [answer.status for answer in answers] == [200] * len(lengths), [a.body for a in answers]
        async with httpx.AsyncClient(timeout=30, auth=keeper_auth) as client:
            saved = await client.get(keeper.http_url + "/audio/willow.wav")
        heard, rate = decode(saved.content)
        assert rate == 16000 and len(heard) * 2 in lengths, len(heard)


def test_saving_from_many_threads_at_once_never_fails(tmp_path: Path) -> None:
    """The same, without the network's timing: each writer has its own temporary file (the save's codec threads
    are as many as the machine's cores, so the test above meets only as often as they allow)."""
    path = tmp_path / "willow.wav"

    def save(value: float) -> None:
        for _ in range(20):
            write_wav(path, np.full(16000, value, dtype=np.float32))

    with ThreadPoolExecutor(8) as pool:
        for done in [pool.submit(save, index / 10) for index in range(8)]:
            done.result()  # raises what the thread raised
    heard, _ = decode(path.read_bytes())
    assert len(heard) == 16000 and [p.name for p in tmp_path.iterdir()] == ["willow.wav"]


# -- clients that stop reading -------------------------------------------------------


@pytest.fixture(scope="module")
def impatient(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--send-timeout", str(SEND_TIMEOUT)]
    running = start_server(args, tmp_path_factory.mktemp("impatient"))
    yield running
    assert_stops_cleanly(running)


def speech_requests(server: Server) -> dict[str, bytes]:
    """The raw requests for a long speech answer, as the OpenAI SDK and a Willow device send them."""
    host = f"Host: {server.host}:{server.http_port}\r\n"
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": LONG_TEXT, "response_format": "wav"})
    events = json.dumps(json.loads(body) | {"stream_format": "sse"})
    return {
        name: (
            f"POST /v1/audio/speech HTTP/1.1\r\n{host}Content-Type: application/json\r\n"
            f"Content-Length: {len(content.encode())}\r\n\r\n{content}"
        ).encode()
        for name, content in (("audio", body), ("sse", events))
    } | {"willow": f"GET /api/tts?text={quote_plus(LONG_TEXT)} HTTP/1.1\r\n{host}\r\n".encode()}


@pytest.mark.parametrize("kind", ["audio", "sse", "willow"])
def test_a_client_that_stops_reading_is_dropped_and_its_synthesis_freed(impatient: Server, kind: str) -> None:
    """A small receive window and no reads: the answer backs up into the server, whose next write waits. After
    --send-timeout of that the server drops the connection, says so, and the request and its synthesis end."""
    route = "/api/tts" if kind == "willow" else "/v1/audio/speech"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: it sets the window
    sock.connect((impatient.host, impatient.http_port))
    try:
        sock.sendall(speech_requests(impatient)[kind])
        warnings_before = impatient.log.count("--send-timeout")
        deadline = time.monotonic() + 90
        while impatient.log.count("--send-timeout") == warnings_before:
            assert time.monotonic() < deadline, f"still sending to a client that reads nothing:\n{impatient.log}"
            time.sleep(0.2)
        dropped = [line for line in impatient.log.splitlines() if "--send-timeout" in line][-1]
        assert "WARNING" in dropped and f"{route!r} from 127.0.0.1" in dropped, dropped
        while impatient.metric("wis_requests_in_progress", frontend="http", route=route):
            assert time.monotonic() < deadline, "the request is still in progress"
            time.sleep(0.2)
        sock.settimeout(10)  # what the kernel still held for the client, then the end (not a TimeoutError)
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(1 << 20):
                pass
    finally:
        sock.close()
    health = httpx.get(impatient.http_url + "/health").json()
    assert all(engine["pending"] == 0 for engine in health["tts"].values()), health
    client = openai.OpenAI(base_url=impatient.http_url + "/v1", api_key="unused", max_retries=0)
    assert client.audio.speech.create(model="tts-1", voice="alloy", input="Still here.").content  # and serving
