"""A Willow device stand-in: POST /api/willow as the ESP32 firmware's http_stream sends it.

Used by the Willow tests and bench/paths.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

DEVICE = {"x-audio-sample-rate": "16000", "x-audio-bits": "16", "x-audio-channel": "1"}


class HttpServer(Protocol):
    host: str
    http_port: int | None


@dataclass
class DeviceAnswer:
    status: int
    body: bytes
    after_last_chunk: float  # seconds from the last chunk sent to the whole answer read

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


async def esp32_post(
    server: HttpServer,
    query: str,
    body: bytes,
    codec: str,
    seconds: float,
    auth: httpx.BasicAuth | None = None,
    path: str = "/api/willow",
) -> DeviceAnswer:
    """POST /api/willow as the device's http_stream does it: chunked encoding framed by hand from 2 KB recorder
    reads, sent at the pace the audio is spoken (`seconds` for all of `body`), then at most 2048 bytes read.
    `auth`: the user:password@ of the device's URL, sent as HTTP Basic; `path`: another route that takes a device's
    stream (/api/wake)."""
    headers = DEVICE | {"x-audio-codec": codec, "User-Agent": "Willow/2.0.0", "x-willow-id": "7c:df:a1:00:00:01"}
    if auth is not None:
        headers["Authorization"] = next(auth.auth_flow(httpx.Request("POST", "/"))).headers["Authorization"]
    reader, writer = await asyncio.open_connection(server.host, server.http_port)
    try:
        head = (
            f"POST {path}?{query} HTTP/1.1\r\nHost: {server.host}:{server.http_port}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            + "Transfer-Encoding: chunked\r\n\r\n"
        )
        writer.write(head.encode())
        started = time.perf_counter()
        for at in range(0, len(body), 2048):
            piece = body[at : at + 2048]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            spoken_by = started + seconds * min(len(body), at + 2048) / len(body)
            await asyncio.sleep(max(0.0, spoken_by - time.perf_counter()))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        sent = time.perf_counter()
        status_line, *header_lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
        answer = await reader.readexactly(min(int(headers["content-length"]), 2048))
        return DeviceAnswer(int(status_line.split()[1]), answer, time.perf_counter() - sent)
    finally:
        writer.close()
