"""Names from Home Assistant (issue 39): the server reads a real Home Assistant's areas, floors and the entities
exposed to Assist over HA's websocket API (--hass-api, --hass-token-file), and Whisper writes them as HA spells them.

The Home Assistant is the suite's `hass`, with its own websocket API served on loopback (`hass_api` below: HA's
app on a random port of 127.0.0.1, an admin's token in a file) and a household of names Whisper base has never
heard ("Nuukfjord Lamp", "Kveldsro", ...): without help it writes "nuke-jord lamp and K-Veltra". Some things are
not exposed to Assist, one is disabled: their names must never be written. Commands that say the names are spoken
by the server's own Piper through HA's TTS entity at two speeds (a custom voice of the data dir's voices.json), and
transcribed through HA's wyoming STT entity by two servers of this checkout: one with the names, and the suite's
server without them (the same audio).

The server logs one line `Names from Home Assistant: N names (...)` per reading; the tests count them (no reading
per utterance) and time the one after a change in the registries (within 5 s). tests/ha/bench_names.py uses the
household and helpers here for bench/ha_names.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from aiohttp import ClientSession
from conftest import COMPONENTS, Wis, WisServer, add_server, entity_ids, start_wis, stop_wis
from homeassistant.components import stt
from homeassistant.components.homeassistant.exposed_entities import async_expose_entity
from homeassistant.core import Event, HomeAssistant, callback
from homeassistant.helpers import area_registry as ar
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers import floor_registry as fr
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry
from support import Pcm, chunks, decode, espeak, metadata, stream, wer, within

# -- the household ----------------------------------------------------------------------


@dataclass(frozen=True)
class Floor:
    name: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Area:
    name: str
    floor: str | None = None  # its floor's name
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Thing:
    """An entity: in the entity registry, with a state whose friendly_name is its name (unless disabled)."""

    entity_id: str
    name: str
    area: str | None = None  # its area's name
    aliases: tuple[str, ...] = ()
    exposed: bool = True  # to Assist ("conversation"); False: explicitly not
    disabled: bool = False
    device: str | None = None  # a device of DEVICES: it is in the device's area, having none of its own


class Household(NamedTuple):
    """What set_up_household puts in HA's registries."""

    floors: tuple[Floor, ...]
    areas: tuple[Area, ...]
    devices: dict[str, str]  # a device's name: its area's
    things: tuple[Thing, ...]


FLOORS = (
    Floor("Ground Floor", ("Downstairs",)),
    Floor("Takloftet", ("Attic",)),
    Floor("Kjellaren", ("Cellar",)),
)
AREAS = (
    Area("Kveldsro", "Ground Floor", ("Lounge",)),
    Area("Solstua", "Ground Floor", ("Sunroom",)),
    Area("Kitchen", "Ground Floor"),
    Area("Hallway", "Ground Floor", ("Entrance",)),
    Area("Tjernvik Study", "Takloftet"),
    Area("Lillebo", "Takloftet", ("Kids Room",)),
    Area("Gjesterommet", "Takloftet"),  # only an unexposed lamp: a place nothing can be done in
    Area("Bryggerhuset", "Kjellaren", ("Laundry",)),
    Area("Vinkjelleren", "Kjellaren"),  # a device's area
    Area("Garage"),
)
DEVICES = {"Vardo Weather Station": "Vinkjelleren"}
THINGS = (
    Thing("light.nuukfjord_lamp", "Nuukfjord Lamp", "Kveldsro"),
    Thing("light.ylvane_spots", "Ylvane Spots", "Kitchen", ("Counter Lights",)),
    Thing("light.ormhaug_strip", "Ormhaug Strip", "Lillebo"),
    Thing("light.varanger_chandelier", "Varanger Chandelier", "Hallway"),
    Thing("light.sandvika_porch_light", "Sandvika Porch Light", "Hallway", ("Porch Glow",)),
    Thing("switch.gaupefell_kettle", "Gaupefell Kettle", "Kitchen"),
    Thing("switch.myrdal_pump", "Myrdal Pump", "Bryggerhuset"),
    Thing("fan.kaldvik_fan", "Kaldvik Fan", "Tjernvik Study"),
    Thing("media_player.tromsund_speaker", "Tromsund Speaker", "Solstua", ("Sun Radio",)),
    Thing("media_player.fjellheim_tv", "Fjellheim TV", "Kveldsro"),
    Thing("climate.kvernhus_heater", "Kvernhus Heater", "Tjernvik Study"),
    Thing("scene.hyggestund", "Hyggestund"),
    Thing("scene.morgengry", "Morgengry"),
    Thing("todo.handleliste", "Handleliste", None, ("Shopping List",)),
    Thing("cover.belax_window", "Belax Window", "Solstua"),
    Thing("lock.kvitebjorn_door", "Kvitebjorn Door", "Hallway"),
    Thing("sensor.vardo_thermometer", "Vardo Thermometer", device="Vardo Weather Station"),
    Thing("vacuum.tussi", "Tussi", "Lillebo"),
    # never in a transcript: not exposed, or disabled
    Thing("light.hvalstad_lamp", "Hvalstad Lamp", "Gjesterommet", exposed=False),
    Thing("switch.quorvath_heater", "Quorvath Heater", "Garage", exposed=False),
    Thing("cover.strandlykke_gate", "Strandlykke Gate", "Garage", exposed=False),
    Thing("light.drobak_lantern", "Drobak Lantern", "Hallway", disabled=True),
)
HOUSEHOLD = Household(FLOORS, AREAS, DEVICES, THINGS)
# Its aliases also hold the computed name (null in the API), where HA has that (2026.4 and later: er.COMPUTED_NAME)
COMPUTED_ALIAS = "light.sandvika_porch_light"
HIDDEN = [thing for thing in THINGS if not thing.exposed or thing.disabled]
# The word of each hidden thing's name that Whisper base never writes unless it was told it
HIDDEN_WORDS = [thing.name.split()[0] for thing in HIDDEN]


