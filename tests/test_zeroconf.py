"""Home Assistant discovery: a real zeroconf browser finds, resolves and uses the service."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

from helpers import assert_clean_log, free_port, read_until, start_server
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe
from zeroconf import ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

SERVICE = "_wyoming._tcp.local."


class Watcher:
    """Collects `_wyoming._tcp` services as they come and go."""

    def __init__(self) -> None:
        self.added: set[str] = set()
        self.removed: set[str] = set()
        self.changed = asyncio.Event()

    def __call__(self, zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Added:
            self.added.add(name)
        elif state_change is ServiceStateChange.Removed:
            self.removed.add(name)
        self.changed.set()

    async def wait_for(self, name: str, removed: bool = False, timeout: float = 20) -> None:
        async def seen() -> None:
            while name not in (self.removed if removed else self.added):
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(seen(), timeout)


async def test_discovered_resolved_and_usable(data_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    args = [
        "--data-dir",
        str(tmp_path / "state"),
        "--data-dir",
        str(data_dir),
        "--asr-model",
        "tiny.en",
        "--zeroconf",
        "--uri",
        f"tcp://0.0.0.0:{port}",
    ]
    browser_zc = AsyncZeroconf()
    watcher = Watcher()
    browser = AsyncServiceBrowser(browser_zc.zeroconf, SERVICE, handlers=[watcher])
    server = start_server(args, tmp_path, port=port)
    try:
        name = (tmp_path / "state" / "zeroconf-name").read_text().strip()
        full_name = f"{name}.{SERVICE}"
        await watcher.wait_for(full_name)

        info = AsyncServiceInfo(SERVICE, full_name)
        assert await info.async_request(browser_zc.zeroconf, 5000)
        addresses = info.parsed_addresses()
        assert addresses and all(not ipaddress.ip_address(a).is_unspecified for a in addresses), addresses
        assert info.port == port

        async with AsyncTcpClient(addresses[0], info.port) as client:  # as Home Assistant would connect
            await client.write_event(Describe().event())
            described = (await read_until(client, "info"))[-1]
        assert described.data["asr"][0]["models"][0]["name"] == "tiny.en"
        assert described.data["tts"][0]["voices"][0]["name"] == "en_US-joe-medium"

        assert server.stop() == 0
        await watcher.wait_for(full_name, removed=True)  # withdrawn on shutdown
        assert_clean_log(server.log)

        # A restart announces the same name, so Home Assistant keeps its entry.
        watcher.added.clear()
        server = start_server(args, tmp_path, port=port)
        await watcher.wait_for(full_name)
        assert (tmp_path / "state" / "zeroconf-name").read_text().strip() == name
    finally:
        server.stop()
        await browser.async_cancel()
        await browser_zc.async_close()


async def test_explicit_name_and_host(data_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    server = start_server(
        [
            "--data-dir",
            str(data_dir),
            "--asr-model",
            "tiny.en",
            "--zeroconf",
            "wis-test-kitchen",
            "--zeroconf-host",
            "127.0.0.1",
            "--uri",
            f"tcp://0.0.0.0:{port}",
        ],
        tmp_path,
        port=port,
    )
    browser_zc = AsyncZeroconf()
    try:
        info = AsyncServiceInfo(SERVICE, f"wis-test-kitchen.{SERVICE}")
        assert await info.async_request(browser_zc.zeroconf, 10000)
        assert info.parsed_addresses() == ["127.0.0.1"] and info.port == port
    finally:
        server.stop()
        await browser_zc.async_close()
