"""Announce the Wyoming service over mDNS so Home Assistant discovers it.

Home Assistant keys a discovered server by its mDNS instance name, so the
name must survive restarts (and container re-creation): unless the user gives
one, it is generated once and kept in the data dir. A data dir that cannot keep
it (full, read-only) costs the name's permanence, never the announcement. The
announced address is a real one, never the 0.0.0.0 the server may be bound to.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import socket
from pathlib import Path

import ifaddr
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from .errors import CannotStore
from .files import atomic_write

_LOGGER = logging.getLogger(__name__)

SERVICE_TYPE = "_wyoming._tcp.local."
_MDNS_GROUP = "224.0.0.251"
_NAME_FILE = "zeroconf-name"


class Announcement:
    """One `_wyoming._tcp` service, registered on start and withdrawn on stop."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.info = AsyncServiceInfo(
            SERVICE_TYPE,
            f"{name}.{SERVICE_TYPE}",
            addresses=[ipaddress.ip_address(host).packed],
            port=port,
        )
        self._zeroconf: AsyncZeroconf | None = None

    @property
    def name(self) -> str:
        return self.info.name[: -len(SERVICE_TYPE) - 1]

    async def start(self) -> None:
        self._zeroconf = AsyncZeroconf()
        await self._zeroconf.async_register_service(self.info, allow_name_change=True)
        _LOGGER.info("Announced %s at %s:%s over zeroconf", self.name, self.host, self.port)

    async def stop(self) -> None:
        if self._zeroconf is None:
            return
        goodbyes = await self._zeroconf.async_unregister_service(self.info)
        await goodbyes  # sent before the sockets close, or Home Assistant keeps the service until its TTL runs out
        await self._zeroconf.async_close()
        self._zeroconf = None
        _LOGGER.info("Withdrew zeroconf announcement %s", self.name)


def stable_name(data_dir: Path) -> str:
    """A name made once per data dir, so restarts keep the same identity; one made for this run if the data dir
    cannot keep it."""
    path = data_dir / _NAME_FILE
    try:
        name = path.read_text(encoding="utf-8").strip()
        if name:
            return name
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as err:  # unreadable, or not text: a new name replaces it
        _LOGGER.warning("Cannot read the zeroconf name in %s (%s); making a new one", path, err)
    name = f"wyoming-wis-{secrets.token_hex(3)}"
    try:
        with atomic_write(path) as file:  # a crash while writing leaves no empty name behind
            file.write(f"{name}\n".encode())
    except CannotStore as err:
        _LOGGER.warning(
            "Cannot keep the zeroconf name in %s (%s): announcing %s for this run only, so Home Assistant may find "
            "this server again as a new one after a restart; --zeroconf NAME gives it a name of its own",
            path,
            err.__cause__,
            name,
        )
    return name


def announce_address(bound_host: str, override: str | None) -> str:
    """The address to announce: the override, the bound address, or the LAN one."""
    if override:
        return override
    try:
        bound = ipaddress.ip_address(socket.gethostbyname(bound_host))
        if not bound.is_unspecified:
            return str(bound)
    except OSError:  # an IPv6 wildcard such as ::, or a name that does not resolve
        pass
    try:
        # The interface the kernel would use for mDNS; no packet is sent.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((_MDNS_GROUP, 5353))
            address = probe.getsockname()[0]
        if not ipaddress.ip_address(address).is_unspecified:
            return address
    except OSError:
        pass
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and not ipaddress.ip_address(ip.ip).is_loopback:  # IPv4
                return ip.ip
    _LOGGER.warning("No LAN address found; announcing 127.0.0.1 (use --zeroconf-host)")
    return "127.0.0.1"
