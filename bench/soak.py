"""Soak: every frontend under many clients for a set time; errors, latency percentiles and memory over time.

One wyoming-wis (bundled Whisper base and Piper voice, its defaults) is started here
and driven by `--clients` clients at once, each in a loop of request, think time
(`--pause`, 0.5-1.5x at random), request, ... The mix for 16 clients, and its
round-robin order for other counts:

- wyoming-asr (4): a satellite: an LJ Speech clip streamed at real-time pace, 0.5 s
  of silence, `audio-stop`; the transcript must match (WER <= 0.35).
- wyoming-tts (3): a reply from bench/tts.py's texts, half of them streamed as an
  LLM does; one in three has a number in it that is new each time, so the speech
  cache both hits and misses. The audio must be the voice's format and not silent.
- openai-transcribe (2), openai-speech (2): `POST /v1/audio/transcriptions` with the
  FLAC clip; `POST /v1/audio/speech` (WAV), decoded.
- willow (2): `POST /api/willow` with 16 kHz PCM, then `GET /api/tts`.
- webrtc (2): a browser stand-in (tests/rtc_client.py) says 3 clips over one peer
  connection, then hangs up and dials again, so connections come and go.
- flaky (1): does everything wrong in turn: leaves mid-audio, mid-synthesis and mid-
  upload, hangs up a browser mid-utterance, and sends garbage (which must get an
  `error` event).

Every answer is `ok`, `busy` (the documented overload answer: Wyoming/WebRTC
`busy`, HTTP 429/503; expected and counted), `aborted` (the flaky client left on
purpose) or an unexpected `error` (anything else, a wrong transcript or bad audio
included). The server's resident memory, threads and open files are sampled every
`--sample` seconds; growth is the median of the last minute over the median of
the first minute after `--warmup`. After the run the clients stop, and the
server's /metrics must show no request in progress, no queued model call and no
WebRTC session left; after a trim pass (wyoming_wis/memory.py) the idle server's
resident memory is sampled once more, to tell memory held from memory only not yet
given back.

    .venv/bin/python bench/soak.py [--minutes 10] [--warmup 2] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from itertools import count
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))
from asr import CHUNK_SAMPLES, Recording, lj_recordings, transcribe, wer  # noqa: E402  (bench/ is not a package)
from common import (  # noqa: E402
    CACHE,
    HOST,
    RATE,
    ROOT,
    WIDTH,
    ServerProcess,
    decode_audio,
    fmt,
    fmt_s,
    log,
    percentile,
    process_cpu_seconds,
    run_and_record,
    start_all_frontends,
)
from rtc_client import RATE as RTC_RATE  # noqa: E402  (tests/rtc_client.py: the browser stand-in)
from rtc_client import Client, PlayedTrack  # noqa: E402
from tts import TEXTS, Text, synthesize, voice_files, voice_format  # noqa: E402

from wyoming_wis.memory import TRIM_SECONDS  # noqa: E402

ORDER = [  # client i runs ORDER[i % len(ORDER)]: 16 clients get the mix in the docstring
    "wyoming-asr",
    "wyoming-tts",
    "openai-transcribe",
    "openai-speech",
    "willow",
    "webrtc",
    "flaky",
    "wyoming-asr",
    "wyoming-tts",
    "openai-transcribe",
    "openai-speech",
    "willow",
    "webrtc",
    "wyoming-asr",
    "wyoming-tts",
    "wyoming-asr",
]
TIMEOUT = 120  # seconds for any one request, queueing under load included
MAX_WER = 0.35  # above this a transcript is wrong, not just imperfect
TRAILING_SILENCE = 0.5
SILENT_PEAK = 500  # int16; speech from the voice peaks far higher
WILLOW_HEADERS = {"x-audio-sample-rate": "16000", "x-audio-bits": "16", "x-audio-channel": "1", "x-audio-codec": "pcm"}
GARBAGE = b'{"type": "transcribe", "data_length": -5}\n'


@dataclass
class Outcome:
    """One request as a client saw it; times in seconds, `at` from the start of the soak."""

    kind: str
    client: int
    at: float
    status: str  # ok | busy | aborted | error
    wait_s: float | None = None  # what a user waits for: end of speech -> text, request -> first audio
    total_s: float | None = None
    audio_s: float = 0.0  # seconds of speech heard (ASR) or spoken (TTS)
    detail: str | None = None


@dataclass
class Sample:
    at: float
    rss_mib: float
    threads: int
    fds: int
    cpu_s: float


class Soak:
    """The clients' shared state: where the server is, what to say, and what happened."""

    def __init__(self, port: int, http_url: str, began: float, end: float, pause: float) -> None:
        self.port, self.http_url = port, http_url
        self.began, self.end, self.pause = began, end, pause
        self.clips = lj_recordings()
        self.flac = {
            clip.name: (ROOT / "tests" / "corpus" / "ljspeech" / f"{clip.name}.flac").read_bytes()
            for clip in self.clips
        }
        self.voice = voice_format(voice_files()[1])
        self.outcomes: list[Outcome] = []
        self.numbers = count(1)
        self.random = random.Random(1)

    def now(self) -> float:
        return time.monotonic() - self.began

    def clip(self) -> Recording:
        return self.random.choice(self.clips)

    def reply(self) -> Text:
        """A text to speak; every third one new (a sensor reading), so the cache sees hits and misses."""
        number = next(self.numbers)
        if number % 3 == 0:
            return Text(f"reading-{number}", f"The hallway sensor reads {number} point {number % 10} degrees.")
        return self.random.choice(TEXTS)

    def record(self, kind: str, client: int, at: float, status: str, **fields: object) -> None:
        self.outcomes.append(Outcome(kind, client, at, status, **fields))  # type: ignore[arg-type]
        if status == "error":
            log(f"{self.now():7.1f} s  {kind} #{client}: {fields.get('detail')}")


