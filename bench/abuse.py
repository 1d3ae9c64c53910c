"""Abuse: the attacks of issues 19 and 49 against a live server; its memory, its event loop and real requests.

One wyoming-wis is started here as `./run.sh` starts it (its defaults and the bundled models; Wyoming, HTTP
and WebRTC on loopback ports) and takes the attacks in turn. A fresh one replaces it after an attack that
killed it or missed a target (it may be left wedged, or still hold what the attack took), and before every
attack with `--fresh`. From the start of an attack to the end of `--settle` seconds after it (the server
gives free memory back every 30 s, wyoming_wis/memory.py), three watchers run:

- memory: the server's VmRSS from /proc every 50 ms, and its VmHWM, reset before the attack, for what falls
  between samples. Past `--guard-mb` the server is killed, and the attack has failed.
- describe and /health: a prober in a process of its own (so that this one's load does not delay it) opens a
  fresh Wyoming connection from 127.0.0.3 every 100 ms and times `describe` (Home Assistant gives up after
  1 s), and a fresh HTTP connection for `GET /health` (as a load balancer asks).
- real requests from 127.0.0.2, in a loop while the attack runs and once after: a Wyoming transcription of
  a corpus clip (its words must match, and it may take at most twice its time on the fresh server, the median
  of three) and a short Wyoming synthesis (it must be audible speech).
The attacks come from 127.0.0.1 (and 127.0.1.x where they spread over addresses): the server's fairness is per
address, as a LAN's devices each have one. The server knows Home Assistant's address (--hass-address 127.0.0.2), as
the add-on and --hass-token tell it; the describe prober is a stranger.

  flac             a 55-byte FLAC declaring 8, 16 or 32 Hz with one 65,535-sample block (2.3 hours at 8 Hz),
                   to /v1/audio/transcriptions, /v1/audio/translations and /api/asr at once: a 4xx, quickly
  demuxers         a 106-byte SDP file, and an ffconcat and an HLS playlist naming a corpus clip by its path from
                   the server's working directory, to every route that decodes an upload at once: a 4xx each,
                   quickly, and no UDP socket opened by the server
  speech-text      /v1/audio/speech, read for 15 s: one 4,096-character sentence with no full stop, and 2,048
                   characters of "9,999,999 ": speech within 10 s, or a refusal
  wyoming-digits   --max-text-chars digits as one `synthesize`, and again streamed (synthesize-start, chunks,
                   synthesize-stop), read for 15 s: speech within 10 s, or a refusal
  wyoming-json     event data of just under --max-event-data-bytes of empty lists, from 32 connections at once (on
                   the loop, each took 60 ms to parse): bad-request each, refused unparsed
  rtc-offers       20 offers with no audio section to /api/rtc/asr, then a browser's: a 4xx each, then the
                   browser connects (no slot leaked)
  rtc-fragments    half --rtc-max-sessions browsers at once each send 16 MiB of one message that never ends
                   (half of them out of order, after a TSN never sent): each closed before 1 MiB of it was taken
                   in
  rtc-no-acks      half --rtc-max-sessions browsers that send no SCTP acknowledgement ping 50,000 times at once:
                   each closed before its last ping, its pongs left unacknowledged past the cap
  rtc-shares       --rtc-max-sessions offers from one address (answered, never connected), then a browser from
                   another address: all of them answered (no one else wanted a place); the browser connects, in the
                   place of one idle since its answer
  rtc-codecs       offers of one audio section with as many bytes of a=rtcp-fb wildcards as of codecs (aiortc
                   reads each wildcard against each codec, on the event loop): bodies of 32 and 64 KiB to
                   /api/rtc/asr and to /v1/realtime/calls as application/sdp, and of 32, 64 and 128 KiB as the
                   call's multipart part, each just within its route's limit: a 4xx each, quickly
  willow-streams   20 Willow devices at once stream AMR-WB NO_DATA frames (a byte per 20 ms: 30 KB is 10 minutes
                   of audio) over 15 s, hold the stream 5 s, and end it: each answered, 200 or a refusal
  wyoming-uploads  20 Wyoming transcriptions at once of --max-audio-seconds of audio sent at full speed: each
                   answered, a transcript or a refusal
  prompts          six 10 MB `prompt`s to /v1/audio/transcriptions with a short clip, and six `transcribe`
                   events whose transcript_names/_terms fill --max-event-data-bytes: each answered (no 5xx)
  markers          a `prompt` (HTTP) and a transcript_name (Wyoming) that spell Whisper's own special tokens
                   (<|endoftext|>...<|fr|><|translate|> Bonjour): each transcript the recording's, no "Bonjour"
  realtime         one Realtime session (/v1/realtime?intent=transcription) sends events that are not JSON, nested
                   30,000 deep, of an unknown type, with bad base64 or odd PCM, of 64 KiB and a byte, and an empty
                   commit: an `error` event each, naming it; a frame of 1 MiB and 3 KB in 3-byte characters (under
                   1 Mi characters) closes its session (1009); then a session transcribes the recording
  realtime-pings   half --realtime-max-sessions sessions from one address write pings back to back for 15 s,
                   reading nothing: the pongs that came back at most what each session's pace allows
  realtime-big-events
                   a 64 KiB + 1 byte event (error event), a 64 KiB one (taken), a frame over 1 MiB in bytes (1009);
                   then --realtime-max-sessions sessions from two addresses write 1 MiB events that cost the most
                   to parse (numbers; appends with 64 KiB of numbers besides their audio) back to back for 15 s: the
                   events refused, the appends taken
  realtime-idle    --realtime-max-sessions sessions from two addresses that send no event but ping every second and
                   answer pings, to a second server run with --realtime-idle-timeout 10: each closed within the
                   timeout (plus 15 s), and a session from a third address opened meanwhile
  realtime-fast-appends
                   --realtime-max-sessions sessions from two addresses append 1 s of speech at a time as fast as
                   each is taken, for 15 s: each session's audio taken at most twice as fast as real time after a
                   10 s burst, and the memory budget holding what their sockets may
  slots            --max-connections idle Wyoming connections (and 4 more) from one address; meanwhile Home
                   Assistant's describe and transcription from another address: both served
  wake-slots       --max-connections wake word streams (and 4 more) from one address, kept up as Home Assistant
                   keeps one per satellite; meanwhile its describe and transcription from another address: both
                   served, in place of the longest-running streams (told `busy`)
  spread-slots     an idle Wyoming connection from each of --max-connections addresses (127.0.1.x); meanwhile
                   Home Assistant's describe and transcription: both served
  spread-detects   a `detect` with no audio (and a ping) from each of --max-connections addresses (127.0.1.x);
                   meanwhile Home Assistant's describe and transcription: both served, in place of idle streams
  trickle          8 Wyoming transcriptions whose audio comes a sample every 2.5 s, to a second server run with
                   --idle-timeout 10: each closed with `timeout` once its audio is 10 s behind the clock
  pipelined-pings  4 connections write `ping`s back to back for 10 s (reading the pongs in bulk), and one writes
                   them and never reads: describe keeps answering; that one is dropped within --send-timeout
                   (plus 15 s) of the server taking no more of its pings
  wake-spellings   half --max-connections wake word streams, each naming Okay Nabu in 64 spellings: one detector's
                   share of the memory budget each; a `detect` naming 500 wake words: bad-request
  slow-readers     a Wyoming `synthesize` and a /v1/audio/speech request of long texts, from sockets with a
                   small receive buffer that never read: dropped within --send-timeout (plus 15 s)
  small            NUL and a lone surrogate in TTS text (400; bad-request); deeply nested JSON to
                   /v1/audio/speech and /api/rtc/asr (400); 4 concurrent save_audio=true Willow requests (all
                   200); the saved recording without the key from a second server run with --api-key (401); an
                   offer whose candidates name other hosts (192.0.2.1, and a UDP socket of ours on 127.0.0.9:
                   no packet may reach it); a Content-Security-Policy on /api/docs
  charsets         forms to /v1/audio/transcriptions whose parts declare what aiohttp decoded: a 1 MiB field in
                   punycode (16 s of event loop), an unknown charset (a 500), a gzipped file (50 MB of zeros in
                   50 kB), a base64 field, 640 parts: a 4xx each, quickly
  big-bodies       just under --max-upload-mb of offer to /api/rtc/asr and of multipart /v1/audio/speech (a
                   recording), each with its length declared and chunked: 413 each, quickly, before the client
                   has sent more than the route's limit (and the sockets' buffers)
  form-parts       64 uploads at once to /v1/audio/transcriptions, each of 8 file parts of exactly 1 MiB (twice
                   --memory-budget-mb in all), never ended (a byte every 2 s for 10 s): those past the address's
                   share refused 429 (or 413), the log saying so, and the server grown by no more than its budget
  echoes           a megabyte of program, voice, wake word and vad_sensitivity in Wyoming events, 60 KB of voice,
                   model and format in /v1/audio/speech, a 64 KiB model field and 60 KB of timestamp_granularities[]
                   in a form, and a path with %0a and %0d: a refusal each whose message is under 400 characters,
                   and under 20 KB logged for all
  clones           --max-cloned-voices (and 8 more) voices cloned with Willow's POST /api/tts?speaker=, 4 at a
                   time, to a second server run with --xtts on a tiny random XTTS-v2: the quota's worth stored
                   (200), the rest refused (507, cannot-store), a replacement stored, and no more voices on disk
  hub-voices       a second server run with --allow-download on a stand-in Hugging Face Hub of 12 voices: one
                   address asks for speech in each, 2 at a time, then in the first 2 again: each spoken, each voice
                   fetched once, and no more than twice the voices loaded on first use that it keeps
  rebinding        a page of evil.example rebound to the server (its Host, Origin and a browser's User-Agent)
                   posts save_audio=true to /api/willow and GETs /audio/willow.wav; a page of another site posts a
                   form to /v1/audio/transcriptions (403 each); a device's save_audio=true without a key (200,
                   nothing kept) and the recording asked for without a key (403)
  http-connections --max-http-connections keep-alive HTTP connections from two addresses, half each, each renewed
                   with GET /health every 20 s; meanwhile /health and a transcription from another address (200)
  hass-answers     a stand-in Home Assistant on loopback answers a second server run with --hass-token: get_states
                   of nearly the 16 MiB cap (9,000 thermostats; read, in a child process), then of 60 MiB (refused
                   as it comes), then a redirect to another stand-in (not followed, which gets no connection); the
                   second server's describe and /health within 250 ms throughout and its peak VmRSS under 4x the
                   cap each time. And a server given the token with a plain http:// URL to this machine's name
                   (homeassistant.local's case): it stops at start (2) naming --hass-plain-host, with no connection

Targets, for each attack: its expected answers; peak resident memory under `--ceiling-mb`; every describe and
/health answered within 250 ms; every real request right, Home Assistant's transcription within 2x its unloaded
time. Prints a table, writes bench/results/abuse-<time>.json,
and exits with status 1 when a target is missed.

    .venv/bin/python bench/abuse.py [--only flac,slots] [--ceiling-mb 1536] [--settle 35] [--fresh]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import math
import os
import secrets
import shutil
import signal
import socket
import statistics
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import openai
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event, async_read_event
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice
from wyoming.wake import Detect

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))
from asr import CHUNK_SAMPLES, LJ_CORPUS, Recording, lj_recordings, wer  # noqa: E402  (bench/ is not a package)
from common import (  # noqa: E402
    CACHE,
    HOST,
    RATE,
    ROOT,
    WIDTH,
    ServerProcess,
    fmt,
    log,
    ours_command,
    percentile,
    run_and_record,
    start_all_frontends,
    stop_servers,
)
from helpers import Pcm, wav_bytes  # noqa: E402
from hostile_files import naming, udp_sockets  # noqa: E402  (tests/hostile_files.py: uploads that name others)
from hostile_offers import swollen  # noqa: E402  (tests/hostile_offers.py: offers aiortc reads for seconds)
from realtime_client import PING, frame, pongs, raw_session  # noqa: E402  (tests/realtime_client.py: raw frames)
from rtc_client import Client as Browser  # noqa: E402  (tests/rtc_client.py: the browser stand-in)

from http_api.bodies import MAX_PARTS, MAX_TEXT_BYTES  # noqa: E402
from http_api.openai_realtime import MAX_FRAME_BYTES, RECEIVE_ALLOWANCE  # noqa: E402
from http_api.openai_speech import MAX_FORM_BYTES  # noqa: E402
from http_api.willow import SAVED_AUDIO  # noqa: E402
from openai_audio.realtime import (  # noqa: E402
    AUDIO_BURST,
    AUDIO_PACE,
    CONTROL_COST,
    EVENT_BYTES_PER_SECOND,
    MAX_EVENT_BYTES,
)
from wyoming_wis.config import Settings  # noqa: E402
from wyoming_wis.memory import TRIM_SECONDS  # noqa: E402
from wyoming_wis.wake.engine import MAX_KEPT_BYTES, MAX_NAMES  # noqa: E402
from wyoming_wis.wake.listener import MICRO_BYTES  # noqa: E402

DEFAULTS = Settings.from_args([], environ={})  # what the server runs with; the attacks are sized by it
ATTACKER = "127.0.0.1"  # where the attacks come from
HOME_ASSISTANT = "127.0.0.2"  # where the real requests come from
PROBER = "127.0.0.3"  # where the describe prober connects from

SAMPLE_S = 0.05  # between memory samples
PROBE_EVERY_S = 0.1
PROBE_TIMEOUT_S = 30.0  # a describe not answered by then counts as this long, and failed
STALL_TARGET_S = 0.25
MAX_SLOWDOWN = 2.0  # Home Assistant's transcription during an attack, at most this many times its unloaded time
UNLOADED_RUNS = 3  # transcriptions timed on each fresh server, for its unloaded time (the median)
REAL_TIMEOUT_S = 60.0  # for one real request, queueing included
REAL_PAUSE_S = 0.5  # between real requests during an attack
MAX_WER = 0.25  # above this a transcript is wrong, not just imperfect
SILENT_PEAK = 500  # int16; speech from the voice peaks far higher
MIN_SPEECH_S = 0.3
QUICK_S = 2.0  # "a 4xx, quickly"
FIRST_AUDIO_S = 10.0  # speech must start within this, or be refused
READ_S = 15.0  # the speech attacks read this long, then hang up
ANSWER_S = 30.0  # the longest an attack's own request may take to be answered, once sent
DROP_SLACK_S = 15.0  # a client that never reads must be dropped within --send-timeout and this
CONCURRENT = 20  # Willow devices or Wyoming uploads at once

REAL_CLIP = "LJ001-0004"  # 5.1 s, 15 words
SAY = "The hallway light is at {} percent"  # a new number each time: the speech cache never answers it
# How a request can fail on the client's side: refused, reset or closed connections, half an event, bad JSON.
CLIENT_FAILURES = (OSError, EOFError, ValueError)


# -- answers ----------------------------------------------------------------------------


@dataclass
class Reply:
    """What came back: an HTTP status, a Wyoming event type or 'error:CODE', or what went wrong."""

    status: int | str
    detail: str = ""
    first_audio_s: float | None = None


@dataclass
class Answer(Reply):
    label: str = ""
    seconds: float = 0.0

    @property
    def refused(self) -> bool:
        """A precise refusal: HTTP 4xx, or a Wyoming error event other than internal-error."""
        if isinstance(self.status, int):
            return 400 <= self.status < 500
        return self.status.startswith("error:") and self.status != "error:internal-error"

    @property
    def spoke_soon(self) -> bool:
        return self.first_audio_s is not None and self.first_audio_s <= FIRST_AUDIO_S


async def timed(label: str, call: Awaitable[Any]) -> Answer:
    """Await a request (a Reply, an httpx response or an OpenAI SDK result); a failure is the answer's status."""
    began = time.perf_counter()
    try:
        result = await call
    except openai.APIStatusError as err:
        result = Reply(err.status_code, str(err.message)[:200])
    except (TimeoutError, openai.APITimeoutError, httpx.TimeoutException):
        result = Reply("timeout")
    except (openai.APIConnectionError, httpx.TransportError, *CLIENT_FAILURES) as err:
        result = Reply("connection lost", f"{type(err).__name__}: {err}")
    if isinstance(result, httpx.Response):
        result = Reply(result.status_code, result.text[:200])
    elif not isinstance(result, Reply):
        result = Reply(200)
    return Answer(result.status, result.detail, result.first_audio_s, label, time.perf_counter() - began)


