"""Paths: every frontend of the running server against faster-whisper's own `transcribe()` (issue 20).

bench/accuracy.py compares our engine with faster-whisper in-process; this checks that what a client of the
running server gets is that same text, whichever way it asks. Per beam size the real server is started as a
subprocess on the bundled models (offline, `--beam-size B`, `--cpu-threads 2`, and `--external-vad`: Wyoming
answers at audio-stop), twice: on its defaults, and with `--partial-results false`. Each utterance is then sent
through every path with the client real users run:

  wyoming               the `wyoming` client as Home Assistant uses it: transcribe, audio-start, chunks,
                        audio-stop, read to `transcript` (the server with --partial-results false; audio at once)
  wyoming-partials      the same at the pace it was spoken, as a satellite sends it, reading transcript-start,
                        transcript-chunk..., transcript, transcript-stop (the server on its defaults)
  openai-json, -text, -srt, -vtt, -verbose, -verbose-word, -verbose-segment, -verbose-word-segment, -stream
                        /v1/audio/transcriptions with the `openai` SDK in each response format and timestamp
                        setting (srt and vtt: the cues' text; stream: the `transcript.text.done` event's)
  openai-translate      /v1/audio/translations, for the utterances not in English (against task translate)
  willow                POST /api/willow as a Willow device sends it (tests/willow_client.py: raw PCM in 2 KB
                        pieces, chunked transfer encoding; at once, as no partial results come back)
  wis-asr               POST /api/asr, Willow Inference Server's upload endpoint
  webrtc                a browser over WebRTC (tests/rtc_client.py: Opus at 48 kHz, data channel, real time)

Language "auto" sends none; "forced" sends the utterance's own (Wyoming `language`, OpenAI `language` (a form
field the SDK's translations call lacks, sent as extra), Willow `force_language`, WebRTC start's `language`).
Formats that differ from another only in how the same request's transcript is written out (text, srt, vtt,
verbose_json and verbose_json with segments, as json; words with segments, as words) are sent in the first
language mode only, unless `--full`. Every path gets the same audio: the utterance and 0.7 s of silence (where a
satellite's or browser's voice detector ends it), as a 16 kHz WAV file where a file is uploaded.

In this process the same model is loaded as bench/accuracy.py does (while the servers work), to give per
utterance, beam and language mode our engine's own text (`WhisperEngine.transcribe`) and faster-whisper's
`transcribe()` text on that very audio. For WebRTC both are computed on the audio the server hears, made here
with aiortc's own Opus encoder and decoder and resampled as rtc/track.py does (the live stream's timing, and the
codec state the utterances before leave, still make it differ a little). Where our decode falls back to a
temperature above 0 it samples, and its text may change from one run to the next: such utterances are marked
"sampled".

    .venv/bin/python bench/paths.py [--beams 1,5] [--languages auto,forced] [--paths wyoming,webrtc,...]
                                    [--groups recorded,joined,...] [--corpus default|all] [--limit N] [--full]

By default a dozen utterances across bench/accuracy.py's groups (`--corpus all`: all of them; `--limit N`: at
most N per group). The beams run side by side, each on its own servers, so that one's real-time paths overlap
the other's decoding; each server gets one request at a time. Texts are normalised as bench/asr.py does before
WER, CER and comparison. The default run took 19 min on 2 CPUs that other work kept busy (load average 4-7).

Reports, per path and beam: WER and CER of the path's text and of faster-whisper's, the requests where the path
is worse than faster-whisper, and those where its text differs from our engine's in-process text (listed with
both). Prints Markdown, writes bench/results/paths-<timestamp>.json, and exits 1 if any path is worse than
faster-whisper on any utterance (or fails to answer), so it serves as a check.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import fractions
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import av
import httpx
import numpy as np
import openai
from wyoming.asr import Transcribe
from wyoming.audio import AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))
from accuracy import (  # noqa: E402  (bench/ is not a package)
    Setting,
    Utterance,
    add_model_args,
    build_corpus,
    cer,
    check_model_args,
    load_engine,
    ours,
    theirs,
    wer,
)
from asr import normalise, send_audio  # noqa: E402
from asr import transcribe as wyoming_transcribe  # noqa: E402
from common import (  # noqa: E402
    HOST,
    RATE,
    WIDTH,
    Pcm,
    comma_choices,
    dist_version,
    log,
    markdown_cell,
    run_and_record,
    silence,
    start_all_frontends,
    wav_bytes,
)
from rtc_client import FRAME, Client, PlayedTrack  # noqa: E402  (tests/: the browser stand-in)
from rtc_client import RATE as BROWSER_RATE  # noqa: E402
from willow_client import esp32_post  # noqa: E402  (tests/: the Willow device stand-in)

from wyoming_wis.asr import WhisperEngine  # noqa: E402

TRAILING_SILENCE = 0.7  # seconds after each utterance, where a voice detector ends it
TIMEOUT = 300.0  # per request; a loaded 2-core machine decodes slowly
# Each default utterance stands for a kind of audio: clean short and long reading, a recording with an unusual
# name, pairs of 10-15 s, synthetic commands (one very short), noise, French and German (also translated), and a
# German sentence between two English ones.
DEFAULT_CORPUS = (
    "LJ001-0002",
    "LJ001-0004",
    "quorvex",
    "LJ001-0008+LJ001-0003",
    "cmd01",
    "cmd08",
    "cmd15",
    "fr1",
    "de0",
    "LJ001-0002+de1+LJ001-0007",
    "LJ001-0002~music5dB",
    "cmd01~white10dB",
)
ENGINE = "engine"  # the row of our in-process engine, for reference
# The servers wait longer than their defaults before giving up on a request: on a loaded machine a slow answer
# must come late, not be refused, since only its text is measured here.
PATIENT = ["--wyoming-max-wait", "300", "--willow-max-wait", "300", "--http-max-wait", "300"]
# Wyoming answers at audio-stop, as it does for a client with its own VAD: on its default the server ends the turn
# itself, and a request of several sentences with pauses between them is several turns (bench/endpoint.py's).
ANSWER_AT_STOP = ["--external-vad"]


# -- what a path gets back ----------------------------------------------------------------


@dataclass
class Said:
    """A path's answer for one utterance: its final text, or why there is none; `notes` on anything odd."""

    text: str = ""
    error: str | None = None
    language: str | None = None  # as the answer names it, where it does
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    """The servers of one beam size."""

    beam: int
    port: int  # Wyoming, on its defaults (partial results on)
    plain_port: int  # Wyoming, --partial-results false
    http_url: str

    @property
    def host(self) -> str:
        return HOST

    @property
    def http_port(self) -> int:
        return int(self.http_url.rsplit(":", 1)[1])

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.http_url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