# -- answers ------------------------------------------------------------------------------


def wyoming_status(error: str | None) -> str:
    """bench/asr.py and bench/tts.py report an error event as 'error event: CODE: text'."""
    if error is None:
        return "ok"
    return "busy" if error.startswith("error event: busy:") else "error"


def http_status(response: httpx.Response) -> tuple[str, str | None]:
    if response.status_code == 200:
        return "ok", None
    detail = f"HTTP {response.status_code}: {response.text[:200]}"
    return ("busy" if response.status_code in (429, 503) else "error"), detail


def heard_right(clip: Recording, text: str) -> str | None:
    """None when the transcript is the clip's, else why not."""
    score = wer([clip.text], [text])
    return None if score is not None and score <= MAX_WER else f"WER {score}: {text!r} for {clip.text!r}"


def speech_problem(audio: bytes) -> tuple[float, str | None]:
    """Seconds of `audio` (any container PyAV reads), and None when it is speech, else why not."""
    try:
        samples = np.frombuffer(decode_audio(audio).audio, dtype=np.int16)
    except Exception as err:  # noqa: BLE001  (any decoder complaint is the finding)
        return 0.0, f"undecodable audio: {err}"
    seconds = samples.size / RATE
    if samples.size < RATE // 4:
        return seconds, f"only {seconds:.2f} s of audio"
    peak = int(np.abs(samples.astype(np.int32)).max())
    return seconds, None if peak >= SILENT_PEAK else f"silent audio (peak {peak})"


# -- clients ------------------------------------------------------------------------------


async def wyoming_asr(soak: Soak, client: int, http: httpx.AsyncClient) -> None:
    clip, at = soak.clip(), soak.now()
    done = await transcribe("ours", soak.port, "soak", clip, True, TRAILING_SILENCE, TIMEOUT)
    status, detail = wyoming_status(done.error), done.error
    if status == "ok":
        detail = heard_right(clip, done.text or "")
        status = "error" if detail else "ok"
    soak.record(
        "wyoming-asr",
        client,
        at,
        status,
        wait_s=done.after_stop_s,
        total_s=done.total_s,
        audio_s=clip.pcm.seconds,
        detail=detail,
    )


async def wyoming_tts(soak: Soak, client: int, http: httpx.AsyncClient) -> None:
    text, at = soak.reply(), soak.now()
    streaming = soak.random.random() < 0.5
    done = await synthesize("ours", soak.port, "soak", text, streaming, 0.05, TIMEOUT, soak.voice)
    status, detail = wyoming_status(done.error), done.error
    if status == "ok" and (done.problems or done.peak < SILENT_PEAK):
        status, detail = "error", "; ".join(done.problems) or f"silent (peak {done.peak})"
    kind = "wyoming-tts-stream" if streaming else "wyoming-tts"
    soak.record(
        kind, client, at, status, wait_s=done.first_audio_s, total_s=done.total_s, audio_s=done.audio_s, detail=detail
    )


