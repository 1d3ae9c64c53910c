"""Language tags in the spellings clients send, read one way everywhere."""

from __future__ import annotations

import pytest

from wyoming_wis.languages import Tag, matches, parse, spellings, whisper_code

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("tag", "parsed"),
    [
        ("en", Tag("en")),
        ("en-US", Tag("en", "US")),
        ("en_US", Tag("en", "US")),
        ("EN-us", Tag("en", "US")),
        (" en_us ", Tag("en", "US")),
        ("pt-BR", Tag("pt", "BR")),
        ("zh-Hans", Tag("zh")),  # a script, not a country
        ("zh-Hant-TW", Tag("zh", "TW")),
        ("es-419", Tag("es", "419")),
        ("zh-cn", Tag("zh", "CN")),  # XTTS writes it so
    ],
)
def test_parse(tag: str, parsed: Tag) -> None:
    assert parse(tag) == parsed


def test_whisper_codes() -> None:
    assert [whisper_code(tag) for tag in ("en-US", "EN_gb", "pt-BR", "zh-Hans", "nb", "nb-NO", "de")] == [
        "en", "en", "pt", "zh", "no", "no", "de"
    ]  # fmt: skip


def test_spellings_home_assistant_may_ask_for() -> None:
    assert spellings("en_US") == ["en_US", "en-US", "en"]
    assert spellings("de") == ["de"]
    assert spellings("zh-cn") == ["zh-cn", "zh_CN", "zh-CN", "zh"]


def test_matches() -> None:
    assert matches("en_US", "en-us", exact=True) and matches("en_US", "en", exact=True)
    assert not matches("en_GB", "en-US", exact=True) and matches("en_GB", "en-US", exact=False)
    assert not matches("de_DE", "en", exact=False)
