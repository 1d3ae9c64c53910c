"""Names from Home Assistant (issue 39): which names, in what order (household.py), and the websocket client that
keeps them current (hass_api.py), against a stand-in for Home Assistant's websocket API over a real socket
(tests/fake_hass.py; tests/ha/test_names.py runs against a real Home Assistant)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fake_hass import TOKEN, FakeHass, serve, until

from wyoming_wis import hass_api
from wyoming_wis.asr.engine import names_heard
from wyoming_wis.hass_api import HassNames, read_token, websocket_url
from wyoming_wis.household import MAX_NAME_CHARS, MAX_NAMES, Household, read_household

pytestmark = pytest.mark.fast


# -- which names, in what order -----------------------------------------------------------------------------------


def test_tiers_put_rooms_in_use_first_then_devices_people_name_then_the_rest() -> None:
    """As wyoming-faster-whisper orders them (the held-out household: 19 of 19 in this order, 18 as a flat list);
    each alias right after its name; unexposed, disabled and null aliases left out; duplicates in any case once."""
    exposed = {
        "light.a": {"conversation": True},
        "climate.b": {"conversation": True},
        "sensor.c": {"conversation": True},
        "switch.hidden": {"conversation": False},
        "light.off": {"conversation": True},
        "fan.d": {"conversation": True, "cloud.alexa": True},
    }
    states = [
        {"entity_id": "light.a", "attributes": {"friendly_name": "Belax window"}},
        {"entity_id": "climate.b", "attributes": {"friendly_name": "Nuukfjord heater"}},
        {"entity_id": "sensor.c", "attributes": {"friendly_name": "Kveldsro humidity"}},
        {"entity_id": "switch.hidden", "attributes": {"friendly_name": "Secret vault"}},
        {"entity_id": "light.off", "attributes": {"friendly_name": "Gone lamp"}},
        {"entity_id": "fan.d", "attributes": {}},
    ]
    entries = {
        "light.a": {"aliases": [None, "window light"], "area_id": "loft"},
        "climate.b": {"aliases": [], "device_id": "dev1"},
        "sensor.c": {"aliases": ["BELAX WINDOW"]},
        "light.off": {"disabled_by": "user", "area_id": "cellar"},
        "fan.d": {"name": "Vindkast", "aliases": []},
    }
    devices = [{"id": "dev1", "area_id": "sauna"}]
    areas = [
        {"area_id": "cellar", "name": "Cellar", "aliases": [], "floor_id": "down"},
        {"area_id": "loft", "name": "Hyttloft", "aliases": ["the loft"], "floor_id": "up"},
        {"area_id": "sauna", "name": "Sauna", "aliases": [], "floor_id": None},
    ]
    floors = [{"floor_id": "up", "name": "Upstairs", "aliases": ["Oppe"]}, {"floor_id": "down", "name": "Kjeller"}]
    household = read_household(exposed, states, entries=entries, devices=devices, areas=areas, floors=floors)
    assert household == Household(
        places_in_use=("Hyttloft", "the loft", "Sauna", "Upstairs", "Oppe"),
        named_entities=("Nuukfjord heater", "Vindkast", "Belax window", "window light"),  # by entity id
        other_places=("Cellar", "Kjeller"),
        other_entities=("Kveldsro humidity",),
    )
    assert household.names[0] == "Hyttloft" and "Secret vault" not in household.names
    assert "Gone lamp" not in household.names  # disabled: gone, and its area (the cellar) is not in use


def test_names_from_home_assistant_are_untrusted_text() -> None:
    """Only strings; control characters and whitespace runs made one space; overlong ones and Whisper's own
    markers left out, not cut; at most MAX_NAMES; any shape of answer gives a household (never an exception)."""
    exposed = {f"light.l{i}": {"conversation": True} for i in range(MAX_NAMES + 50)}
    names = {f"light.l{i}": f"Lamp {i}" for i in range(MAX_NAMES + 50)}
    names |= {"light.l0": "Lamp\n\x1b[31m  zero\t", "light.l1": "x" * (MAX_NAME_CHARS + 1), "light.l2": "<|endoftext|>"}
    names["light.l3"] = ["not", "a", "name"]  # type: ignore[assignment]
    states = [{"entity_id": key, "attributes": {"friendly_name": value}} for key, value in names.items()]
    household = read_household(exposed, states, entries={}, devices=[], areas=[], floors=[])
    assert household.names[0] == "Lamp [31m zero"
    assert len(household.names) == MAX_NAMES
    assert all(len(name) <= MAX_NAME_CHARS and "<|" not in name for name in household.names)
    assert "Lamp 1" not in household.names and "Lamp 4" in household.names
    for shape in (None, [], "x", [1, "a"], {"a": [1]}, {"light.a": "yes"}):
        assert read_household(shape, shape, entries=shape, devices=shape, areas=shape, floors=shape) == Household()  # type: ignore[arg-type]


def test_the_api_url_is_the_peers_and_the_token_comes_from_a_flag_or_a_file(tmp_path: Path) -> None:
    assert websocket_url("http://homeassistant.local:8123/api") == "ws://homeassistant.local:8123/api/websocket"
    assert websocket_url("https://ha.example:8443/api/") == "wss://ha.example:8443/api/websocket"
    assert websocket_url("http://supervisor/core") == "ws://supervisor/core/websocket"  # the add-on's
    assert websocket_url("ws://127.0.0.1:8123/api/websocket") == "ws://127.0.0.1:8123/api/websocket"
    for wrong in ("homeassistant.local:8123", "file:///etc/passwd", "http://", "unix:/run/ha.sock"):
        with pytest.raises(ValueError):
            websocket_url(wrong)
    file = tmp_path / "token"
    file.write_text(f"  {TOKEN}\n")
    assert read_token(None, file) == TOKEN and read_token(TOKEN, None) == TOKEN and read_token(None, None) is None
    file.write_text("a\nb")
    with pytest.raises(ValueError, match="not one line") as refused:
        read_token(None, file)
    assert "a\nb" not in str(refused.value)
    with pytest.raises(ValueError, match="missing"):
        read_token(None, tmp_path / "missing")


# -- the client, over a real socket -------------------------------------------------------------------------------


class Names:
    """What the client handed on, newest last."""

    def __init__(self) -> None:
        self.seen: list[Household] = []

    def __call__(self, household: Household) -> None:
        self.seen.append(household)

    @property
    def now(self) -> tuple[str, ...]:
        return self.seen[-1].names if self.seen else ()


@pytest.fixture
async def hass() -> AsyncIterator[tuple[FakeHass, str]]:
    fake = FakeHass()
    fake.registry.areas.append({"area_id": "loft", "name": "Hyttloft", "aliases": [], "floor_id": None})
    fake.registry.entity("light.a", "Belax window", area="loft")
    fake.registry.entity("switch.b", "Secret vault", exposed=False)
    runner, port = await serve(fake)
    yield fake, f"http://127.0.0.1:{port}/api"
    await runner.cleanup()


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Back-off and quiet times short enough for a test."""
    monkeypatch.setattr(hass_api, "BACKOFF", (0.05, 0.1))
    monkeypatch.setattr(hass_api, "QUIET", 0.2)
    monkeypatch.setattr(hass_api, "ANSWER_SECONDS", 1.0)


