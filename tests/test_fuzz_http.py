"""Fuzzing the HTTP API against its own OpenAPI description with schemathesis (its CLI, on the shared server).

CI runs a few derandomized examples per operation; `bench/fuzz.py --http` runs many more (BENCHMARKS.md, Fuzzing).
Two runs: any request, well-formed or not, is answered without a 5xx and as described; and every request the
description allows is accepted, so that a description looser than the code fails.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import wave
from pathlib import Path

import httpx
import pytest
from helpers import Server

CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance"
CI_EXAMPLES = 5
# Synthesis of up to 4096 generated characters takes seconds each on a CPU: the long run covers these.
SLOW = ["--exclude-path", "/v1/audio/speech", "--exclude-path-regex", "^/api/tts$"]

# Positive data: a request the description allows may meet only a name this server does not have (404) or
# missing credentials, never a 400. The coverage phase tries every bound and choice of each parameter; ten
# fuzzed examples per operation reach the multipart fields, which that phase leaves alone.
POSITIVE_CHECKS = "not_a_server_error,positive_data_acceptance"
POSITIVE_CONFIG = """[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404"]
"""
POSITIVE_EXAMPLES = 10
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")  # uploads of real audio
NOT_POSITIVE = [
    "--exclude-path",  # an SDP offer is a grammar a schema cannot state; tests/test_rtc.py sends real ones
    "/api/rtc/asr",
    "--exclude-path-regex",  # ... and tests/test_realtime_calls.py; the Realtime API is a WebSocket (test_realtime.py)
    "^/v1/realtime",
    "--exclude-name",  # cloning needs XTTS, which the shared server does not load; tests/test_xtts.py clones
    "POST /api/tts",
]


def schemathesis(
    server: Server,
    examples: int,
    *extra: str,
    workdir: Path,
    checks: str = CHECKS,
    config: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        *(["--config-file", str(config)] if config else []),
        "run",
        server.http_url + "/api/openapi.json",
        "--checks",
        checks,
        "--max-examples",
        str(examples),
        "--seed",
        "8",
        "--generation-deterministic",
        "--request-timeout",
        "60",
        "--no-color",
        *extra,
    ]
    environ = os.environ | (env or {})
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=workdir, env=environ)


def test_no_operation_answers_500_or_off_its_description(server: Server, tmp_path: Path) -> None:
    result = schemathesis(server, CI_EXAMPLES, "--phases", "examples,fuzzing", *SLOW, workdir=tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


@pytest.mark.timeout(600)  # every bound of every parameter: about 250 s on 2 cores
def test_every_request_the_description_allows_is_accepted(server: Server, tmp_path: Path) -> None:
    """Fails when http_api/openapi.py allows what the code refuses, e.g. a speed of 0.1 where the code takes 0.25."""
    config = tmp_path / "schemathesis.toml"
    config.write_text(POSITIVE_CONFIG)
    path = os.pathsep.join(filter(None, [str(HOOKS.parent), os.environ.get("PYTHONPATH")]))  # the hooks use helpers
    result = schemathesis(
        server,
        POSITIVE_EXAMPLES,
        *("--mode", "positive", "--phases", "coverage,fuzzing", "--output-truncate", "true", *NOT_POSITIVE),
        workdir=tmp_path,
        checks=POSITIVE_CHECKS,
        config=config,
        env={"SCHEMATHESIS_HOOKS": str(HOOKS), "PYTHONPATH": path},
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


# -- regressions: what fuzzing found ----------------------------------------------------


def test_a_malformed_request_is_400_without_a_traceback_in_the_log(server: Server) -> None:
    """Found by schemathesis's probe (a NUL in a header): aiohttp logged it as an ERROR with a traceback."""
    before = len(server.log)
    for request in (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Probe: \x00\r\n\r\n", b"GET /health HTTP/9\r\n\r\n"):
        with socket.create_connection((server.host, server.http_port), timeout=10) as sock:
            sock.sendall(request)
            assert sock.recv(100).split(b" ")[1] == b"400", request
    time.sleep(0.2)
    new = server.log[before:]
    assert "Traceback" not in new and "ERROR" not in new, new


def test_a_channel_count_ffmpeg_cannot_mix_down_is_refused(server: Server) -> None:
    """Found by the positive-data check: 9, 11, 13 or 15 channels have no FFmpeg layout, and converting them was a
    500; the description lists the counts that work, and the others are a 400 like any unsupported format."""
    headers = {"x-audio-channel": "15", "x-audio-bits": "8"}
    answer = httpx.post(server.http_url + "/api/willow", content=bytes(15 * 1600), headers=headers, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "unsupported_audio_format", answer.text


def test_a_recording_with_no_audio_is_kept_as_an_empty_wav(keeper: Server, keeper_auth: httpx.BasicAuth) -> None:
    """Found by the positive-data check: a few bytes at 384 kHz are no 16 kHz sample at all, and saving them was a
    500 (FFmpeg refuses an empty frame). On a server with credentials: only one keeps recordings."""
    headers = {"x-audio-sample-rate": "384000", "x-audio-bits": "8"}
    url = keeper.http_url + "/api/willow?save_audio=true"
    assert httpx.post(url, content=bytes(8), headers=headers, auth=keeper_auth, timeout=60).status_code == 200
    saved = httpx.get(keeper.http_url + "/audio/willow.wav", auth=keeper_auth)
    with wave.open(io.BytesIO(saved.content)) as wav:
        assert (wav.getnframes(), wav.getframerate()) == (0, 16000)
