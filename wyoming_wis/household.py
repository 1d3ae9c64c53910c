"""The household's own names, from what Home Assistant's registries say, best first.

Home Assistant knows the words a general model gets wrong: its rooms, floors, devices and their aliases
("Nuukfjord heater", not "Nuke Fjord heater"). `hass_api.py` reads them; this module decides which of them go
into Whisper's prompt and in what order. The prompt holds only about 40 names (asr/engine.py `Bias`), so the order
decides which are heard, in tiers as wyoming-faster-whisper orders them (its users' order, measured better than a
flat list):

  1. areas and floors that hold an entity exposed to Assist: few, and in nearly every command
  2. exposed entities of the domains people name aloud (PRIORITY_DOMAINS): the lamp, the heater, the speaker
  3. the other areas and floors
  4. the other exposed entities (mostly sensors, asked for by area rather than by name)

Each alias follows its own name, so a budget cuts whole things. Only entities exposed to Assist are read: a name
nobody can command would only crowd out one they can, and an unexposed device's name never reaches a transcript.

Everything here came from another program, so it is handled as a client's text: only strings, whitespace and
control characters collapsed, each name at most MAX_NAME_CHARS, at most MAX_NAMES in all, and duplicates (in any
case) dropped, the first spelling kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Domains whose entities people say by name; the rest are asked about by area ("the temperature in the office").
PRIORITY_DOMAINS = frozenset({"light", "switch", "fan", "media_player", "climate", "scene", "todo"})
MAX_NAME_CHARS = 100  # a longer one is no name anyone says; it is left out, not cut
MAX_NAMES = 512  # kept of one reading, best first: ten times what the prompt holds

Record = Mapping[str, Any]  # one item of a registry list, as Home Assistant's websocket API sends it
Read = Callable[[object, frozenset[str] | None], object]  # (a record, the entity ids wanted) -> what is read of it


@dataclass(frozen=True)
class Household:
    """One reading of Home Assistant's names: the tiers above, each deduplicated against those before it."""

    places_in_use: tuple[str, ...] = ()  # areas and floors holding an exposed entity, with their aliases
    named_entities: tuple[str, ...] = ()  # exposed entities of PRIORITY_DOMAINS, each with its aliases
    other_places: tuple[str, ...] = ()
    other_entities: tuple[str, ...] = ()
    domains: tuple[tuple[str, str], ...] = ()  # (name or alias, its entity's domain), for the sentence matcher

    @functools.cached_property
    def domain_of(self) -> dict[str, str]:
        """Each entity name's and alias's domain ("light"): Home Assistant's sentences for a lock name a lock."""
        return dict(self.domains)

    @functools.cached_property  # (asked by every request)
    def names(self) -> tuple[str, ...]:
        """Every name, best first: what the prompt is filled from."""
        return (*self.places_in_use, *self.named_entities, *self.other_places, *self.other_entities)

    @property
    def places(self) -> int:
        return len(self.places_in_use) + len(self.other_places)

    @property
    def entities(self) -> int:
        return len(self.named_entities) + len(self.other_entities)


def read_household(
    exposed: Record,
    states: Sequence[Record],
    *,
    entries: Record,
    devices: Sequence[Record],
    areas: Sequence[Record],
    floors: Sequence[Record],
) -> Household:
    """The household from the answers to expose_entity/list, get_states, entity_registry/get_entries,
    device_registry/list, area_registry/list and floor_registry/list (empty where not asked or not known).

    Names come from the state's friendly_name (what Home Assistant itself matches and shows), else the registry
    entry's name, else its original_name. A disabled entity is gone from the home, even as evidence that its area
    is in use. An entity's area is its own, else its device's.
    """
    ids = exposed_to_assist(exposed)
    friendly = {
        _id(state, "entity_id"): _mapping(state.get("attributes")).get("friendly_name") for state in _records(states)
    }
    device_areas = {_id(device, "id"): _id(device, "area_id") for device in _records(devices)}
    named: list[object] = []
    others: list[object] = []
    domains: dict[str, str] = {}
    used_areas: set[str | None] = set()
    for entity_id in ids:
        entry = _mapping(_mapping(entries).get(entity_id))
        if entry.get("disabled_by") is not None:
            continue
        used_areas.add(_id(entry, "area_id") or device_areas.get(_id(entry, "device_id")))
        name = next((n for n in (friendly.get(entity_id), entry.get("name"), entry.get("original_name")) if n), None)
        domain = entity_id.partition(".")[0]
        tier = named if domain in PRIORITY_DOMAINS else others
        for each in _with_aliases(name, entry):
            tier.append(each)
            if (cleaned := clean(each)) is not None:
                domains.setdefault(cleaned.casefold(), domain)
    area_list, floor_list = _records(areas), _records(floors)
    used_areas.discard(None)
    used_floors = {_id(area, "floor_id") for area in area_list if _id(area, "area_id") in used_areas} - {None}
    tiers = _deduplicated(
        [
            *_places(area_list, "area_id", used_areas, True),
            *_places(floor_list, "floor_id", used_floors, True),
        ],
        named,
        [
            *_places(area_list, "area_id", used_areas, False),
            *_places(floor_list, "floor_id", used_floors, False),
        ],
        others,
    )
    kept = [name for tier in tiers[1::2] for name in tier]  # the entities' names
    return Household(*tiers, domains=tuple((name, domains[name.casefold()]) for name in kept))


