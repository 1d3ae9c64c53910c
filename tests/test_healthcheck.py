"""`python -m wyoming_wis.healthcheck`, the check the Docker image, the add-on and docker-compose run."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest
from helpers import ROOT, Server, free_port

from wyoming_wis.healthcheck import DEFAULT_URI, default_uri


def healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wyoming_wis.healthcheck", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env=env,
    )


def test_a_running_server_is_healthy(server: Server) -> None:
    result = healthcheck("--uri", f"tcp://{server.host}:{server.port}")
    assert result.returncode == 0, result.stderr
    assert f"healthy: tcp://{server.host}:{server.port}" in result.stdout


def test_the_uri_comes_from_wis_uri(server: Server) -> None:
    """The server's own WIS_URI, as in the Docker image: a wildcard host is asked on 127.0.0.1."""
    env = {**os.environ, "WIS_URI": f"unix:///nowhere, tcp://0.0.0.0:{server.port}"}
    result = healthcheck(env=env)
    assert result.returncode == 0, result.stderr
    assert f"tcp://127.0.0.1:{server.port}" in result.stdout


def test_a_closed_port_is_unhealthy() -> None:
    port = free_port()
    started = time.monotonic()
    result = healthcheck("--uri", f"tcp://127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr.startswith(f"unhealthy: tcp://127.0.0.1:{port}:")
    assert time.monotonic() - started < 10


def test_a_port_that_never_answers_is_unhealthy_after_the_timeout() -> None:
    """An open port whose server never sends `info` (a hung or still-loading server) is not healthy."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        started = time.monotonic()
        result = healthcheck("--uri", f"tcp://127.0.0.1:{port}", "--timeout", "1")
    assert result.returncode == 1 and "no info within 1 s" in result.stderr
    assert 1 <= time.monotonic() - started < 10


async def test_a_server_that_closes_without_info_is_unhealthy() -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.close()

    listener = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        result = await asyncio.to_thread(healthcheck, "--uri", f"tcp://127.0.0.1:{port}")
    finally:
        listener.close()
    assert result.returncode == 1 and "connection closed without info" in result.stderr


@pytest.mark.parametrize(
    ("wis_uri", "expected"),
    [
        (None, DEFAULT_URI),
        ("tcp://0.0.0.0:10300", "tcp://127.0.0.1:10300"),
        ("tcp://:10301", "tcp://127.0.0.1:10301"),
        ("tcp://192.0.2.7:10302", "tcp://192.0.2.7:10302"),
        ("stdio://", DEFAULT_URI),
    ],
)
def test_default_uri(wis_uri: str | None, expected: str) -> None:
    assert default_uri({} if wis_uri is None else {"WIS_URI": wis_uri}) == expected