Send = Callable[[Target, Sequence[Utterance], bool], Awaitable[list[Said]]]


@dataclass(frozen=True)
class PathSpec:
    """One way to get a transcript from the server."""

    name: str
    send: Send  # (servers, utterances, forced) -> one answer per utterance
    task: str = "transcribe"
    heard: str = "file"  # which in-process texts it is compared with: "file" (the audio sent) or "opus"
    renders_only: bool = False  # the same request as another path but for the form of the answer


def one_by_one(send: Callable[[Target, Utterance, str | None], Awaitable[Said]]) -> Send:
    """A path whose requests are independent: each utterance on its own, one after the other."""

    async def run(target: Target, utterances: Sequence[Utterance], forced: bool) -> list[Said]:
        answers = []
        for utterance in utterances:
            try:
                answers.append(await send(target, utterance, utterance.language if forced else None))
            except (TimeoutError, OSError, EOFError, httpx.HTTPError, openai.OpenAIError) as err:
                answers.append(Said(error=f"{type(err).__name__}: {err}"))
        return answers

    return run


def wav(utterance: Utterance) -> tuple[str, bytes]:
    """The utterance as an uploaded file: 16 kHz 16-bit mono WAV."""
    return f"{utterance.name}.wav", wav_bytes(utterance.pcm.audio, RATE, WIDTH, 1)


