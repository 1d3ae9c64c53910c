"""What clients send is shown cut short and escaped (values.quote); what is limited is shared by owner (shares.py),
an IPv6 host counted by its /64 so that its privacy addresses do not multiply its share."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from wyoming_wis import shares
from wyoming_wis.budget import MemoryBudget
from wyoming_wis.errors import Busy
from wyoming_wis.shares import LOCAL, Slots, client, make_room, owner
from wyoming_wis.values import QUOTE_CHARS, quote

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("Küche", "'Küche'"),
        ("line\nforged INFO x", r"'line\nforged INFO x'"),
        ("\x1b[31mred", r"'\x1b[31mred'"),
        ("\udcff", r"'\udcff'"),  # a byte that was not UTF-8, as aiohttp hands it on
        (12, "12"),
        (None, "None"),
    ],
)
def test_a_value_is_shown_escaped_on_one_line(value: object, shown: str) -> None:
    assert quote(value) == shown


def test_a_long_value_is_cut_and_its_length_said() -> None:
    shown = quote("x" * 1_000_000)
    assert shown == repr("x" * QUOTE_CHARS) + "... (1000000 characters)"
    assert len(quote(list(range(1_000_000)))) < 2 * QUOTE_CHARS  # not a string: its first items only
    assert len(quote({"voice": "y" * 1_000_000})) < 2 * QUOTE_CHARS


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:a:b:c:d", "2001:db8:1:2::/64"),
        ("[2001:db8:1:2::99]", "2001:db8:1:2::/64"),  # as host_of brackets it
        ("fe80::1%eth0", "fe80::1"),  # on the link: a device of its own
        ("::1", "::1"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # a dual-stack socket's IPv4 client
        (None, LOCAL),
        ("", LOCAL),
        ("local", "local"),
    ],
)
def test_an_owner_is_an_address_or_a_remote_ipv6_64(address: str | None, expected: str) -> None:
    assert owner(address) == expected


def test_an_ipv6_host_on_the_servers_own_link_is_an_owner_by_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each device of a home LAN's IPv6 prefix is its own owner, as over IPv4; a remote /64 stays one."""
    interfaces = tmp_path / "if_inet6"  # as Linux lists an interface's address: hex, index, prefix length, ...
    interfaces.write_text("20010db8000100020000000000000001 02 40 00 80     eth0\n")
    monkeypatch.setattr(shares, "INTERFACES", interfaces)
    shares._links.cache_clear()
    try:
        assert owner("2001:db8:1:2::5") == "2001:db8:1:2::5"
        assert owner("2001:db8:1:2::6") == "2001:db8:1:2::6"
        assert owner("2001:db8:9:9::5") == "2001:db8:9:9::/64"
    finally:
        shares._links.cache_clear()


@dataclass(eq=False)
class Held:
    """A place's holder, as a connection is: idle for so long, or busy since a moment."""

    owner: str
    idle_for: float = 0.0
    busy_since: float = math.inf

    @classmethod
    def busy(cls, address: str, since: float = 0.0) -> Held:
        return cls(owner(address), 0.0, since)

    @classmethod
    def idle(cls, address: str, seconds: float = 5.0) -> Held:
        return cls(owner(address), seconds)


def test_a_lone_owner_may_take_every_place() -> None:
    slots: Slots[Held] = Slots(4, "things", "--max-things")
    held = [Held.busy("192.0.2.1") for _ in range(4)]
    assert [slots.take(holder) for holder in held] == [None] * 4
    with pytest.raises(Busy, match=r"all 4 \(--max-things\) are in use, 4 of them from 192.0.2.1"):
        slots.take(Held.busy("192.0.2.1"))
    for holder in held:
        slots.give(holder)
    assert slots.held == 0


