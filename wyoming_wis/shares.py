"""Fair shares of what the server holds for its clients, by who they are; work-conserving, and Home Assistant first.

Whatever is limited (the memory budget, the models' queues, Wyoming and HTTP connections, Realtime and WebRTC
sessions) is shared by owner, so that one host, broken or hostile, cannot take all of it and lock Home Assistant
out; and yet nothing sits unused while someone could use it.

- **Who owns.** An owner is a client's IPv4 address, or an IPv6 address of a host on one of the server's own links
  (link-local, or in a prefix of one of its interfaces: each device at home has its own); any other IPv6 client is
  its /64, in which a remote host may pick any number of addresses. The owner of the request being served is set
  once by its frontend (`client`) and read where something is held or queued (`current`).
- **Home Assistant** speaks for every satellite of the household, through one address. The owners known to be it
  (`--hass-address`, the address its names are read from, in the add-on the Supervisor's word: `trust`) are
  served first and are never refused for a stranger's sake: they take a stranger's place where none is free
  (`make_room`), their calls start before strangers' (scheduler.py), and the memory budget does not refuse them.
- **Work-conserving.** A lone owner may use every free place; the shares bite only when another owner wants one.
  Where every place is taken, a newcomer gets the place of an idle holder first (one whose client has sent nothing
  for IDLE_AFTER_SECONDS and is owed nothing); else of one of an owner holding at least two more than the
  newcomer's, so that two owners never take places from each other in turn. The queues give a newcomer the place
  of the biggest holder's last waiting call, and the memory budget holds an owner to OWNER_SHARE only while
  another owner holds some of it or was refused lately. Nothing a model has started is cut.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from .errors import Busy

OWNER_SHARE = 0.5  # of a limit, the most one owner may hold while another owner wants some of it
LOCAL = "local"  # a Unix socket's or stdio's client, one whose address is not known, or the server's own work
# Sent nothing for this long and owed nothing, a holder gives its place to a newcomer before any busy one does; one
# idle less long may be Home Assistant's, just opened or just answered, its next request on its way.
IDLE_AFTER_SECONDS = 2.0
INTERFACES = Path("/proc/net/if_inet6")  # Linux: the server's own IPv6 addresses and their prefix lengths
LINKS_SECONDS = 60.0  # how long the server's own links are taken as read (an interface may come and go)
_CLIENT: ContextVar[str] = ContextVar("client", default=LOCAL)
_LINK_LOCAL = ipaddress.IPv6Network("fe80::/10")
_TRUSTED: set[str] = set()  # the owners that are Home Assistant


@contextmanager
def client(address: str) -> Iterator[None]:
    """What is held or queued for requests made inside (and tasks they start) is the owner of `address`'s."""
    token = _CLIENT.set(owner(address))
    try:
        yield
    finally:
        _CLIENT.reset(token)


def current() -> str:
    """The owner of the request being served: LOCAL outside any `client`."""
    return _CLIENT.get()


