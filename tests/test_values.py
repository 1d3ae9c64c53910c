"""True and false as people write them: one reading for flags, environment variables, HTTP fields and WebRTC."""

from __future__ import annotations

import pytest

from http_api import fields
from http_api.errors import ApiError
from rtc.messages import BadMessage, Params
from wyoming_wis.config import Settings
from wyoming_wis.values import as_bool, parse_bool


@pytest.mark.parametrize(("text", "meaning"), [("1", True), (" Yes", True), ("ON", True), ("off", False), ("0", False)])
def test_every_frontend_reads_a_spelling_alike(text: str, meaning: bool) -> None:
    assert parse_bool(text) is meaning
    assert Settings.from_args([], environ={"WIS_DEBUG": text}).debug is meaning
    assert fields.boolean(text, "stream", not meaning) is meaning
    assert Params.parse({"partials": text}, "the query").partials is meaning


@pytest.mark.parametrize("value", ["maybe", "2", "y", 1, 0.0, ["true"], {"on": True}])
def test_every_frontend_refuses_what_is_neither(value: object) -> None:
    with pytest.raises(ValueError):
        as_bool(value)  # parse_bool for a word
    with pytest.raises(ApiError):
        fields.boolean(value, "stream", False)
    with pytest.raises(BadMessage):
        Params.parse({"partials": value}, "the query")


@pytest.mark.parametrize("value", [True, False])
def test_json_booleans_read_alike_in_fields_and_messages(value: bool) -> None:
    assert as_bool(value) is value
    assert fields.boolean(value, "stream", not value) is value
    assert Params.parse({"partials": value}, "the query").partials is value