async def openai_transcribe(soak: Soak, client: int, http: httpx.AsyncClient) -> None:
    clip, at = soak.clip(), soak.now()
    sent = time.perf_counter()
    files = {"file": (f"{clip.name}.flac", soak.flac[clip.name], "audio/flac")}
    response = await http.post("/v1/audio/transcriptions", files=files, data={"model": "whisper-1", "language": "en"})
    took = time.perf_counter() - sent
    status, detail = http_status(response)
    if status == "ok":
        detail = heard_right(clip, response.json()["text"])
        status = "error" if detail else "ok"
    soak.record(
        "openai-transcribe", client, at, status, wait_s=took, total_s=took, audio_s=clip.pcm.seconds, detail=detail
    )


async def openai_speech(soak: Soak, client: int, http: httpx.AsyncClient) -> None:
    text, at = soak.reply(), soak.now()
    body: dict[str, object] = {"model": "tts-1", "voice": "alloy", "input": text.text, "response_format": "wav"}
    await _speech(soak, client, at, http, "openai-speech", "POST", "/v1/audio/speech", json=body)


async def willow(soak: Soak, client: int, http: httpx.AsyncClient) -> None:
    clip, at = soak.clip(), soak.now()
    sent = time.perf_counter()
    response = await http.post("/api/willow", content=clip.pcm.audio, headers=WILLOW_HEADERS)
    took = time.perf_counter() - sent
    status, detail = http_status(response)
    if status == "ok":
        detail = heard_right(clip, response.json()["text"])
        status = "error" if detail else "ok"
    soak.record("willow-asr", client, at, status, wait_s=took, total_s=took, audio_s=clip.pcm.seconds, detail=detail)
    await asyncio.sleep(soak.pause * soak.random.uniform(0.5, 1.5))
    text, at = soak.reply(), soak.now()
    await _speech(soak, client, at, http, "willow-tts", "GET", "/api/tts", params={"text": text.text})


async def _speech(
    soak: Soak, client: int, at: float, http: httpx.AsyncClient, kind: str, method: str, path: str, **request: object
) -> None:
    """Read a speech answer as it streams: the wait is the time to its first bytes of audio."""
    sent = time.perf_counter()
    first: float | None = None
    audio = bytearray()
    async with http.stream(method, path, **request) as response:  # type: ignore[arg-type]
        async for piece in response.aiter_bytes():
            first = first or time.perf_counter()
            audio += piece
    took = time.perf_counter() - sent
    status, detail = http_status(response)
    seconds = 0.0
    if status == "ok":
        seconds, detail = speech_problem(bytes(audio))
        status = "error" if detail else "ok"
    else:
        detail = f"HTTP {response.status_code}: {bytes(audio[:200]).decode(errors='replace')}"
    wait = first - sent if first is not None else None
    soak.record(kind, client, at, status, wait_s=wait, total_s=took, audio_s=seconds, detail=detail)