# -- Wyoming ------------------------------------------------------------------------------


async def wyoming_plain(target: Target, utterance: Utterance, language: str | None) -> Said:
    """bench/asr.py's client, as Home Assistant asks: all audio at once, read up to `transcript`."""
    result = await wyoming_transcribe("plain", target.plain_port, "paths", utterance, False, 0.0, TIMEOUT, language)
    return Said(result.text or "", result.error)


async def wyoming_partials(target: Target, utterance: Utterance, language: str | None) -> Said:
    """At the pace it was spoken, reading every streaming event; the final text is the `transcript` event's."""
    client = AsyncTcpClient(HOST, target.port)
    events: list[tuple[str, dict]] = []

    async def read() -> None:
        while not events or events[-1][0] not in ("transcript-stop", "error"):
            event = await client.read_event()
            if event is None:
                raise ConnectionError(f"connection closed after {[kind for kind, _ in events]}")
            events.append((event.type, event.data or {}))

    await asyncio.wait_for(client.connect(), TIMEOUT)
    reader = asyncio.create_task(read())
    try:
        await client.write_event(Transcribe(language=language).event())
        await client.write_event(AudioStart(RATE, WIDTH, 1).event())
        await send_audio(client, utterance.pcm, True, time.perf_counter(), reader)
        if not reader.done():
            await client.write_event(AudioStop().event())
        await asyncio.wait_for(reader, TIMEOUT)
    finally:
        reader.cancel()
        await client.disconnect()
    kinds = [kind for kind, _ in events]
    final = next((data for kind, data in events if kind in ("transcript", "error")), {})
    if kinds[-1] == "error":
        return Said(error=f"error event: {final}")
    said = Said(final.get("text", ""), language=final.get("language"))
    if kinds[0] != "transcript-start" or kinds[-2:] != ["transcript", "transcript-stop"]:
        said.notes.append(f"events out of order: {kinds}")
    chunks = "".join(data.get("text", "") for kind, data in events if kind == "transcript-chunk")
    if normalise(chunks) != normalise(said.text):
        said.notes.append(f"transcript-chunks say: {chunks!r}")
    return said


# -- OpenAI -------------------------------------------------------------------------------

_CUE = re.compile(r"\d\d:\d\d:\d\d[,.]\d{3} --> \d\d:\d\d:\d\d[,.]\d{3}\n(.*)\n")


def cue_text(subtitles: str) -> str:
    """The text of SRT or WebVTT cues, joined, as a subtitle reader shows it."""
    return " ".join(cue.strip() for cue in _CUE.findall(subtitles))


def openai_transcription(response_format: str, granularities: Sequence[str] = ()) -> Send:
    async def send(target: Target, utterance: Utterance, language: str | None) -> Said:
        fields: dict[str, object] = {"response_format": response_format}
        if granularities:
            fields["timestamp_granularities"] = list(granularities)
        if language:
            fields["language"] = language
        async with target.openai() as client:
            result = await client.audio.transcriptions.create(file=wav(utterance), model="whisper-1", **fields)
        if response_format in ("srt", "vtt"):
            return Said(cue_text(result))
        if response_format == "text":
            return Said(result.strip())
        said = Said(result.text, language=getattr(result, "language", None))
        if "word" in granularities:
            words = " ".join(word.word for word in result.words or [])
            if normalise(words) != normalise(result.text):
                said.notes.append(f"words say: {words!r}")
        return said

    return one_by_one(send)


async def openai_stream(target: Target, utterance: Utterance, language: str | None) -> Said:
    """stream=True: deltas, then `transcript.text.done` with the whole text."""
    fields = {"language": language} if language else {}
    deltas, done = [], None
    async with target.openai() as client:
        events = await client.audio.transcriptions.create(file=wav(utterance), model="whisper-1", stream=True, **fields)
        async for event in events:
            if event.type == "transcript.text.delta":
                deltas.append(event.delta)
            elif event.type == "transcript.text.done":
                done = event.text
    if done is None:
        return Said(error=f"no transcript.text.done after {len(deltas)} deltas")
    said = Said(done)
    if "".join(deltas) != done:
        said.notes.append(f"deltas say: {''.join(deltas)!r}")
    return said


