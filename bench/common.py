"""Shared pieces of the benchmarks: server processes, peer venvs, audio, Wyoming clients, statistics.

Kept free of anything ASR- or TTS-specific so that `bench/asr.py` and `bench/tts.py`
start servers, decode audio, summarise timings and print their tables the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import wave
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import av
import numpy as np
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"  # synthesised audio, model data, server logs (gitignored)
HOST = "127.0.0.1"


def log(message: str) -> None:
    """Progress goes to stderr, so stdout carries only the report."""
    print(message, file=sys.stderr, flush=True)


def raise_interrupt(*_: object) -> None:
    """SIGTERM handler: turn it into KeyboardInterrupt, so `finally` blocks stop the servers."""
    raise KeyboardInterrupt


# -- processes ----------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def offline_env(home: Path) -> dict[str, str]:
    """Environment for a server that must not reach the network nor read our or the peer's env settings.

    WIS_*, WYO_WHISPER_* and WYOMING_PIPER_ARGS would silently change the flags of wyoming-wis,
    wyoming-faster-whisper and wyoming-piper.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WIS_", "WYO_WHISPER_", "WYOMING_PIPER_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(home / "hf-home"), PYTHONUNBUFFERED="1")
    return env


@dataclass
class ServerProcess:
    """A Wyoming server started by a benchmark; its stderr and stdout go to a log file."""

    name: str
    argv: list[str]
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def log_tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])

    def memory_mb(self, field: str = "VmHWM") -> float | None:
        """Peak (VmHWM) or current (VmRSS) resident memory, or None once the process is gone."""
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return None
        found = re.search(rf"{field}:\s+(\d+) kB", status)
        return int(found.group(1)) / 1024 if found else None

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_or_kill(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def stop_servers(servers: Sequence[ServerProcess], timeout: float = 15) -> None:
    """SIGTERM all at once (a server may finish a transcription first), then SIGKILL what lingers."""
    for server in servers:
        server.terminate()
    deadline = time.monotonic() + timeout
    for server in servers:
        server.wait_or_kill(max(0.1, deadline - time.monotonic()))


def start_server(
    name: str, argv: Sequence[str], port: int, env: dict[str, str], cwd: Path, log_dir: Path
) -> ServerProcess:
    """Start a server in its own session, so a Ctrl-C in the terminal reaches only us and we stop it cleanly."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
    return ServerProcess(name, list(argv), process, port, log_path)


async def wait_ready(server: ServerProcess, timeout: float = 600) -> None:
    """Wait until the server answers `describe`.

    The log lines differ between servers (and wyoming-faster-whisper logs "Ready" before it listens),
    so we ask the protocol instead.
    """
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}:\n{server.log_tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{server.name} not ready after {timeout:g} s:\n{server.log_tail}")
        try:
            client = AsyncTcpClient(HOST, server.port)
            await asyncio.wait_for(client.connect(), 2)
            try:
                await client.write_event(Describe().event())
                event = await asyncio.wait_for(client.read_event(), 5)
                if event is not None and event.type == "info":
                    return
            finally:
                await client.disconnect()
        except (TimeoutError, OSError):
            pass
        await asyncio.sleep(0.5)


def ours_command(src: Path = ROOT) -> list[str]:
    """The command that starts wyoming-wis from the checkout `src`: `python -m wis_server`, or `-m wyoming_wis` in a
    checkout from before the composition root left the core package (`--ours-src` may name one to compare)."""
    return [sys.executable, "-m", "wis_server" if (src / "wis_server").is_dir() else "wyoming_wis"]


async def start_all_frontends(
    name: str, data_dir: Path, stack: ExitStack, extra: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> tuple[ServerProcess, str]:
    """wyoming-wis on its defaults (and `extra` flags, and `env` in its environment) with Wyoming, HTTP and WebRTC
    on loopback, ready; stopped with `stack`.

    Returns the server and its HTTP base URL.
    """
    port, http_port = free_port(), free_port()
    argv = [*ours_command(), "--uri", f"tcp://{HOST}:{port}", "--http-host", HOST]
    argv += ["--http-port", str(http_port), "--data-dir", str(data_dir), "--rtc-ports", "any", *extra]
    server = start_server(name, argv, port, offline_env(CACHE / "home") | dict(env or {}), ROOT, CACHE / "logs")
    stack.callback(stop_servers, [server])
    await wait_ready(server)
    return server, f"http://{HOST}:{http_port}"


# -- virtual environments ---------------------------------------------------------


def dist_version(distribution: str) -> str:
    """Installed version of a distribution in the interpreter running the benchmark (our venv)."""
    return metadata.version(distribution)


def ensure_venv(venv: Path, requirements: Sequence[str]) -> Path:
    """Create `venv` with exactly `requirements` installed; reuse it when its stamp matches. Returns its python.

    The stamp holds the requirement list, so bumping a pin (e.g. our faster-whisper) rebuilds the peer.
    """
    python = venv / "bin" / "python"
    stamp = venv / ".bench-stamp"
    wanted = "\n".join(requirements) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        print(f"Creating {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"Installing {' '.join(requirements)} into {venv} (once)", file=sys.stderr)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *requirements], check=True)
    stamp.write_text(wanted)
    return python


def venv_versions(python: Path, distributions: Sequence[str]) -> dict[str, str]:
    """Versions installed in another interpreter's environment, to record what was really measured."""
    code = "import sys, importlib.metadata as m; print('\\n'.join(m.version(d) for d in sys.argv[1:]))"
    out = subprocess.run([str(python), "-c", code, *distributions], check=True, capture_output=True, text=True)
    return dict(zip(distributions, out.stdout.split(), strict=True))


# -- audio --------------------------------------------------------------------------

RATE = 16000  # what Home Assistant sends: 16 kHz, 16-bit, mono
WIDTH = 2


@dataclass(frozen=True)
class Pcm:
    """16 kHz 16-bit mono audio."""

    audio: bytes

    @property
    def seconds(self) -> float:
        return len(self.audio) / (RATE * WIDTH)

    def __add__(self, other: Pcm) -> Pcm:
        return Pcm(self.audio + other.audio)

    def floats(self, dtype: type = np.float32) -> np.ndarray:
        """The samples in [-1, 1), as Whisper and signal processing take them."""
        return np.frombuffer(self.audio, dtype="<i2").astype(dtype) / 32768

    @staticmethod
    def from_floats(samples: np.ndarray) -> Pcm:
        """Samples in [-1, 1) as 16-bit audio, clipped where they go past it."""
        return Pcm((np.clip(samples, -1.0, 1.0 - 1 / 32768) * 32768).astype("<i2").tobytes())


def silence(seconds: float) -> Pcm:
    return Pcm(bytes(int(seconds * RATE) * WIDTH))


def decode_audio(source: Path | bytes) -> Pcm:
    """Decode any file PyAV reads (FLAC, WAV, ...) into 16 kHz 16-bit mono."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    out = bytearray()
    with av.open(io.BytesIO(source) if isinstance(source, bytes) else str(source)) as container:
        for frame in container.decode(audio=0):
            for piece in resampler.resample(frame):
                out += piece.to_ndarray().tobytes()
    for piece in resampler.resample(None):
        out += piece.to_ndarray().tobytes()
    return Pcm(bytes(out))


def wav_bytes(audio: bytes, rate: int, width: int, channels: int) -> bytes:
    """Wrap raw PCM in a WAV header, so the cache holds ordinary files."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setframerate(rate)
        wav.setsampwidth(width)
        wav.setnchannels(channels)
        wav.writeframes(audio)
    return buffer.getvalue()


# -- Wyoming -------------------------------------------------------------------------


async def synthesize_wav(port: int, text: str, timeout: float = 120) -> bytes:
    """Speak `text` with the server's default voice over Wyoming; the audio as WAV bytes (server's format)."""
    client = AsyncTcpClient(HOST, port)
    await client.connect()
    try:
        await client.write_event(Synthesize(text=text).event())
        fmt: tuple[int, int, int] | None = None
        audio = bytearray()
        while True:
            event = await asyncio.wait_for(client.read_event(), timeout)
            if event is None or event.type == "error":
                raise RuntimeError(f"synthesis of {text!r} failed: {event.data if event else 'connection closed'}")
            if event.type == "audio-start":
                fmt = (event.data["rate"], event.data["width"], event.data["channels"])
            elif event.type == "audio-chunk":
                audio += event.payload or b""
            elif event.type == "audio-stop":
                break
    finally:
        await client.disconnect()
    if fmt is None:
        raise RuntimeError(f"synthesis of {text!r} sent no audio-start")
    return wav_bytes(bytes(audio), *fmt)


async def server_info(port: int, timeout: float = 10) -> Info | None:
    """What a ready server advertises (`describe`, then its `info`); None if it closes the connection first."""
    client = AsyncTcpClient(HOST, port)
    await client.connect()
    try:
        await client.write_event(Describe().event())
        while True:
            event = await asyncio.wait_for(client.read_event(), timeout)
            if event is None:
                return None
            if Info.is_type(event.type):
                return Info.from_event(event)
    finally:
        await client.disconnect()


def cache_key(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()[:16]


# -- statistics and reporting ---------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default); None for no values."""
    return float(np.percentile(values, q)) if values else None


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def ratio(ours: float | None, peer: float | None) -> float | None:
    """ours/peer, or None when undefined."""
    if ours is None or peer is None or peer == 0:
        return None
    return ours / peer


def busy_cpu_seconds() -> float:
    """CPU time all processes on the machine have used since boot (not idle, not iowait), from /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of one live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BackgroundLoad:
    """How much CPU *other* processes took while we measured: timings on a busy machine are not comparable.

    Everything the machine did, less what this process and our servers did, over the wall time.
    Pass the servers already running when measuring one phase of a run, so only their CPU time from now counts.
    """

    def __init__(self, servers: Sequence[ServerProcess] = ()) -> None:
        self.began = time.monotonic()
        self.busy = busy_cpu_seconds()
        self.own = self._own_cpu()
        self.servers_before = {server.process.pid: self._server_cpu(server) for server in servers}

    @staticmethod
    def _own_cpu() -> float:
        times = os.times()  # children: the pip and version look-ups we ran and waited for
        return times.user + times.system + times.children_user + times.children_system

    @staticmethod
    def _server_cpu(server: ServerProcess) -> float:
        try:
            return process_cpu_seconds(server.process.pid)
        except OSError:
            return 0.0

    def share(self, servers: Sequence[ServerProcess]) -> float:
        """Fraction of all CPUs used by other processes since construction (0 = quiet machine)."""
        wall = time.monotonic() - self.began
        ours = self._own_cpu() - self.own
        for server in servers:
            ours += self._server_cpu(server) - self.servers_before.get(server.process.pid, 0.0)
        other = busy_cpu_seconds() - self.busy - ours
        return max(0.0, other / (wall * (os.cpu_count() or 1)))


def machine_info() -> dict[str, object]:
    """What the numbers were measured on."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        found = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        memory = round(int(found.group(1)) / 1024**2, 1) if found else None
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": memory,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


# -- report table ---------------------------------------------------------------------


@dataclass
class Row:
    """One line of the report: a metric for both servers and how their ratio compares to our target."""

    metric: str
    ours: float | None
    peer: float | None
    fmt: Callable[[float | None], str]
    target: str = ""
    check: Callable[[float | None, float | None], bool | None] | None = None
    show_ratio: bool = True

    @property
    def ratio(self) -> float | None:
        return ratio(self.ours, self.peer) if self.show_ratio else None

    @property
    def verdict(self) -> str:
        if self.check is None:
            return ""
        passed = self.check(self.ours, self.peer)
        return "" if passed is None else ("pass" if passed else "FAIL")


def ratio_at_most(limit: float) -> Callable[[float | None, float | None], bool | None]:
    return lambda ours, peer: None if ratio(ours, peer) is None else ratio(ours, peer) <= limit


def ratio_at_least(limit: float) -> Callable[[float | None, float | None], bool | None]:
    return lambda ours, peer: None if ratio(ours, peer) is None else ratio(ours, peer) >= limit


def not_worse(ours: float | None, peer: float | None) -> bool | None:
    return None if ours is None or peer is None else ours <= peer + 1e-9


def fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def fmt_s(value: float | None) -> str:
    return fmt(value, "{:.3f} s")


def fmt_pct(value: float | None) -> str:
    return fmt(value, "{:.1%}")


def fmt_rate(value: float | None) -> str:
    return fmt(value, "{:.2f}")


def render_table(rows: Sequence[Row]) -> str:
    """Plain fixed-width text, readable in a terminal and pasteable into Markdown as a code block."""
    header = ("metric", "ours", "peer", "ours/peer", "target", "")
    lines = [
        (row.metric, row.fmt(row.ours), row.fmt(row.peer), fmt(row.ratio, "{:.2f}"), row.target, row.verdict)
        for row in rows
    ]
    widths = [max(len(str(cells[i])) for cells in [header, *lines]) for i in range(len(header))]
    out = []
    for cells in [header, *lines]:
        out.append(
            "  ".join(
                str(c).ljust(w) if i == 0 else str(c).rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    out.insert(1, "-" * len(out[0]))
    return "\n".join(line.rstrip() for line in out)


def markdown_cell(text: str) -> str:
    """Text that keeps a Markdown table or list intact."""
    return text.replace("|", "\\|")


def comma_choices(parser: argparse.ArgumentParser, value: str, allowed: Sequence[str], flag: str) -> list[str]:
    """A flag's comma-separated values, each one of `allowed`; at least one."""
    chosen = [item.strip() for item in value.split(",") if item.strip()]
    unknown = set(chosen) - set(allowed)
    if unknown or not chosen:
        parser.error(f"{flag}: choose from {', '.join(allowed)}")
    return chosen


def add_common_args(parser: argparse.ArgumentParser, kind: str, phases: Sequence[str]) -> None:
    """The options every benchmark takes: which phases, where results go, which checkout is "ours"."""
    parser.add_argument("--only", default=",".join(phases), help=f"Comma-separated phases of {', '.join(phases)}")
    parser.add_argument("--out", type=Path, help=f"JSON results. Default: bench/results/{kind}-<timestamp>.json")
    parser.add_argument(
        "--ours-src",
        type=Path,
        default=ROOT,
        help="Checkout to run as ours (`ours_command`: python -m wis_server there). Default: this repo",
    )


def check_common_args(
    parser: argparse.ArgumentParser, args: argparse.Namespace, kind: str, phases: Sequence[str]
) -> None:
    args.phases = [phase.strip() for phase in args.only.split(",") if phase.strip()]
    unknown = set(args.phases) - set(phases)
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(sorted(unknown))}; choose from {', '.join(phases)}")
    args.ours_src = args.ours_src.resolve()
    args.out = args.out or ROOT / "bench" / "results" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def run_and_record(
    run: Callable[[ExitStack], Awaitable[dict]], settings: dict, out: Path, report: Callable[[dict, Path], None]
) -> None:
    """Run a benchmark (its servers stop however it ends), save its JSON to `out` and print the report."""
    signal.signal(signal.SIGTERM, raise_interrupt)  # so `finally` stops the servers on SIGTERM too
    began = time.monotonic()
    command_line = shlex.join(sys.orig_argv)
    machine = machine_info()
    with ExitStack() as stack:
        try:
            outcome = asyncio.run(run(stack))
        except KeyboardInterrupt:
            log("Interrupted; stopping servers")
            sys.exit(130)
    runtime = time.monotonic() - began
    document = {
        "command": command_line,
        "machine": machine,
        "settings": settings,
        "runtime_s": runtime,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - runtime)),
        **outcome,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    report(document, out)
