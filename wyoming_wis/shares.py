"""Fair shares of what the server holds for its clients, by where they connect from.

Whatever is limited (the memory budget, the models' queues, Wyoming and HTTP connections, WebRTC sessions) is shared
by owner, so that one host, broken or hostile, cannot take all of it and lock Home Assistant out. An owner is a
client's IPv4 address, or the /64 network of an IPv6 one: a host picks any number of addresses in its own /64
(privacy addresses), where it has one IPv4 address. No owner holds more than OWNER_SHARE of a limit. The owner of
the request being served is set once by its frontend (`client`) and read where something is held (`current`).
"""

from __future__ import annotations

import ipaddress
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import Busy

OWNER_SHARE = 0.5  # of a limit, the most one owner may hold
LOCAL = "local"  # a Unix socket's or stdio's client, one whose address is not known, or the server's own work
_CLIENT: ContextVar[str] = ContextVar("client", default=LOCAL)


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
    """Who holds a share: the IPv4 address, the IPv6 /64 (`2001:db8:1:2::/64`), or LOCAL.

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
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def share_of(limit: int) -> int:
    """The most places of `limit` that one owner may hold (at least one)."""
    return max(1, int(limit * OWNER_SHARE))


class Slots:
    """At most `limit` places held at once, no owner holding more than its share; safe from any thread.

    `take` returns the owner it counted, to be handed back to `give` when the place is freed.
    """

    def __init__(self, limit: int, what: str, flag: str) -> None:
        self.limit = limit
        self.per_owner = share_of(limit)
        self._what = what  # "WebRTC connections"
        self._flag = flag  # the setting that sets `limit`, named in refusals
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held.total()

    def take(self, address: str | None) -> str:
        """Count one place for the client at `address`; Busy if the limit or its owner's share is reached."""
        who = owner(address)
        with self._lock:
            if self._held.total() >= self.limit:
                raise Busy(f"Too many {self._what}: all {self.limit} ({self._flag}) are in use; try again later")
            if self._held[who] >= self.per_owner:
                raise Busy(
                    f"Too many {self._what} from {who}: {self._held[who]} of the {self.limit} ({self._flag}) are "
                    f"already its, the most one address may hold; close one first"
                )
            self._held[who] += 1
        return who

    def give(self, who: str) -> None:
        """Free a place `take` counted for `who`."""
        with self._lock:
            self._held[who] -= 1
            if self._held[who] <= 0:
                del self._held[who]
