"""Names from Home Assistant (issue 39): which names, in what order (household.py), and the websocket client that
keeps them current (hass_api.py), against a stand-in for Home Assistant's websocket API over a real socket
(tests/fake_hass.py; tests/ha/test_names.py runs against a real Home Assistant). Issue 49: where the token may go
(never to a plain ws:// host nobody named, nor after a redirect), what an answer may cost (capped in bytes, a large
one parsed in a child process: hass_answers.py), and Home Assistant's address, told as the connection learns it;
tests/test_hass_bounds.py does the same through a whole server."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_hass import TOKEN, FakeHass, filler_states, serve, until

from wyoming_wis import hass_api
from wyoming_wis.asr.engine import names_heard
from wyoming_wis.config import Settings
from wyoming_wis.hass_answers import cut_message
from wyoming_wis.hass_api import MAX_MESSAGE_BYTES, HassNames, read_token, websocket_url
from wyoming_wis.household import ESSENTIALS, MAX_NAME_CHARS, MAX_NAMES, Household, read_household

pytestmark = pytest.mark.fast


# -- which names, in what order -----------------------------------------------------------------------------------


def answers() -> dict[str, Any]:
    """A household's answers, by command, as Home Assistant sends them (trimmed of what nobody reads)."""
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
    return {
        "homeassistant/expose_entity/list": {"exposed_entities": exposed},
        "get_states": states,
        "config/entity_registry/get_entries": entries,
        "config/device_registry/list": devices,
        "config/area_registry/list": areas,
        "config/floor_registry/list": floors,
    }


def household_of(answer: dict[str, Any]) -> Household:
    return read_household(
        answer["homeassistant/expose_entity/list"]["exposed_entities"],
        answer["get_states"],
        entries=answer["config/entity_registry/get_entries"],
        devices=answer["config/device_registry/list"],
        areas=answer["config/area_registry/list"],
        floors=answer["config/floor_registry/list"],
    )