def expected_counts(floor_aliases: bool = True) -> tuple[int, int]:
    """What the server should read: every area and floor with its aliases (a floor's only where HA's API gives them:
    2024.3's floor_registry/list does not); every exposed, enabled entity with its aliases (not the computed one)."""
    places = sum(1 + len(area.aliases) for area in AREAS) + sum(
        1 + (len(floor.aliases) if floor_aliases else 0) for floor in FLOORS
    )
    things = sum(1 + len(thing.aliases) for thing in THINGS if thing.exposed and not thing.disabled)
    return places, things


def aliases_value(aliases: tuple[str, ...], computed: bool = False) -> object:
    """Aliases as this HA's registry takes them: a list that may hold the computed name (2026.4+), else a set."""
    if hasattr(er, "COMPUTED_NAME"):
        return [er.COMPUTED_NAME, *aliases] if computed else list(aliases)
    return set(aliases)


async def set_up_household(hass: HomeAssistant, household: Household | None = None) -> None:
    """A household (this module's by default: FLOORS, AREAS, DEVICES, THINGS) in HA's registries, its things'
    states, and what is exposed to Assist; with the components our server's entities and HA's API need."""
    household = household or HOUSEHOLD
    for domain in (*COMPONENTS, "websocket_api", "config"):
        assert await async_setup_component(hass, domain, {}), domain
    floor_registry = fr.async_get(hass)
    floor_ids = {
        floor.name: floor_registry.async_create(floor.name, aliases=set(floor.aliases)).floor_id
        for floor in household.floors
    }
    area_registry = ar.async_get(hass)
    area_ids = {
        area.name: area_registry.async_create(
            area.name, aliases=set(area.aliases), floor_id=floor_ids.get(area.floor or "")
        ).id
        for area in household.areas
    }
    config_entry = MockConfigEntry(domain="test", title="The household's devices")
    config_entry.add_to_hass(hass)
    device_registry = dr.async_get(hass)
    device_ids = {}
    for name, area in household.devices.items():
        device = device_registry.async_get_or_create(
            config_entry_id=config_entry.entry_id, identifiers={("test", name)}, name=name
        )
        device_registry.async_update_device(device.id, area_id=area_ids[area])
        device_ids[name] = device.id
    entity_registry = er.async_get(hass)
    for thing in household.things:
        domain, object_id = thing.entity_id.split(".")
        entry = entity_registry.async_get_or_create(
            domain,
            "test",
            object_id,
            suggested_object_id=object_id,
            original_name=thing.name,
            disabled_by=er.RegistryEntryDisabler.USER if thing.disabled else None,
        )
        assert entry.entity_id == thing.entity_id, entry
        entity_registry.async_update_entity(
            thing.entity_id,
            area_id=area_ids[thing.area] if thing.area else None,
            aliases=aliases_value(thing.aliases, thing.entity_id == COMPUTED_ALIAS),
            device_id=device_ids[thing.device] if thing.device else None,
        )
        if not thing.disabled:
            hass.states.async_set(thing.entity_id, "off", {"friendly_name": thing.name})
        async_expose_entity(hass, "conversation", thing.entity_id, thing.exposed)
    await hass.async_block_till_done()


