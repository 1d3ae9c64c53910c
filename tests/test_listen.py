"""What the server says once it listens (where to connect), and a port that is already taken."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import Server, free_port, offline_env


def test_the_log_says_how_to_add_it_to_home_assistant_and_the_http_urls(server: Server) -> None:
    log = server.log
    assert (
        "Add to Home Assistant: Settings > Devices & services > Add integration > Wyoming Protocol, "
        f"host {server.host}, port {server.port}"
    ) in log
    base = f"http://{server.host}:{server.http_port}"
    assert f"OpenAI clients: base URL {base}/v1; Willow devices: {base}/api/willow; API docs: {base}/api/docs" in log


def start(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wis_server", "--data-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        env=offline_env(tmp_path),
        timeout=120,
    )


def test_an_http_port_in_use_stops_start_up_with_a_hint(server: Server, tmp_path: Path) -> None:
    """A second ./run.sh: refused before any model loads, with what to do, and no traceback."""
    uri = f"tcp://127.0.0.1:{free_port()}"
    result = start(["--uri", uri, "--http-host", server.host, "--http-port", str(server.http_port)], tmp_path)
    assert result.returncode == 1
    assert f"cannot listen on http://{server.host}:{server.http_port}:" in result.stderr
    assert "Is another server running there? (--http-port, --no-http)" in result.stderr
    assert "Traceback" not in result.stderr and "Loaded" not in result.stderr


def test_a_wyoming_port_in_use_stops_start_up_with_a_hint(server: Server, data_dir: Path, tmp_path: Path) -> None:
    uri = f"tcp://{server.host}:{server.port}"
    result = start(["--data-dir", str(data_dir), "--uri", uri, "--no-http", "--asr-model", "tiny.en"], tmp_path)
    assert result.returncode == 1
    assert f"cannot listen on {uri}:" in result.stderr and "(--uri)" in result.stderr
    assert "Traceback" not in result.stderr