def owner(address: str | None) -> str:
    """Who holds a share: the IPv4 address, an on-link IPv6 address, another IPv6 address's /64, or LOCAL.

    An IPv4 address mapped into IPv6 (`::ffff:192.0.2.1`, from a dual-stack socket) is its IPv4 address. Any
    other text is kept as it is (the caller's own name for a client).
    """
    if not address:
        return LOCAL
    try:
        ip = ipaddress.ip_address(address.strip("[]").partition("%")[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if ip in _LINK_LOCAL or ip.is_loopback or any(ip in link for link in _links(time.monotonic() // LINKS_SECONDS)):
            return str(ip)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@lru_cache(maxsize=1)
def _links(_: float) -> tuple[ipaddress.IPv6Network, ...]:
    """The IPv6 prefixes of the server's own interfaces (read again every LINKS_SECONDS: the argument changes)."""
    try:
        lines = INTERFACES.read_text().splitlines()
    except OSError:  # not Linux, or no IPv6
        return ()
    links = set()
    for line in lines:
        fields = line.split()
        try:
            address = ipaddress.IPv6Address(int(fields[0], 16))
            links.add(ipaddress.IPv6Network((address, int(fields[2], 16)), strict=False))
        except (IndexError, ValueError):
            continue
    return tuple(network for network in links if 0 < network.prefixlen < 128 and not network.is_loopback)


def trust(*addresses: str) -> None:
    """Home Assistant connects from these addresses (and no other): their owners are served first and never refused
    for a stranger's sake. With none, no owner is."""
    _TRUSTED.clear()
    _TRUSTED.update(owner(address) for address in addresses)


def trusted(who: str) -> bool:
    """Whether the owner `who` is Home Assistant."""
    return who in _TRUSTED


class Holder(Protocol):
    """What holds a place: a connection or a session."""

    @property
    def owner(self) -> str: ...

    @property
    def idle_for(self) -> float:
        """Seconds since its client's last event, while nothing is owed either way; 0 while it is busy."""

    @property
    def busy_since(self) -> float:
        """When the request it serves began, on a clock all holders of its kind share; infinity while it serves none."""


H = TypeVar("H", bound=Holder)


def make_room(holders: Iterable[H], newcomer: str) -> H | None:
    """The holder whose place goes to a newcomer of owner `newcomer` when every place is taken; None if none may give
    it up. See the module's docstring: an idle one first, the longest idle of the owner holding most; else, the
    longest-running of the owner holding most, among those holding at least two more than the newcomer's (or
    one more, for a holder with no request open: it was idle a moment ago); Home Assistant takes any stranger's."""
    holders = list(holders)
    held = Counter(holder.owner for holder in holders)
    mine = held[newcomer]
    home = trusted(newcomer)

    def may_go(holder: H) -> bool:
        theirs = held[holder.owner]
        if trusted(holder.owner) and not home:
            return False  # Home Assistant never makes room for a stranger
        if holder.idle_for >= IDLE_AFTER_SECONDS:
            return True  # the newcomer's own included: a lone owner's idle one makes room for its next
        if holder.owner == newcomer:
            return False
        return home or theirs > mine + 1 or (theirs > mine and holder.busy_since == math.inf)

    def order(holder: H) -> tuple[bool, int, float]:
        if holder.idle_for >= IDLE_AFTER_SECONDS:
            return (False, -held[holder.owner], -holder.idle_for)
        return (True, -held[holder.owner], holder.busy_since)

    return min(filter(may_go, holders), key=order, default=None)


@dataclass(eq=False)
class Place(Generic[H]):
    """A place taken before its holder is made (a WebRTC connection, once its offer is answered; a Realtime session,
    once its WebSocket is open): busy until then, then as idle or busy as its holder. A Holder itself."""

    owner: str
    holder: H | None = None
    since: float = field(default_factory=time.monotonic)

    @property
    def idle_for(self) -> float:
        return 0.0 if self.holder is None else self.holder.idle_for

    @property
    def busy_since(self) -> float:
        return self.since if self.holder is None else self.holder.busy_since


class Slots(Generic[H]):
    """At most `limit` places held at once, shared by `make_room`; safe from any thread."""

    def __init__(self, limit: int, what: str, flag: str) -> None:
        self.limit = limit
        self._what = what  # "WebRTC connections"
        self._flag = flag  # the setting that sets `limit`, named in refusals
        self._holders: dict[H, None] = {}  # in the order they came
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return len(self._holders)

    def take(self, holder: H) -> H | None:
        """Count a place for `holder`. Returns the holder whose place it took (no longer counted: the caller closes
        it, telling it why with `evicted`), None if a place was free; Busy if none may give its place up."""
        with self._lock:
            victim = None
            if len(self._holders) >= self.limit:
                victim = make_room(self._holders, holder.owner)
                if victim is None:
                    raise self.refusal(holder.owner)
                del self._holders[victim]
            self._holders[holder] = None
        return victim

    def give(self, holder: H) -> None:
        """Free `holder`'s place (nothing if it was taken from it)."""
        with self._lock:
            self._holders.pop(holder, None)

    def refusal(self, newcomer: str) -> Busy:
        mine = sum(holder.owner == newcomer for holder in self._holders)
        return Busy(
            f"Too many {self._what}: all {self.limit} ({self._flag}) are in use, {mine} of them from {newcomer}, and "
            "none is idle or held by an address holding two more; try again later"
        )

    def evicted(self, victim: H) -> Busy:
        """What a holder whose place was taken is told."""
        theirs = sum(holder.owner == victim.owner for holder in self._holders) + 1
        return Busy(
            f"Closed to make room for another client: all {self.limit} {self._what} ({self._flag}) were in use, "
            f"{theirs} of them from {victim.owner}"
        )
