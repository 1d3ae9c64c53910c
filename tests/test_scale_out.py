"""Scale-out: two replicas behind HAProxy (deploy/haproxy/haproxy.cfg, as shipped), and one of them dies mid-run.

HAProxy runs the shipped file unchanged: its addresses and check interval come from the environment. Traffic
flows through it on both fronts (Wyoming in TCP mode, the HTTP API in HTTP mode) from several clients at once;
one replica is killed (SIGKILL, no goodbye) while requests are in flight. Only requests sent to it before
it is gone may fail; everything sent afterwards must succeed, first by HAProxy retrying a refused connection on
the other replica (and taking the dead one out on that failure), then because the health checks (`describe`,
`/health`) keep it out.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import yaml
from helpers import (
    CORPUS,
    ROOT,
    Server,
    assert_clean_log,
    free_port,
    load_audio,
    start_server,
    synthesize,
    transcribe,
    wait_ready,
    wav_bytes,
)
from wyoming.client import AsyncTcpClient

CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
COMPOSE = ROOT / "docker-compose.haproxy.yml"
BACKENDS = ("wis_wyoming", "wis_http", "wis_rtc")
CHECK_INTER = "500ms"  # fall 2: a dead replica is out about a second after it dies
BEFORE_KILL = 5.0  # seconds of traffic with both replicas
AFTER_KILL = 6.0  # and with one
WORKERS = 4  # two Wyoming clients, two HTTP clients; each has at most one request in flight
UTTERANCE = CORPUS / "LJ001-0002.flac"  # "in being comparatively modern."
STATS_AUTH = ("admin", "stats-3b8e")  # WIS_STATS_USER's default and a WIS_STATS_PASSWORD


@dataclass
class Outcome:
    kind: str
    started: float
    ended: float
    error: str | None  # None: it succeeded


@dataclass
class Haproxy:
    process: subprocess.Popen
    log_path: Path
    wyoming_port: int
    http_port: int
    stats_port: int

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def unusual(self) -> list[str]:
        """The log lines of requests that did not end normally (termination state not `--` or `----`): the
        replica, timers, state and retries of each failure, to tell why it failed."""
        requests = (line for line in self.log.splitlines() if re.match(r"\S+:\d+ \[.*\] \w+ wis_", line))
        return [line for line in requests if not re.search(r" (--|----) ", line)]

    def states(self) -> dict:
        """(backend, server) -> (status, last check's result), from HAProxy's stats page in CSV."""
        stats = f"http://127.0.0.1:{self.stats_port}/stats;csv"
        text = httpx.get(stats, auth=STATS_AUTH, timeout=5).raise_for_status().text
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {
            (row["pxname"], row["svname"]): (row["status"], row["check_status"])
            for row in rows
            if row["svname"] not in ("FRONTEND", "BACKEND")
        }

    def wait_for(self, server: str, status: str, checks: tuple[str, ...], timeout: float) -> float:
        """Wait until `server` is `status` in every backend, by a check whose result is one of `checks`; return
        when."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = self.states()
            except httpx.TransportError as err:  # HAProxy is still starting
                states = {"error": str(err)}
            seen = [states.get((backend, server), ("", "")) for backend in BACKENDS]
            if all(state == status and any(check in result for check in checks) for state, result in seen):
                return time.monotonic()
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{server} not {status} after {timeout} s: {states}\n{self.log}")
            time.sleep(0.05)


def start_haproxy(replicas: list[Server], workdir: Path, stats_password: str | None = STATS_AUTH[1]) -> Haproxy:
    """HAProxy in the foreground on loopback ports, with the shipped config, the replicas' addresses and the stats
    page's password (None: none set)."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    assert Path(haproxy).exists(), "this test needs Debian's haproxy, which ./run.sh test installs"
    wyoming_port, http_port, stats_port = free_port(), free_port(), free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("WIS_STATS_")}
    env.update(
        WIS_WYOMING_BIND=f"127.0.0.1:{wyoming_port}",
        WIS_HTTP_BIND=f"127.0.0.1:{http_port}",
        WIS_STATS_BIND=f"127.0.0.1:{stats_port}",
        WIS_CHECK_INTER=CHECK_INTER,
    )
    if stats_password is not None:
        env["WIS_STATS_PASSWORD"] = stats_password
    for number, replica in enumerate(replicas, 1):
        env[f"WIS_REPLICA_{number}_WYOMING"] = f"{replica.host}:{replica.port}"
        env[f"WIS_REPLICA_{number}_HTTP"] = f"{replica.host}:{replica.http_port}"
    checked = subprocess.run([haproxy, "-c", "-f", str(CONFIG)], env=env, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    log_path = workdir / "haproxy.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [haproxy, "-db", "-f", str(CONFIG)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir
        )
    return Haproxy(process, log_path, wyoming_port, http_port, stats_port)


@pytest.fixture
def replicas(data_dir: Path, tmp_path: Path) -> Iterator[list[Server]]:
    """Two replicas sharing one data dir (as replicas may), both loading at once."""
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--voice", "en_US-joe-medium"]
    started = [start_server(args, tmp_path / f"replica-{number}", wait=False) for number in (1, 2)]
    try:
        for replica in started:
            wait_ready(replica)
        yield started
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture
def balancer(replicas: list[Server], tmp_path: Path) -> Iterator[Haproxy]:
    running = start_haproxy(replicas, tmp_path)
    try:
        for name in ("wis1", "wis2"):
            running.wait_for(name, "UP", ("L7OK",), timeout=20)  # L7OK: `describe` got `info`, /health 200
        yield running
    finally:
        running.process.terminate()
        try:
            running.process.wait(10)
        except subprocess.TimeoutExpired:
            running.process.kill()
            running.process.wait()


def served(replica: Server) -> float:
    """Speech requests this replica answered on either front (health checks and scrapes not counted)."""
    text = httpx.get(replica.http_url + "/metrics", timeout=10).raise_for_status().text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("wis_requests_total{") and ("transcri" in line or "synthesize" in line or "speech" in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_requests_keep_succeeding_when_a_replica_dies(replicas: list[Server], balancer: Haproxy) -> None:
    # WebRTC signalling has its own (source-sticky) backend: a replica answers it.
    answer = httpx.post(f"http://127.0.0.1:{balancer.http_port}/api/rtc/asr", json={"type": "offer"}, timeout=10)
    assert answer.status_code == 400, answer.text
    pcm = load_audio(UTTERANCE)
    wav = wav_bytes(pcm)
    outcomes: list[Outcome] = []
    until = time.monotonic() + BEFORE_KILL + AFTER_KILL

    async def wyoming_request(number: int) -> None:
        client = AsyncTcpClient("127.0.0.1", balancer.wyoming_port)
        async with client:  # one connection per request, as Home Assistant does
            if number % 2:
                speech = await synthesize(client, f"Turning on light number {number}.")
                assert speech.pcm.seconds > 0.3, speech.pcm.seconds
            else:
                event = await transcribe(client, pcm)
                assert event.type == "transcript" and "modern" in event.data["text"].lower(), event

    async def http_request(http: httpx.AsyncClient, number: int) -> None:
        url = f"http://127.0.0.1:{balancer.http_port}"
        if number % 2:
            body = {
                "model": "tts-1",
                "voice": "en_US-joe-medium",
                "input": f"Number {number}.",
                "response_format": "pcm",
            }
            answer = await http.post(url + "/v1/audio/speech", json=body)
            assert answer.status_code == 200 and len(answer.content) > 10_000, (answer.status_code, answer.text[:200])
        else:
            files = {"file": ("utterance.wav", wav, "audio/wav")}
            answer = await http.post(url + "/v1/audio/transcriptions", files=files, data={"model": "whisper-1"})
            assert answer.status_code == 200 and "modern" in answer.json()["text"].lower(), answer.text[:200]

    async def worker(kind: str, offset: int) -> None:
        number = offset
        async with httpx.AsyncClient(timeout=30) as http:
            while time.monotonic() < until:
                number += 1
                started = time.monotonic()
                try:
                    await asyncio.wait_for(
                        wyoming_request(number) if kind == "wyoming" else http_request(http, number), 30
                    )
                    error = None
                except Exception as err:  # every failure is counted, whatever it is
                    error = f"{type(err).__name__}: {err}"[:300]
                outcomes.append(Outcome(kind, started, time.monotonic(), error))

    async def traffic() -> tuple[float, float, float]:
        """Run the clients; kill replica 1 after BEFORE_KILL seconds. When it was killed, gone, and marked DOWN."""
        tasks = [asyncio.create_task(worker(kind, offset)) for kind in ("wyoming", "http") for offset in (0, 1000)]
        await asyncio.sleep(BEFORE_KILL)
        counts = await asyncio.gather(*(asyncio.to_thread(served, replica) for replica in replicas))
        assert all(count >= 2 for count in counts), f"both replicas should have served requests: {counts}"
        killed = time.monotonic()
        replicas[0].process.send_signal(signal.SIGKILL)
        # L4CON: an active check was refused; HANA: HAProxy saw a request to it fail first (observe layer4)
        down = asyncio.create_task(asyncio.to_thread(balancer.wait_for, "wis1", "DOWN", ("L4CON", "HANA"), 5))
        # A killed process takes a while to die (hundreds of ms on a busy machine): until its sockets close,
        # its listening socket still completes handshakes, so a request HAProxy sends there fails too.
        await asyncio.to_thread(replicas[0].process.wait)
        gone = time.monotonic()
        await asyncio.gather(*tasks)
        return killed, gone, await down

    killed, gone, dropped = asyncio.run(traffic())
    failures = [outcome for outcome in outcomes if outcome.error]
    summary = (
        f"{len(outcomes)} requests, {len(failures)} failed; after the kill the replica was gone at "
        f"{gone - killed:+.2f} s and DOWN in HAProxy at {dropped - killed:+.2f} s:\n"
        + "\n".join(f"{o.kind} {o.started - killed:+.2f}..{o.ended - killed:+.2f} s: {o.error}" for o in failures)
        + "\nHAProxy's log of them:\n"
        + "\n".join(balancer.unusual())
    )
    print(summary)
    # Only requests sent while the replica was dying may fail (at most a couple per client); none after.
    assert len(failures) <= 2 * WORKERS, summary
    assert all(outcome.started < gone for outcome in failures), summary
    assert dropped - killed < 2.5, summary  # two refused checks 500 ms apart
    after = [outcome for outcome in outcomes if outcome.started > killed]
    for kind in ("wyoming", "http"):
        assert sum(outcome.kind == kind for outcome in after) >= 4, summary  # and traffic really went on
    assert replicas[1].process.poll() is None
    assert "wis_wyoming/wis1 is DOWN" in balancer.log and "wis_http/wis1 is DOWN" in balancer.log, balancer.log
    assert_clean_log(replicas[1].log)


@pytest.mark.parametrize("password", [STATS_AUTH[1], None])
def test_the_stats_page_needs_the_password(tmp_path: Path, password: str | None) -> None:
    """Which replicas are up, and their addresses, are the operator's: without WIS_STATS_PASSWORD the stats page
    and /metrics are closed (403), with it they ask for it (401). Today's main showed them to anyone."""
    nowhere = SimpleNamespace(host="127.0.0.1", port=free_port(), http_port=free_port())  # no replica listens
    running = start_haproxy([nowhere, nowhere], tmp_path, password)  # type: ignore[list-item]
    try:
        base = f"http://127.0.0.1:{running.stats_port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                anyone = [httpx.get(base + path, timeout=5) for path in ("/stats", "/stats;csv", "/metrics")]
                break
            except httpx.TransportError:  # still starting
                assert running.process.poll() is None and time.monotonic() < deadline, running.log
                time.sleep(0.1)
        assert [answer.status_code for answer in anyone] == [403 if password is None else 401] * 3
        if password is not None:
            assert "Basic" in anyone[0].headers["www-authenticate"]
            for path in ("/stats", "/metrics"):
                assert httpx.get(base + path, auth=STATS_AUTH, timeout=5).status_code == 200, path
            assert httpx.get(base + "/stats", auth=(STATS_AUTH[0], "wrong"), timeout=5).status_code == 401
    finally:
        running.process.terminate()
        running.process.wait(10)


def test_compose_example_runs_two_replicas_behind_the_shipped_config() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    proxy = services["haproxy"]
    assert any(volume.startswith("./deploy/haproxy/haproxy.cfg:") for volume in proxy["volumes"]), proxy
    assert {"wis1", "wis2"} <= set(services), services  # the names the config's defaults point at
    published = {port.split(":")[0] for port in proxy["ports"]}
    assert {"10500", "19000"} <= published, proxy["ports"]
    for name in ("wis1", "wis2"):
        assert "ports" not in services[name] or all("udp" in port for port in services[name]["ports"])
    text = CONFIG.read_text()
    assert "wis1:10500" in text and "wis2:19000" in text
    assert set(proxy["environment"]) == {"WIS_STATS_USER", "WIS_STATS_PASSWORD"}, proxy  # the stats page's password