async def webrtc(soak: Soak, client: int, http: httpx.AsyncClient) -> None:
    """One call: connect, three utterances with the track detached between them, hang up."""
    at = soak.now()
    peer = Client(soak.http_url + "/api/rtc/asr")
    try:
        await peer.connect()
    except Exception as err:  # noqa: BLE001  (a refused or failed connection is the finding)
        soak.record("webrtc-connect", client, at, "error", detail=f"{type(err).__name__}: {err}")
        await peer.close()
        return
    try:
        for _ in range(3):
            if time.monotonic() > soak.end:
                break
            clip, at = soak.clip(), soak.now()
            samples = np.repeat(np.frombuffer(clip.pcm.audio, dtype=np.int16), RTC_RATE // RATE)
            try:
                heard = await peer.utterance(samples, 0.7, start={"language": "en"})
            except TimeoutError:
                soak.record("webrtc", client, at, "error", detail="no infer within the timeout")
                return
            code = heard.infer.get("obj", {}).get("code") if heard.infer["type"] == "error" else None
            if heard.infer["type"] == "infer":
                detail = heard_right(clip, heard.text)
                status = "error" if detail else "ok"
            else:
                status, detail = ("busy" if code == "busy" else "error"), json.dumps(heard.infer)
            soak.record(
                "webrtc", client, at, status, wait_s=heard.stop_to_infer, audio_s=clip.pcm.seconds, detail=detail
            )
            await peer.detach()
            await asyncio.sleep(soak.pause * soak.random.uniform(0.5, 1.5))
            peer.attach(PlayedTrack())
    finally:
        await peer.close()


async def flaky(soak: Soak, client: int, http: httpx.AsyncClient) -> None:
    """The next misbehaviour in turn."""
    action = FLAKY[next(soak.numbers) % len(FLAKY)]
    at = soak.now()
    try:
        problem = await asyncio.wait_for(action(soak), TIMEOUT)
    except (TimeoutError, OSError, EOFError) as err:
        problem = f"{type(err).__name__}: {err}"
    soak.record(f"flaky-{action.__name__}", client, at, "error" if problem else "aborted", detail=problem)


async def leave_mid_audio(soak: Soak) -> str | None:
    client = AsyncTcpClient(HOST, soak.port)
    await client.connect()
    await client.write_event(Transcribe(language="en").event())
    await client.write_event(AudioStart(RATE, WIDTH, 1).event())
    audio = soak.clip().pcm.audio
    step = CHUNK_SAMPLES * WIDTH
    for offset in range(0, len(audio) // 2, step):
        await client.write_event(AudioChunk(RATE, WIDTH, 1, audio=audio[offset : offset + step]).event())
        await asyncio.sleep(0.064)
    await client.disconnect()
    return None


async def leave_mid_synthesis(soak: Soak) -> str | None:
    client = AsyncTcpClient(HOST, soak.port)
    await client.connect()
    number = next(soak.numbers)
    await client.write_event(Synthesize(text=f"{TEXTS[-1].text} This is call {number}.").event())
    while (event := await client.read_event()) is not None and event.type not in ("audio-chunk", "error"):
        pass
    await client.disconnect()
    return None


async def leave_mid_upload(soak: Soak) -> str | None:
    """Announce a whole FLAC upload, send half of it, and close."""
    clip = soak.clip()
    data = soak.flac[clip.name]
    boundary = "soakboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.flac"\r\n'
        "Content-Type: audio/flac\r\n\r\n"
    ).encode()
    body = head + data + f"\r\n--{boundary}--\r\n".encode()
    host, port = soak.http_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body[: len(body) // 2]
    )
    await writer.drain()
    await asyncio.sleep(0.5)
    writer.close()
    await writer.wait_closed()
    return None


async def hang_up_mid_utterance(soak: Soak) -> str | None:
    peer = Client(soak.http_url + "/api/rtc/asr")
    try:
        await peer.connect()
        peer.send("start", {"language": "en"})
        samples = np.repeat(np.frombuffer(soak.clip().pcm.audio, dtype=np.int16), RTC_RATE // RATE)
        peer.track.play(samples)
        await asyncio.sleep(1.5)
    finally:
        await peer.close()
    return None


async def send_garbage(soak: Soak) -> str | None:
    """A header the server must refuse with an error event, then close."""
    reader, writer = await asyncio.open_connection(HOST, soak.port)
    try:
        writer.write(GARBAGE)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 30)
        if not line:
            return "connection closed without an error event"
        header = json.loads(line)
        return None if header.get("type") == "error" else f"answered {header.get('type')!r}, not an error event"
    finally:
        writer.close()


FLAKY: list[Callable[[Soak], Awaitable[str | None]]] = [
    leave_mid_audio,
    leave_mid_synthesis,
    leave_mid_upload,
    hang_up_mid_utterance,
    send_garbage,
]
CLIENTS: dict[str, Callable[[Soak, int, httpx.AsyncClient], Awaitable[None]]] = {
    "wyoming-asr": wyoming_asr,
    "wyoming-tts": wyoming_tts,
    "openai-transcribe": openai_transcribe,
    "openai-speech": openai_speech,
    "willow": willow,
    "webrtc": webrtc,
    "flaky": flaky,
}


async def client_loop(soak: Soak, client: int, kind: str) -> None:
    """Requests until the soak's end; the start is staggered so the clients do not move in step."""
    await asyncio.sleep(soak.random.uniform(0, 3))
    async with httpx.AsyncClient(base_url=soak.http_url, timeout=TIMEOUT) as http:
        while time.monotonic() < soak.end:
            at = soak.now()
            try:
                await CLIENTS[kind](soak, client, http)
            except Exception as err:  # noqa: BLE001  (a client-side failure is an unexpected error, not a crash)
                soak.record(kind, client, at, "error", detail=f"{type(err).__name__}: {err}")
            await asyncio.sleep(soak.pause * soak.random.uniform(0.5, 1.5))


# -- the server ---------------------------------------------------------------------------


def sample(server: ServerProcess, at: float) -> Sample | None:
    pid = server.process.pid
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return Sample(at, rss, threads, fds, process_cpu_seconds(pid))


async def sampler(server: ServerProcess, soak: Soak, every: float, samples: list[Sample]) -> None:
    while True:
        taken = sample(server, soak.now())
        if taken is None:
            log("the server is gone")
            return
        samples.append(taken)
        await asyncio.sleep(every)


async def leftovers(http_url: str) -> dict[str, float]:
    """What /metrics says is still going on (its own scrape aside): all 0 once the clients have stopped."""
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(http_url + "/metrics")).text
    names = ("wis_requests_in_progress", "wis_queue_depth", "wis_inference_in_progress", "wis_rtc_sessions")
    found = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(text):
        for metric in family.samples:
            if metric.name in found and metric.labels.get("route") != "/metrics":
                found[metric.name] += metric.value
    return found


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    server, http_url = await start_all_frontends("soak", CACHE / "soak-data", stack)
    port = server.port
    began = time.monotonic()
    soak = Soak(port, http_url, began, began + 60 * (args.warmup + args.minutes), args.pause)
    kinds = [ORDER[i % len(ORDER)] for i in range(args.clients)]
    log(
        f"{args.clients} clients ({', '.join(f'{kinds.count(k)} {k}' for k in CLIENTS if k in kinds)}) for "
        f"{args.warmup:g} + {args.minutes:g} minutes"
    )
    samples: list[Sample] = []
    watching = asyncio.create_task(sampler(server, soak, args.sample, samples))
    await asyncio.gather(*(client_loop(soak, client, kind) for client, kind in enumerate(kinds)))
    finished = soak.now()
    await asyncio.sleep(5)  # let the server notice the last hang-ups
    after = await leftovers(http_url)
    watching.cancel()
    await asyncio.sleep(TRIM_SECONDS + 5)  # idle long enough for a trim: what stays resident is held, not free
    idle = sample(server, soak.now())
    return {
        "kinds": kinds,
        "traffic_s": finished,
        "summary": summarise(soak.outcomes, samples, idle, after, args, finished),
        "outcomes": [asdict(o) for o in soak.outcomes],
        "samples": [asdict(s) for s in samples],
        "server_log_errors": [
            line
            for line in server.log_path.read_text(errors="replace").splitlines()
            if " ERROR " in line or "Traceback" in line
        ],
    }


