"""Test helpers: start a real server process, speak Wyoming to it, load and score audio."""

from __future__ import annotations

import asyncio
import ctypes
import importlib.util
import io
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import wave
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import av
import httpx
import jiwer
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncClient, AsyncTcpClient
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeVoice

from wyoming_wis.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "ljspeech"
READY_LINE = "Wyoming server listening on"


def load_script(name: str) -> ModuleType:
    """A developer tool of scripts/ (not part of the package), imported by its file name."""
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def instructions(dockerfile: Path) -> str:
    """A Dockerfile with continuation lines joined and comments dropped: one instruction a line."""
    lines = [line for line in dockerfile.read_text().splitlines() if not line.lstrip().startswith("#")]
    return re.sub(r"\\\n\s*", " ", "\n".join(lines))


def offline_pip(wheelhouse: Path) -> dict[str, str]:
    """The environment of pip (and of `python -m build`, which runs pip): the wheelhouse alone, no index, no pip.conf,
    and no PYTHONPATH, so nothing of the checkout is on the path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_") and key != "PYTHONPATH"}
    return env | {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def offline_env(home: Path) -> dict[str, str]:
    """Environment for a server that must find everything locally."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(home / "hf-home"), PYTHONUNBUFFERED="1")
    return {key: value for key, value in env.items() if not key.startswith("WIS_")}


