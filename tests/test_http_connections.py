"""HTTP connections are capped (--max-http-connections) and shared by address, on a real server: a lone address may
hold every one, and an idle keep-alive, or one of an address holding more, makes room for a newcomer.

Each connection here is a real socket from a loopback address of its own (127.0.0.x, 127.0.1.x: hosts of their own,
as far as the server can tell).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from helpers import CORPUS, Server, assert_stops_cleanly, start_server

from wyoming_wis.shares import IDLE_AFTER_SECONDS

LIMIT = 8  # --max-http-connections
HEALTH = b"GET /health HTTP/1.1\r\nHost: wis\r\n\r\n"
ANSWER_S = 10.0  # for an answer that comes at once; generous for a loaded machine


@pytest.fixture(scope="module")
def capped(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--max-http-connections", str(LIMIT)]
    running = start_server(args, tmp_path_factory.mktemp("capped"))
    yield running
    assert_stops_cleanly(running)


def connect(server: Server, source: str) -> socket.socket:
    return socket.create_connection((server.host, server.http_port), timeout=ANSWER_S, source_address=(source, 0))


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of one answer on `sock` (with a Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(status.split()[1]), headers, body


def held(server: Server, source: str, stack: ExitStack) -> socket.socket:
    """A keep-alive connection from `source` that has been answered once: the server holds it, idle."""
    sock = stack.enter_context(connect(server, source))
    sock.sendall(HEALTH)
    assert answer(sock)[0] == 200
    return sock


def refused(server: Server, source: str) -> dict[str, object]:
    """A connection from `source` that the server answers 503 as it connects, before reading a byte, and closes."""
    with connect(server, source) as sock:
        status, headers, body = answer(sock)
        assert (status, headers["connection"]) == (503, "close"), (status, headers, body)
        assert sock.recv(1) == b""  # closed
    return json.loads(body)["error"]


def closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (a request on it is answered with nothing)."""
    try:
        sock.sendall(HEALTH)
        return sock.recv(1) == b""
    except OSError:
        return True


def test_a_lone_address_holds_every_connection_until_another_wants_one(capped: Server) -> None:
    with ExitStack() as stack:
        first = [held(capped, "127.0.0.1", stack) for _ in range(LIMIT)]  # today's main: 4, half, and no more
        error = refused(capped, "127.0.0.1")  # its own are not idle long enough to give their places up
        assert error["code"] == "busy" and error["type"] == "server_error", error
        assert f"all {LIMIT} (--max-http-connections) are in use, {LIMIT} of them from 127.0.0.1" in str(
            error["message"]
        ), error
        # Another address is served at once, in the place of one of them (none has a request in progress).
        newcomer = held(capped, "127.0.0.2", stack)
        gone = [sock for sock in first if closed(sock)]
        assert len(gone) == 1, f"{len(gone)} of its connections closed"
        for sock in [newcomer, *(sock for sock in first if sock not in gone)]:  # still open, and still served
            sock.sendall(HEALTH)
            assert answer(sock)[0] == 200
    assert "Closing an HTTP connection of 127.0.0.1: Closed to make room for another client" in capped.log
    assert capped.log.count("Refusing an HTTP connection") <= 3  # a flood of refusals is no flood of log lines


def test_two_addresses_keeping_every_connection_open_lock_no_one_out(capped: Server) -> None:
    """Issue 49's lock-out: two addresses each keep half the connections, renewed with a request now and then. Idle
    between their requests, they make room for anyone else: /health and a transcription from a third address are
    answered (on today's main, 503 for as long as the two kept them)."""
    with ExitStack() as stack:
        hogs = [held(capped, f"127.0.1.{1 + n % 2}", stack) for n in range(LIMIT)]
        time.sleep(IDLE_AFTER_SECONDS)
        transport = httpx.HTTPTransport(local_address="127.0.0.3")
        with httpx.Client(base_url=capped.http_url, transport=transport, timeout=60) as other:
            assert other.get("/health").status_code == 200
            files = {"file": ("speech.flac", (CORPUS / "LJ001-0004.flac").read_bytes())}
            upload = other.post("/v1/audio/transcriptions", files=files, data={"model": "whisper-1"})
            assert upload.status_code == 200 and "block books" in upload.json()["text"].lower(), upload.text
        assert 1 <= sum(closed(sock) for sock in hogs) <= 2