async def openai_translate(target: Target, utterance: Utterance, language: str | None) -> Said:
    """/v1/audio/translations; the SDK has no `language` for it, so a forced one goes as an extra form field."""
    async with target.openai() as client:
        result = await client.audio.translations.create(
            file=wav(utterance), model="whisper-1", extra_body={"language": language} if language else None
        )
    return Said(result.text)


# -- Willow Inference Server's API --------------------------------------------------------


async def willow(target: Target, utterance: Utterance, language: str | None) -> Said:
    """As the device sends it, in one go: the answer does not depend on the pace (no partial results here)."""
    query = f"force_language={language}" if language else ""
    answer = await esp32_post(target, query, utterance.pcm.audio, "pcm", 0.0)
    if answer.status != 200:
        return Said(error=f"HTTP {answer.status}: {answer.body[:200]!r}")
    body = answer.json()
    return Said(body["text"], language=body.get("language"))


async def wis_asr(target: Target, utterance: Utterance, language: str | None) -> Said:
    params = {"force_language": language} if language else {}
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        response = await client.post(target.http_url + "/api/asr", params=params, files={"audio_file": wav(utterance)})
    if response.status_code != 200:
        return Said(error=f"HTTP {response.status_code}: {response.text[:200]}")
    body = response.json()
    return Said(body["text"], language=body.get("language"))


# -- WebRTC ------------------------------------------------------------------------------


