"""Language tags in every spelling clients use: `en`, `en-US`, `en_US`, `EN-us`, `pt-BR`, `zh-Hans`.

Whisper knows a language by its ISO 639-1 code (`en`), a Piper voice says its
language and country (`en_US`), Home Assistant and browsers send BCP 47 tags
(`en-US`, `zh-Hans`). Everything that reads, compares or advertises a tag does
it here, so each spelling works everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Tags whose language Whisper knows under another code (Home Assistant says nb for Norwegian Bokmål).
_WHISPER_CODES = {"nb": "no", "jv": "jw", "iw": "he", "fil": "tl"}
# Languages that only Whisper large-v3 and later know, and the code earlier models write them under.
OLDER_CODES = {"yue": "zh"}  # Cantonese: earlier models transcribe it as Chinese
_REGION = re.compile(r"^(?:[A-Za-z]{2}|\d{3})$")  # US, us, 419; a 4-letter part is a script (Hans)


@dataclass(frozen=True)
class Tag:
    language: str  # lower case: en
    region: str | None = None  # upper case: US; None when the tag names none

    def __str__(self) -> str:
        return f"{self.language}_{self.region}" if self.region else self.language


def parse(tag: str) -> Tag:
    """`en-US`, `en_US`, `EN-us` and `en-Latn-US` are all Tag("en", "US"); `zh-Hans` is Tag("zh")."""
    language, *rest = re.split(r"[-_]", tag.strip())
    region = next((part.upper() for part in rest if _REGION.match(part)), None)
    return Tag(language.lower(), region)


def whisper_code(tag: str) -> str:
    """The code Whisper knows the tag's language by."""
    language = parse(tag).language
    return _WHISPER_CODES.get(language, language)


def spellings(code: str) -> list[str]:
    """`en_US` as advertised, then as `en-US` and `en`: Home Assistant takes a language only in the spelling listed."""
    tag = parse(code)
    region = [f"{tag.language}_{tag.region}", f"{tag.language}-{tag.region}"] if tag.region else []
    return list(dict.fromkeys([code, *region, tag.language]))


def matches(code: str, wanted: str, exact: bool) -> bool:
    """Whether a voice's `code` speaks `wanted`: with `exact`, the same country too, when `wanted` names one."""
    have, want = parse(code), parse(wanted)
    if have.language != want.language:
        return False
    return not exact or want.region is None or have.region == want.region