def test_tiers_put_rooms_in_use_first_then_devices_people_name_then_the_rest() -> None:
    """As wyoming-faster-whisper orders them (the held-out household: 19 of 19 in this order, 18 as a flat list);
    each alias right after its name; unexposed, disabled and null aliases left out; duplicates in any case once."""
    household = household_of(answers())
    assert household == Household(
        places_in_use=("Hyttloft", "the loft", "Sauna", "Upstairs", "Oppe"),
        named_entities=("Nuukfjord heater", "Vindkast", "Belax window", "window light"),  # by entity id
        other_places=("Cellar", "Kjeller"),
        other_entities=("Kveldsro humidity",),
        domains=(
            ("Nuukfjord heater", "climate"),
            ("Vindkast", "fan"),
            ("Belax window", "light"),
            ("window light", "light"),  # an alias: its entity's
            ("Kveldsro humidity", "sensor"),
        ),
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
        self.addresses: list[str] = []  # what on_address was told

    def __call__(self, household: Household) -> None:
        self.seen.append(household)

    def address(self, address: str) -> None:
        self.addresses.append(address)

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
    task = await running(HassNames(api, TOKEN, names, on_address=names.address))
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
    task = await running(HassNames(api, TOKEN, names, on_address=names.address))
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
    task = await running(HassNames(api, token, names, on_address=names.address))
    await until(lambda: sum("Home Assistant at" in r.message for r in caplog.records) >= 3, timeout=5)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "Home Assistant at" in warnings[0].message, caplog.text
    assert names.seen == [] and not task.done()
    await stop(task)
    assert TOKEN not in caplog.text and "\x1b" not in caplog.text


# -- where the token goes (issue 49) -------------------------------------------------------------------------------


def settings_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What the server says when it refuses to start with `argv` (exit status 2); '' where it starts."""
    try:
        Settings.from_args(list(argv), environ={})
    except SystemExit as exit:
        assert exit.code == 2
        return capsys.readouterr().err
    return ""


def test_a_token_goes_over_tls_to_the_supervisor_or_to_loopback_unless_the_user_names_a_plain_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Today's main sent the admin token over plain ws:// to whoever answered, by default to homeassistant.local,
    a name any host on the network may answer for (mDNS). A token with a plain URL to a host nobody named is a
    startup error saying what to add; no name is looked up to decide."""
    refused = settings_error(capsys, "--hass-token", TOKEN)  # the default --hass-api
    assert "unencrypted (ws://) to homeassistant.local" in refused
    assert "add --hass-plain-host homeassistant.local (WIS_HASS_PLAIN_HOST=homeassistant.local)" in refused
    assert TOKEN not in refused
    for plain in ("http://192.168.1.20:8123/api", "ws://ha.lan:8123/api/websocket", "http://127.1:8123/api"):
        assert "--hass-plain-host" in settings_error(capsys, "--hass-token", TOKEN, "--hass-api", plain), plain
        with pytest.raises(ValueError, match="unencrypted"):
            HassNames(plain, TOKEN, Names(), on_address=Names().address)
    assert "--hass-plain-host ha.lan" in settings_error(capsys, "--hass-token-file", "t", "--hass-api", "http://ha.lan")
    for allowed in (
        ("--hass-api", "https://ha.example:8443/api"),
        ("--hass-api", "wss://192.168.1.20:8123/api/websocket"),
        ("--hass-api", "http://supervisor/core"),  # the add-on's
        ("--hass-api", "http://127.0.0.1:8123/api"),
        ("--hass-api", "http://[::1]:8123/api"),
        ("--hass-api", "http://localhost:8123/api"),  # (its peer must be loopback: below)
        ("--hass-api", "http://192.168.1.20:8123/api", "--hass-plain-host", "192.168.1.20"),
        ("--hass-api", "http://HA.lan./api", "--hass-plain-host", "ha.LAN"),
    ):
        assert settings_error(capsys, "--hass-token", TOKEN, *allowed) == "", allowed
    assert settings_error(capsys) == ""  # without a token nothing goes anywhere
    assert settings_error(capsys, "--hass-plain-host", "http://x/") != ""  # a host, not a URL


async def test_a_redirect_is_not_followed_with_the_token(quick: None, caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp follows redirects on ws_connect: today's main logged in wherever Home Assistant's URL sent it."""
    elsewhere = FakeHass()
    elsewhere.registry.entity("light.a", "Belax window")
    runner, port = await serve(elsewhere)
    stranger = f"http://127.0.0.1:{port}/api/websocket"
    redirecting = FakeHass(redirect=stranger)
    redirecting_runner, redirecting_port = await serve(redirecting)
    names = Names()
    task = await running(HassNames(f"http://127.0.0.1:{redirecting_port}/api", TOKEN, names, on_address=names.address))
    try:
        await until(lambda: redirecting.redirected >= 3, timeout=5)  # (and its tries after)
        assert elsewhere.connections == 0 and elsewhere.logins == 0 and names.seen == []
        assert f"redirected to {stranger!r}; the token goes only to --hass-api" in caplog.text
    finally:
        await stop(task)
        await redirecting_runner.cleanup()
        await runner.cleanup()


def outward_address() -> str:
    """An address of this machine that is not loopback: the one it would send to another network from."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # (UDP: nothing is sent)
        return str(probe.getsockname()[0])


def resolving(monkeypatch: pytest.MonkeyPatch, name: str, address: str) -> None:
    """`name` resolves to `address` for this test, as /etc/hosts or DNS might say."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real(address if host == name else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


async def test_localhost_that_is_not_a_loopback_address_gets_no_token(
    quick: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`localhost` is trusted as loopback; what decides is the connection's peer, not what the name says."""
    outward = outward_address()
    fake = FakeHass()
    runner, port = await serve(fake, host=outward)
    resolving(monkeypatch, "localhost", outward)
    names = Names()
    task = await running(HassNames(f"http://localhost:{port}/api", TOKEN, names, on_address=names.address))
    try:
        await until(lambda: "not a loopback address" in caplog.text, timeout=5)
        assert fake.connections == 1 and fake.logins == 0 and names.seen == [] and names.addresses == []
        assert f"answered from {outward}, not a loopback address: the token was not sent" in caplog.text
    finally:
        await stop(task)
        await runner.cleanup()


# -- Home Assistant's address ---------------------------------------------------------------------------------------


async def test_home_assistants_address_is_the_peers_once_logged_in(hass: tuple[FakeHass, str], quick: None) -> None:
    fake, api = hass
    names = Names()
    task = await running(HassNames(api, TOKEN, names, on_address=names.address))
    await until(lambda: fake.reads == 1)
    await fake.drop_connections()
    await until(lambda: fake.reads == 2)
    assert names.addresses == ["127.0.0.1"]  # told once: it did not change
    await stop(task)
    wrong = Names()
    task = await running(HassNames(api, "wrong-" + TOKEN, wrong, on_address=wrong.address))
    await until(lambda: fake.connections == 3)
    await asyncio.sleep(0.2)
    assert wrong.addresses == []  # not logged in: not known to be Home Assistant
    await stop(task)


async def test_through_the_supervisor_home_assistants_address_is_the_supervisors_word(
    hass: tuple[FakeHass, str], quick: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The add-on's websocket goes to the Supervisor's proxy, whose address is the Supervisor's: Home Assistant's
    is what GET http://supervisor/core/info says (with the same token; the add-on's config has hassio_api)."""
    fake, api = hass
    resolving(monkeypatch, "supervisor", "127.0.0.1")
    port = api.split(":")[2].split("/")[0]
    names = Names()
    task = await running(HassNames(f"http://supervisor:{port}/core", TOKEN, names, on_address=names.address))
    await until(lambda: names.now == ("Hyttloft", "Belax window"))
    assert names.addresses == ["172.30.32.1"]
    await stop(task)
    assert TOKEN not in caplog.text


# -- what an answer may cost ------------------------------------------------------------------------------------------


def test_a_large_answer_is_cut_to_what_household_reads_and_gives_the_same_household() -> None:
    """hass_answers.py parses a large message one record at a time in a child and sends back only what
    household.ESSENTIALS says is read; the household of the cut answers is the whole answers' one."""
    full = answers()
    exposed = sorted(full["homeassistant/expose_entity/list"]["exposed_entities"])
    cut = {}
    for command, result in full.items():
        message = json.dumps({"id": 7, "type": "result", "success": True, "result": result, "x": [1]}).encode()
        (envelope,) = json.loads(cut_message(message, command, exposed if command == "get_states" else None))
        assert set(envelope) == {"id", "type", "success", "result"}
        cut[command] = envelope["result"]
    assert set(cut) == set(ESSENTIALS)
    assert household_of(cut) == household_of(full)
    assert cut["get_states"][0] == {"entity_id": "light.a", "attributes": {"friendly_name": "Belax window"}}
    assert "switch.hidden" not in cut["homeassistant/expose_entity/list"]["exposed_entities"]
    big = filler_states(2 * 2**20)
    message = b'[{"id":1,"type":"event","event":{"a":1}},{"id":2,"type":"result","success":true,"result":%s}]' % big
    event, states = json.loads(cut_message(message, "get_states", ["light.a"]))
    assert event == {"id": 1, "type": "event"} and states == {"id": 2, "type": "result", "success": True, "result": []}
    for shape in (None, [], "x", [1, "a"], {"a": [1]}, {"light.a": "yes"}):
        for command in ESSENTIALS:
            message = json.dumps({"id": 1, "type": "result", "success": True, "result": shape}).encode()
            assert "result" in json.loads(cut_message(message, command, None))[0], (command, shape)
    for wrong in (b"", b"{", b'{"a":1} x', b"\xff", b"[1,]", b'{"result": [1 2]}', b'{"id" 1}', b"[" * 100_000):
        with pytest.raises((ValueError, RecursionError)):
            cut_message(wrong, "get_states", None)


async def test_a_large_answer_is_parsed_in_a_child_and_holds_no_one_up(
    hass: tuple[FakeHass, str], quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer of nearly MAX_MESSAGE_BYTES (9,000 thermostats of 1.7 kB): the names are read, and this process's event
    loop, which the fake Home Assistant shares, is never held 0.25 s (SECURITY.md's target for describe). Today's
    main parsed it with json.loads in a thread, which holds the GIL throughout."""
    monkeypatch.setattr(hass_api, "ANSWER_SECONDS", 30.0)
    fake, api = hass
    fake.filler = filler_states(MAX_MESSAGE_BYTES - 2**20)
    fake.hold_states = asyncio.Event()
    names = Names()
    task = await running(HassNames(api, TOKEN, names, on_address=names.address))
    await until(lambda: fake.holding == 1)  # (the fake's answer made: only the client's work is timed)
    loop = asyncio.get_running_loop()
    worst = 0.0
    fake.hold_states.set()
    began = time.monotonic()
    while not names.seen and time.monotonic() - began < 60:
        at = loop.time()
        await asyncio.sleep(0.01)
        worst = max(worst, loop.time() - at - 0.01)
    print(f"{len(fake.filler) / 2**20:.1f} MiB read in {time.monotonic() - began:.2f} s; the loop held {worst:.3f} s")
    assert names.now == ("Hyttloft", "Belax window")
    assert worst < 0.25
    await stop(task)


@pytest.mark.parametrize("fault", ["over the cap", "large and not JSON"])
async def test_a_large_answer_that_is_too_large_or_wrong_costs_a_warning(
    hass: tuple[FakeHass, str], quick: None, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """Over MAX_MESSAGE_BYTES (16 MiB) a message is refused as it comes, before a byte of it is held (today's
    main took up to 64 MiB, and 60 MiB cost it 1.6 GB); a large one that is not JSON fails in its child."""
    fake, api = hass
    if fault == "over the cap":
        fake.filler = filler_states(MAX_MESSAGE_BYTES + 2**20)
    else:
        fake.filler = b"[" + b"x" * 2**20 + b"]"
    names = Names()
    task = await running(HassNames(api, TOKEN, names, on_address=names.address))
    await until(lambda: "Home Assistant at" in caplog.text, timeout=20)
    assert names.seen == []
    said = "exceeds limit 16777216" if fault == "over the cap" else "sent a message that is not JSON"
    assert said in caplog.text
    await stop(task)


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