def tally(answers: Sequence[Answer]) -> str:
    """'400 x9 in <= 5.1 s'."""
    counts = Counter(str(answer.status) for answer in answers)
    slowest = max((answer.seconds for answer in answers), default=0.0)
    return ", ".join(f"{status} x{count}" for status, count in counts.most_common()) + f" in <= {slowest:.1f} s"


def listed(answers: Sequence[Answer]) -> str:
    return "; ".join(f"{answer.label}: {answer.status}, {answer.detail}" for answer in answers)


def sdk(target: Target) -> openai.AsyncOpenAI:
    """The OpenAI SDK as an app uses it on this server; no retries, so each answer is the server's first."""
    return openai.AsyncOpenAI(base_url=target.http_url + "/v1", api_key="none", max_retries=0, timeout=ANSWER_S)


def heard(first: float | None, size: int) -> str:
    return (f"first audio after {first:.1f} s" if first is not None else "no audio") + f", {size / 1e6:.1f} MB read"


# -- Wyoming ------------------------------------------------------------------------------


class SourcedClient(AsyncTcpClient):
    """The `wyoming` client, connecting from a chosen loopback address (the server's fairness is per address)."""

    def __init__(self, port: int, source: str) -> None:
        super().__init__(HOST, port)
        self.source = source

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, local_addr=(self.source, 0))

    async def disconnect(self) -> None:
        try:
            await super().disconnect()
        except OSError:
            pass  # reset by the server


def status_of(event: Event | None) -> str:
    if event is None:
        return "closed"
    return f"error:{(event.data or {}).get('code')}" if event.type == "error" else event.type


async def read_answer(client: AsyncTcpClient, end: str, timeout: float) -> tuple[str, list[Event]]:
    """Events up to `end`, an error or the connection's end: (its type, 'error:CODE' or 'closed'; the events)."""
    events: list[Event] = []
    while True:
        event = await asyncio.wait_for(client.read_event(), timeout)
        if event is not None:
            events.append(event)
        if event is None or event.type in (end, "error"):
            return status_of(event), events


async def transcribe(port: int, source: str, clip: Recording, **request: Any) -> tuple[str, str]:
    """A Wyoming transcription of `clip`, sent at full speed: (status, text)."""
    client = SourcedClient(port, source)
    await client.connect()
    try:
        await client.write_event(Transcribe(language="en", **request).event())
        await client.write_event(AudioStart(RATE, WIDTH, 1).event())
        step = CHUNK_SAMPLES * WIDTH
        for at in range(0, len(clip.pcm.audio), step):
            await client.write_event(AudioChunk(RATE, WIDTH, 1, audio=clip.pcm.audio[at : at + step]).event())
        await client.write_event(AudioStop().event())
        status, events = await read_answer(client, "transcript", REAL_TIMEOUT_S)
        return status, events[-1].data.get("text", "") if status == "transcript" else ""
    finally:
        await client.disconnect()


async def wyoming_speech(port: int, events: Sequence[Event], read_s: float = READ_S) -> Reply:
    """Send `events` from ATTACKER; read the speech for `read_s` or to its end, then hang up."""
    began = time.perf_counter()
    client = SourcedClient(port, ATTACKER)
    first, size, status = None, 0, "no audio"
    await client.connect()
    try:
        for event in events:
            await client.write_event(event)
        while (left := read_s - (time.perf_counter() - began)) > 0:
            try:
                event = await asyncio.wait_for(client.read_event(), left)
            except TimeoutError:
                break
            if event is None or event.type in ("error", "audio-stop"):
                status = status_of(event)
                break
            if event.type == "audio-chunk":
                first = first or time.perf_counter() - began
                size += len(event.payload or b"")
                status = "audio"
    finally:
        await client.disconnect()
    return Reply(status, heard(first, size), first)


def event_bytes(event_type: str, data_json: str) -> bytes:
    """An event as the `wyoming` library writes it (header line, then data), from data already in JSON."""
    data = data_json.encode("utf-8", "surrogatepass")
    return json.dumps({"type": event_type, "data_length": len(data)}).encode() + b"\n" + data


async def raw_event(port: int, event: bytes, source: str = ATTACKER) -> Reply:
    """Write an event the `wyoming` library cannot (it encodes no lone surrogate, nor costly data); the first event
    back."""
    reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
    try:
        writer.write(event)
        await writer.drain()
        answer = await asyncio.wait_for(async_read_event(reader), ANSWER_S)
    finally:
        writer.close()
    return Reply(status_of(answer), str((answer.data or {}).get("text", ""))[:200] if answer else "")


# -- the describe prober: a process of its own ---------------------------------------------


async def describe_once(port: int, source: str) -> str:
    """'ok' (an info event), 'error:CODE', 'closed', 'timeout' or how the connection failed."""
    client = SourcedClient(port, source)
    try:
        await asyncio.wait_for(client.connect(), PROBE_TIMEOUT_S)
        await client.write_event(Describe().event())
        status, _ = await read_answer(client, "info", PROBE_TIMEOUT_S)
        return "ok" if status == "info" else status
    except TimeoutError:
        return "timeout"
    except OSError as err:
        return f"oserror:{type(err).__name__}"
    except Exception as err:  # noqa: BLE001  (the prober outlives any answer: a half event, bad JSON)
        return f"broken:{type(err).__name__}"
    finally:
        await client.disconnect()


