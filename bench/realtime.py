"""OpenAI Realtime transcription against our Wyoming path (issue 40): last word to `completed`, first delta.

The corpus is bench/endpoint.py's (plain, paused, whole-paused and long commands, each with its last speech
sample's time), streamed at real-time pace to one server (Whisper `base`, the same threads, beam and compute type
as bench/endpoint.py), clip by clip, the systems asked in turn (the first rotating) so that they share the
machine's noise:

  Realtime server_vad     the official openai SDK (`client.realtime.connect(extra_query={"intent":
                          "transcription"})`), `session.update` with OpenAI's default server_vad (threshold 0.5,
                          prefix_padding_ms 300, silence_duration_ms 500); the clip at 24 kHz, PCM16, appended in
                          100 ms chunks (--append-ms) at real-time pace, then silence
  Realtime semantic_vad   the same with semantic_vad, eagerness auto (our default sensitivity)
  Wyoming (default)       our Wyoming path on the same audio at 16 kHz in 10 ms chunks, the server ending the turn
                          on its default sensitivity: bench/endpoint.py's "ours (default)"

    .venv/bin/python bench/realtime.py [--quick | --share S] [--only server-vad,semantic-vad,wyoming] [--append-ms MS]

The clock: the Realtime client sends each chunk (100 ms, or --append-ms) when its last sample has been
"recorded", so a sample is sent up to a chunk after it was spoken; the times run from the moment the chunk holding
the sample was sent (Wyoming's 10 ms chunks: to within 10 ms of it). Per clip:

  last word -> completed   the last speech sample sent -> `...input_audio_transcription.completed` of the turn
                           that holds it (Wyoming: -> `transcript`)
  speech start -> delta    the first speech sample sent -> the first `...input_audio_transcription.delta`
  delta - last word        the first delta's time less the last speech sample's: negative while still talking

A turn is cut when it ended (Realtime: `input_audio_buffer.committed` came; Wyoming: the transcript came) before
the last speech sample was sent: on the paused commands, before the words after the pause. A cut turn has no
latency. WER (normalised as bench/accuracy.py and bench/asr.py do) scores the first turn's transcript, what a
client acting on a turn acts on; for Realtime the WER of all the clip's turns joined is given too (a cut turn's
words are not lost there, only split). The server runs with --debug: each turn's `Turn ended (reason) after ...`
and the judging lines (wyoming_wis/asr/session.py) are kept with it, to tell where the time goes.

Prints a Markdown report and writes bench/results/realtime-<timestamp>.json. The full run (138 clips, 3 systems)
took 32 min on 2 busy cores; --quick (10 clips) 2-3 min. --report prints a saved run's report again.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from openai import AsyncOpenAI
from scipy.signal import resample_poly

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asr import MODEL, wer  # noqa: E402  (bench/ is not a package)
from common import (  # noqa: E402
    HOST,
    RATE,
    BackgroundLoad,
    Pcm,
    ServerProcess,
    add_common_args,
    check_common_args,
    dist_version,
    fmt_s,
    markdown_cell,
    median,
    percentile,
    ratio,
    run_and_record,
    silence,
)
from endpoint import (  # noqa: E402
    KINDS,
    TAIL_SECONDS,
    Bench,
    Clip,
    System,
    Turn,
    add_corpus_args,
    alone_phase,
    build_corpus,
    corpus_folder,
    next_speech,
    pick,
    settle_corpus_args,
    start_servers,
    stream_turn,
    warm_up,
)

REALTIME_RATE = 24000  # OpenAI's PCM rate
APPEND_MS = 100  # each append by default: 100 ms, as OpenAI's guides send (the SDK's own microphone example: 20)
GRACE_SECONDS = 2.0  # after the streamed silence ran out, how long to wait for the last `completed`
SERVER_VAD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
SEMANTIC_VAD = {"type": "semantic_vad", "eagerness": "auto"}
TARGET_S = 0.6  # the target: `completed` within this of the last word (median), with server_vad
COMPLETED = "conversation.item.input_audio_transcription.completed"
DELTA = "conversation.item.input_audio_transcription.delta"
# the server's debug lines that tell how a turn was judged and ended (wyoming_wis/asr/session.py)
JUDGING = re.compile(r"Turn ended|Judged a pause|Listened again|Decoded .* ahead|Turn not judged")
TURN_ENDED = re.compile(r"Turn ended \(([\w-]+)\) after ([\d.]+) s")
JUDGED = re.compile(r"Judged a pause after ([\d.]+) s of silence in ([\d.]+) s")


@dataclass(frozen=True)
class RealtimeSystem(System):
    """A row of the report; `detection` is the Realtime session's turn_detection (None: the Wyoming path)."""

    detection: dict | None = None


