"""Values every layer reads alike: true and false as people write them, and the ranges of speech parameters; and
how a value a client sent is shown in a log line or an error message (`quote`).

They live here, below config.py, because the flags are parsed before any engine is imported (tts/ imports
runtime, which imports config); the flags, the engines, the HTTP fields, WebRTC's messages and the OpenAPI
description all check these same ones.
"""

from __future__ import annotations

import reprlib

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off", ""})

# How a voice may be asked to speak (tts.SpeechParams): by flag, per voice and per request.
MIN_SPEED, MAX_SPEED = 0.25, 4.0  # 2.0 speaks twice as fast
MAX_NOISE = 2.0  # Piper's noise_scale and noise_w, from 0
MAX_SENTENCE_SILENCE = 5.0  # seconds, from 0


def parse_bool(text: str) -> bool:
    """1/0, true/false, yes/no, on/off in any case, and empty for false; ValueError for anything else."""
    word = text.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise ValueError("expected true or false")


def as_bool(value: object) -> bool:
    """A client's true or false: JSON's own, or a word `parse_bool` reads; ValueError for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_bool(value)
    raise ValueError("expected true or false")


QUOTE_CHARS = 60  # of a client's value shown in a log line or an error message
_SHORT = reprlib.Repr()  # for a value not a string (a number, a list from JSON): its first items
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring = 2, 4, 4, QUOTE_CHARS


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """A value a client sent, as a log line or an error message may show it: quoted like repr(), cut to `limit`
    characters (and then its length said), control and unprintable characters escaped. No value then fills the log,
    forges a line of it, or is echoed whole to anyone; the cost does not grow with the value.
    """
    if not isinstance(value, str):
        return _SHORT.repr(value)[: limit + 10]
    shown = repr(value[:limit])
    return f"{shown}... ({len(value)} characters)" if len(value) > limit else shown
