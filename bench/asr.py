"""ASR benchmark: wyoming-wis against wyoming-faster-whisper 3.8.1, same model and settings, one run.

Both servers are started here with the same Whisper model folder (our bundled `base`, joined by our server
on its first start), threads, beam size, compute type and device, and are asked in turn, so they share
the machine's noise. Every request uses a new TCP connection and the `wyoming` client, as Home Assistant does.

    .venv/bin/python bench/asr.py [--rounds 2] [--only latency,concurrency,long] [--device cuda]
    .venv/bin/python bench/asr.py --only held-out --held-out jfk.flac [--external-vad] [--beam-size 1] [--rounds 4]

Phases (WER is scored in each):
  latency      voice commands (Piper, synthesised once by our server) and 10-15 s LJ Speech pairs, streamed
               at real-time pace plus trailing silence; latency = audio-stop sent -> final `transcript`.
  held-out     recordings given with --held-out (never used to tune the server; e.g. faster-whisper's own
               tests/data/jfk.flac, with its transcript in jfk.txt beside it), as in latency; only when given.
  concurrency  4 and 8 clients sending recordings back to back as fast as possible; throughput and p95.
  long         one >= 60 s recording sent as fast as possible; real-time factor.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import jiwer
from prometheus_client.parser import text_string_to_metric_families
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402  (bench/ is not a package)
    CACHE,
    HOST,
    RATE,
    ROOT,
    WIDTH,
    BackgroundLoad,
    Pcm,
    Row,
    ServerProcess,
    add_common_args,
    cache_key,
    check_common_args,
    decode_audio,
    dist_version,
    ensure_venv,
    fmt,
    fmt_pct,
    fmt_rate,
    fmt_s,
    free_port,
    log,
    median,
    not_worse,
    offline_env,
    ours_command,
    percentile,
    ratio_at_least,
    ratio_at_most,
    render_table,
    run_and_record,
    silence,
    start_server,
    stop_servers,
    synthesize_wav,
    venv_versions,
    wait_ready,
)

PEER_PACKAGE = "wyoming-faster-whisper==3.8.1"
PEER_VENV = ROOT / "bench" / ".venv-peer"
MODEL = "base"  # bundled with wyoming-wis; the peer gets the very same folder
LJ_CORPUS = ROOT / "tests" / "corpus" / "ljspeech"
CHUNK_SAMPLES = 1024  # 64 ms at 16 kHz, what Home Assistant and wyoming-bench send
CHUNK_SECONDS = CHUNK_SAMPLES / RATE
GAP_SECONDS = 0.3  # silence between joined LJ clips
LONG_MIN_SECONDS = 60.0
CONCURRENT_CLIENTS = (4, 8)
MISMATCH_WER = 0.5  # a concurrent transcript this far off its own audio is counted as wrong
ESTIMATE = "wis_wait_estimate_ratio"  # our server's histogram of each Whisper call's wait over its estimate
PHASES = ("latency", "held-out", "concurrency", "long")
NOISY_SHARE = 0.10  # other processes using more of the CPUs than this make the timings suspect

COMMANDS = [
    "Turn on the kitchen lights.",
    "Set the thermostat to twenty one degrees.",
    "What's the weather tomorrow?",
    "Turn off the living room lamp.",
    "Open the garage door.",
    "Lock the front door.",
    "Dim the bedroom lights to thirty percent.",
    "Start the robot vacuum.",
    "Play some jazz in the living room.",
    "What time is it?",
    "Set a timer for ten minutes.",
    "Close the blinds in the office.",
    "Is the back door locked?",
    "Turn up the volume.",
    "Add milk to the shopping list.",
    "Turn on the fan in the bathroom.",
    "What's the temperature inside?",
    "Switch off all the lights.",
    "Remind me to water the plants at six.",
    "Good night.",
]


# -- text scoring -------------------------------------------------------------------------

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _number_words(number: int) -> str:
    """0-999 in words, so "21" and "twenty-one" score the same; larger numbers (years) stay digits."""
    if number < 20:
        return _ONES[number]
    if number < 100:
        tens, ones = divmod(number, 10)
        return _TENS[tens] + (f" {_ONES[ones]}" if ones else "")
    if number < 1000:
        hundreds, rest = divmod(number, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {_number_words(rest)}" if rest else "")
    return str(number)


_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth"}


def _ordinal_words(number: int) -> str:
    """15 -> "fifteenth", 21 -> "twenty first": Whisper writes "15th" where a reader said "fifteenth"."""
    *head, last = _number_words(number).split()
    if last in _ORDINALS:
        last = _ORDINALS[last]
    elif last == "twelve":
        last = "twelfth"
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return " ".join([*head, last])


def _spell_number(found: re.Match[str]) -> str:
    number = int(found.group(1))
    return f" {_ordinal_words(number) if found.group(2) else _number_words(number)} "


def normalise(text: str) -> str:
    """Lowercase, hyphens to spaces, numbers to words, no punctuation, single spaces."""
    text = text.lower().replace("%", " percent").replace("-", " ")
    text = re.sub(r"(\d+)(st|nd|rd|th)?\b", _spell_number, text)
    text = text.replace("'", "").replace("\u2019", "")  # what's -> whats, on both sides
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(text.split())


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> float | None:
    """Corpus word error rate after normalising both sides; None for nothing to score."""
    if not references:
        return None
    return jiwer.wer([normalise(r) for r in references], [normalise(h) for h in hypotheses])


# -- recordings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """Audio with the text spoken in it."""

    name: str
    text: str
    pcm: Pcm


async def command_recordings(port: int) -> list[Recording]:
    """The voice commands, spoken by our server's default Piper voice; cached as WAV so later runs skip TTS."""
    folder = CACHE / "commands"
    folder.mkdir(parents=True, exist_ok=True)
    recordings = []
    for number, text in enumerate(COMMANDS):
        path = folder / f"{cache_key(text)}.wav"
        if not path.exists():
            path.write_bytes(await synthesize_wav(port, text))
        recordings.append(Recording(f"cmd{number:02d}", text, decode_audio(path)))
    return recordings