WYOMING = RealtimeSystem("wyoming", "Wyoming (default)", "ours", False, "default")
SYSTEMS = [
    RealtimeSystem("server-vad", "Realtime server_vad", "ours", False, None, SERVER_VAD),
    RealtimeSystem("semantic-vad", "Realtime semantic_vad (auto)", "ours", False, None, SEMANTIC_VAD),
    WYOMING,
]
PHASES = tuple(system.key for system in SYSTEMS)


@dataclass
class RealtimeTurn(Turn):
    """A clip streamed to one system (bench/endpoint.py's Turn, with what the Realtime API tells too); times in
    seconds from the first chunk sent."""

    last_sent_s: float | None = None  # when the chunk holding the last speech sample was sent
    speech_sent_s: float | None = None  # ... the first speech sample
    first_delta_s: float | None = None  # speech start -> first delta
    delta_after_word_s: float | None = None  # first delta less the last word (negative: while talking)
    turns: int = 0  # Realtime: turns committed with the clip's audio
    text_all: str | None = None  # Realtime: every turn's transcript, joined
    stopped_s: float | None = None  # Realtime: `speech_stopped` of the turn holding the last word, from it
    audio_end_s: float | None = None  # ... its audio_end_ms less the last speech sample's time
    end_reason: str | None = None  # the server's reason for ending that turn (its log)
    ended_audio_s: float | None = None  # ... how much audio it had then, less the last speech sample's time
    judged_at_s: float | None = None  # ... the silence when its last pause was judged (decoded and scored)
    judge_s: float | None = None  # ... how long that judgement took (the turn cannot end meanwhile)
    server_log: list[str] = field(default_factory=list)


# -- one turn ------------------------------------------------------------------------------


def sent_at(seconds: float, chunk: float, end: bool) -> float:
    """When the chunk holding the sample at `seconds` is sent (chunks sent as their last sample is recorded);
    `end`: `seconds` is where speech ends, its last sample just before."""
    steps = seconds / chunk
    index = math.ceil(round(steps, 6)) - 1 if end else math.floor(round(steps, 6))
    return (index + 1) * chunk


def to_realtime(pcm: Pcm) -> bytes:
    """16 kHz PCM as OpenAI's 24 kHz PCM16."""
    samples = resample_poly(pcm.floats(np.float64), REALTIME_RATE // 8000, RATE // 8000)
    return (np.clip(samples, -1.0, 1.0 - 1 / 32768) * 32768).astype("<i2").tobytes()


class ServerLog:
    """The server's log lines written since the last `take`: those of the turn just streamed."""

    def __init__(self, server: ServerProcess) -> None:
        self.path = server.log_path
        self.offset = self.path.stat().st_size

    def take(self) -> list[str]:
        with open(self.path, "rb") as log_file:
            log_file.seek(self.offset)
            data = log_file.read()
        self.offset += len(data)
        return [line for line in data.decode(errors="replace").splitlines() if JUDGING.search(line)]


def session_config(system: RealtimeSystem) -> dict:
    return {
        "type": "transcription",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": REALTIME_RATE},
                "transcription": {"model": "whisper-1", "language": "en"},
                "turn_detection": system.detection,
            }
        },
    }