def at_48k(pcm: Pcm) -> np.ndarray:
    """16 kHz int16 to the browser's 48 kHz int16, by PyAV's resampler."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=BROWSER_RATE)
    frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm.audio, dtype=np.int16).reshape(1, -1), layout="mono")
    frame.sample_rate = RATE
    pieces = [out.to_ndarray()[0] for out in [*resampler.resample(frame), *resampler.resample(None)]]
    return np.concatenate(pieces)


def over_opus(pcm: Pcm) -> np.ndarray:
    """What the server hears of `pcm` over WebRTC: at 48 kHz, 20 ms frames through aiortc's Opus encoder and
    decoder (stereo s16), then to 16 kHz mono float32 as rtc/track.py resamples it."""
    from aiortc.codecs.opus import OpusDecoder, OpusEncoder
    from aiortc.jitterbuffer import JitterFrame

    encoder, decoder = OpusEncoder(), OpusDecoder()
    resampler = av.AudioResampler(format="flt", layout="mono", rate=RATE)
    samples = at_48k(pcm)
    samples = np.concatenate([samples, np.zeros(-len(samples) % FRAME, dtype=np.int16)])
    out = []
    for at in range(0, len(samples), FRAME):
        frame = av.AudioFrame.from_ndarray(samples[at : at + FRAME].reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = BROWSER_RATE, at, fractions.Fraction(1, BROWSER_RATE)
        payloads, timestamp = encoder.encode(frame)
        for payload in payloads:
            for decoded in decoder.decode(JitterFrame(payload, timestamp)):
                decoded.pts = None
                out += [piece.to_ndarray()[0] for piece in resampler.resample(decoded)]
    out += [piece.to_ndarray()[0] for piece in resampler.resample(None)]
    return np.concatenate(out).astype(np.float32)


@dataclass(frozen=True, eq=False)
class Heard(Utterance):
    """An utterance as the server hears it through a codec: `heard` replaces its samples."""

    heard: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    def samples(self) -> np.ndarray:
        return self.heard


async def webrtc(target: Target, utterances: Sequence[Utterance], forced: bool) -> list[Said]:
    """One browser connection for all utterances, its track detached between them, as bench/rtc.py does."""
    client = Client(target.http_url + "/api/rtc/asr")
    answers = []
    try:
        await client.connect()
        for utterance in utterances:
            start = {"language": utterance.language} if forced else None
            heard = await client.utterance(at_48k(utterance.pcm), 0.0, start=start)
            if heard.infer["type"] == "infer":
                answers.append(Said(heard.text, language=heard.infer["obj"].get("language")))
            else:
                answers.append(Said(error=str(heard.infer)))
            await client.detach()
            await asyncio.sleep(0.5)
            client.attach(PlayedTrack())
    except (TimeoutError, OSError, AssertionError) as err:
        answers += [Said(error=f"{type(err).__name__}: {err}")] * (len(utterances) - len(answers))
    finally:
        await client.close()
    return answers


PATHS = [
    PathSpec("wyoming", one_by_one(wyoming_plain)),
    PathSpec("wyoming-partials", one_by_one(wyoming_partials)),
    PathSpec("openai-json", openai_transcription("json")),
    PathSpec("openai-text", openai_transcription("text"), renders_only=True),
    PathSpec("openai-srt", openai_transcription("srt"), renders_only=True),
    PathSpec("openai-vtt", openai_transcription("vtt"), renders_only=True),
    PathSpec("openai-verbose", openai_transcription("verbose_json"), renders_only=True),
    PathSpec("openai-verbose-word", openai_transcription("verbose_json", ["word"])),
    PathSpec("openai-verbose-segment", openai_transcription("verbose_json", ["segment"]), renders_only=True),
    PathSpec(
        "openai-verbose-word-segment", openai_transcription("verbose_json", ["word", "segment"]), renders_only=True
    ),
    PathSpec("openai-stream", one_by_one(openai_stream)),
    PathSpec("openai-translate", one_by_one(openai_translate), task="translate"),
    PathSpec("willow", one_by_one(willow)),
    PathSpec("wis-asr", one_by_one(wis_asr)),
    PathSpec("webrtc", webrtc, heard="opus"),
]
PATH_NAMES = [path.name for path in PATHS]


# -- scoring ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One utterance through one path at one beam and language mode, with the in-process texts beside it."""

    path: str
    beam: int
    language: str  # "auto" or "forced"
    group: str
    name: str
    seconds: float
    reference: str
    text: str
    engine: str  # our engine in-process, same audio, beam, language and task
    theirs: str  # faster-whisper's transcribe(), likewise
    wer: float
    theirs_wer: float
    cer: float
    theirs_cer: float
    sampled: bool = False  # our engine's own decode fell back to sampling (temperature > 0): its text is random
    error: str | None = None
    answered_language: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def worse(self) -> bool:
        return self.error is not None or self.wer > self.theirs_wer + 1e-9

    @property
    def differs(self) -> bool:
        return normalise(self.text) != normalise(self.engine)


def outcome(path: str, beam: int, mode: str, utterance: Utterance, task: str, said: Said, texts: InProcess) -> Outcome:
    engine, fw = texts.engine, texts.theirs
    reference = utterance.english if task == "translate" else utterance.text
    assert reference is not None
    return Outcome(
        path,
        beam,
        mode,
        utterance.group,
        utterance.name,
        utterance.pcm.seconds,
        reference,
        said.text,
        engine,
        fw,
        wer([reference], [said.text]),
        wer([reference], [fw]),
        cer([reference], [said.text]),
        cer([reference], [fw]),
        texts.sampled,
        said.error,
        said.language,
        said.notes,
    )


def summarise(outcomes: Sequence[Outcome]) -> list[dict]:
    """Per path and beam, over every utterance and language mode."""
    rows = []
    for path, beam in dict.fromkeys((o.path, o.beam) for o in outcomes):
        part = [o for o in outcomes if o.path == path and o.beam == beam]
        refs = [o.reference for o in part]
        rows.append(
            {
                "path": path,
                "beam": beam,
                "requests": len(part),
                "wer": wer(refs, [o.text for o in part]),
                "theirs_wer": wer(refs, [o.theirs for o in part]),
                "cer": cer(refs, [o.text for o in part]),
                "theirs_cer": cer(refs, [o.theirs for o in part]),
                "worse": sum(o.worse for o in part),
                "differs": sum(o.differs for o in part),
                "differs_sampled": sum(o.differs and o.sampled for o in part),
                "errors": sum(o.error is not None for o in part),
                "notes": sum(bool(o.notes) for o in part),
            }
        )
    return rows


