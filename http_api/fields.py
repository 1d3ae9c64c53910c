"""Reading request fields (form or JSON) and refusing bad ones with a 400 that names the field."""

from __future__ import annotations

from collections.abc import Collection

from .errors import bad_field

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def text(value: object, param: str, default: str | None = None) -> str | None:
    if value is None:
        return default
    if not isinstance(value, str):
        raise bad_field(param, f"'{param}' must be a string")
    return value or default


def choice(value: object, param: str, allowed: Collection[str], default: str) -> str:
    chosen = text(value, param, default) or default
    if chosen not in allowed:
        raise bad_field(param, f"'{param}' must be one of {', '.join(allowed)}; got {chosen!r}")
    return chosen


def number(value: object, param: str, low: float, high: float) -> float | None:
    """A number in [low, high]; form fields arrive as strings, JSON as numbers."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise bad_field(param, f"'{param}' must be a number; got {value!r}") from None
    if not low <= result <= high:
        raise bad_field(param, f"'{param}' must be between {low:g} and {high:g}; got {result:g}")
    return result


def boolean(value: object, param: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise bad_field(param, f"'{param}' must be true or false; got {value!r}")