async def realtime_turn(
    system: RealtimeSystem, bench: RealtimeBench, clip: Clip, pcm: Pcm, speech_start: float
) -> RealtimeTurn:
    """Stream `pcm` (the clip and the silence after it; its speech from `speech_start` s) through the official
    SDK at real-time pace, `bench.append_s` an append, until the `completed` of the turn that holds the last
    speech sample (or the audio and GRACE_SECONDS ran out); then close."""
    turn = RealtimeTurn(system.label, clip.name, clip.kind, "alone", clip.text)
    chunk, timeout, http_port = bench.append_s, bench.timeout, bench.http_port
    turn.last_sent_s = sent_at(clip.last_speech_s, chunk, end=True)
    turn.speech_sent_s = sent_at(speech_start, chunk, end=False)
    audio = to_realtime(pcm)
    step = round(chunk * REALTIME_RATE) * 2
    events: list[tuple[float, Any]] = []
    committed: dict[str, float] = {}  # item -> when its turn ended
    finished = asyncio.Event()
    start = time.perf_counter()
    client = AsyncOpenAI(
        api_key="unused", base_url=f"http://{HOST}:{http_port}/v1", websocket_base_url=f"ws://{HOST}:{http_port}/v1"
    )

    async def read(connection: Any) -> None:
        while True:
            event = await connection.recv()
            now = time.perf_counter() - start
            events.append((now, event))
            if event.type == "error":
                turn.error = f"error event: {event.error.code}: {event.error.message}"
                finished.set()
                return
            if event.type == "input_audio_buffer.committed":
                committed[event.item_id] = now
            elif event.type == COMPLETED and committed.get(event.item_id, -1.0) >= turn.last_sent_s:
                finished.set()
                return

    reader: asyncio.Task | None = None
    try:
        async with asyncio.timeout(timeout), client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.session.update(session=session_config(system))
            while (event := await conn.recv()).type != "session.updated":
                if event.type == "error":
                    raise RuntimeError(f"session.update refused: {event.error.message}")
            start = time.perf_counter()
            reader = asyncio.create_task(read(conn))
            for index, offset in enumerate(range(0, len(audio), step)):
                await asyncio.sleep(max(0.0, start + (index + 1) * chunk - time.perf_counter()))
                if finished.is_set():
                    break
                await conn.input_audio_buffer.append(audio=base64.b64encode(audio[offset : offset + step]).decode())
            try:
                await asyncio.wait_for(finished.wait(), GRACE_SECONDS)
            except TimeoutError:
                turn.error = turn.error or "no transcript"
    except TimeoutError:
        turn.error = turn.error or "timed out"
    except Exception as err:  # the SDK's and the socket's: the row says what happened
        turn.error = turn.error or f"{type(err).__name__}: {err}"
    finally:
        if reader is not None and not reader.done():
            reader.cancel()
        await client.close()
    score_realtime(turn, clip, events, committed)
    return turn


def score_realtime(
    turn: RealtimeTurn, clip: Clip, events: list[tuple[float, Any]], committed: dict[str, float]
) -> None:
    """The turn's figures from the events heard: which turn held the last word, when it ended and was answered."""
    assert turn.last_sent_s is not None and turn.speech_sent_s is not None
    items = sorted(committed, key=committed.__getitem__)  # in the order their turns ended
    texts = {e.item_id: e.transcript for _, e in events if e.type == COMPLETED}
    done = {e.item_id: at for at, e in events if e.type == COMPLETED}
    turn.turns = len(items)
    turn.text_all = " ".join(texts[item] for item in items if texts.get(item))
    if items and items[0] in texts:
        turn.text = texts[items[0]]
    deltas = [at for at, e in events if e.type == DELTA]
    if deltas:
        turn.first_delta_s = min(deltas) - turn.speech_sent_s
        turn.delta_after_word_s = min(deltas) - turn.last_sent_s
    if not items:
        return
    turn.cut = committed[items[0]] < turn.last_sent_s
    final = next((item for item in items if committed[item] >= turn.last_sent_s), None)
    if final is None or final not in done:
        turn.error = turn.error or "no transcript for the last word"
        return
    turn.transcript_s = done[final]
    turn.latency_s = None if turn.cut else done[final] - turn.last_sent_s
    stopped = [(at, e) for at, e in events if e.type == "input_audio_buffer.speech_stopped" and e.item_id == final]
    if stopped:
        turn.stopped_s = stopped[0][0] - turn.last_sent_s
        turn.audio_end_s = stopped[0][1].audio_end_ms / 1000 - clip.last_speech_s
    if turn.error == "no transcript":  # the turn that matters was answered after all (the grace ran out later)
        turn.error = None


