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

An offer's candidates name addresses that aioice would send connectivity checks
to, so a client could aim the server's STUN at anyone. `admit` keeps only those
of the connection's own ICE (`Reachable`): the signalling client's own address,
a browser's mDNS name, and for relay candidates the configured TURN server. A
browser whose candidates are dropped is still reached: its own checks to the
answer's candidates teach aioice peer-reflexive ones, at addresses that have just
proven they know the connection's ICE password.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import ipaddress
import logging
import random
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aioice.mdns import is_mdns_hostname
from aiortc import RTCConfiguration, RTCIceServer
from aiortc.rtcicetransport import parse_stun_turn_uri
from aiortc.sdp import candidate_from_sdp

from wyoming_wis.config import PortRange, RtcSettings
from wyoming_wis.errors import StartupError
from wyoming_wis.values import quote

_LOGGER = logging.getLogger(__name__)
_PORTS: contextvars.ContextVar[PortRange | None] = contextvars.ContextVar("wis_rtc_ports", default=None)
_INSTALLED = "_wis_rtc_ports_installed"
_CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ udp \d+ (\S+) (\d+) typ (\w+)", re.IGNORECASE | re.MULTILINE)
# a=candidate:FOUNDATION COMPONENT TRANSPORT PRIORITY ADDRESS PORT typ host ...
_HOST_CANDIDATE = re.compile(r"^(a=candidate:\S+ (\d+) (\S+) \d+ )(\S+) ((\d+) typ host(?: .*)?)$", re.IGNORECASE)
_CONNECTION = re.compile(r"^(c=IN IP[46] |a=rtcp:\d+ IN IP[46] )(\S+)$")
_CANDIDATE_LINE = "a=candidate:"
_END_OF_CANDIDATES = "a=end-of-candidates"
MAX_REMOTE_CANDIDATES = 16  # per media section; a browser names a few per network interface
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class PortsExhausted(Exception):
    """Every port of the range is taken on every address: no candidate to offer."""


def configuration(settings: RtcSettings) -> RTCConfiguration:
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


@dataclass(frozen=True)
class Reachable:
    """Where one connection's ICE may send checks besides peer-reflexive addresses (see the module's docstring)."""

    client: IPAddress | None  # the signalling request's own remote address
    relays: frozenset[IPAddress] = frozenset()  # the --rtc-turn server's addresses

    def admits(self, host: str, kind: str) -> bool:
        """Whether a remote candidate at `host` of type `kind` (host, srflx, prflx, relay) may be checked."""
        if is_mdns_hostname(host):  # a browser hides its host address so; aioice asks the LAN
            return True
        address = _ip(host)
        return address is not None and (address == self.client or (kind == "relay" and address in self.relays))


async def reachable(remote: str | None, configuration: RTCConfiguration) -> Reachable:
    """The policy for a connection whose offer came from `remote`, with the TURN servers' current addresses."""
    return Reachable(_ip(remote), frozenset(await _turn_addresses(configuration)))


def admit(sdp: str, allowed: Reachable) -> str:
    """The offer as aiortc gets it: only candidates `allowed` admits, at most MAX_REMOTE_CANDIDATES a section.

    A section that lost a candidate also loses its end-of-candidates: with it aioice would give up
    once its own checks failed, before the browser's checks (from an address it may have dropped)
    come to teach it a peer-reflexive one. Expects an offer aiortc parses (its candidates are sound).
    """
    lines = sdp.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith("m=")]
    bounds = zip([0, *starts], [*starts, len(lines)], strict=True)
    return _join([line for start, end in bounds for line in _admit_section(lines[start:end], allowed)], sdp)


def _admit_section(lines: list[str], allowed: Reachable) -> list[str]:
    kept: list[str] = []
    admitted = 0
    for line in lines:
        if line.startswith(_CANDIDATE_LINE):
            candidate = candidate_from_sdp(line[len(_CANDIDATE_LINE) :])
            if admitted >= MAX_REMOTE_CANDIDATES or not allowed.admits(candidate.ip, candidate.type):
                _LOGGER.debug(
                    "Remote ICE candidate dropped: %s %s:%s", quote(candidate.type), quote(candidate.ip), candidate.port
                )
                continue
            admitted += 1
        kept.append(line)
    if len(kept) < len(lines):
        return [line for line in kept if line != _END_OF_CANDIDATES]
    return kept


async def _turn_addresses(configuration: RTCConfiguration) -> set[IPAddress]:
    hosts = []
    for server in configuration.iceServers or []:
        uri = parse_stun_turn_uri(str(server.urls))  # checked at startup
        if uri["scheme"] in ("turn", "turns"):
            hosts.append(uri["host"])
    loop = asyncio.get_running_loop()
    found: set[IPAddress] = set()
    for host in hosts:
        try:
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
        except OSError as err:
            _LOGGER.warning("TURN server %s: no address (%s); browsers' relay candidates are dropped", host, err)
            continue
        found |= {address for info in infos if (address := _ip(str(info[4][0]))) is not None}
    return found


def _ip(text: str | None) -> IPAddress | None:
    """An IP address (an IPv4-mapped IPv6 one as IPv4, as a dual-stack socket names IPv4 peers), or None."""
    try:
        address = ipaddress.ip_address(text or "")
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


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
    return _join(sent, sdp)


def _join(lines: list[str], like: str) -> str:
    """`lines` as a description, with `like`'s line ends."""
    end = "\r\n" if "\r\n" in like else "\n"
    return end.join(lines) + (end if like.endswith("\n") else "")


def _family(address: str) -> int | None:
    """4 or 6, or None for what is no IP address (a browser's mDNS name)."""
    try:
        return ipaddress.ip_address(address).version
    except ValueError:
        return None