async def health_once(http_port: int, source: str) -> str:
    """'ok' (200), the status of another answer, 'timeout' or how the connection failed: GET /health on a fresh
    connection, as a load balancer asks."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(HOST, http_port, local_addr=(source, 0))
            try:
                writer.write(b"GET /health HTTP/1.1\r\nHost: wis\r\nConnection: close\r\n\r\n")
                status = (await reader.readline()).split()
                await reader.read()
            finally:
                writer.close()
    except TimeoutError:
        return "timeout"
    except OSError as err:
        return f"oserror:{type(err).__name__}"
    return "ok" if status[1:2] == [b"200"] else (status[1:2] or [b"closed"])[0].decode(errors="replace")


async def probe_forever(port: int, http_port: int) -> None:
    """The prober process: a describe and a GET /health every PROBE_EVERY_S, a line each:
    'MONOTONIC_START SECONDS STATUS KIND'."""
    while True:
        began = time.monotonic()
        for kind, probe in (("describe", describe_once(port, PROBER)), ("health", health_once(http_port, PROBER))):
            start = time.monotonic()
            status = await probe
            print(f"{start:.4f} {time.monotonic() - start:.4f} {status} {kind}", flush=True)
        await asyncio.sleep(max(0.0, began + PROBE_EVERY_S - time.monotonic()))


@dataclass
class Probe:
    at: float  # time.monotonic(): one clock for every process
    seconds: float
    status: str
    kind: str  # describe | health


class Prober:
    """The prober process of one server, and the describes it timed."""

    def __init__(self) -> None:
        self.probes: list[Probe] = []
        self._process: asyncio.subprocess.Process | None = None
        self._reading: asyncio.Task[None] | None = None

    async def start(self, port: int, http_port: int) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--probe-port",
            str(port),
            "--probe-http-port",
            str(http_port),
            stdout=asyncio.subprocess.PIPE,
        )
        self._reading = asyncio.create_task(self._read(self._process.stdout))  # type: ignore[arg-type]
        while not self.probes:
            if self._reading.done():
                raise RuntimeError("the describe prober exited")
            await asyncio.sleep(0.1)

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        async for line in stdout:
            at, seconds, status, kind = line.decode().split()
            self.probes.append(Probe(float(at), float(seconds), status, kind))

    async def stop(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            await self._process.wait()
        if self._reading is not None:
            await self._reading

    def between(self, began: float, ended: float, kind: str) -> list[Probe]:
        return [probe for probe in self.probes if began <= probe.at <= ended and probe.kind == kind]


# -- the server -------------------------------------------------------------------------


class Target:
    """The server under attack, and its prober."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.server: ServerProcess | None = None
        self.http_url = ""
        self.prober = Prober()
        self.suspect = False  # the last attack killed it or missed a target
        self.starts = 0
        self.unloaded_s = math.inf  # Home Assistant's transcription on the server with nothing else to do

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def http_port(self) -> int:
        return int(self.http_url.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        assert self.server is not None
        return self.server.process.pid

    @property
    def alive(self) -> bool:
        return self.server is not None and self.server.process.poll() is None

    async def ensure(self, fresh: bool) -> None:
        """A served server for the next attack: this one, or a new one."""
        if self.alive and not self.suspect and not fresh:
            return
        await self.stop()
        began = time.monotonic()
        self.server, self.http_url = await start_all_frontends(
            "abuse", CACHE / "abuse-data", self.stack, extra=("--hass-address", HOME_ASSISTANT)
        )
        await self.prober.start(self.port, self.http_port)
        self.suspect, self.starts = False, self.starts + 1
        warm = await real_pair(self.port, "warm-up")  # models loaded and run: the baseline is a served server's
        unloaded = [await real_transcription(self.port, "unloaded") for _ in range(UNLOADED_RUNS)]
        self.unloaded_s = statistics.median(real.seconds for real in unloaded)
        log(
            f"server {self.starts} ready in {time.monotonic() - began:.0f} s; warm-up {[r.ok for r in warm]}; "
            f"Home Assistant's transcription unloaded: {self.unloaded_s:.2f} s"
        )

    async def stop(self) -> None:
        await self.prober.stop()
        self.prober = Prober()
        if self.server is not None:
            stop_servers([self.server])


# -- memory -------------------------------------------------------------------------------


def status_mb(pid: int, name: str) -> float | None:
    """A memory figure (VmRSS, VmHWM) of a process from /proc, or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peak(pid: int) -> bool:
    """Start VmHWM afresh (Linux's clear_refs 5), so that it is this attack's; False where that is refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class MemoryWatch(threading.Thread):
    """VmRSS every SAMPLE_S, in a thread (our event loop may be busy); past `guard_mb` the server is killed."""

    def __init__(self, pid: int, guard_mb: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.guard_mb = pid, guard_mb
        self.samples: list[tuple[float, float]] = []
        self.killed_at_mb: float | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            rss = status_mb(self.pid, "VmRSS")
            if rss is None:
                return
            self.samples.append((time.monotonic(), rss))
            if rss > self.guard_mb and self.killed_at_mb is None:
                self.killed_at_mb = rss
                os.kill(self.pid, signal.SIGKILL)
            self._stopped.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stopped.set()
        self.join()

    def timeline(self, began: float, every: float = 0.5) -> list[list[float]]:
        """[seconds from `began`, highest RSS] per `every` seconds: the shape, small enough for the JSON."""
        buckets: dict[int, float] = {}
        for at, rss in self.samples:
            bucket = int((at - began) / every)
            buckets[bucket] = max(buckets.get(bucket, 0.0), rss)
        return [[round(bucket * every, 1), round(rss, 1)] for bucket, rss in sorted(buckets.items())]


# -- real requests ----------------------------------------------------------------------


@dataclass
class Real:
    """A real request, as Home Assistant makes it."""

    kind: str  # transcribe | synthesize
    phase: str  # during | after | warm-up
    ok: bool
    seconds: float
    detail: str


_CLIPS: dict[str, Recording] = {}
_SAID = iter(range(1, 1 << 30))


def real_clip() -> Recording:
    if not _CLIPS:
        _CLIPS.update((clip.name, clip) for clip in lj_recordings())
    return _CLIPS[REAL_CLIP]


async def real_transcription(port: int, phase: str) -> Real:
    clip, began = real_clip(), time.perf_counter()
    try:
        status, text = await transcribe(port, HOME_ASSISTANT, clip)
    except (TimeoutError, *CLIENT_FAILURES) as err:
        return Real("transcribe", phase, False, time.perf_counter() - began, f"{type(err).__name__}: {err}")
    score = wer([clip.text], [text]) if status == "transcript" else None
    ok = score is not None and score <= MAX_WER
    detail = f"WER {score:.2f}: {text!r}" if score is not None else status
    return Real("transcribe", phase, ok, time.perf_counter() - began, detail)


async def real_synthesis(port: int, phase: str) -> Real:
    began = time.perf_counter()
    client = SourcedClient(port, HOME_ASSISTANT)
    try:
        await client.connect()
        await client.write_event(Synthesize(text=SAY.format(next(_SAID))).event())
        status, events = await read_answer(client, "audio-stop", REAL_TIMEOUT_S)
    except (TimeoutError, *CLIENT_FAILURES) as err:
        return Real("synthesize", phase, False, time.perf_counter() - began, f"{type(err).__name__}: {err}")
    finally:
        await client.disconnect()
    start = next((event.data for event in events if event.type == "audio-start"), None)
    audio = b"".join(event.payload or b"" for event in events if event.type == "audio-chunk")
    samples = np.frombuffer(audio[: len(audio) // 2 * 2], dtype=np.int16)
    seconds = len(samples) / start["rate"] if start and start["width"] == 2 and start["channels"] == 1 else 0.0
    peak = int(np.abs(samples.astype(np.int32)).max()) if len(samples) else 0
    ok = status == "audio-stop" and seconds >= MIN_SPEECH_S and peak >= SILENT_PEAK
    return Real("synthesize", phase, ok, time.perf_counter() - began, f"{status}: {seconds:.2f} s, peak {peak}")


async def real_pair(port: int, phase: str) -> list[Real]:
    return [await real_transcription(port, phase), await real_synthesis(port, phase)]


async def real_while(port: int, attacking: asyncio.Event, into: list[Real]) -> None:
    """Real requests in turn while the attack runs: at least one pair, begun with it."""
    while True:
        into.extend(await real_pair(port, "during"))
        if not attacking.is_set():
            return
        await asyncio.sleep(REAL_PAUSE_S)


# -- attacks ------------------------------------------------------------------------------


@dataclass
class Finding:
    """What an attack saw: its answers in a line, whether they are what a bounded server gives, the answers."""

    outcome: str
    expected: bool
    answers: list[Answer] = field(default_factory=list)


# flac


FLAC_RATES = (8, 16, 32)
FLAC_BLOCK = 65535  # samples: the most one FLAC frame holds
FLAC_VALUE = 1000  # the one sample value of the frame


def crc(data: bytes, bits: int, poly: int) -> int:
    """FLAC's CRC-8 (poly 0x07) and CRC-16 (poly 0x8005): MSB first, no reflection, initial 0."""
    top, mask, value = 1 << (bits - 1), (1 << bits) - 1, 0
    for byte in data:
        value ^= byte << (bits - 8)
        for _ in range(8):
            value = ((value << 1) ^ poly) & mask if value & top else (value << 1) & mask
    return value


def tiny_flac(rate: int) -> bytes:
    """55 bytes of FLAC: STREAMINFO declaring `rate` Hz, 16-bit mono, and one frame of FLAC_BLOCK samples
    of one value (a CONSTANT subframe: two bytes)."""
    info = struct.pack(">HH", FLAC_BLOCK, FLAC_BLOCK) + bytes(6)  # block sizes; frame sizes unknown
    info += ((rate << 44) | (15 << 36) | FLAC_BLOCK).to_bytes(8, "big") + bytes(16)  # mono, 16-bit; no MD5
    header = b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info  # the last metadata block
    # sync; block size in 16 bits after the header, rate from STREAMINFO; mono, 16-bit; frame number 0
    frame = bytes([0xFF, 0xF8, 0x70, 0x08, 0x00]) + struct.pack(">H", FLAC_BLOCK - 1)
    frame += bytes([crc(frame, 8, 0x07), 0x00]) + struct.pack(">h", FLAC_VALUE)
    return header + frame + struct.pack(">H", crc(frame, 16, 0x8005))


async def flac(target: Target) -> Finding:
    client = sdk(target)
    async with client, httpx.AsyncClient(base_url=target.http_url, timeout=ANSWER_S) as http:
        calls = []
        for rate in FLAC_RATES:
            upload = ("tiny.flac", tiny_flac(rate), "audio/flac")
            calls += [
                timed(f"transcriptions {rate} Hz", client.audio.transcriptions.create(model="whisper-1", file=upload)),
                timed(f"translations {rate} Hz", client.audio.translations.create(model="whisper-1", file=upload)),
                timed(f"/api/asr {rate} Hz", http.post("/api/asr", files={"audio_file": upload})),
            ]
        answers = list(await asyncio.gather(*calls))
    return Finding(tally(answers), all(a.refused and a.seconds <= QUICK_S for a in answers), answers)


# demuxers


UPLOAD_ROUTES = (  # every route that decodes an uploaded file, and its field
    ("/v1/audio/transcriptions", "file"),
    ("/v1/audio/translations", "file"),
    ("/api/asr", "audio_file"),
    ("/api/wake", "file"),
)


async def demuxers(target: Target) -> Finding:
    cwd = Path(os.readlink(f"/proc/{target.pid}/cwd"))
    clip = os.path.relpath(LJ_CORPUS / f"{REAL_CLIP}.flac", cwd)  # relative: FFmpeg's concat refuses absolute paths
    sockets = udp_sockets(target.pid)
    async with httpx.AsyncClient(base_url=target.http_url, timeout=ANSWER_S) as http:
        calls = [
            timed(f"{route} {kind}", http.post(route, files={field: upload}))
            for route, field in UPLOAD_ROUTES
            for kind, upload in naming(clip).items()
        ]
        answers = list(await asyncio.gather(*calls))
    opened = udp_sockets(target.pid) - sockets
    expected = opened == 0 and all(a.refused and a.seconds <= QUICK_S for a in answers)
    return Finding(f"{tally(answers)}; {opened} UDP sockets opened", expected, answers)


# speech-text


SENTENCE_CHARS = 4096  # OpenAI's limit on `input`
NUMBERS_CHARS = 2048
WORDS = "the porch light in the garden turns on at dusk, and the kitchen stays warm while"  # no full stop


async def speech_for(target: Target, text: str) -> Reply:
    """/v1/audio/speech through the SDK, read as it streams for READ_S, then hung up on."""
    began = time.perf_counter()
    first, size = None, 0
    async with sdk(target) as client:
        request = client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format="wav"
        )
        async with request as response:
            async for piece in response.iter_bytes():
                first = first or time.perf_counter() - began
                size += len(piece)
                if time.perf_counter() - began > READ_S:
                    break
    return Reply(200, heard(first, size), first)


async def speech_text(target: Target) -> Finding:
    sentence = ((WORDS + " ") * (SENTENCE_CHARS // len(WORDS) + 1))[:SENTENCE_CHARS]
    numbers = ("9,999,999 " * NUMBERS_CHARS)[:NUMBERS_CHARS]
    answers = await asyncio.gather(
        timed("4,096-character sentence", speech_for(target, sentence)),
        timed("2,048 characters of 9,999,999", speech_for(target, numbers)),
    )
    return Finding(listed(answers), all(a.refused or a.spoke_soon for a in answers), list(answers))


# wyoming-digits


async def wyoming_digits(target: Target) -> Finding:
    digits = ("0123456789" * DEFAULTS.core.max_text_chars)[: DEFAULTS.core.max_text_chars]
    pieces = [SynthesizeChunk(text=digits[at : at + 100]).event() for at in range(0, len(digits), 100)]
    streamed = [SynthesizeStart().event(), *pieces, SynthesizeStop().event()]
    answers = await asyncio.gather(
        timed("synthesize", wyoming_speech(target.port, [Synthesize(text=digits).event()])),
        timed("streamed", wyoming_speech(target.port, streamed)),
    )
    return Finding(listed(answers), all(a.refused or a.spoke_soon for a in answers), list(answers))


# wyoming-json


JSON_CONNECTIONS = 32  # at once, from as many addresses (127.0.1.x)


async def wyoming_json(target: Target) -> Finding:
    """Event data of just under --max-event-data-bytes of empty lists (60 ms of the loop each to parse, where names
    or text take 1-2 ms), from JSON_CONNECTIONS connections at once."""
    size = DEFAULTS.wyoming.max_event_data_bytes
    data = json.dumps({"text": [[]] * ((size - 20) // 3)}, separators=(",", ":"))
    event = event_bytes("ping", data)
    sources = [f"127.0.1.{n + 1}" for n in range(JSON_CONNECTIONS)]
    answers = list(await asyncio.gather(*(timed(source, raw_event(target.port, event, source)) for source in sources)))
    return Finding(tally(answers), all(answer.status == "error:bad-request" for answer in answers), answers)


# rtc-offers


RTC_BAD_OFFERS = 20  # more than --rtc-max-sessions


async def offer_without_audio() -> str:
    """A browser's offer (tests/rtc_client.py's: audio and a data channel, every candidate in it) with its audio
    section cut out: about 1 KB."""
    client = Browser("")
    try:
        await client.pc.setLocalDescription(await client.pc.createOffer())
        lines = client.pc.localDescription.sdp.split("\r\n")
    finally:
        await client.close()
    audio = next(n for n, line in enumerate(lines) if line.startswith("m=audio"))
    after = next((n for n, line in enumerate(lines) if line.startswith("m=") and n > audio), len(lines))
    return "\r\n".join(lines[:audio] + lines[after:])


async def browser(url: str, source: str | None = None) -> Reply:
    """tests/rtc_client.py's browser connects (its offer sent from `source`): its offer's answer, then its data
    channel open."""
    client = Browser(url, source=source)
    try:
        response = await client.offer()
        if response.status_code != 200:
            return Reply(response.status_code, response.text[:200])
        opened = asyncio.Event()
        client.channel.on("open", opened.set)
        if client.channel.readyState != "open":
            await asyncio.wait_for(opened.wait(), 20)
        return Reply(200, "data channel open")
    finally:
        await client.close()


async def rtc_offers(target: Target) -> Finding:
    url = target.http_url + "/api/rtc/asr"
    offer = {"sdp": await offer_without_audio(), "type": "offer"}
    async with httpx.AsyncClient(timeout=ANSWER_S) as http:
        bad = [await timed(f"no audio {n}", http.post(url, json=offer)) for n in range(RTC_BAD_OFFERS)]
    good = await timed("a browser", browser(url))
    expected = all(answer.refused for answer in bad) and good.status == 200
    return Finding(f"{tally(bad)}; then a browser: {good.status}, {good.detail[:60]}", expected, [*bad, good])


# rtc-fragments, rtc-no-acks, rtc-shares


RTC_SHARE = DEFAULTS.rtc.rtc_max_sessions // 2  # hostile browsers at once: half the connections
UNENDED_BYTES = 16 * 2**20  # of each message that never ends: aiortc alone would hold all of it
UNENDED_TAKEN = 2**20  # bytes of it sent before the server closes the peer, at most (rtc/sctp.py holds a fraction)
UNACKED_PINGS = 50_000  # from each peer that acknowledges nothing; each answered with a pong that waits for it


async def hostile_peer(url: str, attack: Callable[[Browser], Awaitable[int]], most: int, unit: str) -> Reply:
    """A browser from ATTACKER connects and `attack`s (which returns how much it sent): 'closed' if the server closed
    it before more than `most` went, 'closed late' after, 'open' if it never did."""
    client = Browser(url, source=ATTACKER)
    try:
        await client.connect()
        sent = await attack(client)
        status = "open" if client.channel.readyState == "open" else "closed" if sent <= most else "closed late"
        return Reply(status, f"{sent} {unit}")
    finally:
        await client.close()


def unended(in_order: bool) -> Callable[[Browser], Awaitable[int]]:
    return lambda client: client.send_unended(UNENDED_BYTES, in_order)


async def no_acks(client: Browser) -> int:
    client.stop_acknowledging()
    return await client.flood("ping", UNACKED_PINGS)


async def hostile_peers(
    url: str, attacks: dict[str, Callable[[Browser], Awaitable[int]]], most: int, unit: str
) -> Finding:
    """The attacks at once, each from a browser of its own: each closed before more than `most` went."""
    answers = await asyncio.gather(
        *(timed(label, hostile_peer(url, attack, most, unit)) for label, attack in attacks.items())
    )
    outcome = f"{tally(answers)}; sent before the end: {', '.join(answer.detail for answer in answers)}"
    return Finding(outcome, all(answer.status == "closed" for answer in answers), list(answers))


async def rtc_fragments(target: Target) -> Finding:
    attacks = {f"{'unended' if n % 2 else 'out of order'} {n}": unended(n % 2 == 1) for n in range(RTC_SHARE)}
    return await hostile_peers(target.http_url + "/api/rtc/asr", attacks, UNENDED_TAKEN, "bytes")


async def rtc_no_acks(target: Target) -> Finding:
    attacks = {f"no acks {n}": no_acks for n in range(RTC_SHARE)}
    return await hostile_peers(target.http_url + "/api/rtc/asr", attacks, UNACKED_PINGS - 1, "pings")


async def full_offer() -> str:
    """A browser's offer (tests/rtc_client.py's), every candidate in it; the browser is gone once it is made."""
    client = Browser("")
    try:
        await client.pc.setLocalDescription(await client.pc.createOffer())
        return client.pc.localDescription.sdp
    finally:
        await client.close()


async def rtc_shares(target: Target) -> Finding:
    url = target.http_url + "/api/rtc/asr"
    offer = {"sdp": await full_offer(), "type": "offer"}  # answered, never connected: held CONNECT_TIMEOUT (30 s)
    transport = httpx.AsyncHTTPTransport(local_address=ATTACKER)
    async with httpx.AsyncClient(timeout=ANSWER_S, transport=transport) as http:
        offers = [await timed(f"offer {n}", http.post(url, json=offer)) for n in range(DEFAULTS.rtc.rtc_max_sessions)]
    await asyncio.sleep(SLOTS_FILL_S)  # idle since their answers
    good = await timed("a browser at another address", browser(url, HOME_ASSISTANT))
    expected = all(answer.status == 200 for answer in offers) and good.status == 200
    return Finding(f"{tally(offers)}; then a browser: {good.status}, {good.detail[:60]}", expected, [*offers, good])


# rtc-codecs


SWOLLEN_BODIES = (32 * 1024, 64 * 1024, 128 * 1024)  # bytes, each route's up to its limit
OFFER_BYTES = 64 * 1024  # rtc/signalling.py's MAX_OFFER (bench/rtc.py hides the package): an offer's body
CALL_BYTES = OFFER_BYTES + MAX_TEXT_BYTES  # rtc/realtime_call.py's CALL_LIMIT: a call's multipart body


def swollen_body(offer: str, most: int, body_of: Callable[[str], bytes]) -> bytes:
    """The body of the largest swollen offer that `body_of` makes into at most `most` bytes."""
    size = most
    while len(body := body_of(swollen(offer, size))) > most:
        size -= len(body) - most
    return body


async def rtc_codecs(target: Target) -> Finding:
    offer = await full_offer()

    def as_json(sdp: str) -> bytes:
        return json.dumps({"sdp": sdp, "type": "offer"}).encode()

    def as_part(sdp: str) -> bytes:
        return multipart(form_part("sdp", sdp.encode(), "Content-Type: application/sdp", filename="offer.sdp"))

    routes = (  # (path, the body of an offer, its content type, the route's limit for it)
        ("/api/rtc/asr", as_json, "application/json", OFFER_BYTES),
        ("/v1/realtime/calls", str.encode, "application/sdp", OFFER_BYTES),
        ("/v1/realtime/calls", as_part, AS_FORM["Content-Type"], CALL_BYTES),
    )
    answers = []
    async with httpx.AsyncClient(base_url=target.http_url, timeout=ANSWER_S) as http:
        for path, body_of, content_type, limit in routes:
            for most in (size for size in SWOLLEN_BODIES if size <= limit):
                body = swollen_body(offer, most, body_of)
                call = http.post(path, content=body, headers={"Content-Type": content_type})
                answers.append(await timed(f"{path} {content_type.split(';')[0]} {len(body)} B", call))
    return Finding(tally(answers), all(a.status == 400 and a.seconds <= QUICK_S for a in answers), answers)


# willow-streams


AMR_MAGIC = b"#!AMR-WB\n"
AMR_NO_DATA = bytes([15 << 3 | 1 << 2])  # frame type 15, NO_DATA, quality bit set: one byte for 20 ms
AMR_FRAMES_PER_S = 50
WILLOW_READ = 2048  # bytes per chunk, as the device's recorder reads them
WILLOW_SPREAD_S = 15.0  # a body is sent over this long
WILLOW_HOLD_S = 5.0  # then the stream stays open this long before it ends


async def _http_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """An HTTP/1.1 answer with a Content-Length, read whole."""
    status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), await reader.readexactly(int(headers.get("content-length", "0")))


async def willow_device(http_url: str, query: str, body: bytes, seconds: float, hold: float = 0.0) -> Reply:
    """POST /api/willow as a Willow device does: x-audio-* headers, and chunked encoding framed by hand from
    2 KB recorder reads, sent over `seconds`; then `hold` seconds before the last chunk. A server that answers
    early (a refusal) gets no more of the body."""
    host, port = http_url.removeprefix("http://").split(":")
    codec = "amrwb" if body.startswith(AMR_MAGIC) else "pcm"
    headers = {"x-audio-sample-rate": "16000", "x-audio-bits": "16", "x-audio-channel": "1", "x-audio-codec": codec}
    headers |= {"User-Agent": "Willow/2.0.0", "x-willow-id": "7c:df:a1:00:00:01", "Transfer-Encoding": "chunked"}
    head = f"POST /api/willow?{query} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(ATTACKER, 0))
    answer = asyncio.create_task(_http_answer(reader))
    try:
        writer.write((head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
        started = time.perf_counter()
        for at in range(0, len(body), WILLOW_READ):
            if answer.done():
                break
            writer.write(b"%x\r\n%s\r\n" % (len(body[at : at + WILLOW_READ]), body[at : at + WILLOW_READ]))
            await writer.drain()
            due = started + seconds * min(len(body), at + WILLOW_READ) / len(body)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        if not answer.done():
            await asyncio.wait([answer], timeout=hold)
        if not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        pass  # the server stopped taking the body: its answer says why, or its absence does
    status, text = await _answered(answer, writer)
    return Reply(status, text[:200].decode(errors="replace"))


async def _answered(answer: asyncio.Task[tuple[int, bytes]], writer: asyncio.StreamWriter) -> tuple[int, bytes]:
    """The answer `_http_answer` reads, once the body is sent or refused; the connection closed after it."""
    try:
        return await asyncio.wait_for(answer, ANSWER_S)
    finally:
        answer.cancel()
        writer.close()


async def willow_streams(target: Target) -> Finding:
    frames = int((DEFAULTS.core.max_audio_seconds - 1) * AMR_FRAMES_PER_S)  # just under the limit: all of it counts
    body = AMR_MAGIC + AMR_NO_DATA * frames
    answers = await asyncio.gather(
        *(
            timed(f"device {n}", willow_device(target.http_url, "", body, WILLOW_SPREAD_S, WILLOW_HOLD_S))
            for n in range(CONCURRENT)
        )
    )
    expected = all(answer.status == 200 or answer.refused for answer in answers)
    return Finding(f"{len(body) / 1e3:.0f} KB each: {tally(answers)}", expected, list(answers))


# wyoming-uploads


UPLOAD_CHUNK_S = 1  # seconds of audio per audio-chunk


async def long_upload(port: int) -> Reply:
    """--max-audio-seconds (less one) of silence at full speed, then audio-stop; the answer, however it comes."""
    client = SourcedClient(port, ATTACKER)
    await client.connect()
    answer = asyncio.create_task(read_answer(client, "transcript", ANSWER_S + DEFAULTS.core.max_audio_seconds))
    began = time.perf_counter()
    try:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(RATE, WIDTH, 1).event())
        chunk = AudioChunk(RATE, WIDTH, 1, audio=bytes(UPLOAD_CHUNK_S * RATE * WIDTH)).event()
        for _ in range(int(DEFAULTS.core.max_audio_seconds) // UPLOAD_CHUNK_S - 1):
            if answer.done():
                break
            await client.write_event(chunk)
        if not answer.done():
            await client.write_event(AudioStop().event())
        sent = f"sent in {time.perf_counter() - began:.1f} s"
    except ConnectionError:
        sent = "cut off while sending"  # the answer says why, or its absence does
    try:
        status, _ = await asyncio.wait_for(answer, ANSWER_S)
    except TimeoutError:
        status = "timeout"
    finally:
        answer.cancel()
        await client.disconnect()
    return Reply(status, sent)


async def wyoming_uploads(target: Target) -> Finding:
    answers = await asyncio.gather(*(timed(f"upload {n}", long_upload(target.port)) for n in range(CONCURRENT)))
    expected = all(answer.status == "transcript" or answer.refused for answer in answers)
    return Finding(tally(answers), expected, list(answers))


# prompts


PROMPTS = 6
PROMPT_BYTES = 10 * 1024 * 1024


def bias_lists() -> tuple[list[str], list[str]]:
    """transcript_names and transcript_terms that together fill most of --max-event-data-bytes."""
    half = DEFAULTS.wyoming.max_event_data_bytes // 2
    names = [f"Living room lamp {n}" for n in range(half // len('"Living room lamp 99999", '))]
    terms = [f"scene {n}" for n in range(half // len('"scene 99999", '))]
    return names, terms


async def biased_transcription(port: int, names: list[str], terms: list[str]) -> Reply:
    status, text = await transcribe(port, ATTACKER, real_clip(), transcript_names=names, transcript_terms=terms)
    return Reply(status, text[:120])


async def prompts(target: Target) -> Finding:
    clip = real_clip()
    upload = (f"{clip.name}.flac", (LJ_CORPUS / f"{clip.name}.flac").read_bytes(), "audio/flac")
    prompt = ("Turn on the kitchen light. " * (PROMPT_BYTES // 27 + 1))[:PROMPT_BYTES]
    names, terms = bias_lists()
    size = len(json.dumps(Transcribe(language="en", transcript_names=names, transcript_terms=terms).event().data))
    async with sdk(target) as client:
        calls = [
            timed(f"prompt {n}", client.audio.transcriptions.create(model="whisper-1", file=upload, prompt=prompt))
            for n in range(PROMPTS)
        ]
        calls += [timed(f"names {n}", biased_transcription(target.port, names, terms)) for n in range(PROMPTS)]
        answers = list(await asyncio.gather(*calls))
    http, wyoming = answers[:PROMPTS], answers[PROMPTS:]
    expected = all(a.status == 200 or a.refused for a in http) and all(
        a.status == "transcript" or a.refused for a in wyoming
    )
    return Finding(f"10 MB prompts: {tally(http)}; {size // 1000} KB of names: {tally(wyoming)}", expected, answers)


# Whisper's own markers as text: tokenised as they were, "Bonjour" was written ahead of every transcript.
MARKERS = "<|endoftext|>" * 3 + "<|startoftranscript|><|fr|><|translate|><|notimestamps|> Bonjour"


async def marker_transcription(port: int) -> Reply:
    status, text = await transcribe(port, ATTACKER, real_clip(), transcript_names=[MARKERS])
    return Reply(status, text[:120])


async def marker_upload(target: Target) -> Reply:
    clip = real_clip()
    upload = (f"{clip.name}.flac", (LJ_CORPUS / f"{clip.name}.flac").read_bytes(), "audio/flac")
    async with sdk(target) as client:
        heard = await client.audio.transcriptions.create(model="whisper-1", file=upload, language="en", prompt=MARKERS)
    return Reply(200, heard.text[:120])


async def markers(target: Target) -> Finding:
    answers = [await timed("prompt", marker_upload(target)), await timed("names", marker_transcription(target.port))]
    right = [a.status in (200, "transcript") and wer([real_clip().text], [a.detail]) <= MAX_WER for a in answers]
    return Finding(listed(answers), all(right) and not any("onjour" in a.detail for a in answers), answers)


# realtime


REALTIME_HOSTILE = {
    "not JSON": "{not json",
    "nested": "[" * 30_000 + "]" * 30_000,  # within 64 KiB: parsed, and too deep
    "unknown event": json.dumps({"type": "response.create"}),
    "bad base64": json.dumps({"type": "input_audio_buffer.append", "audio": "@@ not base64 @@"}),
    "odd PCM": json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode()}),
    "64 KiB + 1 byte event": json.dumps({"type": "session.update", "session": {}, "x": "A" * MAX_EVENT_BYTES}),
    "empty commit": json.dumps({"type": "input_audio_buffer.commit"}),
}
# past the largest frame a session reads in bytes (3 bytes a character), though not in characters
REALTIME_FRAME = json.dumps(
    {"type": "session.update", "x": "\u20ac" * (MAX_FRAME_BYTES // 3 + 1000)}, ensure_ascii=False
)


def realtime_url(target: Target) -> str:
    return target.http_url.replace("http", "ws", 1) + "/v1/realtime?intent=transcription"


async def realtime_error(socket: aiohttp.ClientWebSocketResponse, data: str) -> Reply:
    await socket.send_str(data)
    event = json.loads((await socket.receive(timeout=ANSWER_S)).data)
    return Reply(f"error:{event['error']['code']}" if event["type"] == "error" else event["type"])


async def realtime_frame(http: aiohttp.ClientSession, url: str) -> Reply:
    """The frame is refused by closing the session: 1009, or (the client still sending it) the connection."""
    async with http.ws_connect(url) as socket:
        await socket.receive(timeout=ANSWER_S)
        try:
            await socket.send_str(REALTIME_FRAME)
            message = await socket.receive(timeout=ANSWER_S)
        except ConnectionError:
            return Reply("error:closed", "the server closed the connection while the frame was sent")
        too_big = socket.close_code == 1009 or (message.type == aiohttp.WSMsgType.CLOSE and message.data == 1009)
        return Reply("error:message-too-big" if too_big else str(message.type), str(message.data))


async def realtime_transcription(http: aiohttp.ClientSession, url: str) -> Reply:
    clip = real_clip()
    manual = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}
    async with http.ws_connect(url) as socket:
        await socket.receive(timeout=ANSWER_S)
        await socket.send_str(json.dumps({"type": "session.update", "session": manual}))
        audio = base64.b64encode(clip.pcm.audio).decode()
        await socket.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
        await socket.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        while True:
            event = json.loads((await socket.receive(timeout=ANSWER_S)).data)
            if event["type"] in ("error", "conversation.item.input_audio_transcription.completed"):
                return Reply(200, event.get("transcript", "")[:120]) if "transcript" in event else Reply("error")


async def realtime(target: Target) -> Finding:
    url = realtime_url(target)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url, max_msg_size=0) as socket:
            await socket.receive(timeout=ANSWER_S)
            answers = [await timed(label, realtime_error(socket, data)) for label, data in REALTIME_HOSTILE.items()]
        answers.append(await timed("1 MiB + 3 KB frame of 3-byte characters", realtime_frame(http, url)))
        heard = await timed("transcription", realtime_transcription(http, url))
    right = heard.status == 200 and wer([real_clip().text], [heard.detail]) <= MAX_WER
    return Finding(listed([*answers, heard]), all(a.refused for a in answers) and right, [*answers, heard])


# realtime-pings, realtime-big-events, realtime-idle, realtime-fast-appends


RT_ATTACKERS = (ATTACKER, "127.0.1.1")  # each address may hold half the sessions
RT_NEWCOMER = "127.0.1.2"
RT_SESSIONS = DEFAULTS.http.realtime_max_sessions
RT_ATTACK_S = 15.0
RT_IDLE_S = 10.0  # the second server's --realtime-idle-timeout: the default's 300 s is past any attack's --cap
RT_PINGS = frame(b"", PING) * 4096
RT_SLACK = 1.1  # a pace measured over a few seconds may be this much over its rate


def numbers(size: int) -> str:
    """About `size` bytes of the JSON that costs the most to parse: a number every two bytes."""
    return "[" + ",".join(["1"] * (size // 2 - 1)) + "]"


# 1 MiB of numbers: 49 ms of the event loop each, where an event of 1 Mi characters was parsed whole
RT_COSTLY = frame(('{"type": "session.update", "x": ' + numbers(MAX_FRAME_BYTES - 64) + "}").encode())
# an append whose audio fills its frame but for 64 KiB of numbers: the most JSON an append may make us parse
RT_COSTLY_APPEND = frame(
    (
        '{"type": "input_audio_buffer.append", "audio": "' + "A" * (MAX_FRAME_BYTES - MAX_EVENT_BYTES) + '", "x": '
        + numbers(MAX_EVENT_BYTES - 200) + "}"
    ).encode()
)  # fmt: skip


async def pinger(target: Target) -> Reply:
    """A session from ATTACKER that writes pings back to back for RT_ATTACK_S, reading nothing; then the pongs that
    came back, against how many its pace allows."""
    began = time.monotonic()
    async with raw_session(HOST, target.http_port, ATTACKER) as (reader, writer):
        with suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(RT_ATTACK_S):
                while True:
                    writer.write(RT_PINGS)
                    await writer.drain()
        came = bytearray()
        with suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(1.0):
                while data := await reader.read(1 << 20):
                    came += data
    seconds = time.monotonic() - began
    most = (2 * MAX_EVENT_BYTES + EVENT_BYTES_PER_SECOND * seconds) / CONTROL_COST
    answered = pongs(bytes(came))
    return Reply("paced" if answered <= most * RT_SLACK else "not paced", f"{answered} pongs, at most {most:.0f}")


async def realtime_pings(target: Target) -> Finding:
    answers = await asyncio.gather(*(timed(f"pinger {n}", pinger(target)) for n in range(RT_SESSIONS // 2)))
    outcome = f"{len(answers)} sessions from one address wrote pings for {RT_ATTACK_S:g} s: {listed(answers[:2])}..."
    return Finding(outcome, all(answer.status == "paced" for answer in answers), list(answers))


def padded_event(size: int) -> str:
    """A session.update of `size` bytes."""
    event = json.dumps({"type": "session.update", "session": {}, "x": ""})
    return event.replace('""', '"' + "x" * (size - len(event)) + '"')


async def costly_writer(target: Target, n: int) -> Reply:
    """A session that writes RT_COSTLY (n even) or RT_COSTLY_APPEND back to back for RT_ATTACK_S, reading in bulk:
    the refusals it was sent."""
    came = bytearray()
    async with raw_session(HOST, target.http_port, RT_ATTACKERS[n % 2]) as (reader, writer):

        async def drain() -> None:
            while data := await reader.read(1 << 20):
                came.extend(data)

        draining = asyncio.create_task(drain())
        with suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(RT_ATTACK_S):
                while True:
                    writer.write(RT_COSTLY if n % 2 == 0 else RT_COSTLY_APPEND)
                    await writer.drain()
        draining.cancel()
    refused = came.count(b'"event_too_large"')
    if n % 2:
        return Reply("taken" if not refused else "refused", f"{refused} refused")
    return Reply("error:event_too_large" if refused else "not refused", f"{refused} refused")


async def realtime_big_events(target: Target) -> Finding:
    url = realtime_url(target)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url) as socket:
            await socket.receive(timeout=ANSWER_S)
            checks = [
                await timed("64 KiB + 1 byte event", realtime_error(socket, padded_event(MAX_EVENT_BYTES + 1))),
                await timed("64 KiB event", realtime_error(socket, padded_event(MAX_EVENT_BYTES))),
            ]
        checks.append(await timed("1 MiB + 3 KB frame of 3-byte characters", realtime_frame(http, url)))
    writers = await asyncio.gather(*(timed(f"costly {n}", costly_writer(target, n)) for n in range(RT_SESSIONS)))
    expected = [c.status for c in checks] == ["error:event_too_large", "session.updated", "error:message-too-big"]
    expected = expected and all(w.status in ("error:event_too_large", "taken") for w in writers)
    outcome = f"{listed(checks)}; {RT_SESSIONS} sessions of costly events for {RT_ATTACK_S:g} s: {tally(writers)}"
    return Finding(outcome, expected, [*checks, *writers])


async def start_realtime_idle_server(stack: ExitStack) -> str:
    """A second server, run with --realtime-idle-timeout RT_IDLE_S; its HTTP URL."""
    _, http_url = await start_all_frontends(
        "abuse-realtime-idle", CACHE / "abuse-realtime-idle-data", stack, ["--realtime-idle-timeout", str(RT_IDLE_S)]
    )
    return http_url


async def pinging_session(url: str, source: str) -> Reply:
    """A session that sends no event but pings every second and answers the server's pings (aiohttp's heartbeat,
    as client libraries keep a socket alive): how it ended."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as http, http.ws_connect(url, heartbeat=1.0) as socket:
        while True:
            message = await asyncio.wait_for(socket.receive(), RT_IDLE_S + DROP_SLACK_S)  # (its timeout restarts)
            if message.type != aiohttp.WSMsgType.TEXT:
                return Reply("closed", f"close code {socket.close_code}")
            if (event := json.loads(message.data))["type"] == "error":
                return Reply(f"error:{event['error']['code']}", event["error"]["message"][:80])


async def newcomer(url: str) -> Reply:
    """A session from a third address, asked for every second until one opens."""
    connector = aiohttp.TCPConnector(local_addr=(RT_NEWCOMER, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        refused = 0
        while True:
            try:
                async with http.ws_connect(url) as socket:
                    await socket.receive(timeout=ANSWER_S)
                    return Reply(200, f"after {refused} refusals")
            except aiohttp.WSServerHandshakeError:
                refused += 1
                await asyncio.sleep(1.0)


async def realtime_idle(target: Target, http_url: str) -> Finding:
    url = http_url.replace("http", "ws", 1) + "/v1/realtime?intent=transcription"
    idle = [
        asyncio.create_task(timed(f"idle {n}", pinging_session(url, RT_ATTACKERS[n % 2]))) for n in range(RT_SESSIONS)
    ]
    await asyncio.sleep(1.0)  # every place held
    late = await timed(f"session from {RT_NEWCOMER}", asyncio.wait_for(newcomer(url), RT_IDLE_S + DROP_SLACK_S))
    answers = await asyncio.gather(*idle)
    within = RT_IDLE_S + DROP_SLACK_S
    ended = all(a.status in ("error:idle_timeout", "error:busy") and a.seconds < within for a in answers)
    outcome = (
        f"{RT_SESSIONS} sessions answering pings, --realtime-idle-timeout {RT_IDLE_S:g}: {tally(answers)}; "
        f"{listed([late])}"
    )
    return Finding(outcome, ended and late.status == 200, [*answers, late])


async def fast_appender(target: Target, n: int) -> Reply:
    """A session that appends 1 s of speech at a time as fast as it is taken for RT_ATTACK_S, then a clear: how
    fast its audio was taken, against its pace."""
    speech, second = real_clip().pcm.audio, RATE * WIDTH
    audio = speech * (1 + int(RT_ATTACK_S * 8 * second) // len(speech))  # more than it may send
    update = {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm",
              "rate": RATE}}}}}  # fmt: skip
    async with raw_session(HOST, target.http_port, RT_ATTACKERS[n % 2]) as (reader, writer):
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)  # (little in flight)
        writer.write(frame(json.dumps(update).encode()))
        began, sent = time.monotonic(), 0
        with suppress(TimeoutError):
            async with asyncio.timeout(RT_ATTACK_S):
                for offset in range(0, len(audio) - second, second):
                    chunk = base64.b64encode(audio[offset : offset + second]).decode()
                    writer.write(frame(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}).encode()))
                    await writer.drain()
                    sent += 1
        writer.write(frame(json.dumps({"type": "input_audio_buffer.clear"}).encode()))  # answered after every append
        came = bytearray()
        async with asyncio.timeout(ANSWER_S + 2 * RT_ATTACK_S):
            while b'"input_audio_buffer.cleared"' not in came and (data := await reader.read(1 << 20)):
                came.extend(data)
    took = time.monotonic() - began
    pace = max(0.0, sent - AUDIO_BURST) / took
    status = "paced" if pace <= AUDIO_PACE * RT_SLACK else "not paced"
    return Reply(status, f"{sent} s of audio taken in {took:.1f} s: {pace:.1f} x real time after the burst")


async def realtime_fast_appends(target: Target) -> Finding:
    appenders = [asyncio.create_task(timed(f"appender {n}", fast_appender(target, n))) for n in range(RT_SESSIONS)]
    await asyncio.sleep(RT_ATTACK_S / 2)
    held = budget_used(target.http_url)
    answers = await asyncio.gather(*appenders)
    counted = held >= RT_SESSIONS * RECEIVE_ALLOWANCE
    outcome = (
        f"{RT_SESSIONS} sessions appending speech as fast as taken: {tally(answers)}, {answers[0].detail}; "
        f"{held / 2**20:.0f} MiB of the memory budget held meanwhile"
    )
    return Finding(outcome, counted and all(answer.status == "paced" for answer in answers), list(answers))


# slots


SLOTS_EXTRA = 4  # connections asked for past --max-connections
SLOTS_FILL_S = 2.0  # the attacker fills the slots this long before Home Assistant asks
SLOTS_HOLD_S = 5.0  # and keeps them this long after
SLOTS_TOP_UP_S = 0.1


async def until_closed(reader: asyncio.StreamReader) -> None:
    with suppress(ConnectionError):
        await reader.read()


class Hoard:
    """Idle Wyoming connections from ATTACKER, topped up as the server refuses or closes them: every slot it
    can get, all the time."""

    def __init__(self, port: int, want: int) -> None:
        self.port, self.want = port, want
        self.open: list[tuple[asyncio.StreamWriter, asyncio.Task[None]]] = []
        self.opened = 0

    @property
    def held(self) -> int:
        return sum(not closed.done() for _, closed in self.open)

    async def keep(self) -> None:
        while True:
            self.open = [(writer, closed) for writer, closed in self.open if not closed.done()]
            for _ in range(self.want - len(self.open)):
                reader, writer = await asyncio.open_connection(HOST, self.port, local_addr=(ATTACKER, 0))
                self.open.append((writer, asyncio.create_task(until_closed(reader))))
                self.opened += 1
            await asyncio.sleep(SLOTS_TOP_UP_S)

    def close(self) -> None:
        for writer, closed in self.open:
            closed.cancel()
            writer.close()


async def slots(target: Target) -> Finding:
    hoard = Hoard(target.port, DEFAULTS.wyoming.max_connections + SLOTS_EXTRA)
    keeping = asyncio.create_task(hoard.keep())
    try:
        await asyncio.sleep(SLOTS_FILL_S)
        held = hoard.held
        describe = await timed("describe from 127.0.0.2", _describe(target.port))
        real = await real_transcription(target.port, "during")
        await asyncio.sleep(SLOTS_HOLD_S)
    finally:
        keeping.cancel()
        hoard.close()
    transcription = Answer(
        "ok" if real.ok else "not served", real.detail, None, "transcription from 127.0.0.2", real.seconds
    )
    outcome = (
        f"the attacker held {held} connections ({hoard.opened} opened); Home Assistant's describe "
        f"{describe.status} in {describe.seconds:.2f} s, transcription {transcription.status} in {real.seconds:.1f} s"
    )
    return Finding(outcome, describe.status == "ok" and real.ok, [describe, transcription])


async def _describe(port: int) -> Reply:
    return Reply(await describe_once(port, HOME_ASSISTANT))


# wake-slots, spread-slots, trickle, pipelined-pings, wake-spellings


SILENCE_CHUNK = AudioChunk(RATE, WIDTH, 1, audio=bytes(RATE // 10 * WIDTH)).event()  # 100 ms, as satellites stream
EVICTED = "evicted"  # a stream ended by `busy` to make room for another address (not refused at its start)


class Satellites:
    """Wake word streams from ATTACKER, as Home Assistant keeps one per satellite (100 ms of silence every 100 ms),
    topped up as the server ends them: every slot it can get, all the time. `ended` counts how each one ended."""

    def __init__(self, port: int, want: int, names: Sequence[str] = ("okay_nabu",)) -> None:
        self.port, self.want, self.names = port, want, list(names)
        self.streams: set[asyncio.Task[str]] = set()
        self.ended: Counter[str] = Counter()

    async def keep(self) -> None:
        try:
            while True:
                for _ in range(self.want - len(self.streams)):
                    stream = asyncio.create_task(self._one())
                    self.streams.add(stream)
                    stream.add_done_callback(self._end)
                await asyncio.sleep(SLOTS_TOP_UP_S)
        finally:
            for stream in self.streams:
                stream.cancel()
            await asyncio.gather(*self.streams, return_exceptions=True)

    def _end(self, stream: asyncio.Task[str]) -> None:
        self.streams.discard(stream)
        if not stream.cancelled():
            failed = stream.exception()
            self.ended[stream.result() if failed is None else type(failed).__name__] += 1

    async def _one(self) -> str:
        client = SourcedClient(self.port, ATTACKER)
        await client.connect()
        streaming = asyncio.create_task(self._stream(client))
        try:
            while (event := await client.read_event()) is not None and event.type != "error":
                pass
            if event is not None and "make room" in str(event.data.get("text")):
                return EVICTED
            return status_of(event)
        finally:
            streaming.cancel()
            await client.disconnect()

    async def _stream(self, client: SourcedClient) -> None:
        with suppress(*CLIENT_FAILURES):
            await client.write_event(Detect(names=self.names).event())
            await client.write_event(AudioStart(RATE, WIDTH, 1).event())
            while True:
                await client.write_event(SILENCE_CHUNK)
                await asyncio.sleep(0.1)


async def served_meanwhile(target: Target) -> tuple[Answer, Answer, Real]:
    """Home Assistant's describe and transcription from its own address, while the slots are held."""
    describe = await timed("describe from 127.0.0.2", _describe(target.port))
    real = await real_transcription(target.port, "during")
    transcription = Answer(
        "ok" if real.ok else "not served", real.detail, None, "transcription from 127.0.0.2", real.seconds
    )
    return describe, transcription, real


async def wake_slots(target: Target) -> Finding:
    satellites = Satellites(target.port, DEFAULTS.wyoming.max_connections + SLOTS_EXTRA)
    keeping = asyncio.create_task(satellites.keep())
    try:
        await asyncio.sleep(SLOTS_FILL_S)
        held = len(satellites.streams)
        describe, transcription, real = await served_meanwhile(target)
        await asyncio.sleep(SLOTS_HOLD_S)
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
    outcome = (
        f"{held} wake word streams kept up from one address, ended: {dict(satellites.ended)}; Home Assistant's "
        f"describe {describe.status} in {describe.seconds:.2f} s, transcription {transcription.status} in "
        f"{real.seconds:.1f} s"
    )
    expected = describe.status == "ok" and real.ok and satellites.ended[EVICTED] > 0
    return Finding(outcome, expected, [describe, transcription])


async def spread(target: Target, first: bytes, what: str) -> Finding:
    """A connection from each of --max-connections addresses (127.0.1.x), each sending `first` and then nothing;
    meanwhile Home Assistant's describe and transcription."""
    opened = []
    for n in range(DEFAULTS.wyoming.max_connections):
        reader, writer = await asyncio.open_connection(HOST, target.port, local_addr=(f"127.0.1.{n + 1}", 0))
        writer.write(first)
        opened.append((writer, asyncio.create_task(until_closed(reader))))
    try:
        await asyncio.sleep(SLOTS_FILL_S)
        describe, transcription, real = await served_meanwhile(target)
    finally:
        for writer, closed in opened:
            closed.cancel()
            writer.close()
    evicted = sum(closed.done() and not closed.cancelled() for _, closed in opened)
    outcome = (
        f"{len(opened)} {what} from as many addresses ({evicted} closed to make room); Home Assistant's describe "
        f"{describe.status} in {describe.seconds:.2f} s, transcription {transcription.status} in {real.seconds:.1f} s"
    )
    return Finding(outcome, describe.status == "ok" and real.ok, [describe, transcription])


async def spread_slots(target: Target) -> Finding:
    return await spread(target, b"", "idle connections")


async def spread_detects(target: Target) -> Finding:
    """Wake word streams that owe nothing: a `detect` with no audio, and a `ping` (as one every 120 s would keep it
    from --idle-timeout)."""
    detect = event_bytes("detect", json.dumps({"names": ["okay_nabu"]})) + event_bytes("ping", "{}")
    return await spread(target, detect, "wake word streams without audio")


TRICKLE_IDLE_S = 10.0  # the second server's --idle-timeout: the default's 300 s is past any attack's --cap
TRICKLES = 8  # transcriptions at once


async def start_trickle_server(stack: ExitStack) -> int:
    """A second server, run with --idle-timeout TRICKLE_IDLE_S; its Wyoming port."""
    server, _ = await start_all_frontends(
        "abuse-trickle", CACHE / "abuse-trickle-data", stack, ["--idle-timeout", str(TRICKLE_IDLE_S)]
    )
    return server.port


async def trickled(port: int) -> Reply:
    """A transcription whose audio comes a sample at a time, each well within --idle-timeout of the last."""
    client = SourcedClient(port, ATTACKER)
    await client.connect()

    async def drip() -> None:
        with suppress(*CLIENT_FAILURES):
            await client.write_event(Transcribe(language="en").event())
            await client.write_event(AudioStart(RATE, WIDTH, 1).event())
            while True:
                await client.write_event(AudioChunk(RATE, WIDTH, 1, audio=bytes(WIDTH)).event())
                await asyncio.sleep(TRICKLE_IDLE_S / 4)

    dripping = asyncio.create_task(drip())
    try:
        status, events = await read_answer(client, "transcript", TRICKLE_IDLE_S + DROP_SLACK_S)
        return Reply(status, str(events[-1].data.get("text", ""))[:200] if events else "")
    finally:
        dripping.cancel()
        await client.disconnect()


async def trickle(target: Target, port: int) -> Finding:
    answers = await asyncio.gather(*(timed(f"trickle {n}", trickled(port)) for n in range(TRICKLES)))
    expected = all(a.status == "error:timeout" and a.seconds < TRICKLE_IDLE_S + DROP_SLACK_S for a in answers)
    return Finding(
        f"{TRICKLES} trickled transcriptions, --idle-timeout {TRICKLE_IDLE_S:g}: {tally(answers)}", expected, answers
    )


FLOOD_S = 10.0
FLOODERS = 4  # connections writing pings back to back
PINGS = b"".join(json.dumps({"type": "ping", "data": {"text": str(n)}}).encode() + b"\n" for n in range(4096))


async def flood(port: int, seconds: float) -> Reply:
    """Pings written back to back for `seconds`, never waiting for a pong (they are read in bulk, so the server
    never waits on its writes); the pongs read."""
    reader, writer = await asyncio.open_connection(HOST, port, local_addr=(ATTACKER, 0))
    pongs = 0

    async def drain() -> None:
        nonlocal pongs
        with suppress(*CLIENT_FAILURES):
            while data := await reader.read(1 << 20):
                pongs += data.count(b'"pong"')

    draining = asyncio.create_task(drain())
    ends = time.monotonic() + seconds
    try:
        with suppress(*CLIENT_FAILURES):
            while time.monotonic() < ends:
                writer.write(PINGS)
                await writer.drain()
    finally:
        draining.cancel()
        writer.close()
    return Reply("answered" if pongs else "no pong", f"{pongs} pongs")


async def pings_never_read(port: int) -> Reply:
    """Pings written from a socket with a small receive buffer that never reads, until the server takes no more
    (its pongs fill the buffers, and it reads nothing while its next answer waits): dropped within --send-timeout
    (and DROP_SLACK_S) of that, or still held. When that comes depends on how fast the server answers and how
    large the kernel lets the buffers grow, so the wait is counted from there, not from the first ping."""
    reader, writer = await asyncio.open_connection(sock=await never_reading(port))
    limit = DEFAULTS.wyoming.send_timeout + DROP_SLACK_S
    began, sent, status = time.monotonic(), 0, "held"
    stalled = began  # when the last write began to wait
    try:
        while time.monotonic() - began < MAX_TAKEN_S:
            writer.write(PINGS)
            stalled = time.monotonic()
            await asyncio.wait_for(writer.drain(), 2 * limit)
            sent += PINGS.count(b"\n")
    except TimeoutError:  # an OSError too: before CLIENT_FAILURES
        pass
    except CLIENT_FAILURES:
        status = "dropped" if time.monotonic() - stalled <= limit else "dropped late"
    finally:
        writer.close()
    now = time.monotonic()
    return Reply(status, f"{sent} pings written in {stalled - began:.1f} s, {status} {now - stalled:.1f} s after")


async def pipelined_pings(target: Target) -> Finding:
    answers = await asyncio.gather(
        *(timed(f"flood {n}", flood(target.port, FLOOD_S)) for n in range(FLOODERS)),
        timed("never reads", pings_never_read(target.port)),
    )
    *floods, never = answers
    expected = all(a.status == "answered" for a in floods) and never.status == "dropped"
    pongs = sum(int(a.detail.split()[0]) for a in floods if a.detail)
    outcome = f"{FLOODERS} connections' pings for {FLOOD_S:g} s: {pongs} pongs; one that never reads: {never.detail}"
    return Finding(outcome, expected, list(answers))


SPELLINGS_HOLD_S = 2.0  # the streams' budget is read this long after they open
SPELLING_STREAMS = DEFAULTS.wyoming.max_connections // 2  # what one address keeps once others come
ONE_STREAM_BYTES = MICRO_BYTES + MAX_KEPT_BYTES  # what a stream listening for one microWakeWord model holds


def budget_used(http_url: str) -> float:
    """wis_memory_budget_used_bytes, from /metrics."""
    text = httpx.get(http_url + "/metrics", timeout=ANSWER_S).raise_for_status().text
    return float(
        next(line.split()[1] for line in text.splitlines() if line.startswith("wis_memory_budget_used_bytes "))
    )


async def wake_spellings(target: Target) -> Finding:
    satellites = Satellites(target.port, SPELLING_STREAMS, [f"Okay_Nabu_v{n}" for n in range(MAX_NAMES)])
    keeping = asyncio.create_task(satellites.keep())
    try:
        await asyncio.sleep(SPELLINGS_HOLD_S)
        held = len(satellites.streams)
        used = await asyncio.to_thread(budget_used, target.http_url)  # with Home Assistant's real requests'
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
    client = SourcedClient(target.port, ATTACKER)
    await client.connect()
    try:
        await client.write_event(Detect(names=[f"okay_nabu_v{n}" for n in range(500)]).event())
        await client.write_event(AudioStart(RATE, WIDTH, 1).event())
        status, events = await read_answer(client, "detection", ANSWER_S)
    finally:
        await client.disconnect()
    refusal = Answer(status, str(events[-1].data.get("text", ""))[:200] if events else "", None, "500 names")
    outcome = (
        f"{held} streams naming Okay Nabu {MAX_NAMES} ways, ended: {dict(satellites.ended)}; the memory budget "
        f"held {used / 1e6:.1f} MB ({ONE_STREAM_BYTES / 1e6:.2f} MB a stream with one detector); 500 names: {status}"
    )
    expected = (
        held == SPELLING_STREAMS
        and not satellites.ended
        and used < 2 * SPELLING_STREAMS * ONE_STREAM_BYTES
        and status == "error:bad-request"
    )
    return Finding(outcome, expected, [refusal])


# slow-readers


SLOW_RCVBUF = 4096  # bytes: the receive buffer of a client that never reads
MAX_TAKEN_S = 120.0  # a server still taking pings from a client that reads none of its pongs after this: held
ACCEPT_S = 5.0  # for the server to accept a connection


def prose(chars: int) -> str:
    """Sentences, each different, up to `chars`: a long answer to read aloud."""
    sentences, length = [], 0
    while length < chars:
        sentences.append(f"Chapter {len(sentences) + 1} tells how the garden lights came on along the path.")
        length += len(sentences[-1]) + 1
    return " ".join(sentences)[:chars].rstrip()


def server_holds(server_port: int, client_port: int) -> bool:
    """Whether the server process holds this connection: its end is in /proc/net/tcp with an inode. One it has
    closed is gone, or orphaned (inode 0) while the kernel still tries to deliver what was written."""
    wanted = (f"{server_port:04X}", f"{client_port:04X}")
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]) == wanted:
            return fields[9] != "0"
    return False


async def never_reading(port: int) -> socket.socket:
    """A connection to `port` from the attacker's address with a small receive buffer (set before connecting:
    it sizes the TCP window, which a later change does not shrink), that its caller will never read."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
        sock.bind((ATTACKER, 0))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def never_reads(port: int, request: bytes, timeout: float) -> Reply:
    """Send `request` from a socket with a small receive buffer that is never read; how long the server keeps
    the connection open."""
    loop = asyncio.get_running_loop()
    sock = await never_reading(port)
    try:
        await loop.sock_sendall(sock, request)
        began, client_port = time.perf_counter(), sock.getsockname()[1]
        while not server_holds(port, client_port):  # until the server has accepted it
            if time.perf_counter() - began > ACCEPT_S:
                return Reply("never accepted")
            await asyncio.sleep(0.05)
        while server_holds(port, client_port):
            if time.perf_counter() - began > timeout:
                return Reply("still connected", f"after {timeout:.0f} s")
            await asyncio.sleep(0.25)
        return Reply("dropped", f"after {time.perf_counter() - began:.1f} s")
    finally:
        sock.close()


async def slow_readers(target: Target) -> Finding:
    timeout = DEFAULTS.wyoming.send_timeout + 2 * DROP_SLACK_S
    synthesize = json.dumps({"text": prose(DEFAULTS.core.max_text_chars)})
    speech = json.dumps({"model": "tts-1", "voice": "alloy", "input": prose(SENTENCE_CHARS), "response_format": "wav"})
    host = f"{HOST}:{target.http_port}"
    post = f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    post += f"Content-Length: {len(speech)}\r\n\r\n{speech}"
    answers = await asyncio.gather(
        timed("Wyoming synthesize", never_reads(target.port, event_bytes("synthesize", synthesize), timeout)),
        timed("/v1/audio/speech", never_reads(target.http_port, post.encode(), timeout)),
    )
    limit = DEFAULTS.wyoming.send_timeout + DROP_SLACK_S
    expected = all(answer.status == "dropped" and answer.seconds <= limit for answer in answers)
    return Finding(listed(answers), expected, list(answers))


# small


NESTING = 30_000  # levels of [ ]: 60 KB, under /api/rtc/asr's 64 KB limit on an offer
SAVES = 4
STUN_LISTENER = "127.0.0.9"  # another host, as far as the server can tell
DOCUMENTATION_ADDRESS = "192.0.2.1"  # TEST-NET-1: nobody's
STUN_WAIT_S = 4.0


async def start_keyed(stack: ExitStack) -> str:
    """A second server, run with --api-key, that has saved a Willow recording; its HTTP URL."""
    key = secrets.token_urlsafe(16)
    server, http_url = await start_all_frontends("abuse-keyed", CACHE / "abuse-keyed-data", stack, [f"--api-key={key}"])
    async with httpx.AsyncClient(base_url=http_url, timeout=ANSWER_S) as http:
        saved = await http.post(
            "/api/willow?save_audio=true", content=real_clip().pcm.audio, headers={"X-API-Key": key}
        )
    if saved.status_code != 200:
        raise RuntimeError(f"the keyed server saved no recording: {saved.status_code} {saved.text}")
    return http_url


def with_candidates(sdp: str, port: int) -> str:
    """An offer with its own candidates replaced by two at other hosts' addresses."""
    lines = [line for line in sdp.splitlines() if not line.startswith("a=candidate:")]
    at = next(n for n, line in enumerate(lines) if line.startswith("a=mid:"))
    others = [
        f"a=candidate:1 1 udp 2130706431 {DOCUMENTATION_ADDRESS} 50000 typ host",
        f"a=candidate:2 1 udp 2130706430 {STUN_LISTENER} {port} typ host",
    ]
    return "\r\n".join(lines[: at + 1] + others + lines[at + 1 :]) + "\r\n"


class Counting(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.received = 0

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.received += 1


async def offer_naming_others(http_url: str) -> Reply:
    """A browser's offer whose candidates name other hosts; the answer, and the packets that reached one."""
    loop = asyncio.get_running_loop()
    transport, counting = await loop.create_datagram_endpoint(Counting, local_addr=(STUN_LISTENER, 0))
    client = Browser(http_url + "/api/rtc/asr")
    try:
        await client.pc.setLocalDescription(await client.pc.createOffer())
        sdp = with_candidates(client.pc.localDescription.sdp, transport.get_extra_info("sockname")[1])
        async with httpx.AsyncClient(timeout=ANSWER_S) as http:
            response = await http.post(http_url + "/api/rtc/asr", json={"sdp": sdp, "type": "offer"})
        await asyncio.sleep(STUN_WAIT_S)
    finally:
        await client.close()
        transport.close()
    accepted = "accepted" if response.status_code == 200 else "refused"
    return Reply(response.status_code, f"offer {accepted}; {counting.received} packets reached {STUN_LISTENER}")


async def docs_policy(http: httpx.AsyncClient) -> Reply:
    response = await http.get("/api/docs")
    return Reply(response.status_code, response.headers.get("Content-Security-Policy", "no Content-Security-Policy"))


SMALL_EXPECTED: dict[str, Callable[[Answer], bool]] = {
    "speech with NUL": lambda a: a.status == 400,
    "speech with a lone surrogate": lambda a: a.status == 400,
    "synthesize with NUL": lambda a: a.status == "error:bad-request",
    "synthesize with a lone surrogate": lambda a: a.status == "error:bad-request",
    "nested JSON to /v1/audio/speech": lambda a: a.status == 400,
    "nested JSON to /api/rtc/asr": lambda a: a.status == 400,
    **{f"save_audio=true {n}": (lambda a: a.status == 200) for n in range(SAVES)},
    "saved recording without the key": lambda a: a.status == 401,
    "offer naming other hosts": lambda a: f" 0 packets reached {STUN_LISTENER}" in a.detail,
    "/api/docs": lambda a: a.status == 200 and not a.detail.startswith("no "),
}


async def small(target: Target, keyed_url: str) -> Finding:
    nested = b"[" * NESTING + b"]" * NESTING
    speech = {"model": "tts-1", "voice": "alloy", "response_format": "wav"}
    nul = json.dumps(speech | {"input": "Turn on the\x00 light"}).encode()
    surrogate = json.dumps(speech | {"input": "Turn on the \ud800 light"}).encode()  # ASCII JSON: "\ud800"
    as_json = {"Content-Type": "application/json"}
    pcm = real_clip().pcm.audio
    async with httpx.AsyncClient(base_url=target.http_url, timeout=ANSWER_S) as http:
        answers = list(
            await asyncio.gather(
                timed("speech with NUL", http.post("/v1/audio/speech", content=nul, headers=as_json)),
                timed(
                    "speech with a lone surrogate", http.post("/v1/audio/speech", content=surrogate, headers=as_json)
                ),
                timed("synthesize with NUL", wyoming_speech(target.port, [Synthesize(text="Turn on\x00 it").event()])),
                timed(
                    "synthesize with a lone surrogate",
                    raw_event(target.port, event_bytes("synthesize", '{"text": "Turn on \\ud800 it"}')),
                ),
                timed(
                    "nested JSON to /v1/audio/speech", http.post("/v1/audio/speech", content=nested, headers=as_json)
                ),
                timed("nested JSON to /api/rtc/asr", http.post("/api/rtc/asr", content=nested, headers=as_json)),
                *(
                    timed(f"save_audio=true {n}", willow_device(target.http_url, "save_audio=true", pcm, 0.5))
                    for n in range(SAVES)
                ),
                timed("saved recording without the key", http.get(keyed_url + "/audio/willow.wav")),
                timed("offer naming other hosts", offer_naming_others(target.http_url)),
                timed("/api/docs", docs_policy(http)),
            )
        )
    missed = [a for a in answers if not SMALL_EXPECTED[a.label](a)]
    outcome = f"{len(answers) - len(missed)} of {len(answers)} as expected"
    if missed:
        outcome += "; not: " + "; ".join(f"{a.label}: {a.status} {a.detail[:60]}" for a in missed)
    return Finding(outcome, not missed, answers)


# charsets


FORM_BOUNDARY = "abuse-boundary"
AS_FORM = {"Content-Type": f"multipart/form-data; boundary={FORM_BOUNDARY}"}
PUNYCODE_BYTES = 1 << 20  # the audit's field: 16 s of event loop while aiohttp decoded it as punycode
BOMB_BYTES = 50_000_000  # zeros, 50 kB gzipped


def form_part(name: str, value: bytes, *headers: str, filename: str | None = None) -> bytes:
    disposition = f'Content-Disposition: form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return "\r\n".join((f"--{FORM_BOUNDARY}", disposition, *headers, "", "")).encode() + value + b"\r\n"


def multipart(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{FORM_BOUNDARY}--\r\n".encode()


async def charsets(target: Target) -> Finding:
    clip = form_part("file", (LJ_CORPUS / f"{REAL_CLIP}.flac").read_bytes(), filename="clip.flac")
    forms = {
        "punycode 1 MiB field": multipart(
            form_part("prompt", b"a" * PUNYCODE_BYTES, "Content-Type: text/plain; charset=punycode"), clip
        ),
        "unknown charset": multipart(form_part("prompt", b"hi", "Content-Type: text/plain; charset=x-none"), clip),
        "gzip bomb": multipart(
            form_part("file", gzip.compress(bytes(BOMB_BYTES)), "Content-Encoding: gzip", filename="a.wav")
        ),
        "base64 field": multipart(form_part("prompt", b"SGk=", "Content-Transfer-Encoding: base64"), clip),
        f"{10 * MAX_PARTS} parts": multipart(clip, *[form_part("unknown", b"1")] * (10 * MAX_PARTS)),
    }
    async with httpx.AsyncClient(base_url=target.http_url, timeout=ANSWER_S) as http:
        calls = [
            timed(label, http.post("/v1/audio/transcriptions", content=body, headers=AS_FORM))
            for label, body in forms.items()
        ]
        answers = list(await asyncio.gather(*calls))
    return Finding(tally(answers), all(a.refused and a.seconds <= QUICK_S for a in answers), answers)


# echoes


MEGABYTE_VALUE = "v" * 1_000_000
MAX_ECHO_CHARS = 400  # of an error message: a client's value in it is cut to 60 characters (values.quote)
MAX_LOGGED_BYTES = 20_000  # logged by the whole attack: a warning a request, each value in it cut short


async def wyoming_error(port: int, event: Event) -> Reply:
    """Send one event (and, for a request that waits for audio, its audio-start) from ATTACKER: the error back,
    with its whole message's length in the detail."""
    client = SourcedClient(port, ATTACKER)
    await client.connect()
    try:
        await client.write_event(event)
        if event.type in ("transcribe", "detect"):
            await client.write_event(AudioStart(RATE, WIDTH, 1).event())
        status, events = await read_answer(client, "error", ANSWER_S)
        text = str((events[-1].data or {}).get("text", "")) if events else ""
        return Reply(status, f"{len(text)} characters")
    finally:
        await client.disconnect()


async def echoes(target: Target) -> Finding:
    assert target.server is not None
    logged = target.server.log_path.stat().st_size
    big, wide = MEGABYTE_VALUE, MEGABYTE_VALUE[:60_000]  # 60 KB: within a JSON body's 64 KiB
    wyoming = {
        "program": Event("select-program", {"name": big}),
        "voice": Event("synthesize", {"text": "Hi.", "voice": {"name": big}}),
        "wake word": Event("detect", {"names": [big]}),
        "vad_sensitivity": Event("transcribe", {"vad_sensitivity": big}),
    }
    speech = {"model": "tts-1", "input": "Hi.", "voice": "alloy"}
    https = {
        "speech voice": ("POST", "/v1/audio/speech", {"json": speech | {"voice": wide}}),
        "speech model": ("POST", "/v1/audio/speech", {"json": speech | {"model": wide}}),
        "speech format": ("POST", "/v1/audio/speech", {"json": speech | {"response_format": wide}}),
        "form model": (
            "POST",
            "/v1/audio/transcriptions",
            {"files": {"file": ("a.wav", b"RIFF"), "model": (None, wide[:65_000])}},
        ),
        "form timestamp_granularities[]": (
            "POST",
            "/v1/audio/transcriptions",
            {"files": {"file": ("a.wav", b"RIFF"), "timestamp_granularities[]": (None, wide)}},
        ),
        "path %0a": ("GET", "/v1/%0a2026-12-04 00:00:00 INFO forged: a line of its own%0d", {}),
    }
    async with httpx.AsyncClient(base_url=target.http_url, timeout=ANSWER_S) as http:

        async def http_error(method: str, path: str, kwargs: dict[str, Any]) -> Reply:
            response = await http.request(method, path, **kwargs)
            return Reply(response.status_code, f"{len(response.json()['error']['message'])} characters")

        answers = list(
            await asyncio.gather(
                *(timed(label, wyoming_error(target.port, event)) for label, event in wyoming.items()),
                *(timed(label, http_error(*request)) for label, request in https.items()),
            )
        )
    grown = target.server.log_path.stat().st_size - logged
    longest = max(int(answer.detail.split()[0]) for answer in answers if answer.detail.endswith("characters"))
    expected = all(answer.refused for answer in answers) and longest < MAX_ECHO_CHARS and grown < MAX_LOGGED_BYTES
    return Finding(f"{tally(answers)}; longest message {longest} characters, {grown} bytes logged", expected, answers)


# big-bodies


BIG_BODY_BYTES = int(DEFAULTS.http.max_upload_mb * 1024 * 1024) - 64 * 1024  # just under --max-upload-mb
IN_FLIGHT_BYTES = 8_000_000  # what a client may have sent before a refusal reaches it: loopback's socket buffers
BODY_PIECE = 64 * 1024


async def body_until_answered(
    http_url: str, path: str, content_type: str, head: bytes, chunked: bool
) -> tuple[Reply, int]:
    """POST `head`, then zeros, BIG_BODY_BYTES in all, as fast as the server takes them, until it answers: the
    answer, and the bytes sent before it (a length declared over the limit is answered before any more)."""
    host, port = http_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(ATTACKER, 0))
    # a small send buffer: what has been sent is little more than what the server has taken
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BODY_PIECE)
    answer = asyncio.create_task(_http_answer(reader))
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {BIG_BODY_BYTES}"
    sent, piece = 0, bytes(BODY_PIECE)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n".encode()
        )
        while sent < BIG_BODY_BYTES and not answer.done():
            data = head if sent == 0 else piece[: BIG_BODY_BYTES - sent]
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            await writer.drain()
            sent += len(data)
            # a declared length over the limit is answered at once; other answers are read between pieces
            await asyncio.wait([answer], timeout=QUICK_S if sent == len(head) and not chunked else 0)
        if chunked and not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        pass  # the server stopped taking the body: its answer says why, or its absence does
    status, text = await _answered(answer, writer)
    return Reply(status, f"{sent / 1e6:.1f} MB sent before it; {text[:150].decode(errors='replace')}"), sent


async def big_bodies(target: Target) -> Finding:
    speech = form_part("input", b"Hello.") + form_part("reference_audio", b"", filename="voice.wav")[:-2]
    cases = {  # label: path, content type, the body's start, the route's limit
        # an offer's, 64 KiB (rtc/signalling.py, which bench/rtc.py hides from here), is nothing beside the buffers
        "offer": ("/api/rtc/asr", "application/json", b'{"type": "offer", "sdp": "', 0),
        "speech form": ("/v1/audio/speech", AS_FORM["Content-Type"], speech, MAX_FORM_BYTES),
    }
    sent: dict[str, int] = {}
    limit: dict[str, int] = {}

    async def send(label: str, path: str, content_type: str, head: bytes, chunked: bool) -> Reply:
        reply, sent[label] = await body_until_answered(target.http_url, path, content_type, head, chunked)
        return reply

    calls = []
    for name, (path, content_type, head, size) in cases.items():
        for framing in ("declared", "chunked"):
            label = f"{name}, {framing}"
            limit[label] = size
            calls.append(timed(label, send(label, path, content_type, head, framing == "chunked")))
    before = status_mb(target.pid, "VmRSS") or 0.0
    answers = list(await asyncio.gather(*calls))
    grown = (status_mb(target.pid, "VmRSS") or 0.0) - before
    expected = all(
        a.status == 413 and a.seconds <= QUICK_S and sent[a.label] <= limit[a.label] + IN_FLIGHT_BYTES for a in answers
    )
    return Finding(f"{tally(answers)}; VmRSS {grown:+.0f} MiB", expected, answers)


# form-parts


FORM_UPLOADS = 64  # at once, from one address
FORM_PARTS = 8  # file parts of exactly 1 MiB per upload: 512 MiB in all (the audit's 96 x 24 held 2.6 GB in memory)
FORM_HOLD_S = 10.0  # an upload taken in stays open this long after its parts, never ended
FORM_TRICKLE_S = 2.0  # a byte this often, so that --http-read-timeout never ends it
FORM_SLACK_MB = 64  # the server may grow by --memory-budget-mb and this (sockets' buffers, the allocator's own)
HELD = "held"  # an upload taken in whole, unanswered: its form never ends


async def unended_form(http_url: str, parts: Sequence[bytes]) -> Reply:
    """POST a form of `parts` from ATTACKER, then a byte every FORM_TRICKLE_S for FORM_HOLD_S, never ending it: the
    refusal (its status, and its envelope's code) or HELD."""
    host, port = http_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(ATTACKER, 0))
    answer = asyncio.create_task(_http_answer(reader))
    length = sum(map(len, parts)) + 1024  # more than ever comes
    try:
        writer.write(
            f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {host}\r\nContent-Type: {AS_FORM['Content-Type']}\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
        )
        for data in parts:
            if answer.done():
                break
            writer.write(data)
            await writer.drain()
        ends = time.monotonic() + FORM_HOLD_S
        while not answer.done() and time.monotonic() < ends:
            await asyncio.wait([answer], timeout=FORM_TRICKLE_S)
            writer.write(b"x")
            await writer.drain()
    except ConnectionError:
        pass  # the server stopped taking the body: its answer says why
    if not answer.done():
        answer.cancel()
        writer.close()
        return Reply(HELD)
    status, body = await _answered(answer, writer)
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = f"no envelope: {body[:80]!r}"
    return Reply(status, code)


async def form_parts(target: Target) -> Finding:
    assert target.server is not None
    budget_mb = DEFAULTS.core.memory_budget_mb
    parts = [form_part(f"file{n}", bytes(2**20), filename=f"{n}.wav") for n in range(FORM_PARTS)]
    logged = target.server.log_path.stat().st_size
    before = status_mb(target.pid, "VmRSS") or 0.0
    watch = MemoryWatch(target.pid, float("inf"))
    watch.start()
    try:
        uploads = [timed(f"upload {n}", unended_form(target.http_url, parts)) for n in range(FORM_UPLOADS)]
        answers = list(await asyncio.gather(*uploads))
    finally:
        watch.stop()
    grown = max((rss for _, rss in watch.samples), default=before) - before
    with open(target.server.log_path, "rb") as log_file:
        log_file.seek(logged)
        said = log_file.read().decode(errors="replace").splitlines()
    told = any("--memory-budget-mb" in line and ATTACKER in line for line in said)
    refused = [answer for answer in answers if answer.status != HELD]
    held = len(answers) - len(refused)
    expected = (
        held <= budget_mb // FORM_PARTS
        and all(answer.status in (413, 429) for answer in refused)
        and all(answer.status != 429 or answer.detail == "busy" for answer in refused)
        and grown <= budget_mb + FORM_SLACK_MB
        and told
    )
    outcome = f"{held} held, {tally(refused)}; VmRSS {grown:+.0f} MiB (budget {budget_mb:g} MB); logged: {told}"
    return Finding(outcome, expected, answers)


# -- hass-answers: the Home Assistant client trusts only where its token should go ---------------------------------

HASS_REFUSED_MB = 60  # the audit's get_states: on the old 64 MiB cap, 2.26 s of describe and +1.63 GB
HASS_WAIT_S = 60.0


@dataclass
class HassReader:
    """A stand-in Home Assistant on loopback (tests/fake_hass.py), and a second server reading its names."""

    hass: Any  # fake_hass.FakeHass
    runner: Any  # its aiohttp runner
    server: ServerProcess
    http_port: int
    large: bytes  # states of nearly the cap, for get_states to answer with (fake_hass.filler_states)
    refused: bytes  # states of HASS_REFUSED_MB


async def start_hass_reader(stack: ExitStack) -> HassReader:
    """A stand-in Home Assistant, which has answered with a small household, and a second server run with
    --hass-token-file reading from it; the large answers made."""
    import fake_hass  # tests/fake_hass.py

    from wyoming_wis.hass_api import MAX_MESSAGE_BYTES

    hass = fake_hass.FakeHass()
    hass.registry.areas.append({"area_id": "office", "name": "Niamh's office", "aliases": [], "floor_id": None})
    hass.registry.entity("fan.office", "Ceiling fan", area="office")
    large = await asyncio.to_thread(fake_hass.filler_states, MAX_MESSAGE_BYTES - 2**20)
    refused = await asyncio.to_thread(fake_hass.filler_states, HASS_REFUSED_MB * 2**20)
    runner, port = await fake_hass.serve(hass, host=HOST)
    token = CACHE / "abuse-hass-token"
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text(fake_hass.TOKEN)
    extra = ["--hass-api", f"http://{HOST}:{port}/api", "--hass-token-file", str(token)]
    server, http_url = await start_all_frontends("abuse-hass", CACHE / "abuse-hass-data", stack, extra)
    await fake_hass.until(lambda: "Names from Home Assistant" in server.log_tail, timeout=HASS_WAIT_S)
    return HassReader(hass, runner, server, int(http_url.rsplit(":", 1)[1]), large, refused)


async def hass_answers(target: Target, reader: HassReader) -> Finding:
    """On the second server, each after a registry event: get_states of nearly the cap (parsed in a child), then one
    of 60 MiB (refused as it comes), then its next connection redirected to another stand-in (not followed), then
    read again; its describe and /health timed by a prober of its own. Then a server given the token with a plain
    http:// URL to this machine's name: it must stop at start (2) and the stand-in listening there see no
    connection."""
    import fake_hass

    from wyoming_wis.hass_api import MAX_MESSAGE_BYTES

    hass, server = reader.hass, reader.server
    pid, most_mb = server.process.pid, 4 * MAX_MESSAGE_BYTES / 2**20  # the message and its copies: the cap's order

    def said() -> str:
        return server.log_path.read_text(errors="replace")

    def names_read() -> int:
        return said().count("Names from Home Assistant")

    async def phase(label: str, done: Callable[[], bool], start: Callable[[], Awaitable[None]]) -> Answer:
        """`start` it, until `done`; the server's peak VmRSS over the one before."""
        before, hwm = status_mb(pid, "VmRSS") or 0.0, reset_peak(pid)
        watch = MemoryWatch(pid, math.inf)
        watch.start()
        began = time.perf_counter()
        await start()
        try:
            await fake_hass.until(done, timeout=HASS_WAIT_S)
            status = "done"
        except AssertionError:
            status = "timeout"
        took = time.perf_counter() - began
        watch.stop()
        peak = max([rss for _, rss in watch.samples] + [(status_mb(pid, "VmHWM") or 0.0) if hwm else 0.0])
        return Answer(status, f"VmRSS {peak - before:+.0f} MiB", label=label, seconds=took)

    prober = Prober()
    await prober.start(server.port, reader.http_port)
    stranger = fake_hass.FakeHass()
    stranger_runner, stranger_port = await fake_hass.serve(stranger, host=HOST)
    try:
        began = time.monotonic()

        def changed(states: bytes) -> Callable[[], Awaitable[None]]:
            async def change() -> None:
                hass.filler = states
                await hass.announce("entity_registry_updated", {"action": "update", "entity_id": "fan.office"})

            return change

        large, refused = f"get_states {len(reader.large) >> 20} MiB", f"get_states {HASS_REFUSED_MB} MiB"
        answers = [
            await phase(large, lambda: names_read() == 2, changed(reader.large)),
            await phase(refused, lambda: "exceeds limit" in said(), changed(reader.refused)),
        ]
        hass.filler, hass.redirect = reader.large, f"http://{HOST}:{stranger_port}/api/websocket"
        await fake_hass.until(lambda: hass.redirected > 0, timeout=HASS_WAIT_S)
        hass.redirect = None
        await fake_hass.until(lambda: names_read() == 3, timeout=HASS_WAIT_S)
        followed = stranger.connections
        verdict = "not followed" if not followed else "followed"
        answers.append(Answer(verdict, f"{followed} connections to where it pointed", label="redirect"))
        ended = time.monotonic()
    finally:
        await prober.stop()
        await stranger_runner.cleanup()
        await reader.runner.cleanup()
    answers.append(await plain_token())
    figures = {kind: probe_figures(prober.between(began, ended, kind)) for kind in ("describe", "health")}
    held = all(f["count"] > 0 and f["failed"] == 0 and f["max_s"] < STALL_TARGET_S for f in figures.values())
    grown = [float(answer.detail.split()[1]) for answer in answers[:2]]
    expected = (
        held
        and all(answer.status == "done" for answer in answers[:2])
        and all(mb < most_mb for mb in grown)
        and answers[2].status == "not followed"
        and answers[3].status == "exit 2"
    )
    stalls = ", ".join(f"{kind} <= {f['max_s'] or 0:.3f} s" for kind, f in figures.items())
    return Finding(f"{listed(answers)}; the reader's {stalls}", expected, answers)


async def plain_token() -> Answer:
    """wyoming-wis given the token with a plain http:// URL to this machine's name (not a loopback address as
    written, as homeassistant.local is not): exit 2 at start, saying what to add, and no connection made."""
    import fake_hass
    from common import offline_env

    host = socket.gethostname()
    address = next(info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM))
    listening = fake_hass.FakeHass()
    runner, port = await fake_hass.serve(listening, host=address)
    argv = [*ours_command(), "--data-dir", str(CACHE / "abuse-hass-data"), "--no-http"]
    argv += ["--uri", f"tcp://{HOST}:0", "--hass-api", f"http://{host}:{port}/api", "--hass-token", fake_hass.TOKEN]
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=offline_env(CACHE)
    )
    try:
        _, said = await asyncio.wait_for(process.communicate(), HASS_WAIT_S)
        status = f"exit {process.returncode}"
    except TimeoutError:
        process.kill()
        said, status = b"", "kept running"
        await process.wait()
    finally:
        await runner.cleanup()
    flag = f"--hass-plain-host {host.lower()}".encode()
    detail = f"{listening.connections} connections; {'names' if flag in said else 'does not name'} {flag.decode()}"
    if listening.connections or flag not in said:
        status += " (wrong)"
    return Answer(status, detail, label=f"plain ws:// to {host}", seconds=time.perf_counter() - began)


# -- clones: more cloned voices than the server keeps ----------------------------------------

CLONES_MODEL = "tiny-xtts"  # tests/xtts_tiny.py's random XTTS-v2: it clones like the real one (and speaks noise)
CLONES_OVER = 8  # clones past --max-cloned-voices
CLONES_AT_ONCE = 4
CLONE_SECONDS = 4.0  # of the reference recording: XTTS takes 3 to 30


async def start_cloner(stack: ExitStack) -> tuple[str, Path]:
    """A second server, run with --xtts on the tiny XTTS-v2 and holding no cloned voice; its HTTP URL and the
    folder its cloned voices go to."""
    import xtts_tiny  # tests/xtts_tiny.py: imports PyTorch, so only for this attack

    from wyoming_wis.core import XTTS_VOICES  # the core's engines load only for this attack, too

    data = CACHE / "abuse-clones-data"
    if not (data / "xtts" / CLONES_MODEL / "model.pth").is_file():
        xtts_tiny.build(data / "xtts" / CLONES_MODEL)
    folder = data / XTTS_VOICES / CLONES_MODEL
    shutil.rmtree(folder, ignore_errors=True)  # the last run's clones
    extra = ["--xtts", CLONES_MODEL, "--asr-model", "tiny.en"]  # tiny.en: nothing to join into this data dir
    _, http_url = await start_all_frontends("abuse-clones", data, stack, extra)
    return http_url, folder


async def clones(target: Target, cloner: tuple[str, Path]) -> Finding:
    http_url, folder = cloner
    quota = DEFAULTS.core.tts.max_cloned_voices
    pcm = real_clip().pcm
    reference = wav_bytes(Pcm(pcm.audio[: int(CLONE_SECONDS * RATE) * WIDTH], RATE, WIDTH, 1))
    gate = asyncio.Semaphore(CLONES_AT_ONCE)
    transport = httpx.AsyncHTTPTransport(local_address=ATTACKER)
    async with httpx.AsyncClient(base_url=http_url, transport=transport, timeout=ANSWER_S) as http:

        async def clone(name: str) -> Answer:
            async with gate:
                files = {"audio_file": ("voice.wav", reference)}
                return await timed(name, http.post("/api/tts", params={"speaker": name}, files=files))

        answers = list(await asyncio.gather(*(clone(f"clone-{n}") for n in range(quota + CLONES_OVER))))
        stored = sorted(answer.label for answer in answers if answer.status == 200)
        answers.append(await clone(stored[0] if stored else "clone-0"))  # a replacement takes no more room
    voices = sorted(path.stem for path in folder.glob("*.safetensors"))
    size = sum(path.stat().st_size for path in folder.iterdir()) if folder.is_dir() else 0
    refused = [answer for answer in answers[:-1] if answer.status == 507]  # cannot-store: no other error is 507
    expected = len(stored) == quota and len(refused) == CLONES_OVER and answers[-1].status == 200
    outcome = f"{tally(answers[:-1])}; replacing one: {answers[-1].status}; {len(voices)} voices, {size / 1e3:.0f} kB"
    return Finding(outcome, expected and voices == stored, answers)


# hub-voices


HUB_VOICES = 12  # voices of the stand-in hub a client names one after another, past twice those kept
HUB_AT_ONCE = 2


@dataclass
class HubReader:
    """A second server, allowed to download, and the stand-in hub it fetches from."""

    hub: Any  # tests/fake_hub.py's StandInHub
    server: ServerProcess
    http_url: str
    names: list[str]


async def start_hub_reader(stack: ExitStack) -> HubReader:
    """A stand-in Hugging Face Hub on loopback whose HUB_VOICES voices are the bundled voice's bytes, and a second
    server run with --allow-download reaching it, once it has the hub's list; no voice of the hub fetched yet."""
    import fake_hub  # tests/fake_hub.py

    from wyoming_wis.catalog import Catalog

    data = CACHE / "abuse-hub-data"
    shutil.rmtree(data, ignore_errors=True)  # the last run's voices and list
    source = Catalog([data]).voice("en_US-joe-medium").path
    names = [f"de_DE-abuse{n}-medium" for n in range(HUB_VOICES)]
    hub = fake_hub.StandInHub({name: (source, None) for name in names})
    stack.callback(hub.stop)
    extra = ["--allow-download", "--asr-model", "tiny.en"]  # tiny.en: nothing to join into this data dir
    server, http_url = await start_all_frontends("abuse-hub", data, stack, extra, env=hub.env())
    listed = f"Piper voices' list from the Hugging Face Hub: {HUB_VOICES} voices"
    deadline = time.monotonic() + ANSWER_S
    while listed not in server.log_tail:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the second server did not fetch the stand-in hub's list:\n{server.log_tail}")
        await asyncio.sleep(0.1)
    return HubReader(hub, server, http_url, names)


async def hub_voices(target: Target, reader: HubReader) -> Finding:
    """From one address, speech in each of the hub's voices, HUB_AT_ONCE at a time, then in the first few again:
    each voice spoken, each fetched once, and the second server holding no more than twice the voices it keeps."""
    import fake_hub

    from wyoming_wis.core import ON_DEMAND_VOICES

    gate = asyncio.Semaphore(HUB_AT_ONCE)

    async def speak(name: str) -> Answer:
        async with gate:
            events = [Synthesize(text="The garage door is open.", voice=SynthesizeVoice(name=name)).event()]
            return await timed(name, wyoming_speech(reader.server.port, events, read_s=ANSWER_S))

    names = reader.names
    answers = list(await asyncio.gather(*(speak(name) for name in [*names, *names[:HUB_AT_ONCE]])))
    fetches = await asyncio.to_thread(lambda: [reader.hub.fetched(fake_hub.voice_path(name)) for name in names])
    async with httpx.AsyncClient(timeout=ANSWER_S) as http:
        health = (await http.get(reader.http_url + "/health")).json()
    held = len(health["tts"]) - 1  # the voices loaded on first use: all but the --voice one
    status = Path(f"/proc/{reader.server.process.pid}/status").read_text()
    peak_mib = int(status.split("VmHWM:")[1].split()[0]) / 1024  # the second server's, since it started
    spoken = all(answer.status == "audio-stop" for answer in answers)
    outcome = (
        f"{tally(answers)}; each fetched {min(fetches)}-{max(fetches)} times; {held} voices loaded on first use "
        f"held; the second server's peak {peak_mib:.0f} MiB"
    )
    return Finding(outcome, spoken and set(fetches) == {1} and held <= 2 * ON_DEMAND_VOICES, answers)


# rebinding


EVIL = "evil.example"  # a web page's name, pointed again at the server's address (DNS rebinding)
BROWSER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
DEVICE_FORMAT = {"x-audio-sample-rate": "16000", "x-audio-bits": "16", "x-audio-channel": "1", "x-audio-codec": "pcm"}
REBINDING_EXPECTED = {  # label: status
    "rebound page: save_audio=true": 403,
    "rebound page: GET the recording": 403,
    "cross-site form to /v1/audio/transcriptions": 403,
    "a device: save_audio=true without a key": 200,
    "anyone: GET the recording without a key": 403,
}


async def rebinding(target: Target) -> Finding:
    """What a web page can make the user's browser do to the server: as a rebound page (its Host), and as a page
    of another site posting a plain form. Then what a device and anyone get of the recording on a server with no
    key."""
    pcm = real_clip().pcm
    rebound = {"Host": f"{EVIL}:{target.http_port}", "User-Agent": BROWSER_AGENT}  # plain HTTP: no Sec-Fetch-*
    form = {"file": ("speech.wav", wav_bytes(Pcm(pcm.audio, RATE, WIDTH, 1)), "audio/wav")}
    transport = httpx.AsyncHTTPTransport(local_address=ATTACKER)
    async with httpx.AsyncClient(base_url=target.http_url, transport=transport, timeout=ANSWER_S) as http:
        requests = {
            "rebound page: save_audio=true": http.post(
                "/api/willow?save_audio=true",
                content=pcm.audio,
                headers=DEVICE_FORMAT | rebound | {"Origin": f"http://{rebound['Host']}"},
            ),
            "rebound page: GET the recording": http.get("/" + SAVED_AUDIO, headers=rebound),
            "cross-site form to /v1/audio/transcriptions": http.post(
                "/v1/audio/transcriptions",
                files=form,
                data={"model": "whisper-1"},
                headers={"Origin": f"http://{EVIL}", "User-Agent": BROWSER_AGENT},
            ),
            "a device: save_audio=true without a key": http.post(
                "/api/willow?save_audio=true", content=pcm.audio, headers=DEVICE_FORMAT | {"User-Agent": "Willow/2.0"}
            ),
            "anyone: GET the recording without a key": http.get("/" + SAVED_AUDIO),
        }
        answers = [await timed(label, request) for label, request in requests.items()]
    expected = all(answer.status == REBINDING_EXPECTED[answer.label] for answer in answers)
    return Finding(", ".join(f"{answer.label}: {answer.status}" for answer in answers), expected, answers)


# http-connections


CONNECTIONS_ADDRESSES = ("127.0.1.1", "127.0.1.2")  # the attacker's two addresses, half the connections each
CONNECTIONS_RENEW_S = 20.0  # each connection asks for /health this often, to stay open
HEALTH_REQUEST = b"GET /health HTTP/1.1\r\nHost: wis\r\n\r\n"


async def kept_open(source: str, port: int, stop: asyncio.Event) -> str:
    """A keep-alive connection from `source`, renewed with GET /health every CONNECTIONS_RENEW_S until `stop`: how
    it ended (`held`, `closed` by the server, `refused` 503 at once)."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
    except OSError:
        return "refused"
    try:
        while True:
            writer.write(HEALTH_REQUEST)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_S)
            if not head.startswith(b"HTTP/1.1 200"):
                return "refused"
            length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))[15:])
            await reader.readexactly(length)
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CONNECTIONS_RENEW_S)
            if stop.is_set():
                return "held"
    except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError):
        return "closed"
    finally:
        writer.close()


async def http_connections(target: Target) -> Finding:
    """--max-http-connections keep-alive connections, half from each of two addresses, each renewed with a request
    every 20 s; meanwhile /health and a transcription from Home Assistant's address."""
    stop = asyncio.Event()
    half = DEFAULTS.http.max_http_connections // 2
    kept = [
        asyncio.create_task(kept_open(source, target.http_port, stop))
        for source in CONNECTIONS_ADDRESSES
        for _ in range(half)
    ]
    try:
        await asyncio.sleep(SLOTS_FILL_S + 1)  # all open, and idle past shares.IDLE_AFTER_SECONDS
        transport = httpx.AsyncHTTPTransport(local_address=HOME_ASSISTANT)
        upload = {"file": ("speech.wav", wav_bytes(Pcm(real_clip().pcm.audio, RATE, WIDTH, 1)), "audio/wav")}
        async with httpx.AsyncClient(base_url=target.http_url, transport=transport, timeout=ANSWER_S) as http:
            answers = [
                await timed("/health from 127.0.0.2", http.get("/health")),
                await timed(
                    "transcription from 127.0.0.2",
                    http.post("/v1/audio/transcriptions", files=upload, data={"model": "whisper-1"}),
                ),
            ]
    finally:
        stop.set()
        ended = Counter(await asyncio.gather(*kept))
    outcome = f"{len(kept)} kept open from 2 addresses: {dict(ended)}; " + ", ".join(
        f"{answer.label}: {answer.status}" for answer in answers
    )
    return Finding(outcome, all(answer.status == 200 for answer in answers), answers)


# -- running them -------------------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    name: str
    run: Callable[..., Awaitable[Finding]]  # (target, *prepared)
    prepare: Callable[[ExitStack], Awaitable[Any]] | None = None  # before it is measured; its result goes to run


ATTACKS = (
    Attack("flac", flac),
    Attack("demuxers", demuxers),
    Attack("speech-text", speech_text),
    Attack("wyoming-digits", wyoming_digits),
    Attack("wyoming-json", wyoming_json),
    Attack("rtc-offers", rtc_offers),
    Attack("rtc-fragments", rtc_fragments),
    Attack("rtc-no-acks", rtc_no_acks),
    Attack("rtc-shares", rtc_shares),
    Attack("rtc-codecs", rtc_codecs),
    Attack("willow-streams", willow_streams),
    Attack("wyoming-uploads", wyoming_uploads),
    Attack("prompts", prompts),
    Attack("markers", markers),
    Attack("realtime", realtime),
    Attack("realtime-pings", realtime_pings),
    Attack("realtime-big-events", realtime_big_events),
    Attack("realtime-idle", realtime_idle, start_realtime_idle_server),
    Attack("realtime-fast-appends", realtime_fast_appends),
    Attack("slots", slots),
    Attack("wake-slots", wake_slots),
    Attack("spread-slots", spread_slots),
    Attack("spread-detects", spread_detects),
    Attack("trickle", trickle, start_trickle_server),
    Attack("pipelined-pings", pipelined_pings),
    Attack("wake-spellings", wake_spellings),
    Attack("slow-readers", slow_readers),
    Attack("small", small, start_keyed),
    Attack("charsets", charsets),
    Attack("big-bodies", big_bodies),
    Attack("form-parts", form_parts),
    Attack("echoes", echoes),
    Attack("clones", clones, start_cloner),
    Attack("hub-voices", hub_voices, start_hub_reader),
    Attack("rebinding", rebinding),
    Attack("http-connections", http_connections),
    Attack("hass-answers", hass_answers, start_hass_reader),
)


async def attempt(attack: Attack, target: Target, prepared: Sequence[Any], cap: float) -> Finding:
    """The attack, within `cap` seconds; an attack that fails in itself (not the server) says how."""
    try:
        return await asyncio.wait_for(attack.run(target, *prepared), cap)
    except TimeoutError:
        return Finding(f"not over after {cap:g} s (--cap)", False)
    except Exception as err:  # noqa: BLE001  (a client that breaks is a finding, not the end of the run)
        return Finding(f"the attack broke: {type(err).__name__}: {err}", False)


def log_errors(path: Path, since: int) -> list[str]:
    """The server log's ERROR lines and tracebacks written after byte `since`: a bounded refusal writes none."""
    with open(path, "rb") as log_file:
        log_file.seek(since)
        lines = log_file.read().decode(errors="replace").splitlines()
    return [line for line in lines if " ERROR " in line or line.startswith("Traceback")]


def probe_figures(probes: Sequence[Probe]) -> dict[str, Any]:
    seconds = [probe.seconds for probe in probes]
    return {
        "count": len(probes),
        "failed": sum(probe.status != "ok" for probe in probes),
        "statuses": dict(Counter(probe.status for probe in probes)),
        "p50_s": percentile(seconds, 50),
        "p99_s": percentile(seconds, 99),
        "max_s": max(seconds, default=None),
    }


async def measure(attack: Attack, target: Target, args: argparse.Namespace, stack: ExitStack) -> dict[str, Any]:
    """One attack with its watchers, then --settle seconds; its figures and verdicts."""
    prepared = [await attack.prepare(stack)] if attack.prepare else []
    await target.ensure(args.fresh)
    assert target.server is not None
    server_start, pid, log_path = target.starts, target.pid, target.server.log_path
    log_since = log_path.stat().st_size
    baseline, hwm_reset = status_mb(pid, "VmRSS"), reset_peak(pid)
    watch = MemoryWatch(pid, args.guard_mb)
    watch.start()
    log(f"{attack.name}: baseline {fmt(baseline, '{:.0f}')} MiB")
    began = time.monotonic()
    attacking, reals = asyncio.Event(), []
    attacking.set()
    during = asyncio.create_task(real_while(target.port, attacking, reals))
    finding = await attempt(attack, target, prepared, args.cap)
    attack_s = time.monotonic() - began
    attacking.clear()
    await during
    reals += await real_pair(target.port, "after")
    if target.alive:
        await asyncio.sleep(max(0.0, began + attack_s + args.settle - time.monotonic()))
    final, hwm = status_mb(pid, "VmRSS"), status_mb(pid, "VmHWM") if hwm_reset else None
    watch.stop()
    ended = time.monotonic()
    sampled = max((rss for _, rss in watch.samples), default=None)
    peak = max((value for value in (sampled, hwm) if value is not None), default=None)
    describe, health = (probe_figures(target.prober.between(began, ended, kind)) for kind in ("describe", "health"))
    heard = [real.seconds for real in reals if real.kind == "transcribe"]
    slowed = max(heard, default=math.inf) / target.unloaded_s
    targets = {
        "answers": finding.expected,
        "memory": watch.killed_at_mb is None and peak is not None and peak < args.ceiling_mb,
        "describe": describe["count"] > 0 and describe["failed"] == 0 and describe["max_s"] < STALL_TARGET_S,
        "health": health["count"] > 0 and health["failed"] == 0 and health["max_s"] < STALL_TARGET_S,
        "real": bool(reals) and all(real.ok for real in reals) and slowed <= MAX_SLOWDOWN,
    }
    passed = all(targets.values())
    target.suspect = not passed or not target.alive
    log(f"{attack.name}: {'passed' if passed else 'FAILED ' + str([k for k, v in targets.items() if not v])}")
    return {
        "name": attack.name,
        "server_start": server_start,
        "outcome": finding.outcome,
        "answers": [asdict(answer) | {"refused": answer.refused} for answer in finding.answers],
        "attack_s": attack_s,
        "rss_mib": {
            "baseline": baseline,
            "peak": peak,
            "peak_sampled": sampled,
            "peak_hwm": hwm,
            "final": final,
            "killed_at": watch.killed_at_mb,
            "timeline": watch.timeline(began),
        },
        "server_alive_after": target.alive,
        "log_errors": log_errors(log_path, log_since),
        "describe": describe,
        "health": health,
        "real": [asdict(real) for real in reals],
        "transcription_unloaded_s": target.unloaded_s,
        "transcription_slowdown": slowed,
        "targets": targets,
        "passed": passed,
    }


async def run(args: argparse.Namespace, stack: ExitStack) -> dict[str, Any]:
    target = Target(stack)
    results = []
    try:
        for attack in ATTACKS:
            if attack.name in args.attacks:
                try:
                    results.append(await measure(attack, target, args, stack))
                except Exception as err:  # noqa: BLE001  (the bench itself, or what an attack needs, failed: on to the next)
                    log(f"{attack.name}: could not be run: {type(err).__name__}: {err}")
                    results.append(not_run(attack, err))
                    target.suspect = True
    finally:
        await target.stop()
    return {"attacks": results, "servers_started": target.starts, "passed": all(r["passed"] for r in results)}


def not_run(attack: Attack, err: Exception) -> dict[str, Any]:
    """The result of an attack that could not be run (its second server did not start, a package is missing)."""
    nothing = {"count": 0, "failed": 0, "statuses": {}, "p50_s": None, "p99_s": None, "max_s": None}
    return {
        "name": attack.name,
        "outcome": f"not run: {type(err).__name__}: {str(err)[:300]}",
        "answers": [],
        "rss_mib": {"baseline": None, "peak": None, "final": None, "killed_at": None},
        "describe": nothing,
        "health": nothing,
        "real": [],
        "transcription_slowdown": None,
        "log_errors": [],
        "targets": {"answers": False, "memory": False, "describe": False, "health": False, "real": False},
        "passed": False,
    }


# -- report ---------------------------------------------------------------------------------


def report(document: dict[str, Any], out: Path) -> None:
    settings = document["settings"]
    print(f"Command: {document['command']}")
    print(f"Machine: {document['machine']['cpu_count']} CPUs ({document['machine']['cpu_model']})")
    print(
        f"Targets: expected answers; peak RSS < {settings['ceiling_mb']:g} MiB; describe and /health < "
        f"{STALL_TARGET_S * 1000:.0f} ms, none failed; real requests right, Home Assistant's transcription within "
        f"{MAX_SLOWDOWN:g}x its unloaded time (! marks a miss). Final RSS after {settings['settle']:g} s; log: the "
        "server's ERROR lines and tracebacks meanwhile."
    )
    print()
    header = ("attack", "answers", "base MiB", "peak MiB", "final MiB", "describe max", "failed", "health max")
    header += ("real ok", "transcription")
    header += ("log", "")
    rows = [header]
    for result in document["attacks"]:
        rss, describe, health, targets = result["rss_mib"], result["describe"], result["health"], result["targets"]
        killed = f" (killed at {rss['killed_at']:.0f})" if rss["killed_at"] else ""
        rows.append(
            (
                result["name"],
                "as expected" if targets["answers"] else "NOT",
                fmt(rss["baseline"], "{:.0f}"),
                fmt(rss["peak"], "{:.0f}") + killed + ("" if targets["memory"] else " !"),
                fmt(rss["final"], "{:.0f}"),
                (">" if "timeout" in describe["statuses"] else "")
                + fmt(describe["max_s"], "{:.3f} s")
                + ("" if targets["describe"] else " !"),
                f"{describe['failed'] + health['failed']}/{describe['count'] + health['count']}",
                (">" if "timeout" in health["statuses"] else "")
                + fmt(health["max_s"], "{:.3f} s")
                + ("" if targets["health"] else " !"),
                f"{sum(r['ok'] for r in result['real'])}/{len(result['real'])}" + ("" if targets["real"] else " !"),
                fmt(result["transcription_slowdown"], "{:.1f}x"),
                f"{len(result['log_errors'])} errors",
                "pass" if result["passed"] else "FAIL",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        print(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    print()
    for result in document["attacks"]:
        print(f"{result['name']}: {result['outcome']}")
        wrong = [r for r in result["real"] if not r["ok"]]
        if wrong:
            print(
                "  real requests not right: "
                + "; ".join(f"{r['phase']} {r['kind']}: {r['detail'][:80]}" for r in wrong[:3])
            )
    print()
    print(f"Servers started: {document['servers_started']}; run took {document['runtime_s']:.0f} s")
    print(f"Results: {out}")
    print("All targets met" if document["passed"] else "Targets missed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [attack.name for attack in ATTACKS]
    parser.add_argument("--only", default=",".join(names), help=f"Comma-separated attacks of {', '.join(names)}")
    parser.add_argument("--ceiling-mb", type=float, default=1536, help="Peak resident memory an attack may cause")
    parser.add_argument("--guard-mb", type=float, default=6144, help="Kill the server past this resident memory")
    parser.add_argument(
        "--settle", type=float, default=TRIM_SECONDS + 5, help="Seconds after an attack until its final RSS"
    )
    parser.add_argument("--cap", type=float, default=150, help="Seconds an attack may take before it is cut short")
    parser.add_argument("--fresh", action="store_true", help="A new server for every attack")
    parser.add_argument("--out", type=Path, help="JSON results. Default: bench/results/abuse-<timestamp>.json")
    parser.add_argument("--probe-port", type=int, help=argparse.SUPPRESS)  # the prober process
    parser.add_argument("--probe-http-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe_port:
        asyncio.run(probe_forever(args.probe_port, args.probe_http_port))
        return
    args.attacks = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := set(args.attacks) - set(names):
        parser.error(f"unknown attack(s) {', '.join(sorted(unknown))}; choose from {', '.join(names)}")
    out = args.out or ROOT / "bench" / "results" / f"abuse-{time.strftime('%Y%m%d-%H%M%S')}.json"
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "probe_port", "only")}
    run_and_record(lambda stack: run(args, stack), settings, out, report)
    sys.exit(0 if json.loads(out.read_text())["passed"] else 1)


if __name__ == "__main__":
    main()