# -- running ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InProcess:
    """What a path is compared with: our engine's text and faster-whisper's, on the same audio and settings."""

    engine: str
    theirs: str
    sampled: bool  # our decode fell back to a temperature above 0: another run may well give another text


Texts = dict[tuple[str, str, str, str], InProcess]  # (heard, task, language mode, utterance name) -> texts


async def in_process(engine: WhisperEngine, lock: asyncio.Lock, utterance: Utterance, setting: Setting) -> InProcess:
    """Our engine's text and faster-whisper's on the same model, one decode at a time in this process."""
    async with lock:
        transcript, _ = await ours(engine, utterance, setting)
        text, _ = await asyncio.to_thread(theirs, engine, utterance, setting)
    return InProcess(transcript.text, text, any(segment.temperature > 0 for segment in transcript.segments))


async def references(
    engine: WhisperEngine, lock: asyncio.Lock, beam: int, args: argparse.Namespace, jobs: dict[str, list[Utterance]]
) -> Texts:
    """The in-process texts every chosen path is compared with, for one beam."""
    texts: Texts = {}
    for key, utterances in jobs.items():
        heard, task = key.split(":")
        for mode in args.languages:
            setting = Setting(beam, mode, task)
            for utterance in utterances:
                texts[heard, task, mode, utterance.name] = await in_process(engine, lock, utterance, setting)
                log(f"[beam {beam}] in-process {key} {mode} {utterance.name}")
    return texts


def utterances_for(path: PathSpec, corpus: Sequence[Utterance], heard: dict[str, Heard]) -> list[Utterance]:
    chosen = [u for u in corpus if u.english is not None] if path.task == "translate" else list(corpus)
    return [heard[u.name] for u in chosen] if path.heard == "opus" else chosen


async def run_beam(
    beam: int,
    args: argparse.Namespace,
    corpus: Sequence[Utterance],
    engine: WhisperEngine,
    lock: asyncio.Lock,
    stack: ExitStack,
) -> list[Outcome]:
    """Start this beam's servers, compute the in-process texts, then send every utterance through every path."""
    flags = ["--beam-size", str(beam), "--cpu-threads", str(args.threads), "--device", args.device, *PATIENT]
    flags += ANSWER_AT_STOP
    (main, http_url), (plain, _) = await asyncio.gather(
        start_all_frontends(f"paths-beam{beam}", args.data_dir, stack, flags),
        start_all_frontends(f"paths-beam{beam}-plain", args.data_dir, stack, [*flags, "--partial-results", "false"]),
    )
    target = Target(beam, main.port, plain.port, http_url)
    paths = [path for path in PATHS if path.name in args.paths]
    heard: dict[str, Heard] = {}
    if any(path.heard == "opus" for path in paths):
        made = await asyncio.gather(*(asyncio.to_thread(over_opus, u.pcm) for u in corpus))
        heard = {
            u.name: Heard(u.name, u.group, u.language, u.text, u.pcm, u.english, samples)
            for u, samples in zip(corpus, made, strict=True)
        }
    jobs: dict[str, list[Utterance]] = {"file:transcribe": list(corpus)}
    for path in paths:
        jobs.setdefault(f"{path.heard}:{path.task}", utterances_for(path, corpus, heard))
    # computed while the server works: the real-time paths leave the CPUs mostly idle
    pending = asyncio.create_task(references(engine, lock, beam, args, jobs))
    try:
        answers = []
        for path in paths:
            for mode in path_modes(path, args):
                utterances = utterances_for(path, corpus, heard)
                began = time.monotonic()
                said = await path.send(target, utterances, mode == "forced")
                answers += [(path, mode, u, one) for u, one in zip(utterances, said, strict=True)]
                log(f"[beam {beam}] {path.name} {mode}: {len(utterances)} in {time.monotonic() - began:.1f} s")
        texts = await pending
    finally:
        pending.cancel()
    outcomes = [
        outcome(ENGINE, beam, mode, u, "transcribe", Said(texts[key].engine), texts[key])
        for mode in args.languages
        for u in corpus
        for key in [("file", "transcribe", mode, u.name)]
    ]
    for path, mode, utterance, said in answers:
        done = outcome(
            path.name, beam, mode, utterance, path.task, said, texts[path.heard, path.task, mode, utterance.name]
        )
        outcomes.append(done)
        if done.worse or done.differs:
            marks = " and ".join(m for m, on in (("worse than fw", done.worse), ("differs", done.differs)) if on)
            log(f"[beam {beam}] {path.name} {mode} {utterance.name}: {marks}")
    return outcomes


