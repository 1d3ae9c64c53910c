"""ICE for browser connections: STUN/TURN servers, and UDP ports only from `--rtc-ports`.

aioice (under aiortc) binds each host candidate with
`loop.create_datagram_endpoint(..., local_addr=(address, 0))` and has no option
for a port range, yet a container or a firewall can only open a fixed range.
`install` wraps the event loop's `create_datagram_endpoint` once; the wrapper
acts only inside `bound_to(ports)`, which the signalling handler holds while
aiortc gathers candidates (a context variable, so it reaches aioice's tasks and
nothing else: other UDP sockets of the process, e.g. zeroconf's, bind as they
ask). Inside, a request for "any port" tries the range's ports in random order
(as WIS does), so peers rarely race for one port; a range that is full leaves
the address without a candidate, which `check_candidates` turns into an error.

Behind NAT with the same port numbers published (a container's `-p
10000-10049:10000-10049/udp`), the sockets' own addresses are of no use to a
browser; `advertise` names `--rtc-public-address` in the answer's host
candidates instead, as pion's NAT 1:1 IPs or mediasoup's announced address do.
The sockets stay where they are bound: the published port forwards a browser's
packets to the container's address and the same port, where aioice answers.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import ipaddress
import logging
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiortc import RTCConfiguration, RTCIceServer
from aiortc.rtcicetransport import parse_stun_turn_uri

from wyoming_wis.config import PortRange, Settings
from wyoming_wis.errors import StartupError

_LOGGER = logging.getLogger(__name__)
_PORTS: contextvars.ContextVar[PortRange | None] = contextvars.ContextVar("wis_rtc_ports", default=None)
_INSTALLED = "_wis_rtc_ports_installed"
_CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ udp \d+ (\S+) (\d+) typ (\w+)", re.IGNORECASE | re.MULTILINE)
# a=candidate:FOUNDATION COMPONENT TRANSPORT PRIORITY ADDRESS PORT typ host ...
_HOST_CANDIDATE = re.compile(r"^(a=candidate:\S+ (\d+) (\S+) \d+ )(\S+) ((\d+) typ host(?: .*)?)$", re.IGNORECASE)
_CONNECTION = re.compile(r"^(c=IN IP[46] |a=rtcp:\d+ IN IP[46] )(\S+)$")


class PortsExhausted(Exception):
    """Every port of the range is taken on every address: no candidate to offer."""


def configuration(settings: Settings) -> RTCConfiguration:
    """The peer connections' ICE servers: none unless configured (aiortc's default would ask Google's STUN)."""
    servers = []
    if settings.rtc_stun:
        servers.append(RTCIceServer(urls=settings.rtc_stun))
    if settings.rtc_turn:
        servers.append(RTCIceServer(settings.rtc_turn, settings.rtc_turn_user, settings.rtc_turn_password))
    for server in servers:
        try:
            parse_stun_turn_uri(str(server.urls))
        except ValueError as err:
            raise StartupError(f"WebRTC ICE server {server.urls!r}: {err}") from err
    return RTCConfiguration(iceServers=servers)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Wrap the loop's `create_datagram_endpoint` (once) so that `bound_to` can steer ICE's sockets."""
    if getattr(loop, _INSTALLED, False):
        return
    original = loop.create_datagram_endpoint

    async def create_datagram_endpoint(protocol_factory: Any, *args: Any, **kwargs: Any) -> Any:
        ports = _PORTS.get()
        local_addr = kwargs.get("local_addr")
        aioice_any_port = not args and set(kwargs) == {"local_addr"} and local_addr is not None and local_addr[1] == 0
        if ports is None or ports.unrestricted or not aioice_any_port:
            return await original(protocol_factory, *args, **kwargs)  # anything but aioice's "any port" request
        return await _bind_in_range(original, protocol_factory, local_addr[0], ports)

    loop.create_datagram_endpoint = create_datagram_endpoint  # type: ignore[method-assign]
    setattr(loop, _INSTALLED, True)


async def _bind_in_range(original: Any, protocol_factory: Any, host: str, ports: PortRange) -> Any:
    candidates = list(range(ports.low, ports.high + 1))
    random.shuffle(candidates)
    for port in candidates:
        try:
            return await original(protocol_factory, local_addr=(host, port))
        except OSError as err:
            if err.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no free UDP port on {host} in --rtc-ports {ports}")


@contextmanager
def bound_to(ports: PortRange) -> Iterator[None]:
    """ICE sockets created in this context (and tasks it starts) bind in `ports`."""
    token = _PORTS.set(ports)
    try:
        yield
    finally:
        _PORTS.reset(token)


def candidates(sdp: str) -> list[tuple[str, int, str]]:
    """(address, port, type) of every UDP candidate in a session description."""
    return [(host, int(port), kind) for host, port, kind in _CANDIDATE.findall(sdp)]


def check_candidates(sdp: str, ports: PortRange) -> None:
    """Raise PortsExhausted if the answer offers no way in (every host port taken)."""
    if not candidates(sdp):
        raise PortsExhausted(
            f"No free UDP port for WebRTC in --rtc-ports {ports}: every port is in use by other connections "
            "or programs; widen the range or close connections"
        )


def advertise(sdp: str, address: str | None) -> str:
    """The answer as sent: its host candidates of `address`'s IP family name `address` (ports unchanged).

    c= and a=rtcp: lines that named one of those candidates' addresses follow. Candidates that
    become the same (several interfaces bound on one port number) are sent once per section;
    server-reflexive and relayed candidates, and host candidates of the other family, are left
    as they are. Without `address`, the answer is aiortc's.
    """
    if address is None:
        return sdp
    family = _family(address)
    lines = sdp.splitlines()
    replaced = {match[4] for line in lines if (match := _HOST_CANDIDATE.match(line)) and _family(match[4]) == family}
    sent: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for line in lines:
        if line.startswith("m="):
            seen = set()  # each media section lists its candidates
        elif (match := _HOST_CANDIDATE.match(line)) and match[4] in replaced:
            key = (match[2], match[3].lower(), match[6])  # component, transport, port
            if key in seen:
                continue
            seen.add(key)
            line = f"{match[1]}{address} {match[5]}"
        elif (match := _CONNECTION.match(line)) and match[2] in replaced:
            line = f"{match[1]}{address}"  # the same family: IP4 or IP6 stays
        sent.append(line)
    end = "\r\n" if "\r\n" in sdp else "\n"
    return end.join(sent) + (end if sdp.endswith("\n") else "")


def _family(address: str) -> int | None:
    """4 or 6, or None for what is no IP address (a browser's mDNS name)."""
    try:
        return ipaddress.ip_address(address).version
    except ValueError:
        return None
