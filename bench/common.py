"""Shared pieces of the benchmarks: server processes, peer venvs, audio, Wyoming clients, statistics.

Kept free of anything ASR- or TTS-specific so that `bench/asr.py` and a future `bench/tts.py`
start servers, decode audio and summarise timings the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import av
import numpy as np
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe
from wyoming.tts import Synthesize

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"  # synthesised audio, model data, server logs (gitignored)
HOST = "127.0.0.1"

# -- processes ----------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def offline_env(home: Path) -> dict[str, str]:
    """Environment for a server that must not reach the network nor read our or the peer's env settings.

    WIS_* and WYO_WHISPER_* would silently override flags of wyoming-wis and wyoming-faster-whisper.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WIS_", "WYO_WHISPER_"))}
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
        except (OSError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.5)


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
    """

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.busy = busy_cpu_seconds()
        self.own = self._own_cpu()

    @staticmethod
    def _own_cpu() -> float:
        times = os.times()  # children: the pip and version look-ups we ran and waited for
        return times.user + times.system + times.children_user + times.children_system

    def share(self, servers: Sequence[ServerProcess]) -> float:
        """Fraction of all CPUs used by other processes since construction (0 = quiet machine)."""
        wall = time.monotonic() - self.began
        ours = self._own_cpu() - self.own
        for server in servers:
            try:
                ours += process_cpu_seconds(server.process.pid)
            except OSError:
                pass
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