async def running(client: HassNames) -> asyncio.Task[None]:
    return asyncio.create_task(client.run())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_names_are_read_once_and_again_after_each_burst_of_registry_changes(
    hass: tuple[FakeHass, str], quick: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Read at connect; a rename arrives as entity_registry_updated and is read QUIET after the burst: one read
    for five events, none without one (no polling per utterance)."""
    caplog.set_level(logging.DEBUG)
    fake, api = hass
    names = Names()
    task = await running(HassNames(api, TOKEN, names))
    await until(lambda: names.now == ("Hyttloft", "Belax window"))
    await asyncio.sleep(0.5)
    assert fake.reads == 1
    fake.registry.entity("light.a", "Nuukfjord heater", aliases=["the heater"], area="loft")
    for _ in range(5):
        await fake.announce("entity_registry_updated", {"action": "update", "entity_id": "light.a"})
        await asyncio.sleep(0.05)
    took = await until(lambda: "Nuukfjord heater" in names.now)
    assert took < 2.0 and names.now == ("Hyttloft", "Nuukfjord heater", "the heater")
    await asyncio.sleep(0.5)
    assert fake.reads == 2
    for event in ("area_registry_updated", "floor_registry_updated", "device_registry_updated"):
        fake.registry.areas[0]["aliases"] = [event]
        await fake.announce(event, {"action": "update"})
        await until(lambda event=event: event in names.now)
    assert fake.reads == 5
    await stop(task)
    assert TOKEN not in caplog.text
    assert "Secret vault" not in caplog.text


async def test_home_assistant_restarting_costs_a_warning_and_the_names_stay(
    hass: tuple[FakeHass, str], quick: None, caplog: pytest.LogCaptureFixture
) -> None:
    fake, api = hass
    names = Names()
    task = await running(HassNames(api, TOKEN, names))
    await until(lambda: fake.reads == 1)
    await fake.drop_connections()
    await until(lambda: fake.logins == 2 and fake.reads == 2)  # connected again, after its back-off, and re-read
    assert names.now == ("Hyttloft", "Belax window")
    assert [r.levelname for r in caplog.records if "Home Assistant at" in r.message] == ["WARNING"]
    await stop(task)


@pytest.mark.parametrize(
    "fault",
    ["wrong token", "never answers", "garbage result", "not an object", "error answer", "nobody listening"],
)
async def test_a_home_assistant_that_answers_wrongly_or_not_at_all_costs_only_a_warning(
    hass: tuple[FakeHass, str], quick: None, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """The client keeps trying with back-off, hands on no names it did not read, logs one warning (the rest at
    debug), never the token, and is stopped at once."""
    caplog.set_level(logging.DEBUG)
    fake, api = hass
    token = TOKEN
    if fault == "wrong token":
        token = "wrong-" + TOKEN
    elif fault == "never answers":
        fake.delay = 60.0
    elif fault == "garbage result":
        fake.broken = lambda c: {"id": c["id"], "type": "result", "success": True, "result": [1, {"x": None}]}
    elif fault == "not an object":
        fake.broken = lambda c: "not an object"
    elif fault == "error answer":
        fake.broken = lambda c: {"id": c["id"], "type": "result", "success": False, "error": {"code": "\x1b[2J"}}
    elif fault == "nobody listening":
        api = "http://127.0.0.1:9/api"
    names = Names()
    task = await running(HassNames(api, token, names))
    await until(lambda: sum("Home Assistant at" in r.message for r in caplog.records) >= 3, timeout=5)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "Home Assistant at" in warnings[0].message, caplog.text
    assert names.seen == [] and not task.done()
    await stop(task)
    assert TOKEN not in caplog.text and "\x1b" not in caplog.text


def test_a_prompted_text_is_kept_where_it_writes_a_name_as_speech_not_as_the_prompt_said_back() -> None:
    """What decides whether a text decoded with names in the prompt is kept (asr/engine.py: else it is decoded again
    without them): a name whole (in any case and punctuation) or nearly; not an empty text, nor the prompt said
    back (with 50 names, German "Wo ist der Bahnhof?" came out "Nuukfjord lamp, Nuukfjord lamp," and French speech
    "Nuukfjord, Vesle lamp, Nuukfjord, Vesle bensoble.")."""
    names = ("Niamh's office", "Wi-Fi plug", "Lamp", "Nuukfjord lamp", "Hyttloft", "Vesle lamp", "Kitchen light")
    rare = {
        "niamh's",
        "nuukfjord",
        "hyttloft",
        "vesle",
        "varanger",
        "kvernhus",
        "saunas",
    }.__contains__  # (the tokenizer's verdict, in the engine)

    def heard(text: str) -> bool:
        return names_heard(text, names, rare)

    assert heard("Turn on the fan in niamh’s Office.") and heard("Switch off the wi fi plug!") and heard("LAMP")
    assert heard("Hyttloft.")  # the answer to "in which area?"
    assert heard("Turn on the Nuukfjord lamp and the Wi-Fi plug.") and heard("Is the kitchen light on in Hyttloft?")
    assert not heard("Turn on the lamps.") and not heard("Nine offices") and not heard("")
    assert not heard("Nuukfjord lamp, Nuukfjord lamp,") and not heard("Hyttloft, Lamp, Wi-Fi plug.")
    assert not heard("Nuukfjord, Vesle lamp, Nuukfjord, Vesle bensoble.") and not heard("Vesle fan, Vesle flasse")
    assert heard("Turn on the lamp in the kitchen and the Wi-Fi plug")  # "lamp": a common word of a name
    # nearly: the prompt at work, more right than the text without it (a command the peer wrote so, ours not)
    assert names_heard("Turn on the Baranger Chandelier.", ("Varanger Chandelier",), rare)
    assert names_heard("Set the Kvarnas heater to 21 degrees", ("Kvernhus Heater",), rare)
    assert not names_heard("Turn on the bathroom light", ("Bedroom light",), rare)
    assert not names_heard("Open the sauna", ("Saunas",), rare)  # too short to be nearly written
