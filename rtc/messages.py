"""The data channel's messages: JSON `{type, message?, obj?}`, as Willow Inference Server's browser client speaks.

Client to server: `ping`; `start` and `stop`, each with an optional `obj` of
recognition parameters (`model`, `language`, `beam_size`, `detect_language`,
`partials`, `hands_free`, `vad_sensitivity`); `wake` (`obj.names`: the wake
words to listen for, a list or comma-separated; none: okay_nabu) and
`wake-stop`. Server to client: `detection` (`obj`: `name`, `timestamp` in ms
since `wake`, `probability`) as soon as a wake word is heard, `not-detected`
at `wake-stop` if none was, `pong`,
`partial` (`obj.text`: all the stable text so far), `turn-end` (hands-free: the
server ended the turn, `obj.reason`: command, complete, silence, max-speech or
no-speech; its `infer` follows), `infer` (`obj`:
`text`, `language`, `audio_duration` and `infer_time` in ms, `model`), `log`
(`message`) and `error` (`message`, and `obj.code`: a core error code or one of
the codes below).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from wyoming_wis.requests import MAX_BEAM_SIZE, SENSITIVITIES, AsrRequest
from wyoming_wis.values import as_bool, quote

MAX_MESSAGE = 64 * 1024  # characters, and the bytes a browser is told it may send (sctp.py); a message is a few dozen
BAD_MESSAGE = "bad-message"
NOT_STARTED = "not-started"
CLIENT_TYPES = ("ping", "start", "stop", "wake", "wake-stop")


class BadMessage(Exception):
    """A message this server cannot act on; the connection carries on."""

    def __init__(self, message: str, code: str = BAD_MESSAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class Params:
    """Recognition parameters; None means not given here (an earlier source, or the server's default, applies)."""

    model: str | None = None
    language: str | None = None
    beam_size: int | None = None
    detect_language: bool | None = None
    partials: bool | None = None  # send `partial` messages (default true)
    hands_free: bool | None = None  # the server ends each turn at a pause and listens for the next, until `stop`
    vad_sensitivity: str | None = None  # hands-free: how soon a turn ends, one of SENSITIVITIES (the first if None)

    def over(self, base: Params) -> Params:
        """These parameters where given, `base`'s elsewhere."""
        given = {field.name: getattr(self, field.name) for field in fields(self)}
        return replace(base, **{name: value for name, value in given.items() if value is not None})

    def request(self) -> AsrRequest:
        """The ASR request these parameters ask for; what is not given is the server's."""
        return AsrRequest(
            model=self.model,
            language=self.language,
            beam_size=self.beam_size,
            detect_language=bool(self.detect_language),
            end_of_turn=(self.vad_sensitivity or SENSITIVITIES[0]) if self.hands_free else None,
        )

    @classmethod
    def parse(cls, values: Any, where: str) -> Params:
        """From a message's `obj` or a query string; a wrong value is a BadMessage naming it."""
        if values is None:
            return cls()
        if not hasattr(values, "get"):
            raise BadMessage(f"{where} must be an object")
        return cls(
            model=_text(values.get("model"), "model"),
            language=_text(values.get("language"), "language"),
            beam_size=_beam_size(values.get("beam_size")),
            detect_language=_flag(values.get("detect_language"), "detect_language"),
            partials=_flag(values.get("partials"), "partials"),
            hands_free=_flag(values.get("hands_free"), "hands_free"),
            vad_sensitivity=_sensitivity(values.get("vad_sensitivity")),
        )


def wake_names(values: Any) -> tuple[str, ...]:
    """The wake words a `wake` message's obj names: `names`, a list of strings or one comma-separated string."""
    if values is None:
        return ()
    if not hasattr(values, "get"):
        raise BadMessage("wake's obj must be an object")
    names = values.get("names")
    if names is None or names == "":
        return ()
    if isinstance(names, str):
        names = names.split(",")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise BadMessage(f"names must be a list of wake word names; got {quote(names)}")
    return tuple(name.strip() for name in names if name.strip())


@dataclass(frozen=True)
class Message:
    type: str
    obj: Any = None


def parse(data: str | bytes) -> Message:
    """One client message; BadMessage if it is not JSON `{type, obj?}` of a known type."""
    if isinstance(data, bytes):
        raise BadMessage("Messages are JSON text, not binary")
    if len(data) > MAX_MESSAGE:
        raise BadMessage(f"Message of {len(data)} characters; the limit is {MAX_MESSAGE}")
    try:
        decoded = json.loads(data)
    except ValueError as err:
        raise BadMessage(f"Not JSON: {err}") from None
    except RecursionError:
        raise BadMessage("Not JSON this server reads: nested too deep") from None
    if not isinstance(decoded, dict) or not isinstance(decoded.get("type"), str):
        raise BadMessage('A message is a JSON object with a "type"')
    if decoded["type"] not in CLIENT_TYPES:
        raise BadMessage(f"Unknown message type {quote(decoded['type'])} (known: {', '.join(CLIENT_TYPES)})")
    return Message(decoded["type"], decoded.get("obj"))


def pong() -> str:
    return _dump({"type": "pong"})


def log(message: str) -> str:
    return _dump({"type": "log", "message": message})


def error(message: str, code: str) -> str:
    return _dump({"type": "error", "message": message, "obj": {"code": code}})


def partial(text: str, language: str | None) -> str:
    obj: dict[str, Any] = {"text": text}
    if language:
        obj["language"] = language
    return _dump({"type": "partial", "obj": obj})


def detection(name: str, milliseconds: int, probability: float) -> str:
    return _dump({"type": "detection", "obj": {"name": name, "timestamp": milliseconds, "probability": probability}})


def not_detected() -> str:
    return _dump({"type": "not-detected"})


def turn_end(reason: str) -> str:
    return _dump({"type": "turn-end", "obj": {"reason": reason}})


def infer(text: str, language: str | None, audio_seconds: float, infer_seconds: float, model: str) -> str:
    return _dump(
        {
            "type": "infer",
            "obj": {
                "text": text,
                "language": language or "",
                "audio_duration": round(audio_seconds * 1000, 1),
                "infer_time": round(infer_seconds * 1000, 1),
                "model": model,
            },
        }
    )


def _dump(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def _text(value: Any, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadMessage(f"{name} must be a string; got {quote(value)}")
    return value


def _beam_size(value: Any) -> int | None:
    if value is None or value == "":
        return None
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if number is None or not 1 <= number <= MAX_BEAM_SIZE:
        raise BadMessage(f"beam_size must be a whole number from 1 to {MAX_BEAM_SIZE}; got {quote(value)}")
    return number


def _sensitivity(value: Any) -> str | None:
    """A sensitivity's name; which names there are, the core checks (`Core.resolve`), as for every frontend."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadMessage(f"vad_sensitivity must be a name; got {quote(value)}")
    return value


def _flag(value: Any, name: str) -> bool | None:
    if value is None or value == "":
        return None
    try:
        return as_bool(value)
    except ValueError:
        raise BadMessage(f"{name} must be true or false; got {quote(value)}") from None
