"""Request bodies an attacker shapes (issue 36): a form's parts are taken only as UTF-8 text or plain files, and a
body over its route's limit is refused before it is read, on the shared server. What a form holds (issue 49) is
counted in the memory budget as it arrives, at most a megabyte of it in memory: on a server of its own with a small
budget."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import CORPUS, Server, assert_clean_log, start_server

from http_api.bodies import FORM_MEMORY_BYTES, MAX_PARTS, MAX_TEXT_BYTES
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


# -- what a form holds ------------------------------------------------------------------------------


def test_text_fields_past_a_forms_memory_are_a_413_and_files_make_room_for_text(server: Server) -> None:
    """At most FORM_MEMORY_BYTES of a form is in memory: text fields past it in all are a 413 naming the limit; a
    file kept in memory goes to disk to make room for text that comes after it."""
    field = b"a" * MAX_TEXT_BYTES
    fields = [part(f"unknown{n}", field) for n in range(FORM_MEMORY_BYTES // MAX_TEXT_BYTES + 1)]
    answer = transcribe(server, form(*fields, part("file", AUDIO, filename="a.flac")))
    assert answer.status_code == 413, answer.text
    error = error_of(answer)
    assert error["code"] == "request_entity_too_large" and str(FORM_MEMORY_BYTES) in str(error["message"]), error
    padding = [part(f"unknown{n}", field) for n in range(FORM_MEMORY_BYTES // MAX_TEXT_BYTES - 1)]
    answer = transcribe(server, form(part("file", AUDIO, filename="a.flac"), part("model", b"tiny.en"), *padding))
    assert answer.status_code == 200 and "block books" in answer.json()["text"].lower(), answer.text


BUDGET_MB = 32  # the budgeted server's --memory-budget-mb; one address holds at most half of it once others want some
ATTACKER = "127.0.1.1"
NEIGHBOUR = "127.0.0.2"  # another host of the household, uploading as the attack comes
PROBE = "127.0.0.3"
FORMS = 24  # the attacker's uploads at once, each of PARTS_MB file parts of exactly 1 MiB that never end
PARTS_MB = 8  # 192 MiB in all: all of it was held in memory
RSS_SLACK_MB = 16  # the server may grow by its budget and this (sockets' buffers, the allocator's own)
STALL_S = 0.25  # /health answered within this while the attack runs
# Times /health from a process of its own (this one is busy sending the attack) until its stdin closes.
HEALTH_PROBE = """
import select, sys, time, httpx
url, source = sys.argv[1:]
with httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=source), timeout=30) as http:
    http.get("/health").raise_for_status()
    print("ready", flush=True)
    while not select.select([sys.stdin], [], [], 0.05)[0]:
        started = time.monotonic()
        http.get("/health").raise_for_status()
        print(time.monotonic() - started, flush=True)
"""


@pytest.fixture(scope="module")
def budgeted(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--memory-budget-mb", str(BUDGET_MB)]
    running = start_server(args, tmp_path_factory.mktemp("budgeted"))
    yield running
    running.stop()
    assert_clean_log(running.log)


class PeakRss:
    """The server's largest resident size while the block runs, sampled every 10 ms in a thread of its own."""

    def __init__(self, server: Server) -> None:
        self.server, self.peak, self._done = server, 0.0, threading.Event()

    def __enter__(self) -> PeakRss:
        self.before = self.peak = self.server.rss_mb()
        self._thread = threading.Thread(target=self._sample)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, self.server.rss_mb())

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