# -- figures ------------------------------------------------------------------------------


def summarise(
    outcomes: list[Outcome],
    samples: list[Sample],
    idle: Sample | None,
    after: dict[str, float],
    args: argparse.Namespace,
    traffic_s: float,
) -> dict:
    kinds: dict[str, dict] = {}
    for kind in sorted({o.kind for o in outcomes}):
        mine = [o for o in outcomes if o.kind == kind]
        waits = [o.wait_s for o in mine if o.status == "ok" and o.wait_s is not None]
        kinds[kind] = {
            "requests": len(mine),
            **{status: sum(o.status == status for o in mine) for status in ("ok", "busy", "aborted", "error")},
            "p50_s": percentile(waits, 50),
            "p95_s": percentile(waits, 95),
            "p99_s": percentile(waits, 99),
            "max_s": max(waits, default=None),
            "audio_per_s": sum(o.audio_s for o in mine if o.status == "ok") / traffic_s,
        }
    warm = args.warmup * 60
    measured = [s for s in samples if s.at >= warm]
    first = [s.rss_mib for s in measured if s.at < warm + 60]
    last = [s.rss_mib for s in measured if s.at >= measured[-1].at - 60] if measured else []
    base, end = (statistics.median(first) if first else None), (statistics.median(last) if last else None)
    slope = None
    if len(measured) > 2:
        slope = float(np.polyfit([s.at / 3600 for s in measured], [s.rss_mib for s in measured], 1)[0])
    cpu = None
    if len(samples) > 1 and samples[-1].at > samples[0].at:
        cpu = (samples[-1].cpu_s - samples[0].cpu_s) / (samples[-1].at - samples[0].at)
    return {
        "kinds": kinds,
        "requests": len(outcomes),
        **{status: sum(o.status == status for o in outcomes) for status in ("ok", "busy", "aborted", "error")},
        "rss_start_mib": samples[0].rss_mib if samples else None,
        "rss_after_warmup_mib": base,
        "rss_end_mib": end,
        "rss_growth": end / base - 1 if base and end else None,
        "rss_max_mib": max((s.rss_mib for s in samples), default=None),
        "rss_slope_mib_per_hour": slope,
        "rss_idle_mib": idle.rss_mib if idle else None,
        "threads_after_warmup": max((s.threads for s in measured if s.at < warm + 60), default=None),
        "threads_max": max((s.threads for s in samples), default=None),
        "threads_idle": idle.threads if idle else None,
        "fds_after_warmup": max((s.fds for s in measured if s.at < warm + 60), default=None),
        "fds_max": max((s.fds for s in samples), default=None),
        "fds_idle": idle.fds if idle else None,
        "server_cpu_cores": cpu,
        "left_after": after,
    }


