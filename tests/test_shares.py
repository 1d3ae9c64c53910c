"""What clients send is shown cut short and escaped (values.quote); what is limited is shared by owner (shares.py),
an IPv6 host counted by its /64 so that its privacy addresses do not multiply its share."""

from __future__ import annotations

import threading

import pytest

from wyoming_wis.budget import MemoryBudget
from wyoming_wis.errors import Busy
from wyoming_wis.shares import LOCAL, Slots, client, owner, share_of
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
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # a dual-stack socket's IPv4 client
        (None, LOCAL),
        ("", LOCAL),
        ("local", "local"),
    ],
)
def test_an_owner_is_an_ipv4_address_or_an_ipv6_64(address: str | None, expected: str) -> None:
    assert owner(address) == expected


def test_slots_keep_half_for_others_and_are_given_back() -> None:
    slots = Slots(8, "things", "--max-things")
    assert slots.per_owner == share_of(8) == 4
    held = [slots.take(f"2001:db8::{n}") for n in range(4)]  # four privacy addresses of one host
    with pytest.raises(Busy, match="from 2001:db8::/64"):
        slots.take("2001:db8::99")
    held += [slots.take(f"192.0.2.{n}") for n in range(4)]
    with pytest.raises(Busy, match=r"all 8 \(--max-things\)"):
        slots.take("198.51.100.1")
    for who in held:
        slots.give(who)
    assert slots.held == 0
    assert share_of(1) == 1  # a limit of one is still usable


def test_slots_count_right_from_many_threads() -> None:
    slots = Slots(1000, "things", "--max-things")

    def churn(n: int) -> None:
        for _ in range(500):
            slots.give(slots.take(f"192.0.2.{n}"))

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert slots.held == 0


def test_the_memory_budget_counts_an_ipv6_host_once() -> None:
    budget = MemoryBudget(100)
    with client("2001:db8::1"):
        first = budget.hold()
    with client("2001:db8::2"):
        second = budget.hold()
    first.set(50)
    with pytest.raises(Busy):
        second.set(1)  # the same /64: its half is spent