# -- Home Assistant's API -------------------------------------------------------------------


@dataclass
class HassApi:
    """Home Assistant's own HTTP and websocket API, served on loopback as a real one serves it, and an
    administrator's access token in a file (what --hass-token-file reads)."""

    url: str  # http://127.0.0.1:PORT/api
    token: str
    token_file: Path

    @property
    def websocket(self) -> str:
        return self.url.replace("http://", "ws://", 1) + "/websocket"


@pytest.fixture
async def hass_api(hass: HomeAssistant, aiohttp_client: Any, hass_access_token: str, tmp_path: Path) -> HassApi:
    """HA's API on a random port of 127.0.0.1 (`aiohttp_client` serves HA's own app over real TCP, websocket
    included), with the components it needs and those the assist paths use (COMPONENTS, and wyoming's
    dependencies): once it serves, no component may add a view."""
    for domain in (*COMPONENTS, "websocket_api", "config", "wyoming"):
        assert await async_setup_component(hass, domain, {}), domain
    client = await aiohttp_client(hass.http.app)
    token_file = tmp_path / "hass-token"
    token_file.write_text(hass_access_token + "\n")
    return HassApi(f"http://127.0.0.1:{client.port}/api", hass_access_token, token_file)


# -- the servers ------------------------------------------------------------------------

NAMES_LINE = "Names from Home Assistant: "
NAMES_READ = re.compile(r"Names from Home Assistant: \d+ names \(")
NAMES_COUNTS = re.compile(
    r"Names from Home Assistant: (\d+) names \((\d+) areas and floors, (\d+) entities and aliases"
)
# Custom voices of the server's voices.json: joe at other speeds, and without Piper's random variation (noise 0: the
# same audio every take, so that the tests hear what they heard before; the bench takes the varying ones)
VOICES = {
    "joe-slow": {"speed": 0.85},
    "joe-fast": {"speed": 1.2},
    "joe-steady": {"noise_scale": 0.0, "noise_w": 0.0},
    "joe-steady-slow": {"speed": 0.85, "noise_scale": 0.0, "noise_w": 0.0},
}
REGISTRY_EVENTS = (
    "entity_registry_updated",
    "area_registry_updated",
    "floor_registry_updated",
    "device_registry_updated",
)


def names_lines(server: WisServer) -> list[str]:
    """The server's readings of the names: one line each (not its other lines that start the same way)."""
    return [line for line in server.log.splitlines() if NAMES_READ.search(line)]


def write_voices(data_dir: Path) -> None:
    """VOICES: Piper's joe in other manners, as custom voices (wyoming_wis/tts/voices.py's manifest)."""
    manifest = {"voices": {name: {"model": "en_US-joe-medium", **manner} for name, manner in VOICES.items()}}
    (data_dir / "voices").mkdir(parents=True, exist_ok=True)
    (data_dir / "voices" / "voices.json").write_text(json.dumps(manifest))


async def start_server(workdir: Path, *options: str) -> WisServer:
    """start_wis (the server of this checkout) in a thread: HA's loop goes on serving meanwhile, as the server
    reads the names while it starts."""
    workdir.mkdir(parents=True, exist_ok=True)
    write_voices(workdir / "data")
    return await asyncio.to_thread(start_wis, workdir, *options)


async def stop_server(server: WisServer) -> None:
    """Stop it while HA's loop runs (HA answers the websocket's close), then stop_wis's checks."""
    server.process.terminate()
    for _ in range(200):
        if server.process.poll() is not None:
            break
        await asyncio.sleep(0.1)
    stop_wis(server)
    await asyncio.sleep(0.2)  # HA's side of the websocket ends


def with_names(hass_api: HassApi, token_file: bool = True) -> tuple[str, ...]:
    """The flags that give the server HA's names: the token in a file, or (`token_file` False) on the command line."""
    token = ("--hass-token-file", str(hass_api.token_file)) if token_file else ("--hass-token", hass_api.token)
    return ("--hass-api", hass_api.url, *token)