def judge_log(turn: RealtimeTurn, clip: Clip, lines: list[str]) -> None:
    """From the server's log of the turn: why the turn holding the last word ended, and with how much audio."""
    turn.server_log = [line.split(" DEBUG ", 1)[-1] for line in lines]
    judge_lines(turn, clip)


def judge_lines(turn: RealtimeTurn, clip: Clip) -> None:
    """`judge_log`'s reading of the turn's `server_log`."""
    first = next((i for i, line in enumerate(turn.server_log) if TURN_ENDED.search(line)), None)
    if first is None or turn.cut:  # the first turn is the one holding the last word; it starts with the clip
        return
    ended = TURN_ENDED.search(turn.server_log[first])
    assert ended is not None
    turn.end_reason = ended.group(1)
    turn.ended_audio_s = float(ended.group(2)) - clip.last_speech_s
    judged = [match for line in turn.server_log[:first] if (match := JUDGED.search(line))]
    if judged:
        turn.judged_at_s, turn.judge_s = float(judged[-1].group(1)), float(judged[-1].group(2))


# -- the bench -------------------------------------------------------------------------------


@dataclass
class RealtimeBench(Bench):
    """bench/endpoint.py's Bench, the Realtime systems on the same server's HTTP port."""

    http_port: int = 0
    server_log: ServerLog | None = None
    append_s: float = APPEND_MS / 1000  # the Realtime client's chunk

    async def turn(self, system: System, clip: Clip, phase: str, delay: float = 0.0) -> Turn:
        assert isinstance(system, RealtimeSystem)
        pcm = clip.pcm(self.folder)
        speech_start = next_speech(pcm, 0)
        if self.server_log is not None:
            self.server_log.take()  # what came after the turn before
        audio = pcm + silence(self.tail_s)
        if system.detection is None:
            ended = await stream_turn(system, self.ports[system.server], clip, audio.audio, None, phase, self.timeout)
            turn = RealtimeTurn(**asdict(ended))
            turn.last_sent_s = clip.last_speech_s
            turn.speech_sent_s = speech_start
        else:
            turn = await realtime_turn(system, self, clip, audio, speech_start)
        if self.server_log is not None:
            judge_log(turn, clip, self.server_log.take())
        return turn


# -- summaries ------------------------------------------------------------------------------


def summarise(turns: Sequence[RealtimeTurn], systems: Sequence[System]) -> list[dict]:
    """Per kind (and all) and system: last word -> completed, first delta, cuts, WER."""
    rows = []
    for kind in [*KINDS, "all"]:
        for system in systems:
            part = [t for t in turns if t.system == system.label and kind in ("all", t.kind)]
            if not part:
                continue
            latencies = [t.latency_s for t in part if t.latency_s is not None]
            firsts = [t.first_delta_s for t in part if t.first_delta_s is not None]
            afters = [t.delta_after_word_s for t in part if t.delta_after_word_s is not None]
            cuts = sum(t.cut for t in part)
            realtime = isinstance(system, RealtimeSystem) and system.detection is not None
            rows.append(
                {
                    "kind": kind,
                    "system": system.label,
                    "turns": len(part),
                    "median_s": median(latencies),
                    "p90_s": percentile(latencies, 90),
                    "within_target": sum(v <= TARGET_S for v in latencies) / len(latencies) if latencies else None,
                    "first_delta_median_s": median(firsts),
                    "first_delta_p90_s": percentile(firsts, 90),
                    "delta_after_word_median_s": median(afters),
                    "with_delta": len(firsts),
                    "cuts": cuts,
                    "no_transcript": sum(t.text is None for t in part),
                    "errors": sum(t.error is not None for t in part),
                    "wer": wer([t.reference for t in part], [t.text or "" for t in part]),
                    "wer_all_turns": wer([t.reference for t in part], [t.text_all or "" for t in part])
                    if realtime
                    else None,
                }
            )
    return rows