def _exposed(record: object, wanted: frozenset[str] | None) -> object:
    return {"conversation": True} if _mapping(record).get("conversation") is True else None


def _state(record: object, wanted: frozenset[str] | None) -> object:
    entity_id = _mapping(record).get("entity_id")
    if not isinstance(entity_id, str) or (wanted is not None and entity_id not in wanted):
        return None
    return {"entity_id": entity_id, "attributes": _fields(_mapping(record).get("attributes"), "friendly_name")}


def _fields(record: object, *keys: str) -> dict[str, Any] | None:
    return {key: record[key] for key in keys if key in record} if isinstance(record, Mapping) else None


# What read_household reads of each answer, by command: where in the result its records are, and what of each
# record it reads (None: nothing, the record may go). hass_answers.py cuts a large answer down to this where it
# parses it, in another process, so that only this comes back; tests/test_hass_names.py checks that the cut
# household is the whole one's. `wanted`: the entity ids exposed to Assist, for get_states (None: all).
ESSENTIALS: dict[str, tuple[tuple[str, ...], Read]] = {
    "homeassistant/expose_entity/list": (("exposed_entities",), _exposed),
    "get_states": ((), _state),
    "config/entity_registry/get_entries": (
        (),
        lambda record, _: _fields(record, "name", "original_name", "aliases", "area_id", "device_id", "disabled_by"),
    ),
    "config/device_registry/list": ((), lambda record, _: _fields(record, "id", "area_id")),
    "config/area_registry/list": ((), lambda record, _: _fields(record, "area_id", "name", "aliases", "floor_id")),
    "config/floor_registry/list": ((), lambda record, _: _fields(record, "floor_id", "name", "aliases")),
}


def exposed_to_assist(exposed: object) -> list[str]:
    """The entity ids that expose_entity/list's `exposed_entities` exposes to Assist (`conversation`), in order."""
    return sorted(key for key, value in _mapping(exposed).items() if _mapping(value).get("conversation") is True)


def clean(name: object) -> str | None:
    """A name as the prompt may hold it, or None: not a string, empty, or longer than MAX_NAME_CHARS.

    Control characters and runs of whitespace become one space; Whisper's own markers (<|...|>) are no names.
    """
    if not isinstance(name, str):
        return None
    text = " ".join("".join(" " if not char.isprintable() else char for char in name).split())
    if not text or len(text) > MAX_NAME_CHARS or "<|" in text:
        return None
    return text


def _with_aliases(name: object, record: Record) -> list[object]:
    """A thing's name, then its aliases (in 2026.11 an alias may be null: the computed name, skipped)."""
    aliases = record.get("aliases")
    return [name, *(aliases if isinstance(aliases, list | tuple) else ())]


def _places(records: Sequence[Record], key: str, used: set[str | None], in_use: bool) -> list[object]:
    """The names and aliases of the areas (or floors) on one side of `used`, in the registry's order."""
    names: list[object] = []
    for record in records:
        if (_id(record, key) in used) == in_use:
            names.extend(_with_aliases(record.get("name"), record))
    return names


def _deduplicated(*tiers: Iterable[object]) -> list[tuple[str, ...]]:
    """Each tier cleaned, without the names (in any case) of itself or the tiers before; MAX_NAMES in all."""
    seen: set[str] = set()
    out: list[tuple[str, ...]] = []
    for tier in tiers:
        kept = []
        for name in map(clean, tier):
            if name is not None and name.casefold() not in seen and len(seen) < MAX_NAMES:
                seen.add(name.casefold())
                kept.append(name)
        out.append(tuple(kept))
    return out


def _id(record: Record, key: str) -> str | None:
    """An id in a record, or None where it is missing or not a string."""
    value = record.get(key)
    return value if isinstance(value, str) else None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _records(value: object) -> list[Record]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []
