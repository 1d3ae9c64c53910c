"""Fuzzing the HTTP API against its own OpenAPI description with schemathesis (its CLI, on the shared server).

CI runs a few derandomized examples per operation; `bench/fuzz.py --http` runs many more (BENCHMARKS.md, Fuzzing).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers import Server

CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance"
CI_EXAMPLES = 5
# Synthesis of up to 4096 generated characters takes seconds each on a CPU: the long run covers these.
SLOW = ["--exclude-path", "/v1/audio/speech", "--exclude-path-regex", "^/api/tts$"]


def schemathesis(server: Server, examples: int, *extra: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        server.http_url + "/api/openapi.json",
        "--checks",
        CHECKS,
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
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=workdir)


def test_no_operation_answers_500_or_off_its_description(server: Server, tmp_path: Path) -> None:
    result = schemathesis(server, CI_EXAMPLES, "--phases", "examples,fuzzing", *SLOW, workdir=tmp_path)
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