async def added(hass: HomeAssistant, server: WisServer) -> Wis:
    entry = await add_server(hass, server.host, server.port)
    ids = entity_ids(hass, entry)
    return Wis(hass, server, entry, ids["stt"], ids.get("tts", ""))  # (the peer has no TTS)


class RegistryEvents:
    """The registry events HA fires while it is listened to (what may make the server read the names again)."""

    def __init__(self, hass: HomeAssistant) -> None:
        self.times: list[float] = []
        self._unsubscribe = [hass.bus.async_listen(kind, self._heard) for kind in REGISTRY_EVENTS]

    @callback
    def _heard(self, _: Event) -> None:
        self.times.append(time.monotonic())

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()


@pytest.fixture
def registry_events(hass: HomeAssistant) -> Iterator[RegistryEvents]:
    events = RegistryEvents(hass)
    yield events
    events.close()


async def ask(hass_api: HassApi, *commands: dict[str, Any]) -> list[Any]:
    """What HA's websocket API answers to `commands`, as the server's client or any other would ask."""
    async with ClientSession() as session, session.ws_connect(hass_api.websocket) as ws:
        assert (await ws.receive_json())["type"] == "auth_required"
        await ws.send_json({"type": "auth", "access_token": hass_api.token})
        assert (await ws.receive_json())["type"] == "auth_ok"
        results = []
        for number, command in enumerate(commands, 1):
            await ws.send_json({"id": number, **command})
            answer = await ws.receive_json()
            assert answer["id"] == number and answer["success"], (command, answer)
            results.append(answer["result"])
        return results


async def settled(server: WisServer, events: RegistryEvents, quiet: float = 3.0, limit: float = 30.0) -> int:
    """Wait until the server has read the names and then neither it read them again nor HA changed a registry for
    `quiet` seconds; the number of readings so far."""
    deadline = time.monotonic() + limit
    last = (-1, -1)
    since = time.monotonic()
    while time.monotonic() < deadline:
        now = (len(names_lines(server)), len(events.times))
        if now != last:
            last, since = now, time.monotonic()
        elif now[0] > 0 and time.monotonic() - since >= quiet:
            return now[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"the server's readings did not settle in {limit:g} s: {names_lines(server)}\n{server.log}")


async def next_reading(server: WisServer, before: int, seconds: float) -> float:
    """Seconds until the server logs reading number `before + 1`; fails after `seconds`."""
    started = time.monotonic()
    while len(names_lines(server)) <= before:
        if time.monotonic() - started > seconds:
            raise AssertionError(f"no new reading within {seconds:g} s: {names_lines(server)}\n{server.log[-4000:]}")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


# -- speech ---------------------------------------------------------------------------


async def spoken(wis: Wis, text: str, voice: str | None) -> Pcm:
    """`text` spoken by the server's Piper through HA's TTS entity (`voice`: a custom voice of VOICES, None: the
    default voice), or by espeak-ng (`voice` "espeak"); without the silence around it."""
    if voice == "espeak":
        return (await espeak(text, "en-us")).trimmed()
    options = {"voice": voice} if voice else {}
    _, audio = await within(
        30, f"TTS of {text!r}", wis.tts.async_get_tts_audio(text, wis.tts.default_language, options)
    )
    assert audio, f"no audio for {text!r}"
    return (await decode(audio)).trimmed()


async def heard(wis: Wis, pcm: Pcm) -> str:
    """What HA's STT entity of `wis` hears in `pcm` (homeassistant/components/wyoming/stt.py)."""
    result = await within(
        60, "HA's STT", wis.stt.internal_async_process_audio_stream(metadata("en"), stream(chunks(pcm)))
    )
    assert result.result == stt.SpeechResultState.SUCCESS, result
    return result.text or ""


def written(name: str, text: str) -> bool:
    """`name` is in `text` as it is spelled (whatever the case)."""
    return " ".join(name.casefold().split()) in " ".join(text.casefold().split())


@dataclass(frozen=True)
class Command:
    text: str
    names: tuple[str, ...] = ()  # exposed names it says
    hidden: tuple[str, ...] = ()  # names of HIDDEN it says