def ratios(summary: Sequence[dict]) -> list[dict]:
    """Realtime's median and p90 over Wyoming's, per kind."""
    row = {(r["system"], r["kind"]): r for r in summary}
    out = []
    for (label, kind), mine in row.items():
        wyoming = row.get((WYOMING.label, kind))
        if label == WYOMING.label or wyoming is None:
            continue
        out.append(
            {
                "kind": kind,
                "system": label,
                "median_ratio": ratio(mine["median_s"], wyoming["median_s"]),
                "p90_ratio": ratio(mine["p90_s"], wyoming["p90_s"]),
            }
        )
    return out


def breakdown(turns: Sequence[RealtimeTurn], systems: Sequence[System]) -> list[dict]:
    """Where the time goes, per system, on the uncut turns: the server's end of speech against the last sample
    (its VAD's lag), how much audio past the last word it had when it ended the turn (the silence it waited), when
    the client heard the turn end, and from there to the transcript (the final decode and the send)."""
    rows = []
    for system in systems:
        part = [t for t in turns if t.system == system.label and t.latency_s is not None]
        if not part:
            continue
        reasons: dict[str, int] = {}
        for t in part:
            reasons[t.end_reason or "?"] = reasons.get(t.end_reason or "?", 0) + 1
        ended = [t.ended_audio_s for t in part if t.ended_audio_s is not None]
        stopped = [t.stopped_s for t in part if t.stopped_s is not None]
        answer = [t.latency_s - t.stopped_s for t in part if t.latency_s is not None and t.stopped_s is not None]
        judge = [t.judge_s for t in part if t.judge_s is not None]
        judged_by = [t.judged_at_s + t.judge_s for t in part if t.judged_at_s is not None and t.judge_s is not None]
        held = [t for t in part if t.judged_at_s is not None and t.judge_s is not None]
        rows.append(
            {
                "system": system.label,
                "turns": len(part),
                "reasons": reasons,
                "vad_end_median_s": median([t.audio_end_s for t in part if t.audio_end_s is not None]),
                "ended_audio_median_s": median(ended),
                "ended_audio_p90_s": percentile(ended, 90),
                "stopped_median_s": median(stopped),
                "stopped_to_completed_median_s": median(answer),
                "stopped_to_completed_p90_s": percentile(answer, 90),
                "judge_median_s": median(judge),
                "judge_p90_s": percentile(judge, 90),
                "judged_by_median_s": median(judged_by),
                "judged_by_p90_s": percentile(judged_by, 90),
                "held": held_by_judging(held, system),
                "latency_median_s": median([t.latency_s for t in part if t.latency_s is not None]),
            }
        )
    return rows


def held_by_judging(turns: Sequence[RealtimeTurn], system: System) -> int | None:
    """server_vad: how many turns' last judgement (its decode and the turn model) was still running when the
    silence reached silence_duration_ms, so that the turn ended only after it (the session's loop does not look
    at the silence while it judges)."""
    if not isinstance(system, RealtimeSystem) or system.detection is None or system.detection["type"] != "server_vad":
        return None
    limit = system.detection["silence_duration_ms"] / 1000
    return sum(t.judged_at_s + t.judge_s > limit for t in turns if t.judged_at_s is not None and t.judge_s is not None)


# -- report ---------------------------------------------------------------------------------