def path_modes(path: PathSpec, args: argparse.Namespace) -> list[str]:
    """The language modes a path is sent in: all, but those that only render the transcript in the first alone."""
    return args.languages if args.full or not path.renders_only else args.languages[:1]


def choose(corpus: Sequence[Utterance], args: argparse.Namespace) -> list[Utterance]:
    """The utterances to send (`--corpus`, `--limit` per group), each followed by the trailing silence."""
    chosen: list[Utterance] = []
    for utterance in corpus:
        if args.corpus == "all" or utterance.name in DEFAULT_CORPUS:
            if not args.limit or sum(u.group == utterance.group for u in chosen) < args.limit:
                chosen.append(utterance)
    return [dataclasses.replace(u, pcm=u.pcm + silence(TRAILING_SILENCE)) for u in chosen]


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    corpus = choose(build_corpus(args.groups, args.data_dir), args)
    if not corpus:
        raise SystemExit("no utterances chosen")
    log(f"{len(corpus)} utterances, {sum(u.pcm.seconds for u in corpus):.0f} s of audio, beams {args.beams}")
    engine = load_engine(args)
    stack.callback(engine.close)
    lock = asyncio.Lock()  # one in-process decode at a time, whichever beam asks
    if args.serial:
        per_beam = [await run_beam(beam, args, corpus, engine, lock, stack) for beam in args.beams]
    else:
        per_beam = await asyncio.gather(*(run_beam(beam, args, corpus, engine, lock, stack) for beam in args.beams))
    outcomes = [done for beam in per_beam for done in beam]
    versions = {name: dist_version(name) for name in ("wyoming-wis", "faster-whisper", "ctranslate2", "openai")}
    return {
        "versions": versions,
        "corpus": [
            {"name": u.name, "group": u.group, "language": u.language, "seconds": u.pcm.seconds} for u in corpus
        ],
        "summary": summarise(outcomes),
        "engine_worse": [asdict(o) for o in outcomes if o.worse and o.path == ENGINE],
        "worse": [asdict(o) for o in outcomes if o.worse and o.path != ENGINE],
        "differs": [asdict(o) for o in outcomes if o.differs and o.path != ENGINE],
        "noted": [asdict(o) for o in outcomes if o.notes],
        "results": [asdict(o) for o in outcomes],
    }


# -- report -------------------------------------------------------------------------------


def _listing(title: str, items: Sequence[dict], lines: Callable[[dict], list[str]]) -> None:
    print(f"\n## {title} ({len(items)})\n")
    if not items:
        print("None.")
    for item in items:
        sampled = ", sampled" if item["sampled"] else ""
        print(
            f"- **{item['path']}, beam {item['beam']}, {item['language']}, {item['name']}** ({item['group']}{sampled})"
        )
        for line in lines(item):
            print(f"  - {markdown_cell(line)}")


