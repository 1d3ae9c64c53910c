"""Reading request fields (form or JSON) and refusing bad ones with a 400 that names the field."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import MultiDictProxy

from wyoming_wis.values import parse_bool

from .errors import ApiError, bad_field

# A JSON request is a few fields and at most a few thousand characters of text (`\uXXXX` escapes take six
# bytes each): a body past this is refused while it arrives, before it is held or parsed on the event loop.
MAX_JSON_BYTES = 64 * 1024


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


def integer(value: object, param: str, low: int, high: int) -> int | None:
    """A whole number in [low, high]."""
    result = number(value, param, low, high)
    if result is not None and not result.is_integer():
        raise bad_field(param, f"'{param}' must be a whole number; got {value!r}")
    return None if result is None else int(result)


def boolean(value: object, param: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return parse_bool(value)
        except ValueError:
            pass
    raise bad_field(param, f"'{param}' must be true or false; got {value!r}")


async def read_form(request: web.Request) -> MultiDictProxy[str | bytes | web.FileField]:
    """A multipart/form-data body; 415 for another content type, 400 for a broken one."""
    if request.content_type != "multipart/form-data":
        raise ApiError(
            415, f"Send multipart/form-data (got {request.content_type or 'no content type'})", None, "bad_content_type"
        )
    try:
        return await request.post()
    except ValueError as err:
        raise ApiError(400, f"Malformed multipart body: {err}", None, "bad_multipart") from err
    except HttpProcessingError as err:  # e.g. a part's header line is broken
        raise ApiError(400, f"Malformed multipart body: {err.message}", None, "bad_multipart") from err


async def read_json(request: web.Request) -> dict[str, Any]:
    """A JSON object body of at most MAX_JSON_BYTES; 413 for a larger one, 400 for anything else.

    Nesting too deep for the parser (`[[[[...`) is a RecursionError, not a ValueError: a 400 too.
    """
    if (request.content_length or 0) > MAX_JSON_BYTES:
        raise _too_large()
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > MAX_JSON_BYTES:
            raise _too_large()
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ApiError(400, f"The body must be a JSON object: {reason}", None, "bad_json") from None
    if not isinstance(value, dict):
        raise ApiError(400, "The body must be a JSON object", None, "bad_json")
    return value


def _too_large() -> ApiError:
    return ApiError(413, f"A JSON body may be at most {MAX_JSON_BYTES} bytes", None, "request_entity_too_large")