class HealthProbe:
    """The longest /health took, from PROBE, while the block runs."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def __enter__(self) -> HealthProbe:
        argv = [sys.executable, "-c", HEALTH_PROBE, self.server.http_url, PROBE]
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None and self._process.stdout.readline() == "ready\n"
        return self

    def __exit__(self, *_: object) -> None:
        out, _ = self._process.communicate("", timeout=60)  # stdin closed: it stops
        self.seconds = [float(line) for line in out.split()]
        assert self._process.returncode == 0 and self.seconds, out


def held_on_disk_mb(server: Server) -> float:
    """What the server's deleted (temporary) files hold on disk."""
    held = 0
    for fd in Path(f"/proc/{server.process.pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(fd).endswith(" (deleted)"):
                held += fd.stat().st_size
    return held / 2**20


class Upload:
    """A form posted over a connection of its own from `source`, a part at a time; its answer read as it comes."""

    def __init__(self, server: Server, source: str, length: int) -> None:
        self.server, self.source, self.length = server, source, length
        self.status: int | None = None
        self.body: dict[str, object] = {}

    async def open(self) -> Upload:
        self._reader, self._writer = await asyncio.open_connection(
            self.server.host, self.server.http_port, local_addr=(self.source, 0)
        )
        self._writer.write(
            f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: {FORM}\r\n"
            f"Content-Length: {self.length}\r\n\r\n".encode()
        )
        self.answered = asyncio.create_task(self._answer())
        return self

    async def send(self, data: bytes) -> bool:
        """Send `data` unless the server has answered; whether it was sent."""
        if self.answered.done():
            return False
        with contextlib.suppress(ConnectionError):  # answered and closed meanwhile
            self._writer.write(data)
            await self._writer.drain()
        return not self.answered.done()

    @property
    def error(self) -> dict[str, object]:
        return self.body.get("error") or {}  # type: ignore[return-value]

    async def _answer(self) -> None:
        head = (await self._reader.readuntil(b"\r\n\r\n")).decode()
        self.status = int(head.split()[1])
        length = next(int(line.split(":")[1]) for line in head.lower().split("\r\n") if "content-length" in line)
        self.body = json.loads(await self._reader.readexactly(length))

    def close(self) -> None:
        self.answered.cancel()
        self._writer.close()


def neighbour_transcribes(server: Server) -> httpx.Response:
    """A transcription from the neighbour's address."""
    transport = httpx.HTTPTransport(local_address=NEIGHBOUR)
    with httpx.Client(base_url=server.http_url, transport=transport, timeout=60) as http:
        return http.post("/v1/audio/transcriptions", files={"file": ("a.flac", AUDIO)}, data={"model": "tiny.en"})


def budget_used(server: Server) -> float:
    return server.metric("wis_memory_budget_used_bytes") or 0.0


async def test_a_forms_parts_are_counted_in_the_budget_as_they_arrive(budgeted: Server) -> None:
    """Issue 49: 96 uploads of 24 file parts of exactly 1 MiB, never ended, held 2.6 GB in memory for as long as they
    lasted (aiohttp kept each part in memory up to 1 MiB), with no refusal and nothing in the log. Now every byte of
    a form is counted in the memory budget as it arrives, on disk or in memory, and at most 1 MiB of a form is in
    memory: the attacker's uploads past its share are refused (429, in the envelope, and the log says so), the
    server grows by no more than its budget, /health keeps answering, and a neighbour's upload, begun before the
    attack and finished during it, is transcribed, as is a new one."""
    assert neighbour_transcribes(budgeted).status_code == 200  # what a first transcription allocates, allocated
    megabyte = bytes(2**20)
    attack_parts = [part(f"file{n}", megabyte, filename=f"{n}.wav") for n in range(PARTS_MB)]
    length = len(form(*attack_parts))  # declared, never all sent: the closing boundary never comes
    audio, rest = part("file", AUDIO, filename="a.flac"), form(part("model", b"tiny.en"))
    log_before = len(budgeted.log)

    async def attack(upload: Upload) -> None:
        for data in attack_parts:
            if not await upload.send(data):
                return

    with PeakRss(budgeted) as rss, HealthProbe(budgeted) as health:
        neighbour = await Upload(budgeted, NEIGHBOUR, len(audio) + len(rest)).open()
        uploads: list[Upload] = []
        try:
            await neighbour.send(audio)  # the neighbour's recording is on its way; the rest of its form comes later
            deadline = time.monotonic() + 5
            while not (counted := budget_used(budgeted)) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            uploads = [await Upload(budgeted, ATTACKER, length).open() for _ in range(FORMS)]
            await asyncio.gather(*(attack(upload) for upload in uploads))
            used, steady = -1.0, 0  # until all that was sent is taken in: each upload refused, or held whole
            while steady < 10:
                now = budget_used(budgeted)
                steady, used = (steady + 1 if now == used else 0), now
                await asyncio.sleep(0.1)
            on_disk = held_on_disk_mb(budgeted)
            await neighbour.send(rest)
            await asyncio.wait_for(neighbour.answered, 60)
            again = await asyncio.to_thread(neighbour_transcribes, budgeted)
            refused = [upload for upload in uploads if upload.answered.done()]
        finally:
            for upload in (neighbour, *uploads):
                upload.close()
    grown, held = rss.peak - rss.before, len(uploads) - len(refused)
    assert grown < BUDGET_MB + RSS_SLACK_MB, f"the server grew by {grown:.0f} MB (budget {BUDGET_MB} MB)"
    statuses = sorted({upload.status for upload in refused})
    assert held <= BUDGET_MB // PARTS_MB and len(refused) >= FORMS - BUDGET_MB // PARTS_MB, (held, statuses)
    assert set(statuses) <= {413, 429}, statuses
    for upload in refused:
        assert set(upload.error) == {"message", "type", "param", "code"}, upload.body
        assert upload.status != 429 or upload.error["code"] == "busy", upload.body
    refusals = [line for line in budgeted.log[log_before:].splitlines() if "--memory-budget-mb" in line]
    assert any(ATTACKER in line for line in refusals), budgeted.log[log_before:][-3000:]
    assert counted and used <= BUDGET_MB * 2**20, (counted, used)
    assert on_disk <= BUDGET_MB, f"{on_disk:.0f} MB of temporary files held"
    assert neighbour.status == 200 and "block books" in str(neighbour.body).lower(), neighbour.body
    assert again.status_code == 200 and "block books" in again.json()["text"].lower(), again.text
    assert max(health.seconds) < STALL_S, f"/health took up to {max(health.seconds):.2f} s during the attack"
    deadline = time.monotonic() + 20  # closed, the uploads give back what they held, and their files
    while budget_used(budgeted) or held_on_disk_mb(budgeted):
        assert time.monotonic() < deadline, "the uploads' share of the budget, or their files, not given back"
        await asyncio.sleep(0.1)