def print_report(document: dict, out: Path) -> None:
    machine, settings, run = document["machine"], document["settings"], document["versions"]
    print("# OpenAI Realtime transcription against our Wyoming path\n")
    print(f"Command: `{document['command']}`  ")
    print(f"Machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), Python {machine['python']}  ")
    print(
        f"One server: wyoming-wis {run['ours']['wyoming-wis']} from {run['ours_src']}, Whisper {MODEL}, device "
        f"{settings['device']}, compute type {settings['compute_type']}, beam {settings['beam_size']}, "
        f"{settings['threads']} threads, --debug; openai SDK {run.get('openai', '?')}  "
    )
    print(
        f"Corpus: {len(document['corpus'])} clips of bench/endpoint.py's, each followed by up to {TAIL_SECONDS:g} s "
        f"of silence; Realtime: 24 kHz PCM16, {settings.get('append_ms', APPEND_MS)} ms appends, "
        "Wyoming: 16 kHz, 10 ms chunks; real-time pace; "
        "the systems asked in turn clip by clip\n"
    )
    print("## Last speech sample sent -> transcript (`completed` / `transcript`)\n")
    print("| kind | system | turns | median | p90 | <= 0.6 s | speech -> 1st delta | 1st delta - last word "
          "| cut | none | WER | WER all turns |")  # fmt: skip
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in document["summary"]:
        kind = f"**{row['kind']}**" if row["kind"] == "all" else row["kind"]
        within = "-" if row["within_target"] is None else f"{row['within_target']:.0%}"
        all_turns = "-" if row["wer_all_turns"] is None else f"{row['wer_all_turns']:.1%}"
        print(
            f"| {kind} | {row['system']} | {row['turns']} | {fmt_s(row['median_s'])} | {fmt_s(row['p90_s'])} "
            f"| {within} | {fmt_s(row['first_delta_median_s'])} | {fmt_s(row['delta_after_word_median_s'])} "
            f"| {row['cuts']} | {row['no_transcript']} | {row['wer']:.1%} | {all_turns} |"
        )
    if document["ratios"]:  # none where Wyoming or every Realtime system was left out (--only)
        print("\n## Realtime / Wyoming\n")
        print("| kind | system | median ratio | p90 ratio |\n|---|---|--:|--:|")
    for row in document["ratios"]:
        show = [("-" if v is None else f"{v:.2f}") for v in (row["median_ratio"], row["p90_ratio"])]
        print(f"| {row['kind']} | {row['system']} | {show[0]} | {show[1]} |")
    print("\n## Where the time goes (uncut turns; medians)\n")
    print("VAD's end: the server's end of speech (speech_stopped's audio_end_ms) less the last speech sample's time.")
    print("Audio at the end: audio the server had when it ended the turn (its log), less the last speech sample.\n")
    print("Judged: the silence when the last pause was judged plus the judgement's time (the decode and the turn")
    print("model; the session does not look at the silence meanwhile); held: server_vad turns still being judged")
    print("when the silence reached silence_duration_ms.\n")
    print("| system | turns | ended by | VAD's end | audio at the end (p90) | judgement (p90) | judged by (p90) "
          "| held | speech_stopped heard | then -> completed (p90) | total |")  # fmt: skip
    print("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in document["breakdown"]:
        reasons = ", ".join(f"{name} {count}" for name, count in sorted(row["reasons"].items()))
        print(
            f"| {row['system']} | {row['turns']} | {reasons} | {fmt_s(row['vad_end_median_s'])} "
            f"| {fmt_s(row['ended_audio_median_s'])} ({fmt_s(row['ended_audio_p90_s'])}) "
            f"| {fmt_s(row['judge_median_s'])} ({fmt_s(row['judge_p90_s'])}) "
            f"| {fmt_s(row['judged_by_median_s'])} ({fmt_s(row['judged_by_p90_s'])}) "
            f"| {'-' if row['held'] is None else row['held']} "
            f"| {fmt_s(row['stopped_median_s'])} | {fmt_s(row['stopped_to_completed_median_s'])} "
            f"({fmt_s(row['stopped_to_completed_p90_s'])}) | {fmt_s(row['latency_median_s'])} |"
        )
    wrong = [t for t in document["turns"] if t["error"] or t["cut"]]
    if wrong:
        print(f"\n## Cut turns and errors ({len(wrong)})\n")
    clips = {clip["name"]: clip for clip in document["corpus"]}
    for turn in wrong:
        clip = clips[turn["clip"]]
        what = turn["error"] or ""
        if turn["cut"]:
            resumed = "" if clip["resume_s"] is None else f", the speech resumed at {clip['resume_s']:.2f} s"
            what = f"cut{resumed}, the last speech at {clip['last_speech_s']:.2f} s; {what}".rstrip("; ")
        print(f"- {turn['system']}, {turn['clip']}: {what}")
        heard = turn["text"] or ""
        if turn.get("text_all") and turn["text_all"] != heard:
            heard += f" / all turns: {turn['text_all']}"
        print(f"  - said: {markdown_cell(turn['reference'])}; heard: {markdown_cell(heard)}")
    print(f"\nOther processes used {document['background_cpu_share']:.0%} of the CPUs during the run.")
    print(f"Runtime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_args(parser, "A few clips of each kind (10): a smoke run")
    parser.add_argument("--timeout", type=float, default=60, help="Seconds a turn may take in all. Default: 60")
    parser.add_argument(
        "--append-ms",
        type=int,
        default=APPEND_MS,
        metavar="MS",
        help=f"Audio in each Realtime append. Default: {APPEND_MS}",
    )
    parser.add_argument(
        "--report", type=Path, metavar="JSON", help="Run nothing: print the report of a saved run again, re-summarised"
    )
    add_common_args(parser, "realtime", PHASES)
    args = parser.parse_args(argv)
    check_common_args(parser, args, "realtime", PHASES)
    settle_corpus_args(args)
    if not 10 <= args.append_ms <= 1000:
        parser.error("--append-ms: from 10 to 1000")
    return args


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    load = BackgroundLoad()
    clips = build_corpus(args)
    if args.quick or args.share < 1:
        clips = pick(clips, None if args.quick else args.share)
    systems = [system for system in SYSTEMS if system.key in args.phases]
    ports, versions, servers = await start_servers(args, [WYOMING], stack, ["--debug"])
    argv = versions["ours_argv"]
    http_port = int(argv[argv.index("--http-port") + 1])
    versions["openai"] = dist_version("openai")  # the SDK the Realtime systems connect with
    log = ServerLog(servers[0])
    bench = RealtimeBench(
        ports,
        corpus_folder(),
        TAIL_SECONDS,
        {},
        args.timeout,
        versions["metrics"],
        http_port=http_port,
        server_log=log,
        append_s=args.append_ms / 1000,
    )
    await warm_up(bench, [WYOMING], clips[0])
    for system in systems:  # the first Realtime session (the SDK's imports, the route) kept out of the numbers
        if system.detection is not None:
            await bench.turn(system, clips[0], "warm-up")
    turns = await alone_phase(bench, systems, clips)
    summary = summarise(turns, systems)
    return {
        "versions": versions,
        "corpus": [asdict(clip) for clip in clips],
        "summary": summary,
        "ratios": ratios(summary),
        "breakdown": breakdown(turns, systems),
        "background_cpu_share": load.share(servers),
        "turns": [asdict(turn) for turn in turns],
    }


def report_again(path: Path) -> None:
    """The report of a saved run, its summaries made again from its turns (and their server logs)."""
    document = json.loads(path.read_text())
    clips = {item["name"]: Clip(**item) for item in document["corpus"]}
    turns = [RealtimeTurn(**item) for item in document["turns"]]
    for turn in turns:
        judge_lines(turn, clips[turn.clip])
    labels = {turn.system for turn in turns}
    systems = [system for system in SYSTEMS if system.label in labels]
    summary = summarise(turns, systems)
    document |= {"summary": summary, "ratios": ratios(summary), "breakdown": breakdown(turns, systems)}
    document["turns"] = [asdict(turn) for turn in turns]
    print_report(document, path)


def main() -> None:
    args = parse_args()
    if args.report:
        report_again(args.report)
        return
    keys = ("device", "threads", "beam_size", "compute_type", "share", "quick", "append_ms")
    settings = {key: getattr(args, key) for key in keys} | {"phases": args.phases}
    run_and_record(lambda stack: run(args, stack), settings, args.out, print_report)


if __name__ == "__main__":
    main()