# Names Whisper base gets wrong alone and right with the household's names, in SPEAKERS' takes (others, as
# "Activate Hyggestund", come out near but not exact: bench/ha_names.py counts them all)
COMMANDS = (
    Command("Turn on the Nuukfjord Lamp in Kveldsro", ("Nuukfjord Lamp", "Kveldsro")),
    Command("Open the Belax Window in the Solstua", ("Belax Window", "Solstua")),
    Command("Dim the Ylvane Spots to half", ("Ylvane Spots",)),
    Command("Play music on the Tromsund Speaker", ("Tromsund Speaker",)),
    Command("Turn on the Kaldvik Fan in the Tjernvik Study", ("Kaldvik Fan", "Tjernvik Study")),
    Command("What is the temperature of the Vardo Thermometer", ("Vardo Thermometer",)),
    Command("Turn off the lights on Takloftet", ("Takloftet",)),
    Command("Switch on the Myrdal Pump in Bryggerhuset", ("Myrdal Pump", "Bryggerhuset")),
    Command("Pause the Fjellheim TV", ("Fjellheim TV",)),
    Command("Start the Morgengry scene", ("Morgengry",)),
    # hidden: if their names were in the prompt Whisper would write them (it does, told them)
    Command("Turn on the Hvalstad Lamp", hidden=("Hvalstad Lamp",)),
    Command("Switch off the Quorvath Heater", hidden=("Quorvath Heater",)),
    Command("Open the Strandlykke Gate", hidden=("Strandlykke Gate",)),
    Command("Turn on the Drobak Lantern", hidden=("Drobak Lantern",)),
    # no names: the prompt must not make these worse
    Command("Turn on the bedroom light"),
    Command("Set a timer for 10 minutes"),
)
SPEAKERS = ("joe-steady", "joe-steady-slow")  # at 1.0 and 0.85, the same takes every run


# -- the tests --------------------------------------------------------------------------


async def test_home_assistant_serves_the_household(hass: HomeAssistant, hass_api: HassApi) -> None:
    """The fixture itself: HA's websocket API answers on its URL, with the token, and says what is exposed (a
    tiny client does what the server does)."""
    await set_up_household(hass)
    exposed, floors, areas = await ask(
        hass_api,
        {"type": "homeassistant/expose_entity/list"},
        {"type": "config/floor_registry/list"},
        {"type": "config/area_registry/list"},
    )
    conversation = {entity_id for entity_id, to in exposed["exposed_entities"].items() if to.get("conversation")}
    assert conversation == {thing.entity_id for thing in THINGS if thing.exposed}
    assert [floor["name"] for floor in floors] == [floor.name for floor in FLOORS]
    assert {area["name"] for area in areas} == {area.name for area in AREAS}
    (entries,) = await ask(hass_api, {"type": "config/entity_registry/get_entries", "entity_ids": sorted(conversation)})
    assert entries["light.drobak_lantern"]["disabled_by"] == "user"
    if hasattr(er, "COMPUTED_NAME"):
        assert None in entries[COMPUTED_ALIAS]["aliases"], entries[COMPUTED_ALIAS]