def print_report(document: dict, out: Path) -> None:
    machine, settings, versions = document["machine"], document["settings"], document["versions"]
    print("# Paths: every frontend of the server against faster-whisper's transcribe()\n")
    print(f"Command: `{document['command']}`  ")
    print(f"Machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), Python {machine['python']}  ")
    print(
        f"Model base, device {settings['device']}, compute type {settings['compute_type']}, {settings['threads']} "
        f"threads; wyoming-wis {versions['wyoming-wis']}, faster-whisper {versions['faster-whisper']}, "
        f"ctranslate2 {versions['ctranslate2']}, openai {versions['openai']}  "
    )
    corpus = document["corpus"]
    print(
        f"{len(corpus)} utterances ({sum(u['seconds'] for u in corpus):.0f} s with {TRAILING_SILENCE} s of silence "
        f"after each), language modes {', '.join(settings['languages'])}. `{ENGINE}` is our engine in-process; "
        "fw is faster-whisper's transcribe() on the same audio (for webrtc: after Opus), beam and language. "
        "Sampled: where our engine's own decode fell back to a temperature above 0, so that its text is random.\n"
    )
    print("| path | beam | requests | WER | WER fw | CER | CER fw | worse than fw | differs from engine (sampled) |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in document["summary"]:
        errors = f" ({row['errors']} failed)" if row["errors"] else ""
        differs = "-" if row["path"] == ENGINE else f"{row['differs']} ({row['differs_sampled']})"
        print(
            f"| {row['path']} | {row['beam']} | {row['requests']} | {row['wer']:.1%} | {row['theirs_wer']:.1%} "
            f"| {row['cer']:.1%} | {row['theirs_cer']:.1%} | {row['worse']}{errors} | {differs} |"
        )
    _listing(
        "Where a path differs from the engine in-process",
        document["differs"],
        lambda o: [f"path: {o['text']}", f"engine: {o['engine']}", f"fw: {o['theirs']}"],
    )
    worse = [o for o in document["worse"] if o["error"] or normalise(o["text"]) != normalise(o["engine"])]

    def scores(o: dict) -> list[str]:
        error = f" [error: {o['error']}]" if o["error"] else ""
        return [
            f"reference: {o['reference']}",
            f"{o['path']} (WER {o['wer']:.3f}): {o['text']}{error}",
            f"fw (WER {o['theirs_wer']:.3f}): {o['theirs']}",
        ]

    _listing("Where our engine in-process is worse than faster-whisper", document["engine_worse"], scores)
    _listing("Where a path is worse than faster-whisper, with a text other than the engine's", worse, scores)
    print(
        f"\n{len(document['worse']) - len(worse)} more requests are worse than faster-whisper with the engine's own "
        "text (listed in the JSON)."
    )
    _listing("Notes", document["noted"], lambda o: o["notes"])
    print(f"\nRuntime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser, "paths")  # each beam gets servers of its own, on --threads each
    parser.add_argument("--paths", default=",".join(PATH_NAMES), help="Some of the paths above. Default: all")
    parser.add_argument("--corpus", choices=["default", "all"], default="default", help="The dozen, or every one")
    parser.add_argument("--limit", type=int, default=0, help="At most this many utterances per group (0: no limit)")
    parser.add_argument("--serial", action="store_true", help="One beam after the other, not side by side")
    parser.add_argument(
        "--full", action="store_true", help="Every path in every language mode, also those that only render"
    )
    args = parser.parse_args(argv)
    check_model_args(parser, args, "paths", most_beam=5)
    args.paths = comma_choices(parser, args.paths, PATH_NAMES, "--paths")
    return args


def main() -> None:
    args = parse_args()
    keys = ("beams", "languages", "paths", "groups", "corpus", "limit", "serial", "full", "device", "threads")
    settings = {key: getattr(args, key) for key in keys}
    settings.update(compute_type=args.compute_type, data_dir=str(args.data_dir))
    failed = False

    def report(document: dict, out: Path) -> None:
        nonlocal failed
        print_report(document, out)
        failed = bool(document["worse"])

    run_and_record(lambda stack: run(args, stack), settings, args.out, report)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
