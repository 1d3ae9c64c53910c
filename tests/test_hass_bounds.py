"""Home Assistant's token and answers through a whole server (issue 49, attack 8: "the Home Assistant client trusts
whoever answers"). A server given a token with a plain ws:// URL to a host nobody named stops at start, before any
connection; one reading a large household's names from a stand-in Home Assistant on loopback answers `describe`
within 0.25 s throughout, holds memory of the message's order, not of its parse, refuses a longer answer as it
comes, and logs where Home Assistant is. tests/test_hass_names.py tests the client itself, in-process."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fake_hass import TOKEN, FakeHass, filler_states, serve, until
from helpers import Server, assert_clean_log, start_server
from wyoming.info import Describe

from wyoming_wis.hass_api import MAX_MESSAGE_BYTES

LIGHT = ["--asr-model", "tiny.en", "--wake-model", "none", "--no-http"]  # what the server loads does not matter
DESCRIBE_TARGET = 0.25  # seconds: SECURITY.md's bound on describe throughout an attack
MAX_GROWTH = 4 * MAX_MESSAGE_BYTES  # the message, its copies while it is handed on: the cap's order, not the parse's


def household() -> FakeHass:
    hass = FakeHass()
    hass.registry.areas.append({"area_id": "office", "name": "Niamh's office", "aliases": [], "floor_id": None})
    hass.registry.entity("fan.office", "Ceiling fan", area="office")
    return hass


def memory_mb(pid: int, name: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(name)


class Peak(threading.Thread):
    """The highest VmRSS of a process while it runs (sampled every 10 ms, and its VmHWM, reset at the start)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.mb, self.done = pid, 0.0, threading.Event()
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from now on
            self.hwm = True
        except OSError:
            self.hwm = False

    def run(self) -> None:
        while not self.done.wait(0.01):
            self.mb = max(self.mb, memory_mb(self.pid, "VmRSS"))

    def stop(self) -> float:
        self.done.set()
        self.join()
        return max(self.mb, memory_mb(self.pid, "VmHWM") if self.hwm else 0.0)


async def describe_seconds(server: Server) -> float:
    began = time.perf_counter()
    async with server.client() as client:
        await client.write_event(Describe().event())
        while (event := await asyncio.wait_for(client.read_event(), 30)) is not None and event.type != "info":
            pass
    return time.perf_counter() - began


async def describes_until(server: Server, done: str, timeout: float = 60) -> list[float]:
    """describe's times, one every 50 ms, until the server's log says `done`."""
    delays = []
    deadline = time.monotonic() + timeout
    while done not in server.log:
        assert time.monotonic() < deadline, f"no {done!r} within {timeout} s:\n{server.log[-3000:]}"
        delays.append(await describe_seconds(server))
        await asyncio.sleep(0.05)
    return delays


@pytest.fixture
async def reading(data_dir: Path, tmp_path: Path) -> AsyncIterator[tuple[Server, FakeHass]]:
    """A server reading names from a stand-in Home Assistant on loopback, whose get_states is nearly
    MAX_MESSAGE_BYTES (9,000 more thermostats of 1.7 kB), made and held until the test says."""
    hass = household()
    hass.hold_states = asyncio.Event()
    hass.filler = await asyncio.to_thread(filler_states, MAX_MESSAGE_BYTES - 2**20)
    runner, port = await serve(hass)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    flags = ["--data-dir", str(data_dir), *LIGHT, "--hass-api", f"http://127.0.0.1:{port}/api"]
    server = await asyncio.to_thread(start_server, [*flags, "--hass-token-file", str(token_file)], tmp_path)
    try:
        yield server, hass
    finally:
        assert await asyncio.to_thread(server.stop) == 0, server.log
        await runner.cleanup()


async def test_a_large_household_is_read_without_holding_describe_or_memory(
    reading: tuple[Server, FakeHass],
) -> None:
    """get_states of nearly MAX_MESSAGE_BYTES (9,000 thermostats of 1.7 kB), then one just over it. Today's main
    parsed both with json.loads in a worker thread, which holds the GIL: describe waited 1 s for the first (4.9 s
    for 60 MiB, and +330 MiB). Now the first is parsed in a child process, the second refused by its frame's
    declared length. (The describes are timed from this process, which also sends the answers: its own loop's
    delay is in them.)"""
    server, hass = reading
    await until(lambda: hass.holding == 1, timeout=30)  # logged in, asked for get_states, answer made and held
    quiet = [await describe_seconds(server) for _ in range(3)]
    before = memory_mb(server.process.pid, "VmRSS")
    peak = Peak(server.process.pid)
    peak.start()
    assert hass.hold_states is not None
    hass.hold_states.set()
    delays = await describes_until(server, "Names from Home Assistant")
    grown = peak.stop() - before
    print(f"describe quiet {max(quiet):.3f} s, while {len(hass.filler) >> 20} MiB was read {max(delays):.3f} s")
    print(f"VmRSS {before:.0f} MiB before, peak {grown:+.0f} MiB ({'VmHWM' if peak.hwm else 'sampled'})")
    assert "Names from Home Assistant: 2 names" in server.log  # Niamh's office, Ceiling fan: read, not dropped
    assert "Home Assistant is at 127.0.0.1" in server.log  # the address hook (Core.household_address)
    assert max(delays) < DESCRIBE_TARGET and grown < MAX_GROWTH / 2**20

    hass.filler = await asyncio.to_thread(filler_states, MAX_MESSAGE_BYTES + 2**20)  # (bench/abuse.py: 60 MiB)
    peak = Peak(server.process.pid)
    peak.start()
    await hass.announce("entity_registry_updated", {"action": "update", "entity_id": "fan.office"})
    delays = await describes_until(server, "exceeds limit")
    grown = peak.stop() - before
    print(f"{len(hass.filler) >> 20} MiB refused: describe {max(delays):.3f} s, VmRSS peak {grown:+.0f} MiB")
    assert max(delays) < DESCRIBE_TARGET and grown < MAX_GROWTH / 2**20
    assert TOKEN not in server.log
    assert_clean_log(server.log)


def own_address(host: str) -> str:
    """The IPv4 address this machine's name resolves to (loopback or not: what matters is that it is a name)."""
    return next(info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM))


async def test_a_token_for_a_plain_host_nobody_named_stops_the_server_before_any_connection(
    data_dir: Path, tmp_path: Path
) -> None:
    """Today's main sent the admin token over plain ws:// to whatever answered for the name it was given (by default
    homeassistant.local, which any host on the network may answer for). This machine's own name stands for it:
    the server must say what to add and stop, and the stand-in listening there see no connection at all."""
    host = socket.gethostname()
    hass = household()
    runner, port = await serve(hass, host=own_address(host))
    flags = ["--data-dir", str(data_dir), *LIGHT, "--hass-api", f"http://{host}:{port}/api", "--hass-token", TOKEN]
    server = await asyncio.to_thread(start_server, flags, tmp_path, wait=False)
    try:
        await until(lambda: server.process.poll() is not None or hass.connections > 0, timeout=120)
        assert hass.connections == 0 and hass.logins == 0, server.log
        assert server.process.wait(10) == 2, server.log
        name = host.lower()
        assert f"add --hass-plain-host {name} (WIS_HASS_PLAIN_HOST={name})" in server.log, server.log
        assert TOKEN not in server.log
    finally:
        server.stop()
        await runner.cleanup()
