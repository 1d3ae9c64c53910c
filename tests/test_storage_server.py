"""A server whose data dir refuses writes (read-only, or on a full disk), as its clients see it: what it would keep
is refused clearly (507), what it only caches is not kept, and everything else is served as before.

The disks are real (tests/disks.py); tests/test_storage.py has each writer in-process.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from disks import full_dir, read_only_dir, temporary_files
from helpers import CORPUS, Server, assert_clean_log, load_audio, start_server, transcribe, wer
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from wyoming_wis.discovery import SERVICE_TYPE

KEY = "storage-test-key"  # saved recordings may come to need the key; with it, this test holds either way
SPOKEN = CORPUS / "LJ001-0004.flac"  # 5.1 s
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
DISKS = {  # how a data dir refuses, and what a client is told (a pattern)
    "read-only": (read_only_dir, "Read-only file system|Permission denied"),
    "full": (full_dir, "No space left on device"),
}


@pytest.fixture(params=list(DISKS))
def refusing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A data dir that refuses writes, and the reason a client is told (a pattern)."""
    make, reason = DISKS[request.param]
    with make(tmp_path / "data") as data:
        yield data, reason


async def announcement(server: Server, timeout: float = 20) -> str:
    """The name the server announced over zeroconf, once its log says so (just after it listens)."""
    deadline = time.monotonic() + timeout
    while (announced := re.search(r"Announced (\S+) at ", server.log)) is None:
        assert time.monotonic() < deadline and server.process.poll() is None, server.log
        await asyncio.sleep(0.1)
    return announced[1]


def stored_files(data: Path) -> list[Path]:
    return sorted(path for path in data.rglob("*") if path.is_file() and path.name != ".filler")


async def test_a_data_dir_that_refuses_writes_costs_only_what_it_would_keep(
    refusing: tuple[Path, str], tmp_path: Path
) -> None:
    data, reason = refusing
    args = ["--data-dir", str(data), "--asr-model", "tiny.en", "--api-key", KEY]
    server = start_server(args, tmp_path / "server")
    pcm = load_audio(SPOKEN)
    try:
        async with httpx.AsyncClient(base_url=server.http_url, headers={"X-API-Key": KEY}, timeout=60) as http:
            saved = await http.post("/api/willow?save_audio=true", content=pcm.audio)
            assert saved.status_code == 507, saved.text  # before: 500, "Internal error; see the server log"
            error = saved.json()["error"]
            assert error["code"] == "cannot-store" and error["type"] == "server_error"
            assert re.fullmatch(f"The server's data dir cannot be written: ({reason})", error["message"]), error
            for n in range(3):  # the speech cache keeps nothing, and says so once
                spoken = await http.get("/api/tts", params={"text": f"The hallway light is at {n} percent."})
                assert spoken.status_code == 200 and spoken.headers["X-Cache"] == "MISS" and len(spoken.content) > 8000
            assert (await http.get("/audio/willow.wav")).status_code == 404
        async with server.client() as client:
            transcript = await transcribe(client, pcm)
        assert transcript.type == "transcript" and wer([SPOKEN_TEXT], [transcript.data["text"]]) < 0.3, transcript
        assert temporary_files(data) == [] and stored_files(data) == []
    finally:
        code = server.stop()
    log = server.log
    assert code == 0, log
    assert log.count("Speech cache in") == 1, log
    assert_clean_log(log)


async def test_discovery_on_a_data_dir_that_refuses_writes_announces_a_name_for_the_run(
    refusing: tuple[Path, str], tmp_path: Path
) -> None:
    data, _ = refusing
    args = ["--data-dir", str(data), "--asr-model", "tiny.en", "--zeroconf", "--zeroconf-host", "127.0.0.1"]
    server = start_server(args, tmp_path / "server")  # before: it exited (1) when it could not write the name
    try:
        announced = await announcement(server)
        browser = AsyncZeroconf()
        try:
            found = AsyncServiceInfo(SERVICE_TYPE, f"{announced}.{SERVICE_TYPE}")
            assert await found.async_request(browser.zeroconf, 10000), announced
            assert found.parsed_addresses() == ["127.0.0.1"] and found.port == server.port
        finally:
            await browser.async_close()
        assert announced.startswith("wyoming-wis-") and temporary_files(data) == [] and stored_files(data) == []
    finally:
        code = server.stop()
    log = server.log
    assert code == 0 and log.count("for this run only") == 1, log
    assert_clean_log(log)
