"""A Realtime API WebSocket (/v1/realtime) opened by hand: frames written in bulk, as an attacker writes them.

aiohttp's client answers and frames everything itself; these write raw frames (masked with a mask of zeros, so the
payload is as it is) on a stream from a chosen loopback address, for tests/test_realtime_bounds.py and bench/abuse.py.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

PING, PONG, TEXT = 0x9, 0xA, 0x1  # opcodes
PATH = "/v1/realtime?intent=transcription"


def frame(payload: bytes, opcode: int = TEXT) -> bytes:
    """A client's frame (text by default)."""
    size = len(payload)
    if size < 126:
        length = bytes([0x80 | size])
    elif size < 1 << 16:
        length = bytes([0x80 | 126]) + size.to_bytes(2, "big")
    else:
        length = bytes([0x80 | 127]) + size.to_bytes(8, "big")
    return bytes([0x80 | opcode]) + length + bytes(4) + payload


@asynccontextmanager
async def raw_session(
    host: str, port: int, source: str
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A session from `source`, its 101 read (session.created is the first thing left to read). Its end is abrupt:
    what asyncio has not sent yet is dropped, not sent on at the pace the server reads it."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionRefusedError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
        yield reader, writer
    finally:
        writer.transport.abort()


def pongs(data: bytes) -> int:
    """The empty pongs in what a server sent (a pong of an empty ping is two bytes)."""
    return data.count(bytes([0x80 | PONG, 0]))
