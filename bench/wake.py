"""Wake words: wyoming-wis against wyoming-openwakeword, the same phrases, noise and machine, in one run.

Systems (each its own process, started here, asked over Wyoming as Home Assistant asks):

  ours-micro    wyoming-wis, the bundled microWakeWord models (okay_nabu, hey_jarvis, ...)
  ours-oww      wyoming-wis, the bundled openWakeWord models (okay_nabu_oww, ...): the peer's own models
  peer          wyoming-openwakeword 1.8.2, the PyPI release (tflite-runtime-nightly; `ok_nabu_v0.1` for Okay Nabu)
  peer-2.1      wyoming-openwakeword 2.1.0, its upstream source (pyopen-wakeword 1.1.0, as ours), with
                --upstream DIR (a checkout or a bare git repository); skipped without it

    .venv/bin/python bench/wake.py [--quick] [--words okay_nabu,hey_jarvis] [--only accuracy,latency,concurrency,memory]
        [--systems ours-micro,ours-oww,peer,peer-2.1] [--upstream DIR] [--data-dir DIR] [--out FILE]

Corpus (made once, cached in bench/.cache/wake/): each phrase said by the bundled Piper voice at three speeds
and by four espeak-ng voices, 1 s of silence before and after, clean and mixed with white noise and with a music
stand-in at 20, 10 and 5 dB SNR; the negatives are every speech recording of the shared corpus and other sentences
said by Piper and espeak-ng, joined into one long stream.

Phases:
  accuracy      every positive, one connection each, streamed at 4 times real time in 1024-sample chunks:
                recall (a detection of the asked wake word before audio-stop); the negatives stream through one
                connection per wake word: false accepts per hour.
  latency       the clean and 20 dB positives at real-time pace in 10 ms chunks (as Home Assistant streams them):
                seconds from the last sample of the phrase to the `detection`.
  concurrency   N satellites at once (1024-sample chunks at real-time pace, a phrase every 6 s), N = 1, 2, 4, ...:
                the largest N at which every phrase is heard within 1.5 s of its end, with the median under 0.5 s.
  memory        the server's resident memory with none and with 16 streams open (at real-time pace): MB a stream.

Prints a Markdown report and writes bench/results/wake-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.ping import Ping
from wyoming.wake import Detect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import mix, piper_speaker  # noqa: E402  (bench/ is not a package)
from common import (  # noqa: E402
    CACHE,
    HOST,
    ROOT,
    Pcm,
    ServerProcess,
    cache_key,
    decode_audio,
    ensure_venv,
    free_port,
    log,
    machine_info,
    median,
    offline_env,
    ours_command,
    percentile,
    silence,
    start_server,
    stop_servers,
    venv_versions,
    wait_ready,
)

RATE = 16000
AUDIO = CACHE / "wake"
PHRASES = {"okay_nabu": "Okay Nabu.", "hey_jarvis": "Hey Jarvis.", "alexa": "Alexa.", "hey_mycroft": "Hey Mycroft."}
PIPER_SPEEDS = (0.85, 1.0, 1.2)  # length scales: 0.85 is faster
ESPEAK_VOICES = ("en-us", "en", "en-gb-x-rp", "en-us+f3")
NOISES = (("white", 20), ("white", 10), ("white", 5), ("music", 20), ("music", 10), ("music", 5))
NEGATIVE_SENTENCES = (
    "Turn on the kitchen lights.",
    "What's the weather like tomorrow?",
    "Set a timer for ten minutes.",
    "Okay, now play some jazz in the living room.",
    "Hey, can you tell me a joke?",
    "Lock the front door and close the garage.",
    "Add milk and eggs to the shopping list.",
    "How long will it take to drive to the airport?",
    "A nap before dinner sounds like a good idea.",
    "Jarvis Cocker sang with Pulp in the nineties.",
    "Alex said the bus was late again this morning.",
    "My craft project needs more glue and paper.",
    "The news at nine covered the election results.",
    "Open the blinds in the bedroom, please.",
)
# Long runs of other speech: the shared references (about Home Assistant, Willow and speech servers) and our own
# documents, read sentence by sentence; sentences naming a wake word (or close to one) are left out.
PROSE = (
    *sorted((ROOT.parent / "shared" / "reference").glob("*.md")),
    *(ROOT / name for name in ("README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md")),
)
WAKE_WORDS = re.compile(r"nabu|jarvis|alexa|mycroft|rhasspy|computer", re.I)
SYSTEMS = ("ours-micro", "ours-oww", "peer", "peer-2.1")
PHASES = ("accuracy", "latency", "concurrency", "memory")
# The PyPI release, and the numpy its tflite-runtime-nightly was built for (it fails to load its models under numpy 2)
PEER_PYPI = ("wyoming-openwakeword==1.8.2", "numpy<2")
CHUNK = 1024  # samples a Wyoming satellite sends at a time
HA_CHUNK = 160  # 10 ms, as Home Assistant's wake word stage sends them
KEEPS_UP = 1.5  # seconds: every phrase heard within this of its end, ...
KEEPS_UP_MEDIAN = 0.5  # ... and half of them within this
MEMORY_STREAMS = 16
PERIOD = 6.0  # seconds: a concurrency satellite says the phrase every PERIOD s, three times
STAGGER = 0.37  # seconds between satellites' starts (modulo PERIOD), so that their chunks do not come in step
QUIET = 0.5  # seconds after the pong that answers a stream's end, for detections still on their way
SETTLE = 3.0  # seconds to wait for that pong
ACCURACY_SPEED = 4.0  # times real time: wyoming-openwakeword 1.8.2 keeps 10 s of a client's audio, and loses
# what comes faster than its threads hear it


@dataclass
class Take:
    """One positive: a phrase after LEAD s of silence, where the phrase ends (s), in which conditions."""

    word: str
    source: str  # piper-0.85, espeak-en-us, ...
    noise: str  # clean, white20, music5, ...
    pcm: Pcm
    phrase_end: float


@dataclass
class System:
    key: str
    label: str
    names: dict[str, str]  # wake word -> the name this system calls it
    server: ServerProcess | None = None
    versions: dict[str, str] = field(default_factory=dict)


# -- corpus ---------------------------------------------------------------------------


def _cached(kind: str, text: str, make) -> Pcm:
    path = AUDIO / kind / f"{cache_key(kind, text)}.wav"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(make())
    return decode_audio(path)


def _trimmed(pcm: Pcm, threshold: float = 0.02) -> Pcm:
    samples = np.frombuffer(pcm.audio, dtype=np.int16)
    loud = np.flatnonzero(np.abs(samples) > threshold * 32768)
    return Pcm(samples[loud[0] : loud[-1] + 1].tobytes()) if len(loud) else pcm


def positives(words: Sequence[str], data_dir: Path, quick: bool) -> list[Take]:
    speak = piper_speaker(data_dir)
    rng = np.random.default_rng(24)
    takes = []
    for word in words:
        text = PHRASES[word]
        said: list[tuple[str, Pcm]] = [
            (f"piper-{scale}", _cached(f"piper-{scale}", text, lambda text=text, scale=scale: speak(text, scale)))
            for scale in PIPER_SPEEDS
        ]
        said += [(f"espeak-{voice}", _espeak(voice, text)) for voice in ESPEAK_VOICES]
        for source, pcm in said[:2] if quick else said:
            speech = _trimmed(pcm)
            clean = silence(1.0) + speech + silence(1.0)
            takes.append(Take(word, source, "clean", clean, 1.0 + speech.seconds))
            for kind, snr in NOISES[::3] if quick else NOISES:
                takes.append(Take(word, source, f"{kind}{snr}", mix(clean, kind, snr, rng), 1.0 + speech.seconds))
    return takes


def _espeak(voice: str, text: str) -> Pcm:
    def make() -> bytes:
        command = ["espeak-ng", "-v", voice, "--stdout", "--stdin"]  # a text may start with "-"
        return subprocess.run(command, input=text.encode(), check=True, capture_output=True).stdout

    return _cached(f"espeak-{voice}", text, make)


def negatives(data_dir: Path, quick: bool, minutes: float) -> Pcm:
    """Every speech recording of the shared corpus, then other sentences by Piper and espeak-ng, 0.5 s apart; then,
    up to `minutes`, prose read by them in turn (PROSE), again in other voices if it runs out."""
    recordings = sorted((ROOT.parent / "shared" / "corpus").rglob("*.flac"))
    speak = piper_speaker(data_dir)
    pieces = [decode_audio(path) for path in recordings]
    sentences = NEGATIVE_SENTENCES[:4] if quick else NEGATIVE_SENTENCES
    pieces += [_cached("piper-1.0", text, lambda text=text: speak(text, 1.0)) for text in sentences]
    pieces += [_espeak(voice, text) for voice in ESPEAK_VOICES for text in sentences]
    readers = [lambda text: _cached("piper-1.0", text, lambda: speak(text, 1.0))]
    readers += [lambda text, voice=voice: _espeak(voice, text) for voice in ESPEAK_VOICES]
    seconds = sum(piece.seconds + 0.5 for piece in pieces)
    sentences = prose()
    for index in range(len(sentences) * len(readers)):  # each pass reads each sentence in another voice
        if seconds >= minutes * 60:
            break
        text = sentences[index % len(sentences)]
        pieces.append(readers[(index + index // len(sentences)) % len(readers)](text))
        seconds += pieces[-1].seconds + 0.5
    gap = silence(0.5).audio
    return Pcm(gap + b"".join(piece.audio + gap for piece in pieces))


def prose() -> list[str]:
    """Sentences of plain English from PROSE: none with code, addresses or any wake word in it."""
    text = "\n".join(path.read_text(encoding="utf-8") for path in PROSE if path.exists())
    text = re.sub(r"```.*?```", " ", text, flags=re.S)  # code blocks
    text = re.sub(r"^\s*[|#>].*$", " ", text, flags=re.M)  # tables, headings, quotes
    text = re.sub(r"^\s*(-|\d+\.)\s+", " ", text, flags=re.M)  # list items' marks
    text = re.sub(r"\]\([^)]*\)|[\[\]*_`]", " ", text)  # links' targets, emphasis, code marks
    sentences = []
    for sentence in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text)):
        words = sentence.split()
        plain = sum(bool(re.fullmatch(r"\(?[A-Za-z0-9][A-Za-z0-9'.%-]*[,;:.!?)]*", word)) for word in words)
        if 5 <= len(words) <= 40 and plain >= 0.9 * len(words) and not WAKE_WORDS.search(sentence):
            sentences.append(sentence.strip())
    return sentences


# -- systems --------------------------------------------------------------------------


def upstream_source(upstream: Path) -> Path:
    """A source tree of wyoming-openwakeword from a checkout or a bare git repository (its HEAD, unpacked)."""
    if (upstream / "pyproject.toml").exists():
        return upstream
    target = CACHE / "wyoming-openwakeword-src"
    git = ["git", "-C", str(upstream)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    if (target / ".head").exists() and (target / ".head").read_text() == head.stdout:
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    archive = target / "src.tar"
    subprocess.run([*git, "archive", "-o", str(archive), "HEAD"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    archive.unlink()
    (target / ".head").write_text(head.stdout)
    return target


async def start_systems(
    keys: Sequence[str], words: Sequence[str], args: argparse.Namespace, stack: ExitStack
) -> list[System]:
    systems = []
    ours = None
    for key in keys:
        if key.startswith("ours"):
            if ours is None:
                port = free_port()
                argv = [*ours_command(), "--uri", f"tcp://{HOST}:{port}", "--no-http"]
                argv += ["--data-dir", str(args.data_dir), "--asr-model", "tiny.en", "--turn-model", "none"]
                argv += ["--max-connections", str(2 * args.max_streams)]  # the peers have no limit
                ours = start_server("wyoming-wis", argv, port, offline_env(CACHE / "home"), ROOT, CACHE / "logs")
                stack.callback(stop_servers, [ours])
                await wait_ready(ours)
            suffix = "_oww" if key == "ours-oww" else ""
            label = "ours (openWakeWord)" if suffix else "ours (microWakeWord)"
            systems.append(System(key, label, {word: word + suffix for word in words}, ours))
            continue
        if key == "peer":
            python = ensure_venv(CACHE / "venv-wake-peer-1.8.2", PEER_PYPI)
            # as its info names them, and so Home Assistant asks (its detections carry these names)
            names = {word: ("ok_nabu" if word == "okay_nabu" else word) + "_v0.1" for word in words}
            label = "wyoming-openwakeword 1.8.2"
            runtime = ["tflite-runtime-nightly"]  # unpinned by the peer: what the index had
        else:
            if args.upstream is None:
                log("peer-2.1: no --upstream source given; skipped")
                continue
            source = upstream_source(args.upstream)
            python = ensure_venv(CACHE / "venv-wake-peer-2.1", [str(source)])
            names = {word: word for word in words}
            label = "wyoming-openwakeword 2.1.0 (upstream)"
            runtime = ["pyopen-wakeword"]
        port = free_port()
        argv = [str(python), "-m", "wyoming_openwakeword", "--uri", f"tcp://{HOST}:{port}"]
        server = start_server(key, argv, port, offline_env(CACHE / "home"), ROOT, CACHE / "logs")
        stack.callback(stop_servers, [server])
        await wait_ready(server)
        versions = venv_versions(python, ["wyoming-openwakeword", "wyoming", "numpy", *runtime])
        systems.append(System(key, label, names, server, versions))
    return systems


# -- streaming ------------------------------------------------------------------------


@dataclass
class Stream:
    """What one connection heard: detections (name, seconds since the first chunk was sent), and when chunks went."""

    detections: list[tuple[str, float]]
    sent: list[float]  # time.perf_counter() after each chunk
    started: float


async def stream(port: int, name: str, pcm: Pcm, chunk: int, speed: float) -> Stream:
    """detect, audio-start, the audio in chunks at `speed` times real time, audio-stop, then a ping: everything up
    to the pong (or not-detected), or SETTLE s if neither comes (wyoming-openwakeword 1.8.2 answers no ping, and
    nothing at audio-stop after a detection), and QUIET s more (a server that hears in threads of its own may
    answer before it has heard everything)."""
    client = AsyncTcpClient(HOST, port)
    await client.connect()
    detections: list[tuple[str, float]] = []
    sent: list[float] = []
    started = time.perf_counter()
    ended = asyncio.Event()

    async def read() -> None:
        while (event := await client.read_event()) is not None:
            if event.type == "detection":
                detections.append((event.data.get("name") or "", time.perf_counter()))
            elif event.type in ("pong", "not-detected"):
                ended.set()

    reader = asyncio.create_task(read())
    try:
        await client.write_event(Detect(names=[name]).event())
        await client.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
        step = chunk * 2
        for index, start in enumerate(range(0, len(pcm.audio), step)):
            await asyncio.sleep(max(0.0, started + index * chunk / RATE / speed - time.perf_counter()))
            piece = AudioChunk(rate=RATE, width=2, channels=1, audio=pcm.audio[start : start + step])
            await client.write_event(piece.event())
            sent.append(time.perf_counter())
        await client.write_event(AudioStop().event())
        await client.write_event(Ping().event())
        try:
            await asyncio.wait_for(ended.wait(), SETTLE)
        except TimeoutError:
            pass
        await asyncio.sleep(QUIET)
    finally:
        reader.cancel()
        await client.disconnect()
    return Stream(detections, sent, started)


def _sent_at(result: Stream, seconds: float, chunk: int) -> float:
    """When the chunk holding the audio up to `seconds` had been sent."""
    index = min(len(result.sent) - 1, int(np.ceil(seconds * RATE / chunk)) - 1)
    return result.sent[max(0, index)]


# -- phases ---------------------------------------------------------------------------


async def accuracy(systems: Sequence[System], takes: Sequence[Take], noise: Pcm, words: Sequence[str]) -> list[dict]:
    """Recall, one positive at a time; then the negatives, streamed to every system and word at once (each
    connection at ACCURACY_SPEED: together they use well under the CPU, and an hour takes a quarter of one)."""
    rows = []
    for system in systems:
        for word in words:
            mine = [take for take in takes if take.word == word]
            hits = 0
            missed = []
            for take in mine:
                result = await stream(system.server.port, system.names[word], take.pcm, CHUNK, ACCURACY_SPEED)
                if any(name == system.names[word] for name, _ in result.detections):
                    hits += 1
                else:
                    missed.append(f"{take.source}/{take.noise}")
            rows.append(
                {
                    "system": system.key,
                    "word": word,
                    "positives": len(mine),
                    "recall": hits / len(mine),
                    "missed": missed,
                }
            )
            log(f"[accuracy] {system.label} {word}: recall {hits}/{len(mine)}")
    log(f"[accuracy] {noise.seconds / 60:.0f} min of negatives to {len(rows)} streams at once")
    falses = await asyncio.gather(
        *(
            stream(system.server.port, system.names[word], noise, CHUNK, ACCURACY_SPEED)
            for system in systems
            for word in words
        )
    )
    for row, false in zip(rows, falses, strict=True):
        row |= {
            "negative_hours": noise.seconds / 3600,
            "false_accepts": len(false.detections),
            "false_accepts_per_hour": len(false.detections) / (noise.seconds / 3600),
            "false_accepts_audio_s": [round((at - false.started) * ACCURACY_SPEED, 1) for _, at in false.detections],
        }
        log(f"[accuracy] {row['system']} {row['word']}: {len(false.detections)} false accepts")
    return rows


async def latency(systems: Sequence[System], takes: Sequence[Take]) -> list[dict]:
    chosen = [take for take in takes if take.noise in ("clean", "white20", "music20")]
    rows = []
    for system in systems:
        delays, missed = [], 0
        for take in chosen:
            result = await stream(system.server.port, system.names[take.word], take.pcm, HA_CHUNK, 1.0)
            heard = [at for name, at in result.detections if name == system.names[take.word]]
            if not heard:
                missed += 1
                continue
            delays.append(heard[0] - _sent_at(result, take.phrase_end, HA_CHUNK))
        rows.append(
            {
                "system": system.key,
                "takes": len(chosen),
                "missed": missed,
                "median_s": median(delays),
                "p95_s": percentile(delays, 95),
                "delays": delays,
            }
        )
        log(f"[latency] {system.label}: median {median(delays)} s over {len(delays)}")
    return rows


async def concurrency(systems: Sequence[System], takes: Sequence[Take], word: str, limit: int) -> list[dict]:
    phrase = next(take for take in takes if take.word == word and take.source == "piper-1.0" and take.noise == "clean")
    gap = silence(PERIOD - phrase.pcm.seconds)
    satellite = phrase.pcm + gap + phrase.pcm + gap + phrase.pcm
    ends = [phrase.phrase_end + index * PERIOD for index in range(3)]
    rows = []
    for system in systems:
        best, failed, tried = 0, limit + 1, []
        count = 1
        while count < failed:
            # every satellite starts within one period, so all of them stream at once for two periods
            results = await asyncio.gather(
                *(
                    _offset(
                        index * STAGGER % PERIOD, stream(system.server.port, system.names[word], satellite, CHUNK, 1.0)
                    )
                    for index in range(count)
                )
            )
            delays, missed = [], 0
            for result in results:
                heard = [at for name, at in result.detections if name == system.names[word]]
                for end in ends:
                    sent = _sent_at(result, end, CHUNK)
                    after = [at - sent for at in heard if -0.5 < at - sent < 5.0]
                    if after:
                        delays.append(max(0.0, after[0]))
                    else:
                        missed += 1
            kept_up = missed == 0 and max(delays, default=0) <= KEEPS_UP and (median(delays) or 0) <= KEEPS_UP_MEDIAN
            slowest = max(delays, default=None)
            tried.append(
                {"streams": count, "missed": missed, "median_s": median(delays), "max_s": slowest, "kept_up": kept_up}
            )
            log(
                f"[concurrency] {system.label}: {count} streams, {missed} missed, median {median(delays)}, "
                f"max {slowest}"
            )
            if kept_up:
                best = count
            else:
                failed = count
            if failed - best <= max(1, best // 4):  # doubled until one fails, then halved to within a quarter
                break
            count = count * 2 if failed > limit else (best + failed) // 2
            count = min(count, limit)
        rows.append({"system": system.key, "word": word, "max_streams": best, "tried": tried})
    return rows


async def _offset(seconds: float, work):
    await asyncio.sleep(seconds)
    return await work


async def memory(systems: Sequence[System], word: str) -> list[dict]:
    rows = []
    quiet = silence(8.0)
    for system in systems:
        before = system.server.memory_mb("VmRSS")
        tasks = [
            asyncio.create_task(stream(system.server.port, system.names[word], quiet, CHUNK, 1.0))
            for _ in range(MEMORY_STREAMS)
        ]
        await asyncio.sleep(6.0)
        during = system.server.memory_mb("VmRSS")
        await asyncio.gather(*tasks)
        per_stream = (during - before) / MEMORY_STREAMS if before is not None and during is not None else None
        row = {"system": system.key, "rss_idle_mb": before, "rss_streams_mb": during, "mb_per_stream": per_stream}
        rows.append(row)
        log(f"[memory] {system.label}: {before} MB idle, {during} MB with {MEMORY_STREAMS} streams")
    return rows


# -- report ---------------------------------------------------------------------------


def report(results: dict, systems: Sequence[System]) -> str:
    labels = {system.key: system.label for system in systems}
    out = []
    if rows := results.get("accuracy"):
        out += ["## Recall and false accepts\n", "| system | wake word | positives | recall | false accepts / h |"]
        out.append("|---|---|--:|--:|--:|")
        for row in rows:
            cells = [labels[row["system"]], row["word"], row["positives"], f"{row['recall']:.1%}"]
            out.append(_row([*cells, f"{row['false_accepts_per_hour']:.2f}"]))
    if rows := results.get("latency"):
        out += ["\n## From the end of the phrase to the detection (real-time pace, 10 ms chunks)\n"]
        out += ["| system | takes | missed | median | p95 |", "|---|--:|--:|--:|--:|"]
        for row in rows:
            times = [f"{row[key]:.3f} s" if row[key] is not None else "-" for key in ("median_s", "p95_s")]
            out.append(_row([labels[row["system"]], row["takes"], row["missed"], *times]))
    if rows := results.get("concurrency"):
        out += ["\n## Satellites at once on this machine (each at real-time pace)\n"]
        out += ["| system | most streams that keep up |", "|---|--:|"]
        out += [_row([labels[row["system"]], row["max_streams"]]) for row in rows]
    if rows := results.get("memory"):
        out += [f"\n## Memory ({MEMORY_STREAMS} streams open)\n", "| system | idle | with streams | per stream |"]
        out.append("|---|--:|--:|--:|")
        for row in rows:
            sizes = [
                f"{row['rss_idle_mb']:.0f} MB",
                f"{row['rss_streams_mb']:.0f} MB",
                f"{row['mb_per_stream']:.2f} MB",
            ]
            out.append(_row([labels[row["system"]], *sizes]))
    return "\n".join(out)


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="Two takes a phrase, fewer noises and sentences")
    parser.add_argument("--words", default="okay_nabu,hey_jarvis", help="Wake words (default: okay_nabu,hey_jarvis)")
    parser.add_argument("--only", default=",".join(PHASES), help=f"Phases: {','.join(PHASES)}")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"Systems: {','.join(SYSTEMS)}")
    parser.add_argument("--upstream", type=Path, help="wyoming-openwakeword's source (checkout or bare git repo)")
    parser.add_argument("--data-dir", type=Path, default=CACHE / "data", help="Our server's data dir")
    parser.add_argument("--max-streams", type=int, default=256, help="Most satellites at once to try")
    parser.add_argument(
        "--negative-minutes", type=float, default=0, help="Read prose after the corpus up to this much (default: none)"
    )
    parser.add_argument("--out", type=Path, help="JSON results (default: bench/results/wake-<time>.json)")
    args = parser.parse_args()
    words = [word for word in args.words.split(",") if word]
    unknown = set(words) - set(PHRASES)
    if unknown:
        parser.error(f"--words: no phrase for {', '.join(sorted(unknown))} (known: {', '.join(PHRASES)})")
    phases = [phase for phase in args.only.split(",") if phase]
    started = time.strftime("%Y%m%d-%H%M%S")
    log("Making the corpus (cached after the first run)")
    takes = positives(words, args.data_dir, args.quick)
    noise = negatives(args.data_dir, args.quick, args.negative_minutes)
    log(f"{len(takes)} positives, {noise.seconds / 60:.1f} min of negatives")
    results: dict = {"machine": machine_info(), "command": " ".join(sys.argv), "quick": args.quick}
    with ExitStack() as stack:
        systems = await start_systems(args.systems.split(","), words, args, stack)
        results["systems"] = [{"key": item.key, "label": item.label, "versions": item.versions} for item in systems]
        if "accuracy" in phases:
            results["accuracy"] = await accuracy(systems, takes, noise, words)
        if "latency" in phases:
            results["latency"] = await latency(systems, takes)
        if "concurrency" in phases:
            results["concurrency"] = await concurrency(systems, takes, words[0], args.max_streams)
        if "memory" in phases:
            results["memory"] = await memory(systems, words[0])
    text = report(results, systems)
    print(text)
    out = args.out or ROOT / "bench" / "results" / f"wake-{started}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    log(f"Results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
