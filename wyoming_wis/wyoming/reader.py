"""Read Wyoming events with limits, telling a malformed event from a closed socket.

The `wyoming` library's reader turns bad JSON into "connection closed" and
trusts any announced length. This one raises `BadRequest` with the reason, so
the client learns what was wrong, and refuses lengths past a limit before
allocating or waiting for them.

JSON is parsed on the event loop, and its cost grows with its values, not its
bytes: a megabyte of event data as numbers or empty lists held the loop 30-60
ms, and a megabyte of names or text 1-2 ms. So before parsing, the separators
and brackets that part values are counted (a pass over the bytes in C, 0.2 ms a
megabyte), and more than MAX_JSON_TOKENS of them are refused: the costliest
data that passes is parsed in about 1.5 ms.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from wyoming.event import Event

from ..errors import BadRequest, Timeout
from ..values import quote

# Of an event's header line or data: the most JSON separators and brackets (`,` `:` `[` `{`) read. Its 1,024 bias
# names and 1,024 terms, or a 10,000-character text of commas, have fewer.
MAX_JSON_TOKENS = 16384


@dataclass(frozen=True)
class EventLimits:
    """What one event may cost; the header line's limit is the stream reader's own (`--max-event-line-bytes`)."""

    data_bytes: int = 1 << 20  # event data (JSON) beyond the header line
    payload_bytes: int = 1 << 20  # one audio chunk: over 5 s even of 44.1 kHz stereo, and converted in ~10 ms
    seconds: float = 30.0  # from an event's first byte to its last


class Idle(Exception):
    """No byte of a next event came within the idle time."""


async def read_event(
    reader: asyncio.StreamReader, limits: EventLimits, idle_seconds: float | None = None
) -> Event | None:
    """The next event, or None when the client has gone.

    Raises `Idle` when no event starts within `idle_seconds`, and
    `Timeout` when one starts but is not whole within `limits.seconds`: a half-sent event must not hold a
    connection open.
    """
    try:
        async with asyncio.timeout(idle_seconds):
            first = await reader.read(1)
    except TimeoutError:
        raise Idle from None
    if not first:
        return None
    try:
        async with asyncio.timeout(limits.seconds):
            return await _rest_of_event(reader, first, limits)
    except TimeoutError:
        raise Timeout(f"Event not received whole within {limits.seconds:g} s (--event-timeout)") from None


async def _rest_of_event(reader: asyncio.StreamReader, first: bytes, limits: EventLimits) -> Event | None:
    try:
        line = first + (await reader.readline() if first != b"\n" else b"")
    except (ValueError, asyncio.LimitOverrunError) as err:  # header line past the stream limit
        raise BadRequest(f"Malformed event: header line too long ({err})") from err
    if not line.endswith(b"\n"):
        return None  # the client closed the connection mid-line
    _check_tokens(line, "header")
    try:
        header = json.loads(line)
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise BadRequest(f"Malformed event: header is not JSON ({err})") from err
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise BadRequest("Malformed event: header must be a JSON object with a string 'type'")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise BadRequest("Malformed event: 'data' must be a JSON object")
    try:
        data_length = _length(header, "data_length", limits.data_bytes, "--max-event-data-bytes")
        payload_length = _length(header, "payload_length", limits.payload_bytes, "--max-event-payload-bytes")
        if data_length:
            text = await reader.readexactly(data_length)
            _check_tokens(text, "data")
            extra = json.loads(text)
            if not isinstance(extra, dict):
                raise BadRequest("Malformed event: additional data must be a JSON object")
            data.update(extra)
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        return None  # the client closed the connection mid-event
    except (ValueError, RecursionError) as err:
        raise BadRequest(f"Malformed event: additional data is not JSON ({err})") from err
    return Event(type=header["type"], data=data, payload=payload)


def _check_tokens(text: bytes, what: str) -> None:
    """BadRequest for JSON whose parse would cost more than MAX_JSON_TOKENS values (see the module's docstring)."""
    tokens = sum(text.count(mark) for mark in (b",", b":", b"[", b"{"))
    if tokens > MAX_JSON_TOKENS:
        raise BadRequest(
            f"Malformed event: its {what} has {tokens} JSON separators and brackets; at most {MAX_JSON_TOKENS} are read"
        )


def _length(header: dict[str, Any], key: str, limit: int, flag: str) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"Malformed event: {key} must be a non-negative integer")
    if value > limit:
        raise BadRequest(f"Malformed event: {key} {quote(value)} is over the limit of {limit} bytes ({flag})")
    return value
