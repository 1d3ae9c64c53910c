"""Text as a person would read it aloud, before the phonemizer sees it.

espeak-ng, Piper's phonemizer, already reads plain numbers, ordinals and
most abbreviations in each language. What it reads wrong are symbols and
units glued to numbers ("21°C" as "21 degrees C", "€5" as "euros 5",
"3 km" letter by letter) and numeric dates ("12/03/2026" digit group by
digit group). Those are rewritten here, for English voices; other languages
pass through unchanged. Emoji are dropped in every language.
"""

from __future__ import annotations

import re

from ..languages import parse

_MONTHS = "January February March April May June July August September October November December".split()
_UNITS = {
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "kW": ("kilowatt", "kilowatts"),
    "km": ("kilometer", "kilometers"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "kg": ("kilogram", "kilograms"),
    "mg": ("milligram", "milligrams"),
    "ml": ("milliliter", "milliliters"),
    "GB": ("gigabyte", "gigabytes"),
    "MB": ("megabyte", "megabytes"),
    "min": ("minute", "minutes"),
    "hr": ("hour", "hours"),
    "h": ("hour", "hours"),
    "W": ("watt", "watts"),
    "V": ("volt", "volts"),
    "m": ("meter", "meters"),
    "g": ("gram", "grams"),
    "l": ("liter", "liters"),
}
_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
               "£": ("pound", "pounds", "penny", "pence")}  # fmt: skip
# Every pattern is linear in its text: a number starts only where a run of digits does, so a run is scanned
# once and not again from each of its digits (which made 10,000 digits cost seconds, holding the GIL), and
# what follows a number cannot start with a digit, so giving digits back fails at once.
_NUMBER = r"(?<!\d)(-?\d+(?:[.,]\d+)?)"
_TEMPERATURE = re.compile(_NUMBER + r"\s?°\s?([CF])\b")
_DEGREES = re.compile(_NUMBER + r"\s?°")
_MONEY = re.compile(r"([$€£])\s?(\d+)(?:\.(\d{2}))?\b")
_UNIT = re.compile(_NUMBER + r"\s?(" + "|".join(re.escape(unit) for unit in _UNITS) + r")(?![\w/])")
# Pictographs, dingbats, flags, keycaps, and the joiners and selectors that build emoji from them.
_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0e\ufe0f\u200d\u20e3]")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_SLASH_DATE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")


def normalize(text: str, language: str) -> str:
    """`language` is the voice's, e.g. en_US, or the request's; emoji go in every language (espeak-ng would
    read 👍 as "thumbs up"), the rest is rewritten for English only."""
    text = _EMOJI.sub("", text)
    tag = parse(language)
    if tag.language != "en":
        return text
    day_first = tag.region != "US"
    text = _ISO_DATE.sub(lambda m: _date(int(m[1]), int(m[2]), int(m[3])) or m[0], text)
    text = _SLASH_DATE.sub(lambda m: _slash_date(m, day_first), text)
    text = _TEMPERATURE.sub(lambda m: f"{m[1]} degrees {'Celsius' if m[2] == 'C' else 'Fahrenheit'}", text)
    text = _DEGREES.sub(lambda m: f"{m[1]} {'degree' if _is_one(m[1]) else 'degrees'}", text)
    text = _MONEY.sub(_money, text)
    return _UNIT.sub(lambda m: f"{m[1]} {_UNITS[m[2]][0 if _is_one(m[1]) else 1]}", text)


def _is_one(number: str) -> bool:
    return number in ("1", "-1")


def _money(match: re.Match[str]) -> str:
    one, many, cent, cents = _CURRENCIES[match[1]]
    spoken = f"{match[2]} {one if match[2] == '1' else many}"
    if match[3] and match[3] != "00":
        spoken += f" {int(match[3])} {cent if int(match[3]) == 1 else cents}"
    return spoken


def _slash_date(match: re.Match[str], day_first: bool) -> str:
    first, second, year = int(match[1]), int(match[2]), int(match[3])
    month, day = (second, first) if day_first else (first, second)
    return _date(year, month, day) or match[0]


def _date(year: int, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    suffix = "th" if 11 <= day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{_MONTHS[month - 1]} {day}{suffix}, {year}"
