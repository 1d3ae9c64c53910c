"""Reading request fields (form or JSON) and refusing bad ones with a 400 that names the field."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from wyoming_wis.values import as_bool, quote

from . import bodies
from .errors import ApiError, bad_field

# A JSON request is a few fields and at most a few thousand characters of text (`\uXXXX` escapes take six
# bytes each): a body past this is refused while it arrives, before it is held or parsed on the event loop.
MAX_JSON_BYTES = 64 * 1024
JSON_LIMIT = bodies.Limit(MAX_JSON_BYTES, "A JSON body")


def text(value: object, param: str, default: str | None = None) -> str | None:
    if value is None:
        return default
    if not isinstance(value, str):
        raise bad_field(param, f"'{param}' must be a string")
    return value or default


def choice(value: object, param: str, allowed: Collection[str], default: str) -> str:
    chosen = text(value, param, default) or default
    if chosen not in allowed:
        raise bad_field(param, f"'{param}' must be one of {', '.join(allowed)}; got {quote(chosen)}")
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
        raise bad_field(param, f"'{param}' must be a number; got {quote(value)}") from None
    if not low <= result <= high:
        raise bad_field(param, f"'{param}' must be between {low:g} and {high:g}; got {result:g}")
    return result


def integer(value: object, param: str, low: int, high: int) -> int | None:
    """A whole number in [low, high]."""
    result = number(value, param, low, high)
    if result is not None and not result.is_integer():
        raise bad_field(param, f"'{param}' must be a whole number; got {quote(value)}")
    return None if result is None else int(result)


def boolean(value: object, param: str, default: bool) -> bool:
    if value is None:
        return default
    try:
        return as_bool(value)
    except ValueError:
        raise bad_field(param, f"'{param}' must be true or false; got {quote(value)}") from None


async def read_form(request: web.Request, limit: bodies.Limit | None = None) -> MultiDictProxy[str | web.FileField]:
    """A multipart/form-data body of at most `limit` (by default --max-upload-mb); 415 for another content type,
    413 for a larger body, 400 for a broken one (bodies.read_form)."""
    if request.content_type != "multipart/form-data":
        got = quote(request.content_type) if request.content_type else "no content type"
        raise ApiError(415, f"Send multipart/form-data (got {got})", None, "bad_content_type")
    uploads = bodies.Limit(request.client_max_size, "An upload (--max-upload-mb)", "file")
    return await bodies.read_form(request, limit or uploads)


async def read_json(request: web.Request) -> dict[str, Any]:
    """A JSON object body of at most MAX_JSON_BYTES; 413 for a larger one, 400 for anything else.

    Nesting too deep for the parser (`[[[[...`) is a RecursionError, not a ValueError: a 400 too.
    """
    body = await bodies.read(request, JSON_LIMIT)
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ApiError(400, f"The body must be a JSON object: {reason}", None, "bad_json") from None
    if not isinstance(value, dict):
        raise ApiError(400, "The body must be a JSON object", None, "bad_json")
    return value