@dataclass
class Server:
    """A wyoming-wis process started by a test."""

    process: subprocess.Popen
    log_path: Path
    host: str
    port: int
    http_port: int | None = None  # None: started with --no-http

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self) -> AsyncTcpClient:
        return AsyncTcpClient(self.host, self.port)

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample from GET /metrics, or None if it is not there."""
        text = httpx.get(self.http_url + "/metrics", timeout=10).raise_for_status().text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        return None

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def assert_clean_log(log: str) -> None:
    """No crash, traceback or orphaned task anywhere in a server's log.

    The message starts with the lines around the first sign (a long log is cut short in CI's summary), then the log.
    """
    for sign in ("Traceback", "exception was never retrieved", "Task was destroyed", "ERROR"):
        if sign in log:
            lines = log.splitlines()
            first = next(index for index, line in enumerate(lines) if sign in line)
            around = "\n".join(lines[max(0, first - 5) : first + 40])
            raise AssertionError(f"{sign!r} in server log, at line {first + 1}:\n{around}\n\nThe whole log:\n{log}")


def assert_stops_cleanly(server: Server) -> None:
    """SIGTERM ends the server with exit code 0 and a clean log; a failure's message starts with what went wrong
    (CI's summary keeps only the start of a long one)."""
    code = server.stop()
    log = server.log
    assert code == 0, f"exit code {code}; the log's last lines:\n" + "\n".join(log.splitlines()[-40:])
    assert_clean_log(log)


def start_server(
    args: Sequence[str],
    workdir: Path,
    port: int | None = None,
    host: str = "127.0.0.1",
    wait: bool = True,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    launcher: Sequence[str] = ("-m", "wis_server"),
    wrapper: Sequence[str] = (),
    executable: str = sys.executable,
) -> Server:
    """Run `python -m wis_server` (with `env` added to its environment) and wait until it listens (its log says so).

    `launcher` replaces `-m wis_server`, for a script that changes the server before running it (faulty_server.py);
    `wrapper` runs it under another program (strace); `executable` replaces this Python (with `launcher=()`: an
    installed `wyoming-wis` console script, tests/test_wheel.py).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log_path = workdir / f"server-{port}.log"
    argv = [*wrapper, executable, *launcher, *args]
    if not any(arg.startswith("--uri") for arg in args):
        argv += ["--uri", f"tcp://{host}:{port}"]
    http_port = None
    if "--no-http" not in args and not any(arg.startswith("--http-port") for arg in args):
        http_port = free_port()  # never the default 19000: servers of one run must not collide
        argv += ["--http-port", str(http_port), "--http-host", host]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=log, env=offline_env(workdir) | (env or {}), cwd=workdir
        )
    server = Server(process, log_path, host, port, http_port)
    if wait:
        wait_ready(server, timeout)
    return server


def wait_ready(server: Server, timeout: float = 180) -> None:
    """Wait until the server listens (its log says so)."""
    deadline = time.monotonic() + timeout
    while READY_LINE not in server.log:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.log}")
        if time.monotonic() > deadline:
            server.stop()
            raise TimeoutError(f"server not ready after {timeout} s:\n{server.log}")
        time.sleep(0.1)


# -- audio ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pcm:
    audio: bytes
    rate: int
    width: int
    channels: int

    @property
    def seconds(self) -> float:
        return len(self.audio) / (self.rate * self.width * self.channels)

    def samples(self) -> np.ndarray:
        """Mono float samples of 16-bit audio."""
        assert self.width == 2
        data = np.frombuffer(self.audio, dtype="<i2").astype(np.float32) / 32768
        return data.reshape(-1, self.channels).mean(axis=1)


_AV_FORMATS = {1: "u8", 2: "s16", 4: "s32"}


def load_audio(source: Path | bytes, rate: int = 16000, width: int = 2, channels: int = 1) -> Pcm:
    """Decode any file PyAV reads (a path, or its bytes) into PCM of the given format."""
    layout = "mono" if channels == 1 else "stereo" if channels == 2 else f"{channels}c"
    resampler = av.AudioResampler(format=_AV_FORMATS[width], layout=layout, rate=rate)
    out = bytearray()
    with av.open(io.BytesIO(source) if isinstance(source, bytes) else str(source)) as container:
        for frame in container.decode(audio=0):
            for piece in resampler.resample(frame):
                out += piece.to_ndarray().tobytes()
    for piece in resampler.resample(None):
        out += piece.to_ndarray().tobytes()
    return Pcm(bytes(out), rate, width, channels)


def silence(seconds: float, rate: int = 16000) -> Pcm:
    return Pcm(bytes(int(seconds * rate) * 2), rate, 2, 1)


def pink_noise(seconds: float, dbfs: float, seed: int = 0) -> Pcm:
    """16 kHz noise with as much power per octave (a fan, a room's hum) at `dbfs` RMS: no speech in it."""
    length = int(seconds * 16000)
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(length))
    noise = np.fft.irfft(spectrum / np.sqrt(np.maximum(np.fft.rfftfreq(length, 1 / 16000), 20.0)), length)
    noise *= 10 ** (dbfs / 20) / np.sqrt(np.mean(noise**2))
    return Pcm((noise * 32768).astype("<i2").tobytes(), 16000, 2, 1)


def wav_bytes(pcm: Pcm) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setframerate(pcm.rate)
        wav.setsampwidth(pcm.width)
        wav.setnchannels(pcm.channels)
        wav.writeframes(pcm.audio)
    return buffer.getvalue()


def amr_wb(pcm: Pcm, mode: int = 8) -> bytes:
    """16 kHz mono PCM as an AMR-WB file (storage format, "#!AMR-WB\\n" and frames), made as a Willow device
    makes it: mode 8 is 23.85 kbit/s. VisualOn's encoder (Debian's libvo-amrwbenc0, which ./run.sh test installs)."""
    assert (pcm.rate, pcm.width, pcm.channels) == (16000, 2, 1)
    encoder = ctypes.CDLL("libvo-amrwbenc.so.0")
    encoder.E_IF_init.restype = ctypes.c_void_p
    encoder.E_IF_encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    encoder.E_IF_exit.argtypes = [ctypes.c_void_p]
    samples = np.frombuffer(pcm.audio + bytes(-len(pcm.audio) % 640), dtype="<i2")
    state, out, frame = encoder.E_IF_init(), bytearray(b"#!AMR-WB\n"), ctypes.create_string_buffer(64)
    try:
        for start in range(0, len(samples), 320):  # 20 ms frames
            piece = np.ascontiguousarray(samples[start : start + 320])
            size = encoder.E_IF_encode(state, mode, piece.ctypes.data, frame, 0)
            out += frame.raw[:size]
    finally:
        encoder.E_IF_exit(state)
    return bytes(out)


def corpus() -> list[tuple[Path, str]]:
    return [(path, path.with_suffix(".txt").read_text().strip()) for path in sorted(CORPUS.glob("*.flac"))]


def normalise(text: str) -> str:
    text = re.sub(r"[^\w\s']", " ", text.lower())
    return " ".join(text.split())


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    return jiwer.wer([normalise(r) for r in references], [normalise(h) for h in hypotheses])


# -- Wyoming ----------------------------------------------------------------------


async def read_until(client: AsyncClient, *types: str, timeout: float = 120) -> list[Event]:
    """Events up to and including the first of `types` (or an error)."""
    events = []
    while True:
        event = await asyncio.wait_for(client.read_event(), timeout)
        assert event is not None, f"connection closed; got {[e.type for e in events]}"
        events.append(event)
        if event.type in types or event.type == "error":
            return events


async def send_audio(client: AsyncClient, pcm: Pcm, frames_per_chunk: int = 1024) -> None:
    await client.write_event(AudioStart(pcm.rate, pcm.width, pcm.channels).event())
    step = frames_per_chunk * pcm.width * pcm.channels
    for start in range(0, len(pcm.audio), step):
        chunk = pcm.audio[start : start + step]
        await client.write_event(AudioChunk(pcm.rate, pcm.width, pcm.channels, audio=chunk).event())
    await client.write_event(AudioStop().event())


async def transcribe(client: AsyncClient, pcm: Pcm, name: str | None = None, language: str | None = None) -> Event:
    """Send one utterance; return the `transcript` (or `error`) event."""
    await client.write_event(Transcribe(name=name, language=language).event())
    await send_audio(client, pcm)
    return (await read_until(client, "transcript"))[-1]


@dataclass
class Heard:
    """What a client heard while it streamed one utterance."""

    events: list[Event]  # every event, in order
    before_stop: list[Event]  # those that arrived before audio-stop was sent

    @property
    def transcript(self) -> Event:
        return next(event for event in self.events if event.type in ("transcript", "error"))

    def texts(self, events: list[Event] | None = None) -> str:
        """The transcript-chunk texts, joined."""
        return "".join(event.data["text"] for event in (events or self.events) if event.type == "transcript-chunk")


async def stream(client: AsyncClient, pcm: Pcm, trailing_silence: float = 0.0, **transcribe: object) -> Heard:
    """Send one utterance at the pace it was spoken, as a satellite does, reading replies meanwhile."""
    audio = pcm.audio + bytes(int(trailing_silence * pcm.rate) * pcm.width * pcm.channels)
    events: list[Event] = []

    async def read() -> None:
        while not events or events[-1].type not in ("transcript-stop", "error"):
            event = await asyncio.wait_for(client.read_event(), 120)
            assert event is not None, f"connection closed; got {[e.type for e in events]}"
            events.append(event)

    reader = asyncio.create_task(read())
    await client.write_event(Transcribe(**transcribe).event())  # type: ignore[arg-type]
    await client.write_event(AudioStart(pcm.rate, pcm.width, pcm.channels).event())
    step = 1024 * pcm.width * pcm.channels  # 64 ms at 16 kHz
    started = time.monotonic()
    for start in range(0, len(audio), step):
        await client.write_event(
            AudioChunk(pcm.rate, pcm.width, pcm.channels, audio=audio[start : start + step]).event()
        )
        due = started + (start + step) / (pcm.rate * pcm.width * pcm.channels)
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    before_stop = list(events)
    await client.write_event(AudioStop().event())
    await reader
    return Heard(events, before_stop)


@dataclass
class Speech:
    starts: list[dict]
    stops: int
    pcm: Pcm
    events: list[Event]


def collect_speech(events: list[Event]) -> Speech:
    starts = [event.data for event in events if event.type == "audio-start"]
    chunks = [event for event in events if event.type == "audio-chunk"]
    assert starts, f"no audio-start in {[e.type for e in events]}"
    first = starts[0]
    for chunk in chunks:
        assert (chunk.data["rate"], chunk.data["width"], chunk.data["channels"]) == (
            first["rate"],
            first["width"],
            first["channels"],
        )
    audio = b"".join(chunk.payload or b"" for chunk in chunks)
    pcm = Pcm(audio, first["rate"], first["width"], first["channels"])
    return Speech(starts, sum(event.type == "audio-stop" for event in events), pcm, events)


async def synthesize(client: AsyncClient, text: str, voice: SynthesizeVoice | None = None) -> Speech:
    await client.write_event(Synthesize(text=text, voice=voice).event())
    events = await read_until(client, "audio-stop")
    assert events[-1].type == "audio-stop", events[-1]
    return collect_speech(events)


def rms(pcm: Pcm) -> float:
    samples = pcm.samples()
    return float(np.sqrt(np.mean(samples**2))) if len(samples) else 0.0


@asynccontextmanager
async def held(scheduler: Scheduler) -> AsyncIterator[threading.Event]:
    """A scheduler's only worker, held by a call until the event is set (at the latest on leaving), so that what
    is run inside queues behind it."""
    release = threading.Event()
    holding = asyncio.ensure_future(scheduler.run(release.wait, 10))
    await asyncio.sleep(0.05)
    try:
        yield release
    finally:
        release.set()
        await holding