def lj_recordings() -> list[Recording]:
    """The LJ Speech clips shipped with the tests (1.5-10 s)."""
    return [
        Recording(path.stem, path.with_suffix(".txt").read_text().strip(), decode_audio(path))
        for path in sorted(LJ_CORPUS.glob("*.flac"))
    ]


def held_out_recordings(paths: Sequence[Path]) -> list[Recording]:
    """Recordings from elsewhere, each with its transcript in a .txt file beside it (none: WER not scored)."""
    return [
        Recording(
            path.stem,
            text.read_text().strip() if (text := path.with_suffix(".txt")).is_file() else "",
            decode_audio(path),
        )
        for path in paths
    ]


def join(name: str, parts: Sequence[Recording]) -> Recording:
    """Concatenate recordings with a short pause, as one person speaking several sentences."""
    pcm = parts[0].pcm
    for part in parts[1:]:
        pcm = pcm + silence(GAP_SECONDS) + part.pcm
    return Recording(name, " ".join(part.text for part in parts), pcm)


def long_utterances(clips: Sequence[Recording]) -> list[Recording]:
    """Pairs of LJ clips of 10-15 s: the shortest with the longest, and so on inwards."""
    ordered = sorted(clips, key=lambda clip: clip.pcm.seconds)
    pairs = [(ordered[i], ordered[-1 - i]) for i in range(len(ordered) // 2)]
    return [join(f"{a.name}+{b.name}", (a, b)) for a, b in pairs]


def long_recording(clips: Sequence[Recording]) -> Recording:
    """All LJ clips in order, repeated from the start until at least a minute long."""
    parts: list[Recording] = []
    while not parts or join("", parts).pcm.seconds < LONG_MIN_SECONDS:
        parts.append(clips[len(parts) % len(clips)])
    return join(f"lj-x{len(parts)}", parts)


# -- one request --------------------------------------------------------------------------


@dataclass
class Result:
    """One transcription request; times in seconds."""

    server: str
    phase: str
    recording: str
    audio_s: float
    reference: str
    text: str | None = None
    error: str | None = None
    total_s: float | None = None  # request start (before connecting) -> final transcript
    after_stop_s: float | None = None  # audio-stop sent -> final transcript
    first_chunk_s: float | None = None  # audio-start sent -> first transcript-chunk (streaming servers)
    chunks: int = 0  # transcript-chunk events seen
    wer: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None


@dataclass
class Marks:
    """What the reader task saw, as perf_counter times."""

    final: float | None = None
    first_chunk: float | None = None
    chunks: int = 0
    text: str | None = None
    error: str | None = None


async def read_until_transcript(client: AsyncTcpClient, marks: Marks) -> None:
    """Read events while audio is still being sent; stop at the final `transcript` (or an error)."""
    while True:
        event = await client.read_event()
        now = time.perf_counter()
        if event is None:
            marks.error = "connection closed before a transcript"
            return
        if event.type == "transcript-chunk":
            marks.chunks += 1
            marks.first_chunk = marks.first_chunk or now
        elif event.type == "transcript":
            marks.final, marks.text = now, event.data.get("text", "")
            return
        elif event.type == "error":
            marks.error = f"error event: {event.data.get('code')}: {event.data.get('text')}"
            return


async def send_audio(client: AsyncTcpClient, audio: Pcm, paced: bool, start: float, reader: asyncio.Task) -> None:
    """Send 64 ms chunks, each at the moment a microphone would have finished recording it when paced."""
    step = CHUNK_SAMPLES * WIDTH
    for index, offset in enumerate(range(0, len(audio.audio), step)):
        if reader.done():  # the server gave up (error, closed): no point talking on
            return
        if paced:
            await asyncio.sleep(max(0.0, start + (index + 1) * CHUNK_SECONDS - time.perf_counter()))
        await client.write_event(AudioChunk(RATE, WIDTH, 1, audio=audio.audio[offset : offset + step]).event())


async def transcribe(
    server: str,
    port: int,
    phase: str,
    recording: Recording,
    paced: bool,
    trailing_silence: float,
    timeout: float,
    language: str | None = "en",
) -> Result:
    """One request on a fresh connection: transcribe(language; None: detect), audio-start, chunks, audio-stop,
    read to `transcript`."""
    result = Result(server, phase, recording.name, recording.pcm.seconds, recording.text)
    audio = recording.pcm + silence(trailing_silence) if trailing_silence > 0 else recording.pcm
    marks = Marks()
    begin = time.perf_counter()
    client = AsyncTcpClient(HOST, port)
    reader: asyncio.Task | None = None
    audio_start = begin
    stop_sent: float | None = None
    try:
        await asyncio.wait_for(client.connect(), timeout)
        reader = asyncio.create_task(read_until_transcript(client, marks))
        await client.write_event(Transcribe(language=language).event())
        await client.write_event(AudioStart(RATE, WIDTH, 1).event())
        audio_start = time.perf_counter()
        try:
            await send_audio(client, audio, paced, audio_start, reader)
            if not reader.done():
                await client.write_event(AudioStop().event())
                stop_sent = time.perf_counter()
        except ConnectionError:
            pass  # the reader tells what happened
        await asyncio.wait_for(asyncio.shield(reader), timeout)
    except (TimeoutError, OSError, EOFError) as err:
        marks.error = marks.error or f"{type(err).__name__}: {err}"
    finally:
        if reader is not None and not reader.done():
            reader.cancel()
        await client.disconnect()
    result.text, result.error, result.chunks = marks.text, marks.error, marks.chunks
    if marks.final is not None:
        result.total_s = marks.final - begin
        result.after_stop_s = marks.final - stop_sent if stop_sent is not None else None
        if marks.first_chunk is not None:
            result.first_chunk_s = marks.first_chunk - audio_start
        result.wer = wer([recording.text], [marks.text or ""]) if recording.text else None
    return result


# -- phases -------------------------------------------------------------------------------


@dataclass
class Settings:
    """What every request of this run shares."""

    servers: dict[str, int]  # name -> port, in the order "ours", "peer"
    trailing_silence: float
    timeout: float
    rounds: int
    ours_http: str  # our server's HTTP API, for its /metrics
    results: list[Result] = field(default_factory=list)


async def warm_up(settings: Settings, recordings: Sequence[Recording]) -> None:
    """First requests load lazy parts (tokenizer, thread pools); keep them out of the numbers."""
    for name, port in settings.servers.items():
        for recording in recordings:
            result = await transcribe(name, port, "warm-up", recording, False, 0.0, settings.timeout)
            if not result.ok:
                raise RuntimeError(f"{name} failed its warm-up request: {result.error}")


async def latency_phase(settings: Settings, sets: dict[str, list[Recording]]) -> None:
    """Each recording at real-time pace, ours and peer in turn (first one alternating) to share machine noise."""
    names = list(settings.servers)
    for round_number in range(settings.rounds):
        for set_name, recordings in sets.items():
            for index, recording in enumerate(recordings):
                order = names if (round_number + index) % 2 == 0 else names[::-1]
                line = []
                for name in order:
                    result = await transcribe(
                        name,
                        settings.servers[name],
                        f"latency:{set_name}",
                        recording,
                        True,
                        settings.trailing_silence,
                        settings.timeout,
                    )
                    settings.results.append(result)
                    line.append(f"{name} {fmt_s(result.after_stop_s)}" + ("" if result.ok else f" ({result.error})"))
                log(f"[latency r{round_number + 1} {set_name} {index + 1}/{len(recordings)}] " + ", ".join(line))


async def concurrency_phase(
    settings: Settings, pool: Sequence[Recording], clients: int, per_client: int, peer_first: bool
) -> dict:
    """`clients` connections at once, each sending its recordings back to back unpaced; per server in turn."""
    summary = {}
    order = list(settings.servers)[::-1] if peer_first else list(settings.servers)
    for name in order:
        phase = f"concurrency:{clients}"
        work = [[pool[(c * per_client + j) % len(pool)] for j in range(per_client)] for c in range(clients)]

        before = await estimate_buckets(settings.ours_http) if name == "ours" else {}
        begin = time.perf_counter()
        batches = await asyncio.gather(*(_client_loop(settings, name, phase, recordings) for recordings in work))
        wall = time.perf_counter() - begin
        results = [result for batch in batches for result in batch]
        settings.results.extend(results)
        summary[name] = _concurrency_summary(results, wall)
        if name == "ours":
            summary[name]["estimate"] = _estimate_summary(before, await estimate_buckets(settings.ours_http))
        log(f"[concurrency {clients}] {name}: {summary[name]['throughput']:.2f} audio-s/s, wall {wall:.1f} s")
    return summary


async def estimate_buckets(http_url: str) -> dict[str, float]:
    """Our server's count of Whisper calls by how their wait compared with its estimate: upper bound -> calls."""
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(http_url + "/metrics")).raise_for_status().text
    return {
        sample.labels["le"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == ESTIMATE + "_bucket" and sample.labels.get("engine") == "whisper"
    }


async def _client_loop(settings: Settings, name: str, phase: str, recordings: Sequence[Recording]) -> list[Result]:
    """One concurrent client: its recordings back to back, each on a new connection, unpaced."""
    port = settings.servers[name]
    return [await transcribe(name, port, phase, r, False, 0.0, settings.timeout) for r in recordings]


async def long_phase(settings: Settings, recording: Recording) -> dict:
    """The minute-long recording sent unpaced to each server; RTF = (request start -> transcript) / audio."""
    summary = {}
    for name, port in settings.servers.items():
        result = await transcribe(name, port, "long", recording, False, 0.0, settings.timeout)
        settings.results.append(result)
        rtf = result.total_s / result.audio_s if result.total_s is not None else None
        summary[name] = {"audio_s": result.audio_s, "total_s": result.total_s, "rtf": rtf, "wer": result.wer}
        summary[name]["error"] = result.error
        log(f"[long {result.audio_s:.1f} s] {name}: {fmt_s(result.total_s)}, RTF {fmt(rtf, '{:.3f}')}")
    return summary


# -- summaries ------------------------------------------------------------------------------


def _latency_summary(results: Sequence[Result]) -> dict:
    done = [r for r in results if r.ok and r.after_stop_s is not None]
    first = [r.first_chunk_s for r in done if r.first_chunk_s is not None]
    return {
        "requests": len(results),
        "errors": len(results) - len(done),
        "median_after_stop_s": median([r.after_stop_s for r in done]),
        "p95_after_stop_s": percentile([r.after_stop_s for r in done], 95),
        "median_first_chunk_s": median(first),
        "with_chunks": len(first),
        "wer": wer([r.reference for r in done], [r.text or "" for r in done])
        if all(r.reference for r in done)
        else None,
    }


def _concurrency_summary(results: Sequence[Result], wall: float) -> dict:
    done = [r for r in results if r.ok]
    wrong = [r for r in done if r.wer is not None and r.wer > MISMATCH_WER]
    return {
        "requests": len(results),
        "errors": len(results) - len(done),
        "mismatches": len(wrong),
        "error_details": sorted({r.error for r in results if r.error}),
        "wall_s": wall,
        "audio_s": sum(r.audio_s for r in done),
        "throughput": sum(r.audio_s for r in done) / wall,
        "p95_latency_s": percentile([r.total_s for r in done if r.total_s is not None], 95),
        "wer": wer([r.reference for r in done], [r.text or "" for r in done]),
    }


def _estimate_summary(before: dict[str, float], after: dict[str, float]) -> dict:
    """How the waits of the Whisper calls made between two scrapes compared with the server's estimates (what
    admission and busy answers go by): calls counted, and how many were within ±30 %."""
    calls = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in after}
    return {
        "calls": calls.get("+Inf", 0.0),
        "within_30pct": calls.get("1.3", 0.0) - calls.get("0.7", 0.0),
        "under_half": calls.get("0.5", 0.0),  # waited less than half the estimate
        "over_double": calls.get("+Inf", 0.0) - calls.get("2.0", 0.0),  # waited more than twice it
        "buckets": calls,  # upper bound of wait / estimate -> calls at or below it
    }


def report_rows(summary: dict) -> list[Row]:
    """The table, from the summary dict (so a saved JSON could be re-rendered the same way)."""
    rows: list[Row] = []
    for set_name, per in summary.get("latency", {}).items():
        ours, peer = per["ours"], per["peer"]
        is_commands = set_name == "commands"
        rows += [
            Row(
                f"{set_name}: median after-stop latency",
                ours["median_after_stop_s"],
                peer["median_after_stop_s"],
                fmt_s,
                "<= 0.25" if is_commands else "",
                ratio_at_most(0.25) if is_commands else None,
            ),
            Row(
                f"{set_name}: p95 after-stop latency",
                ours["p95_after_stop_s"],
                peer["p95_after_stop_s"],
                fmt_s,
                "<= 0.35" if is_commands else "",
                ratio_at_most(0.35) if is_commands else None,
            ),
            Row(f"{set_name}: WER", ours["wer"], peer["wer"], fmt_pct, "not worse", not_worse),
            Row(f"{set_name}: errors", ours["errors"], peer["errors"], str, show_ratio=False),
        ]
        if ours["with_chunks"] or peer["with_chunks"]:
            rows.append(
                Row(
                    f"{set_name}: median first partial (audio-start -> chunk)",
                    ours["median_first_chunk_s"],
                    peer["median_first_chunk_s"],
                    fmt_s,
                )
            )
    for clients, per in summary.get("concurrency", {}).items():
        ours, peer = per["ours"], per["peer"]
        rows += [
            Row(
                f"{clients} clients: audio s per wall s",
                ours["throughput"],
                peer["throughput"],
                fmt_rate,
                ">= 2.0",
                ratio_at_least(2.0),
            ),
            Row(f"{clients} clients: p95 request latency", ours["p95_latency_s"], peer["p95_latency_s"], fmt_s),
            Row(f"{clients} clients: WER", ours["wer"], peer["wer"], fmt_pct, "not worse", not_worse),
            Row(
                f"{clients} clients: errors + wrong transcripts",
                ours["errors"] + ours["mismatches"],
                peer["errors"] + peer["mismatches"],
                str,
                show_ratio=False,
            ),
        ]
        if (estimate := ours.get("estimate")) and estimate["calls"]:
            within = estimate["within_30pct"] / estimate["calls"]
            rows.append(Row(f"{clients} clients: waits within ±30 % of the estimate", within, None, fmt_pct))
    if "long" in summary:
        ours, peer = summary["long"]["ours"], summary["long"]["peer"]
        seconds = ours["audio_s"]
        rows += [
            Row(f"long audio ({seconds:.0f} s): RTF", ours["rtf"], peer["rtf"], fmt_rate, "<= 1.0", ratio_at_most(1.0)),
            Row(f"long audio ({seconds:.0f} s): WER", ours["wer"], peer["wer"], fmt_pct, "not worse", not_worse),
        ]
    memory = summary.get("peak_rss_mb", {})
    if memory:
        rows.append(Row("peak server RSS (MiB)", memory.get("ours"), memory.get("peer"), lambda v: fmt(v, "{:.0f}")))
    return rows


def server_flags(args: argparse.Namespace) -> dict[str, str]:
    """The settings both servers get, spelled as both spell them."""
    return {
        "--device": args.device,
        "--compute-type": args.compute_type,
        "--beam-size": str(args.beam_size),
        "--cpu-threads": str(args.threads),
        "--language": "en",
    }


def ours_argv(args: argparse.Namespace, port: int, http_port: int, data_dir: Path) -> list[str]:
    flags = [item for pair in server_flags(args).items() for item in pair]
    uri = f"tcp://{HOST}:{port}"
    return [
        *ours_command(args.ours_src),
        "--uri",
        uri,
        "--http-host",
        HOST,
        "--http-port",
        str(http_port),
        "--data-dir",
        str(data_dir),
        "--asr-model",
        MODEL,
        *flags,
    ]


def peer_argv(python: Path, args: argparse.Namespace, port: int, model_dir: Path, data_dir: Path) -> list[str]:
    """wyoming-faster-whisper with our model folder (faster-whisper loads a directory path as is).

    --stt-library faster-whisper: "auto" would pick sherpa/Parakeet for English were it installed.
    --local-files-only: never reach for the Hub.
    """
    flags = [item for pair in server_flags(args).items() for item in pair]
    return [
        str(python),
        "-m",
        "wyoming_faster_whisper",
        "--uri",
        f"tcp://{HOST}:{port}",
        "--model",
        str(model_dir),
        "--data-dir",
        str(data_dir),
        "--stt-library",
        "faster-whisper",
        "--local-files-only",
        *flags,
    ]


def peer_requirements() -> list[str]:
    """The peer, with the same inference libraries (and protocol library) as our venv."""
    same = ("faster-whisper", "ctranslate2", "wyoming")
    return [PEER_PACKAGE, *(f"{name}=={dist_version(name)}" for name in same)]


async def start_servers(
    args: argparse.Namespace, stack: ExitStack, extra: Sequence[str] = ()
) -> tuple[dict[str, ServerProcess], str, dict]:
    """Ours first (it joins the bundled model on its first start; with the `extra` flags), then the peer on that
    same model folder."""
    peer_python = ensure_venv(PEER_VENV, peer_requirements())
    home = CACHE / "home"
    data_dir, logs = CACHE / "data", CACHE / "logs"
    started: list[ServerProcess] = []
    stack.callback(stop_servers, started)
    port, http_port = free_port(), free_port()
    argv = [*ours_argv(args, port, http_port, data_dir), *extra]
    ours = start_server("ours", argv, port, offline_env(home), args.ours_src, logs)
    started.append(ours)
    log(f"Starting ours: {shlex.join(ours.argv)}")
    await wait_ready(ours)
    model_dir = data_dir / "bundled" / MODEL
    if not (model_dir / "model.bin").is_file():
        raise RuntimeError(f"our server did not leave the model in {model_dir}; see {ours.log_path}")
    port = free_port()
    argv = peer_argv(peer_python, args, port, model_dir, CACHE / "peer-data")
    peer = start_server("peer", argv, port, offline_env(home), CACHE, logs)
    started.append(peer)
    log(f"Starting peer: {shlex.join(peer.argv)}")
    await wait_ready(peer)
    versions = {
        "ours": {name: dist_version(name) for name in ("wyoming-wis", "faster-whisper", "ctranslate2", "wyoming")},
        "peer": venv_versions(peer_python, ["wyoming-faster-whisper", "faster-whisper", "ctranslate2", "wyoming"]),
        "model_dir": str(model_dir),
        "ours_src": str(args.ours_src),
        "ours_argv": ours.argv,
        "peer_argv": peer.argv,
    }
    return {"ours": ours, "peer": peer}, f"http://{HOST}:{http_port}", versions


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per server (--cpu-threads). Default: 2")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--compute-type", help="CTranslate2 compute type. Default: int8 on cpu, float16 on cuda")
    parser.add_argument("--rounds", type=int, default=2, help="Passes over the latency sets. Default: 2")
    parser.add_argument(
        "--trailing-silence",
        type=float,
        default=0.5,
        help="Silence streamed after each latency recording before audio-stop, as Home Assistant's VAD waits "
        "for it. Default: 0.5 s",
    )
    parser.add_argument(
        "--held-out", type=Path, nargs="+", default=[], metavar="FILE", help="Recordings for the held-out phase"
    )
    parser.add_argument(
        "--external-vad",
        action="store_true",
        help="Start ours with --external-vad: the client's audio-stop ends every request, as the peer's does",
    )
    parser.add_argument("--per-client", type=int, default=3, help="Requests per concurrent client. Default: 3")
    parser.add_argument("--timeout", type=float, default=300, help="Seconds to wait for one transcript")
    add_common_args(parser, "asr", PHASES)
    args = parser.parse_args(argv)
    check_common_args(parser, args, "asr", PHASES)
    if args.phases == ["held-out"] and not args.held_out:
        parser.error("--only held-out needs --held-out FILE")
    args.compute_type = args.compute_type or ("float16" if args.device == "cuda" else "int8")
    return args


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    """Start both servers, build the audio, run the chosen phases; the summary and every request."""
    load = BackgroundLoad()
    servers, ours_http, versions = await start_servers(args, stack, ["--external-vad"] if args.external_vad else [])
    ports = {name: server.port for name, server in servers.items()}
    settings = Settings(ports, args.trailing_silence, args.timeout, args.rounds, ours_http)
    commands = await command_recordings(servers["ours"].port)
    clips = lj_recordings()
    await warm_up(settings, [commands[0], clips[0]])
    summary: dict = {}
    sets = (
        {"commands": commands, "long utterances (10-15 s)": long_utterances(clips)} if "latency" in args.phases else {}
    )
    if "held-out" in args.phases and args.held_out:
        sets["held-out"] = held_out_recordings(args.held_out)
    if sets:
        await latency_phase(settings, sets)
        summary["latency"] = {
            set_name: {
                name: _latency_summary(
                    [r for r in settings.results if r.phase == f"latency:{set_name}" and r.server == name]
                )
                for name in settings.servers
            }
            for set_name in sets
        }
    if "concurrency" in args.phases:
        pool = [item for k, command in enumerate(commands) for item in (command, clips[k % len(clips)])]
        summary["concurrency"] = {
            clients: await concurrency_phase(settings, pool, clients, args.per_client, peer_first=index % 2 == 1)
            for index, clients in enumerate(CONCURRENT_CLIENTS)
        }
    if "long" in args.phases:
        summary["long"] = await long_phase(settings, long_recording(clips))
    summary["peak_rss_mb"] = {name: server.memory_mb("VmHWM") for name, server in servers.items()}
    summary["background_cpu_share"] = load.share(list(servers.values()))
    return {"summary": summary, "versions": versions, "results": [asdict(r) for r in settings.results]}


