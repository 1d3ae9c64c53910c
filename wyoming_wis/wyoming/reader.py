"""Read Wyoming events with limits, telling a malformed event from a closed socket.

The `wyoming` library's reader turns bad JSON into "connection closed" and
trusts any announced length. This one raises `BadRequest` with the reason, so
the client learns what was wrong, and refuses lengths past a limit before
allocating or waiting for them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from wyoming.event import Event

from ..errors import BadRequest

MAX_DATA_BYTES = 1 << 20  # event data (JSON) beyond the header line
MAX_PAYLOAD_BYTES = 1 << 20  # one audio chunk: over 5 s even of 44.1 kHz stereo, and converted in ~10 ms


async def read_event(reader: asyncio.StreamReader) -> Event | None:
    """The next event, or None when the client has gone."""
    try:
        line = await reader.readline()
    except (ValueError, asyncio.LimitOverrunError) as err:  # header line past the stream limit
        raise BadRequest(f"Malformed event: header line too long ({err})") from err
    if not line:
        return None
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
        data_length = _length(header, "data_length", MAX_DATA_BYTES)
        payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
        if data_length:
            extra = json.loads(await reader.readexactly(data_length))
            if not isinstance(extra, dict):
                raise BadRequest("Malformed event: additional data must be a JSON object")
            data.update(extra)
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        return None  # the client closed the connection mid-event
    except (ValueError, RecursionError) as err:
        raise BadRequest(f"Malformed event: additional data is not JSON ({err})") from err
    return Event(type=header["type"], data=data, payload=payload)


def _length(header: dict[str, Any], key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"Malformed event: {key} must be a non-negative integer")
    if value > limit:
        raise BadRequest(f"Malformed event: {key} {value} is over the limit of {limit} bytes")
    return value