def test_an_idle_holder_makes_room_first_whoever_holds_most() -> None:
    """A newcomer takes the place of the longest idle of the owner holding most, before any busy one's."""
    slots: Slots[Held] = Slots(4, "things", "--max-things")
    busy = [Held.busy("192.0.2.1", since) for since in range(3)]
    idle = Held.idle("192.0.2.2")
    for holder in [*busy, idle]:
        slots.take(holder)
    newcomer = Held.busy("192.0.2.3")
    assert slots.take(newcomer) is idle
    assert slots.held == 4
    slots.give(idle)  # its close comes later, and frees nothing more
    assert slots.held == 4


def test_a_busy_holder_makes_room_only_for_an_owner_holding_two_fewer() -> None:
    """Two owners never take places from each other in turn: the one holding most gives its longest-running."""
    slots: Slots[Held] = Slots(4, "things", "--max-things")
    hog = [Held.busy("192.0.2.1", since) for since in range(3)]
    other = Held.busy("192.0.2.2")
    for holder in [*hog, other]:
        slots.take(holder)
    assert slots.take(Held.busy("192.0.2.3")) is hog[0]  # 3 against none
    with pytest.raises(Busy):
        slots.take(Held.busy("192.0.2.3"))  # its second: 2, 1 and 1 against 1, too close
    just_opened = Held("192.0.2.5", idle_for=0.1)  # a connection just opened, its request on its way
    assert make_room([just_opened, Held.busy("192.0.2.6")], "192.0.2.7") is just_opened


def test_home_assistant_takes_a_strangers_place_and_gives_none(home_assistant: str) -> None:
    """Home Assistant, through which every satellite speaks, is never refused a place for a stranger's sake, and no
    stranger takes one of its places, even idle."""
    slots: Slots[Held] = Slots(2, "things", "--max-things")
    strangers = [Held.busy("192.0.2.1"), Held.busy("192.0.2.2", 1.0)]
    for holder in strangers:
        slots.take(holder)
    home = Held.busy(home_assistant)
    assert slots.take(home) is strangers[0]
    assert slots.take(Held.idle(home_assistant)) is strangers[1]
    with pytest.raises(Busy):
        slots.take(Held.busy("192.0.2.3"))
    assert make_room([Held.idle(home_assistant)], "192.0.2.3") is None


def test_slots_count_right_from_many_threads() -> None:
    slots: Slots[Held] = Slots(1000, "things", "--max-things")

    def churn(n: int) -> None:
        for _ in range(500):
            holder = Held.busy(f"192.0.2.{n}")
            assert slots.take(holder) is None
            slots.give(holder)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert slots.held == 0


def test_the_memory_budget_is_all_a_lone_owners_and_half_while_another_wants_some() -> None:
    budget = MemoryBudget(100)
    with client("192.0.2.1"):
        hog = budget.hold()
    with client("192.0.2.2"):
        other = budget.hold()
    hog.set(90)  # nobody else holds any
    with pytest.raises(Busy, match="holds 0 MB for its clients"):
        other.set(20)  # refused: it wants some now
    hog.set(80)
    with pytest.raises(Busy, match="192.0.2.1 holds 0 MB already"):
        hog.set(85)  # over half while another wants some: it may not grow
    other.set(20)
    hog.close()
    other.close()
    assert budget.used == 0


def test_the_memory_budget_counts_an_ipv6_host_once() -> None:
    budget = MemoryBudget(100)
    with client("2001:db8::1"):
        first = budget.hold()
    with client("2001:db8::2"):
        second = budget.hold()
    with client("192.0.2.1"):
        other = budget.hold()
    other.set(1)
    first.set(50)
    with pytest.raises(Busy):
        second.set(1)  # the same /64: its half is spent while another holds some


def test_the_memory_budget_never_refuses_home_assistant(home_assistant: str) -> None:
    budget = MemoryBudget(100)
    with client("192.0.2.1"):
        stranger = budget.hold()
    with client(home_assistant):
        home = budget.hold()
    stranger.set(100)
    home.set(30)  # counted, past the limit
    assert budget.used == 130
    with pytest.raises(Busy):
        stranger.set(101)