def main() -> None:
    args = parse_args()
    settings = {key: getattr(args, key) for key in ("device", "threads", "beam_size", "compute_type", "rounds")}
    settings.update(trailing_silence=args.trailing_silence, per_client=args.per_client, phases=args.phases)
    settings.update(external_vad=args.external_vad, held_out=[str(path) for path in args.held_out])
    run_and_record(lambda stack: run(args, stack), settings, args.out, print_report)


def print_report(document: dict, out: Path) -> None:
    machine, settings, versions = document["machine"], document["settings"], document["versions"]
    print(f"Command: {document['command']}")
    cpus = f"{machine['cpu_count']} CPUs ({machine['cpu_model']})"
    print(f"Machine: {cpus}, {machine['memory_gib']} GiB memory, {machine['platform']}, Python {machine['python']}")
    print(
        f"Settings: model {MODEL} ({versions['model_dir']}), device {settings['device']}, "
        f"compute type {settings['compute_type']}, beam {settings['beam_size']}, {settings['threads']} threads, "
        f"{settings['rounds']} rounds, trailing silence {settings['trailing_silence']:g} s"
        + (", ours with --external-vad" if settings.get("external_vad") else "")
    )
    ours, peer = versions["ours"], versions["peer"]
    print(
        f"Ours: wyoming-wis {ours['wyoming-wis']} from {versions['ours_src']}; "
        f"peer: wyoming-faster-whisper {peer['wyoming-faster-whisper']}; "
        f"both faster-whisper {ours['faster-whisper']}/{peer['faster-whisper']}, "
        f"ctranslate2 {ours['ctranslate2']}/{peer['ctranslate2']}"
    )
    print()
    print(render_table(report_rows(document["summary"])))
    print()
    background = document["summary"].get("background_cpu_share")
    if background is not None:
        verdict = "quiet enough" if background < NOISY_SHARE else "busy: timings may be skewed, rerun when quiet"
        print(f"Other processes used {background:.0%} of the CPUs during the run ({verdict}).")
    print(f"Runtime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


if __name__ == "__main__":
    main()
