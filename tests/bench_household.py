"""The household the end-of-turn benchmarks' commands name (bench/endpoint.py's corpus), as plain data: some names
begin with an area's ("Living Room Lamp"), so "turn on the living room" is a prefix of a longer command.

tests/ha/bench_turns.py sets it up in a real Home Assistant's registries (bench/ha_turns.py); bench/endpoint.py
serves it from the stand-in, tests/fake_hass.py (`fill`).
"""

from __future__ import annotations

from typing import Any

FLOORS = (("Ground Floor", ("Downstairs",)), ("Upstairs", ()))  # name, aliases
AREAS = (  # name, floor
    ("Living Room", "Ground Floor"),
    ("Kitchen", "Ground Floor"),
    ("Dining Room", "Ground Floor"),
    ("Hallway", "Ground Floor"),
    ("Office", "Ground Floor"),
    ("Garage", None),
    ("Bedroom", "Upstairs"),
    ("Bathroom", "Upstairs"),
)
THINGS = (  # entity id, name, area, aliases
    ("light.living_room_lamp", "Living Room Lamp", "Living Room", ()),
    ("light.kitchen_lights", "Kitchen Lights", "Kitchen", ("Kitchen Light",)),
    ("light.dining_room_lights", "Dining Room Lights", "Dining Room", ()),
    ("light.bedroom_lights", "Bedroom Lights", "Bedroom", ()),
    ("cover.garage_door", "Garage Door", "Garage", ()),
    ("cover.office_blinds", "Office Blinds", "Office", ()),
    ("lock.front_door", "Front Door", "Hallway", ()),
    ("lock.back_door", "Back Door", "Hallway", ()),
    ("vacuum.robot_vacuum", "Robot Vacuum", "Hallway", ()),
    ("climate.thermostat", "Thermostat", "Living Room", ()),
    ("fan.bathroom_fan", "Bathroom Fan", "Bathroom", ()),
    ("media_player.kitchen_speaker", "Kitchen Speaker", "Kitchen", ()),
    ("media_player.bedroom_speaker", "Bedroom Speaker", "Bedroom", ()),
    ("switch.dishwasher", "Dishwasher", "Kitchen", ()),
    ("todo.shopping_list", "Shopping List", None, ()),
)


def _id(name: str) -> str:
    return name.lower().replace(" ", "_")


def fill(registry: Any) -> None:
    """Put the household in a tests/fake_hass.py `Registry`, with the ids Home Assistant would give it."""
    registry.floors.extend({"floor_id": _id(name), "name": name, "aliases": list(aliases)} for name, aliases in FLOORS)
    registry.areas.extend(
        {"area_id": _id(name), "name": name, "aliases": [], "floor_id": floor and _id(floor)} for name, floor in AREAS
    )
    for entity_id, name, area, aliases in THINGS:
        registry.entity(entity_id, name, aliases=list(aliases), area=area and _id(area))