@pytest.mark.timeout(600)
async def test_names_are_written(
    hass: HomeAssistant,
    hass_api: HassApi,
    wis_server: WisServer,
    registry_events: RegistryEvents,
    tmp_path: Path,
) -> None:
    """Ours with the names writes them as HA spells them; the same server without them (the suite's) does not;
    no hidden (unexposed or disabled) name is ever written; commands without names are heard as well as without
    the prompt; the names are read once, not per utterance; the token is never logged."""
    await set_up_household(hass)
    server = await start_server(tmp_path / "wis-names", *with_names(hass_api))
    try:
        ours, plain = await added(hass, server), await added(hass, wis_server)
        readings = await settled(server, registry_events)
        found = NAMES_COUNTS.search(names_lines(server)[-1])
        (floors,) = await ask(hass_api, {"type": "config/floor_registry/list"})
        places, things = expected_counts(floor_aliases=all("aliases" in floor for floor in floors))
        assert found, names_lines(server)
        assert (int(found[1]), int(found[2]), int(found[3])) == (places + things, places, things), found[0]
        clips = [
            (command, voice, await spoken(ours, command.text, voice)) for command in COMMANDS for voice in SPEAKERS
        ]
        events_before = len(registry_events.times)
        rows = [(command, voice, await heard(ours, pcm), await heard(plain, pcm)) for command, voice, pcm in clips]
        table = "\n".join(f"{voice or 'joe'}: {text!r} | {without!r}" for _, voice, text, without in rows)
        # (d) no reading per utterance: at most one per burst of registry changes HA made meanwhile (none, usually)
        new_events = len(registry_events.times) - events_before
        new_readings = len(names_lines(server)) - readings
        assert new_readings <= min(new_events, 1), (new_readings, new_events, names_lines(server))
    finally:
        await stop_server(server)

    said = [(name, text, without) for command, _, text, without in rows for name in command.names]
    ours_right = [name for name, text, _ in said if written(name, text)]
    plain_right = [name for name, _, without in said if written(name, without)]
    print(f"names written: {len(ours_right)} of {len(said)} with the names, {len(plain_right)} without\n{table}")
    # (a) every name as HA spells it, but for a slip in ten (a take Piper says oddly); without the names, few if any
    slips = max(1, len(said) // 10)
    assert len(ours_right) >= len(said) - slips, f"{len(ours_right)} of {len(said)} names written:\n{table}"
    assert len(plain_right) <= len(said) // 2 < len(ours_right), f"without names: {plain_right}\n{table}"
    # (b) a hidden thing's name never: neither in the commands that say it nor anywhere else
    leaked = [(word, text) for *_, text, _ in rows for word in HIDDEN_WORDS if word.casefold() in text.casefold()]
    assert not leaked, f"hidden names written: {leaked}\n{table}"
    # no-name commands: the prompt makes them no worse
    plain_rows = [
        (command.text, text, without) for command, _, text, without in rows if not command.names + command.hidden
    ]
    reference = " ".join(said for said, _, _ in plain_rows)
    with_prompt = wer(reference, " ".join(text for _, text, _ in plain_rows))
    without_prompt = wer(reference, " ".join(without for _, _, without in plain_rows))
    assert with_prompt <= without_prompt + 0.05, (
        f"no-name commands: WER {with_prompt:.2f} with names, {without_prompt:.2f} without\n{table}"
    )
    # (e) the token, never
    assert hass_api.token not in server.log
    assert NAMES_LINE not in wis_server.log  # and the server without a token reads no names


@pytest.mark.timeout(300)
async def test_rename_and_alias_are_heard(
    hass: HomeAssistant, hass_api: HassApi, registry_events: RegistryEvents, tmp_path: Path
) -> None:
    """A rename in the entity registry, and a new alias, are read within 5 s (the registries' events) and the next
    transcription writes them; utterances alone make no reading. (The token on the command line this time: the
    server must not log it either.)"""
    await set_up_household(hass)
    server = await start_server(tmp_path / "wis-names", *with_names(hass_api, token_file=False))
    try:
        ours = await added(hass, server)
        await settled(server, registry_events)

        def rename(entity_id: str, name: str) -> None:
            er.async_get(hass).async_update_entity(entity_id, name=name)
            # as the entity's platform does on a registry update: its state anew, with the new friendly_name
            hass.states.async_set(entity_id, "off", {"friendly_name": name})

        def add_alias(entity_id: str, alias: str) -> None:
            er.async_get(hass).async_update_entity(entity_id, aliases=aliases_value((alias,)))

        changes: list[tuple[str, Callable[[], None]]] = [
            ("Hornblasen Lamp", lambda: rename("light.ormhaug_strip", "Hornblasen Lamp")),
            ("Ulvedalen Heater", lambda: add_alias("climate.kvernhus_heater", "Ulvedalen Heater")),
        ]

        texts = {"Hornblasen Lamp": "Turn on the Hornblasen Lamp", "Ulvedalen Heater": "Turn off the Ulvedalen Heater"}
        clips = {name: [await spoken(ours, text, voice) for voice in SPEAKERS] for name, text in texts.items()}
        report = []
        for name, change in changes:
            before = [await heard(ours, pcm) for pcm in clips[name]]
            assert not any(written(name, text) for text in before), f"{name!r} written before HA had it: {before}"
            readings = len(names_lines(server))
            change()
            seconds = await next_reading(server, readings, 5.0)
            readings += 1
            after = [await heard(ours, pcm) for pcm in clips[name]]
            report.append((name, round(seconds, 2), before, after))
            assert any(written(name, text) for text in after), f"{name!r} after {seconds:.2f} s: {after}"
        # every take after its change writes the new name, but for one slip (a take Piper says oddly)
        slips = [text for name, _, _, after in report for text in after if not written(name, text)]
        assert len(slips) <= 1, report
        await asyncio.sleep(2)  # (any reading a transcription caused would be logged by now)
        assert len(names_lines(server)) == readings, names_lines(server)
        print(f"changes read after (s), heard before and after: {report}")
        assert hass_api.token not in server.log
    finally:
        await stop_server(server)
