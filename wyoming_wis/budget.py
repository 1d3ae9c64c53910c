"""One memory budget for what clients make the server hold, across every request and frontend.

Each request's own limits (`--max-audio-seconds`, `--max-upload-mb`, `--max-text-chars`)
bound what one client can cost, but not what twenty can: twenty streams that each stay
under the limit once took a home server from 450 MB to 3.7 GB. So every buffer that grows
with client input (audio kept for transcription, an uploaded or decoded file) is counted
here before it is allocated; a request that would pass `--memory-budget-mb` is refused
as busy, and what a request held is given back when it ends. No one address may hold more
than OWNER_SHARE of it (shares.py), so that a flood from one host cannot starve Home Assistant's requests.
"""

from __future__ import annotations

import threading
from collections import Counter

from . import shares
from .errors import Busy
from .shares import OWNER_SHARE

RETRY_SECONDS = 5.0  # a held buffer is given back when its request ends: typically within seconds


class MemoryBudget:
    """Bytes held for clients, up to `limit`; safe from any thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._owners: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def hold(self) -> Hold:
        """A new, empty share for one request or buffer, of the client whose request is being served."""
        return Hold(self, shares.current())

    def _change(self, owner: str, delta: int) -> None:
        with self._lock:
            if delta > 0 and self._used + delta > self.limit:
                self._refuse(f"The server holds {self._used / 2**20:.0f} MB of clients' audio", delta)
            if delta > 0 and self._owners[owner] + delta > self.limit * OWNER_SHARE:
                self._refuse(f"{owner} holds {self._owners[owner] / 2**20:.0f} MB of audio already", delta)
            self._used += delta
            self._owners[owner] += delta
            if not self._owners[owner]:
                del self._owners[owner]

    def _refuse(self, why: str, delta: int) -> None:
        raise Busy(
            f"{why} and cannot take {delta / 2**20:.1f} MB more (--memory-budget-mb {self.limit / 2**20:g}, "
            f"at most {OWNER_SHARE:.0%} of it per address); try again shortly",
            retry_after=RETRY_SECONDS,
        )


class Hold:
    """What one buffer holds of the budget: set its size before allocating, close it when freed."""

    def __init__(self, budget: MemoryBudget, owner: str) -> None:
        self._budget = budget
        self.owner = owner
        self.size = 0

    def set(self, size: int) -> None:
        """Hold `size` bytes in all; raises Busy, holding what it held before, if the budget cannot take it."""
        self._budget._change(self.owner, size - self.size)
        self.size = size

    def close(self) -> None:
        """Give everything back; safe to call more than once."""
        self.set(0)

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
