"""Request bodies an attacker shapes (issue 36): a form's parts are taken only as UTF-8 text or plain files, and a
body over its route's limit is refused before it is read, on the shared server."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import select
import socket
import time
from pathlib import Path

import httpx
import pytest
from helpers import CORPUS, Server, assert_clean_log

from http_api.bodies import MAX_PARTS
from http_api.openai_speech import MAX_FORM_BYTES
from rtc.signalling import MAX_OFFER

BOUNDARY = "wis-boundary"
FORM = f"multipart/form-data; boundary={BOUNDARY}"
AUDIO = (CORPUS / "LJ001-0004.flac").read_bytes()  # 5.1 s
MB = 1_000_000
BODY_BYTES = 25 * MB  # what the audit sent: just under --max-upload-mb's default (25 MiB)
# What a client may have sent before a refusal reaches it: the sockets' buffers on loopback, which grow to megabytes.
IN_FLIGHT = 8 * MB


def part(name: str, value: bytes, *headers: str, filename: str | None = None) -> bytes:
    disposition = f'Content-Disposition: form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return "\r\n".join((f"--{BOUNDARY}", disposition, *headers, "", "")).encode() + value + b"\r\n"


def form(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def error_of(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def transcribe(server: Server, body: bytes) -> httpx.Response:
    headers = {"Content-Type": FORM}
    return httpx.post(server.http_url + "/v1/audio/transcriptions", content=body, headers=headers, timeout=120)


# -- what a form's parts declare -------------------------------------------------------------------


async def test_a_punycode_field_is_refused_at_once_and_the_loop_stays_free(server: Server) -> None:
    """aiohttp decoded a text part with the charset it declared, on the event loop; punycode is quadratic: a 1 MiB
    field took 16 s, and /health waited as long. Now only UTF-8 is taken: a 400 naming the field at once."""
    body = form(
        part("prompt", b"a" * (1 << 20), "Content-Type: text/plain; charset=punycode"),
        part("file", AUDIO, filename="a.flac"),
    )
    async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as http:

        async def attack() -> tuple[httpx.Response, float]:
            started = time.monotonic()
            answer = await http.post("/v1/audio/transcriptions", content=body, headers={"Content-Type": FORM})
            return answer, time.monotonic() - started

        async def health() -> float:
            await asyncio.sleep(0.2)  # the attack has arrived
            started = time.monotonic()
            (await http.get("/health")).raise_for_status()
            return time.monotonic() - started

        (answer, took), waited = await asyncio.gather(attack(), health())
    assert answer.status_code == 400, answer.text
    error = error_of(answer)
    assert error["param"] == "prompt" and "'punycode'" in str(error["message"]), error
    assert took < 3 and waited < 1, f"the attack took {took:.1f} s, /health waited {waited:.1f} s"


@pytest.mark.parametrize("declared", ["charset=x-no-such-charset", "charset=utf-16", "charset=utf-8"])
def test_a_charset_other_than_utf8_is_a_400_and_no_error_in_the_log(server: Server, declared: str) -> None:
    """An unknown charset was a 500 with a traceback (LookupError); a known one not UTF-8 decoded as the client
    said. Either is a 400 naming the field now; UTF-8 said or not, the field is taken."""
    before = len(server.log)
    field = part("model", b"tiny.en", f"Content-Type: text/plain; {declared}")
    answer = transcribe(server, form(field, part("language", b"de"), part("file", AUDIO, filename="a.flac")))
    assert answer.status_code == 400, answer.text
    param = error_of(answer)["param"]
    assert param == ("language" if declared == "charset=utf-8" else "model"), answer.text  # tiny.en: English only
    time.sleep(0.2)
    assert_clean_log(server.log[before:])


def test_a_compressed_part_is_refused_before_it_is_inflated(server: Server) -> None:
    """A decompression bomb: 50 MB of zeros in 50 kB, which aiohttp inflated into a temporary file."""
    bomb = gzip.compress(bytes(50 * MB))
    body = form(part("file", bomb, "Content-Encoding: gzip", filename="a.wav"))
    started = time.monotonic()
    answer = transcribe(server, body)
    took = time.monotonic() - started
    assert answer.status_code == 400, answer.text
    error = error_of(answer)
    assert error["param"] == "file" and "'gzip'" in str(error["message"]) and took < 2, (error, took)


@pytest.mark.parametrize(("encoding", "value"), [("base64", b"SGVsbG8="), ("quoted-printable", b"Hello=3D")])
def test_a_part_in_a_transfer_encoding_is_refused(server: Server, encoding: str, value: bytes) -> None:
    """aiohttp decoded these; no client of ours sends them."""
    field = part("prompt", value, f"Content-Transfer-Encoding: {encoding}")
    answer = transcribe(server, form(field, part("file", AUDIO, filename="a.flac")))
    assert answer.status_code == 400, answer.text
    assert error_of(answer)["param"] == "prompt", answer.text


def test_a_form_of_too_many_parts_is_refused(server: Server) -> None:
    """aiohttp took a thousand fields; no request of ours has more than a dozen."""
    parts = [part("unknown", b"x") for _ in range(10 * MAX_PARTS)]
    answer = transcribe(server, form(part("model", b"tiny.en"), part("file", AUDIO, filename="a.flac"), *parts))
    assert answer.status_code == 400, answer.text
    error = error_of(answer)
    assert error["code"] == "bad_multipart" and str(MAX_PARTS) in str(error["message"]), error


def test_ordinary_forms_still_work(server: Server) -> None:
    """Fields with and without a content type or charset, as clients send them; a file with no content type."""
    body = form(
        part("model", b"tiny.en"),
        part("language", b"en", "Content-Type: text/plain; charset=UTF-8"),
        part("response_format", b"json", "Content-Type: text/plain"),
        part("file", AUDIO, filename="a.flac"),
    )
    answer = transcribe(server, body)
    assert answer.status_code == 200 and "block books" in answer.json()["text"].lower(), answer.text


def held_temporary_files(server: Server) -> set[str]:
    """The deleted files the server holds open: temporary files (their names go as they are made)."""
    held = set()
    for fd in Path(f"/proc/{server.process.pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            if (target := os.readlink(fd)).endswith(" (deleted)"):
                held.add(target)
    return held


def test_a_file_on_disk_is_closed_when_its_request_ends(server: Server) -> None:
    """A file part past a megabyte is spooled to a temporary file; it is closed (and so gone) with the request."""
    before = held_temporary_files(server)
    body = form(part("file", bytes(3 * MB), filename="a.wav"))
    head = (
        f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: {FORM}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((server.host, server.http_port), timeout=30) as sock:
        sock.sendall(head + body[:-100])
        deadline = time.monotonic() + 10
        while not held_temporary_files(server) - before:
            assert time.monotonic() < deadline, "the upload never went to disk"
            time.sleep(0.05)
        sock.sendall(body[-100:])
        assert sock.recv(100).split(b" ")[1] in (b"400", b"415")  # zeros are no audio
    deadline = time.monotonic() + 10
    while held_temporary_files(server) - before:
        assert time.monotonic() < deadline, f"still held: {held_temporary_files(server) - before}"
        time.sleep(0.05)


# -- bodies over the route's limit ------------------------------------------------------------------


def send_until_answered(server: Server, path: str, head: bytes, content_type: str, chunked: bool) -> tuple[int, bytes]:
    """POST `head` and then zeros, BODY_BYTES in all, as fast as the server takes them and until it answers; the
    bytes sent by then and the answer."""
    sock = socket.create_connection((server.host, server.http_port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {BODY_BYTES}"
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n".encode())
    sent, piece = 0, bytes(64 * 1024)
    with sock:
        while sent < BODY_BYTES:
            data = head if sent == 0 else piece[: BODY_BYTES - sent]
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            sent += len(data)
            patience = 10 if sent == len(head) and not chunked else 0  # a declared length: answered at once
            if select.select([sock], [], [], patience)[0]:
                break
        if chunked and sent == BODY_BYTES:
            sock.sendall(b"0\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            received = sock.recv(65536)
            assert received, f"closed after {answer!r}"
            answer += received
    return sent, answer


def _length(answer: bytes) -> int:
    headers = answer.partition(b"\r\n\r\n")[0].decode().lower().split("\r\n")
    return next(int(line.partition(":")[2]) for line in headers if line.startswith("content-length:"))


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
@pytest.mark.parametrize(
    ("path", "limit", "param"),
    [("/api/rtc/asr", MAX_OFFER, "sdp"), ("/v1/audio/speech", MAX_FORM_BYTES, "reference_audio")],
)
def test_a_body_over_the_limit_is_413_before_it_is_read(
    server: Server, path: str, limit: int, param: str, chunked: bool
) -> None:
    """A 25 MB offer was read whole (RSS +36 MB) before its 400 for being over 64 KiB, and a 25 MB multipart speech
    request (+24 MB) before its recording was found too large. A declared length over the limit is answered before
    the body is sent; a chunked body as soon as it passes the limit."""
    if path == "/api/rtc/asr":
        content_type, head = "application/json", b'{"type": "offer", "sdp": "'
    else:
        content_type = FORM
        head = part("input", b"Hello.") + part("reference_audio", b"", filename="voice.wav")[:-2]
    before = server.rss_mb()
    sent, answer = send_until_answered(server, path, head, content_type, chunked)
    grown = server.rss_mb() - before
    status = answer.split(b" ", 2)[1]
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert status == b"413" and error["param"] == param, answer
    if chunked:
        assert sent < limit + IN_FLIGHT, f"{sent} bytes sent before the answer"
    else:
        assert sent == len(head), f"{sent} bytes sent before the answer"
    assert grown < 10, f"the server's memory grew by {grown:.0f} MB"