def report(document: dict, out: Path) -> None:
    summary = document["summary"]
    settings = document["settings"]
    print(f"Command: {document['command']}")
    print(f"Machine: {document['machine']['cpu_count']} CPUs ({document['machine']['cpu_model']})")
    print(
        f"{settings['clients']} clients, {settings['warmup']:g} min warm-up + {settings['minutes']:g} min; "
        f"{summary['requests']} requests: {summary['ok']} ok, {summary['busy']} busy, "
        f"{summary['aborted']} aborted on purpose, {summary['error']} unexpected errors"
    )
    print()
    print("| kind | requests | ok | busy | aborted | errors | audio s/s | wait p50 | p95 | p99 | max |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, row in summary["kinds"].items():
        print(
            f"| {kind} | {row['requests']} | {row['ok']} | {row['busy']} | {row['aborted']} | {row['error']} | "
            f"{fmt(row['audio_per_s'], '{:.2f}')} | {fmt_s(row['p50_s'])} | {fmt_s(row['p95_s'])} | "
            f"{fmt_s(row['p99_s'])} | {fmt_s(row['max_s'])} |"
        )
    print()
    growth = summary["rss_growth"]
    print(
        f"Server RSS: {fmt(summary['rss_start_mib'], '{:.0f}')} MiB at start, "
        f"{fmt(summary['rss_after_warmup_mib'], '{:.0f}')} MiB after warm-up, {fmt(summary['rss_end_mib'], '{:.0f}')} "
        f"MiB at the end (growth {fmt(growth and growth * 100, '{:+.1f}')} %, target < 5 %), max "
        f"{fmt(summary['rss_max_mib'], '{:.0f}')} MiB; trend after warm-up "
        f"{fmt(summary['rss_slope_mib_per_hour'], '{:+.0f}')} MiB/hour; {fmt(summary.get('rss_idle_mib'), '{:.0f}')} "
        "MiB idle after"
    )
    print(
        f"Threads: {summary['threads_after_warmup']} after warm-up, max {summary['threads_max']}, "
        f"{summary['threads_idle']} idle after; open files: {summary['fds_after_warmup']} after warm-up, "
        f"max {summary['fds_max']}, {summary['fds_idle']} idle after"
    )
    print(f"Server CPU: {fmt(summary['server_cpu_cores'], '{:.2f}')} cores on average")
    print(f"Left after the clients stopped (/metrics): {summary['left_after']}")
    print(f"Server log lines with ERROR or Traceback: {len(document['server_log_errors'])}")
    print(f"Results: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10, help="Measured time, after the warm-up")
    parser.add_argument("--warmup", type=float, default=2, help="Minutes of traffic before memory is compared")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--pause", type=float, default=1.0, help="Mean think time between a client's requests (s)")
    parser.add_argument("--sample", type=float, default=5.0, help="Seconds between memory samples")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or ROOT / "bench" / "results" / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json"
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    run_and_record(lambda stack: run(args, stack), settings, out, report)


if __name__ == "__main__":
    main()
