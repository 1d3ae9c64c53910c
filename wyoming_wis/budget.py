"""One memory budget for what clients make the server hold, across every request and frontend.

Each request's own limits (`--max-audio-seconds`, `--max-upload-mb`, `--max-text-chars`)
bound what one client can cost, but not what twenty can: twenty streams that each stay
under the limit once took a home server from 450 MB to 3.7 GB. So every buffer that grows
with client input (audio kept for transcription, an uploaded or decoded file, a form's
parts) is counted here before it is allocated; a request that would pass
`--memory-budget-mb` is refused as busy, and what a request held is given back when it
ends. The budget is shared as every limit is (shares.py): a lone owner may hold all of it,
but while another owner holds some or was refused lately (WANTED_SECONDS), no owner may
grow past OWNER_SHARE of it, so that a flood from one host cannot starve another's
requests; Home Assistant's are counted and never refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from . import shares
from .errors import Busy
from .shares import OWNER_SHARE

_LOGGER = logging.getLogger(__name__)
RETRY_SECONDS = 5.0  # a held buffer is given back when its request ends: typically within seconds
WANTED_SECONDS = 2 * RETRY_SECONDS  # an owner refused wants its share back for this long: it is told to retry sooner
LOG_EVERY_SECONDS = 10.0  # refusals are logged as a warning this often, the rest at debug


class MemoryBudget:
    """Bytes held for clients, up to `limit`; safe from any thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._owners: Counter[str] = Counter()
        self._refused: dict[str, float] = {}  # owners refused lately, and when
        self._logged = -LOG_EVERY_SECONDS
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def hold(self) -> Hold:
        """A new, empty share for one request or buffer, of the client whose request is being served."""
        return Hold(self, shares.current())

    def _change(self, owner: str, delta: int) -> None:
        with self._lock:
            if delta > 0 and not shares.trusted(owner):
                if self._used + delta > self.limit:
                    self._refuse(owner, f"The server holds {self._used / 2**20:.0f} MB for its clients", delta)
                if self._owners[owner] + delta > self.limit * OWNER_SHARE and self._contended(owner):
                    self._refuse(owner, f"{owner} holds {self._owners[owner] / 2**20:.0f} MB already", delta)
            self._used += delta
            self._owners[owner] += delta
            if not self._owners[owner]:
                del self._owners[owner]

    def _contended(self, owner: str) -> bool:
        """Whether another owner holds some of the budget, or was refused lately (and wants some)."""
        now = time.monotonic()
        self._refused = {who: when for who, when in self._refused.items() if now - when < WANTED_SECONDS}
        return any(who != owner for who in self._owners) or any(who != owner for who in self._refused)

    def _refuse(self, owner: str, why: str, delta: int) -> None:
        now = time.monotonic()
        self._refused[owner] = now
        message = (
            f"{why} and cannot take {delta / 2**20:.1f} MB more for {owner} "
            f"(--memory-budget-mb {self.limit / 2**20:g}, at most {OWNER_SHARE:.0%} of it per address while others "
            "want some); try again shortly"
        )
        if now - self._logged >= LOG_EVERY_SECONDS:
            self._logged = now
            _LOGGER.warning("Memory budget: %s", message)
        else:
            _LOGGER.debug("Memory budget: %s", message)
        raise Busy(message, retry_after=RETRY_SECONDS)


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
