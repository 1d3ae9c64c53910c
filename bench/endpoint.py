"""End of turn (issue 23): how long a speaker waits from their last word to the transcript, per system, one run.

Every spoken command is streamed at real-time pace in 10 ms chunks of 320 bytes (Home Assistant's
BYTES_PER_CHUNK), after 0.3 s of lead-in silence and followed by continuous silence; `audio-stop` is sent only
where the system under test has Home Assistant decide the end. The clock runs from the moment the last speech
sample was recorded to the `transcript` event. Systems, all on Whisper `base`, the same threads, beam and
compute type, asked in turn clip by clip so that they share the machine's noise:

  HA default path + ours  Home Assistant 2026.2.3's own VoiceCommandSegmenter (bench/ha_vad.py, run in the venv
                          of the Home Assistant suite) decides where `audio-stop` goes; our server with
                          --external-vad behind it (a server from before issue 23 is already that)
  HA default path + peer  the same in front of wyoming-faster-whisper 3.8.1
  peer endpointing        wyoming-faster-whisper 3.8.1 with --vad-endpointing 0.7 (its README's value, Home
                          Assistant's default silence), streamed until its transcript
  ours (SENSITIVITY)      our server on its defaults, ending the turn itself; `transcribe` carries each
                          vad_sensitivity in turn; streamed until its transcript
  ours (household)        the same on the default sensitivity, reading the names of the household the commands
                          name (tests/bench_household.py: "Living Room Lamp", "Kitchen Lights", ...) from a
                          stand-in Home Assistant on loopback (tests/fake_hass.py), as --hass-token has it read a
                          real one: a command Home Assistant's own sentences recognise ends at once, and words
                          that begin a longer name or command ("turn on the living room") wait for the silence

    .venv/bin/python bench/endpoint.py [--quick] [--ours-src DIR] [--device cuda] [--room CONDITION]
                                       [--only ha-ours,ha-peer,peer-endpointing,ours,ours-household,concurrency]

With --room (a condition of bench/rooms.py, e.g. "room 0.8 s + pink 10 dB") every clip and the silence after it
are heard as a Voice PE's raw microphone hears them across a room: reverb, and the noise going on throughout.

The corpus (built once, cached under bench/.cache/endpoint/): plain commands (bench/asr.py's twenty, spoken by
the bundled Piper voice at two of three speeds, and the LJ Speech clips of tests/corpus, which are
shared/corpus's); paused commands, whose words before the pause are not a complete request ("set a timer for
... ten minutes"), each at three speeds, and the LJ clips cut mid-sentence after a function word, with 0.3-0.8 s
of silence inserted at that word boundary (found with faster-whisper's word timestamps, placed at the quietest
10 ms between the two words); whole-paused commands, whose words before the pause are a whole request by
themselves ("turn on the living room ... lamp"), each at three speeds with 0.3, 0.6 and 1.0 s of silence, where
only the sound can tell that more is coming; long requests of 10-15 s (Piper, and pairs of LJ clips). Each clip's
last speech sample is its last word's end (word timestamps) refined by energy: the end of the last 10 ms louder than
35 dB under the clip's speech level; a paused clip's speech resumes at the first such 10 ms after the pause.

A turn is a false cut when it ended (`audio-stop` sent, or the transcript came) before the last speech sample
was sent: on the paused commands, before the speech after the pause was complete. A cut turn has no
last-word-to-transcript time; its text still counts in the WER (normalised as bench/accuracy.py does), and so
does a turn with no transcript at all (none within GRACE_SECONDS after the streamed silence ran out). What ended
each of ours' turns sent alone (command, complete, silence, ...) is the server's own count (`wis_turns_total`),
read from its /metrics before and after the turn.

Several satellites at once: groups of 2 and 4 clips streamed together, each at real-time pace, started
STAGGER_SECONDS apart, to ours (default) and to HA default path + ours; each one's last-word-to-transcript time
against the same clip's alone. The issue's target: the end-of-turn work for one delays another's transcript by
no more than 50 ms.

Prints a Markdown report and writes bench/results/endpoint-<timestamp>.json. The full run streams 114 clips
(7.3 min of audio) to each of the seven systems in real time: about 75 min, plus 6 to make the corpus the first
time; `--only ours,ha-ours,concurrency` about 35 min; `--quick` (three clips of each kind but one long, one group
of satellites) about 5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx
import numpy as np
from faster_whisper import WhisperModel
from prometheus_client.parser import text_string_to_metric_families
from wyoming.asr import Transcribe, VadSensitivity
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))
import bench_household  # noqa: E402  (tests/: the household the commands name)
import fake_hass  # noqa: E402  (tests/: a stand-in Home Assistant to read it from)
from accuracy import load_engine, piper_speaker  # noqa: E402  (bench/ is not a package)
from asr import (  # noqa: E402
    COMMANDS,
    MODEL,
    PEER_VENV,
    Marks,
    Recording,
    lj_recordings,
    long_utterances,
    normalise,
    ours_argv,
    peer_argv,
    peer_requirements,
    read_until_transcript,
    transcribe,
    wer,
)
from common import (  # noqa: E402
    CACHE,
    HOST,
    RATE,
    ROOT,
    WIDTH,
    BackgroundLoad,
    Pcm,
    ServerProcess,
    add_common_args,
    cache_key,
    check_common_args,
    decode_audio,
    dist_version,
    ensure_venv,
    fmt_pct,
    fmt_s,
    free_port,
    log,
    markdown_cell,
    median,
    offline_env,
    percentile,
    run_and_record,
    server_info,
    silence,
    start_server,
    stop_servers,
    venv_versions,
    wait_ready,
    wav_bytes,
)
from rooms import CONDITIONS, Condition, delay, render  # noqa: E402

from wyoming_wis.catalog import Catalog  # noqa: E402

HA_VERSION = "2026.2.3"  # a Home Assistant of the conformance suite (tests/ha/env.sh): BENCHMARKS.md measured it
CHUNK_BYTES = 320  # Home Assistant's BYTES_PER_CHUNK: 10 ms at 16 kHz, 16-bit mono
CHUNK_SECONDS = CHUNK_BYTES / WIDTH / RATE
LEAD_SECONDS = 0.3  # silence before the speech: the wake word has just been heard
TAIL_SECONDS = 4.0  # continuous silence streamed after the speech, at most
GRACE_SECONDS = 2.0  # then how long to wait for a transcript before counting none
NAMES_READ = "Names from Home Assistant:"  # what our server logs once it has read them (wyoming_wis/hass_api.py)
PEER_ENDPOINTING = 0.7  # --vad-endpointing seconds: its README's example, Home Assistant's default silence
SENSITIVITIES = tuple(sensitivity.value for sensitivity in VadSensitivity)  # the protocol's own list
KINDS = ("plain", "paused", "whole-paused", "long")
SCALES = (0.8, 1.0, 1.25)  # Piper length scales: brisk, the voice's own pace, slow
PAUSES = (0.3, 0.45, 0.6, 0.8)  # seconds of silence inserted in a paused command, in turn
WHOLE_PAUSES = (0.3, 0.6, 1.0)  # ... in a whole-paused one: each command at each, one per speed
FRAME_SECONDS = 0.01  # the energy analysis' frame
SPEECH_DB_BELOW = 35.0  # a frame this far under the clip's speech level (95th percentile) is silence
FUNCTION_WORDS = {"the", "a", "an", "of", "to", "in", "for", "with", "by", "on", "and", "from", "that", "as"}
CONCURRENT = (2, 4)  # satellites streaming at once
STAGGER_SECONDS = 0.5  # between their starts
GROWTH_TARGET_S = 0.05  # the limit on how much one satellite's end of turn may delay another's transcript
CORPUS_VERSION = "2"  # bump when the way clips are made changes, to rebuild the cache

PAUSED = [  # "|" marks the pause; the words before it are not a complete request
    "Set a timer for | ten minutes.",
    "Turn on the | kitchen light.",
    "Turn off the lights in the | living room.",
    "Set the thermostat to | twenty one degrees.",
    "Play some music in the | bedroom.",
    "Remind me to | call mom at six.",
    "Add | milk and eggs to the shopping list.",
    "What's the weather like in | Paris tomorrow?",
    "Open the | garage door.",
    "Dim the lights in the | dining room to fifty percent.",
    "Lock the | front door.",
    "Turn the volume | down to four.",
    "Close the blinds in | the office.",
    "Start the | robot vacuum.",
    "Set an alarm for | seven thirty tomorrow morning.",
    "Turn on the fan in the | bathroom.",
]
WHOLE_PAUSED = [  # the words before the pause are a whole request by themselves: only the sound says more is coming
    "Turn on the living room | lamp.",
    "Turn off the kitchen lights | please.",
    "Open the garage | door.",
    "Set a timer | for ten minutes.",
    "Play some music | in the bedroom.",
    "Turn on the fan | in the bathroom.",
    "Lock the front door | and the back door.",
    "What time is it | in Tokyo?",
]
LONG = [  # 10-15 s at the length scales LONG_SCALES
    "Turn off all the lights downstairs, close the blinds in the living room and in the kitchen, lock the front "
    "door and the back door, start the robot vacuum in the hallway, and set the thermostat to nineteen degrees "
    "for the night.",
    "Add tomatoes, two onions, a bag of rice, olive oil, fresh basil, a dozen eggs and a bottle of red wine to "
    "the shopping list, and remind me to go to the store on my way home from work tomorrow afternoon.",
    "Play the latest episode of my favourite podcast on the kitchen speaker at a low volume, and when it is "
    "over, turn off the speaker, switch on the dishwasher and dim the lights in the dining room to twenty percent.",
]
LONG_SCALES = (1.0, 1.25)
QUICK_PER_KIND = {"plain": 3, "paused": 3, "whole-paused": 3, "long": 1}


# -- corpus -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    """One turn's audio (lead-in silence, then speech) and what is known about it; times from its start."""

    name: str
    kind: str  # one of KINDS
    origin: str  # "piper x1.25", "LJ Speech"
    text: str
    file: str  # the cached WAV, relative to the corpus folder
    seconds: float
    last_speech_s: float  # the end of the last speech sample
    pause_s: float | None = None  # paused: the silence inserted
    resume_s: float | None = None  # paused: where the speech after the pause starts

    def pcm(self, folder: Path) -> Pcm:
        return decode_audio(folder / self.file)


@dataclass(frozen=True)
class Source:
    """A recording before analysis: where a pause goes (`prefix`: after these words; "": after a function word
    mid-sentence) and how long it is."""

    name: str
    kind: str
    origin: str
    recording: Recording
    prefix: str | None = None
    pause_s: float | None = None


def piper_sources(data_dir: Path) -> list[Source]:
    """Commands, paused commands and long requests in the bundled Piper voice at several speeds."""
    speak = piper_speaker(data_dir)

    def spoken(name: str, text: str, scale: float) -> Recording:
        return Recording(name, text, decode_audio(speak(text, scale)))

    sources = []
    for number, text in enumerate(COMMANDS):  # two of the three speeds each, in turn
        for scale in (SCALES[number % len(SCALES)], SCALES[(number + 1) % len(SCALES)]):
            name = f"cmd{number:02d}x{scale:g}"
            sources.append(Source(name, "plain", f"piper x{scale:g}", spoken(name, text, scale)))
    for number, marked in enumerate(PAUSED):
        prefix, rest = (part.strip() for part in marked.split("|"))
        for step, scale in enumerate(SCALES):
            name = f"pause{number:02d}x{scale:g}"
            pause = PAUSES[(number * len(SCALES) + step) % len(PAUSES)]
            recording = spoken(name, f"{prefix} {rest}", scale)
            sources.append(Source(name, "paused", f"piper x{scale:g}", recording, prefix, pause))
    for number, marked in enumerate(WHOLE_PAUSED):
        prefix, rest = (part.strip() for part in marked.split("|"))
        for step, scale in enumerate(SCALES):
            name = f"whole{number:02d}x{scale:g}"
            pause = WHOLE_PAUSES[(number + step) % len(WHOLE_PAUSES)]
            recording = spoken(name, f"{prefix} {rest}", scale)
            sources.append(Source(name, "whole-paused", f"piper x{scale:g}", recording, prefix, pause))
    for number, text in enumerate(LONG):
        for scale in LONG_SCALES:
            name = f"long{number}x{scale:g}"
            sources.append(Source(name, "long", f"piper x{scale:g}", spoken(name, text, scale)))
    return sources


def lj_sources() -> list[Source]:
    """The LJ Speech clips as they are, each cut mid-sentence by a pause, and joined in pairs of 10-15 s."""
    clips = lj_recordings()
    sources = [Source(clip.name, "plain", "LJ Speech", clip) for clip in clips]
    for number, clip in enumerate(clips):
        pause = PAUSES[number % len(PAUSES)]
        sources.append(Source(f"{clip.name}~pause", "paused", "LJ Speech", clip, "", pause))
    sources += [Source(pair.name, "long", "LJ Speech", pair) for pair in long_utterances(clips)]
    return sources


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    end: float


def words_of(model: WhisperModel, pcm: Pcm) -> list[Word]:
    """faster-whisper's word timestamps (English, beam 5)."""
    segments, _ = model.transcribe(pcm.floats(), language="en", beam_size=5, word_timestamps=True)
    return [Word(word.word.strip(), word.start, word.end) for segment in segments for word in segment.words or []]


def frame_db(pcm: Pcm) -> np.ndarray:
    """RMS level of each 10 ms frame, in dB of full scale."""
    samples = pcm.floats(np.float64)
    size = int(FRAME_SECONDS * RATE)
    frames = samples[: len(samples) // size * size].reshape(-1, size)
    return 20 * np.log10(np.sqrt(np.mean(frames**2, axis=1)) + 1e-9)


def speech_frames(pcm: Pcm) -> np.ndarray:
    """Which 10 ms frames are at speech level: at most SPEECH_DB_BELOW under the clip's loud frames."""
    levels = frame_db(pcm)
    return levels > np.percentile(levels, 95) - SPEECH_DB_BELOW


def last_speech(pcm: Pcm, word_end: float) -> float:
    """Where the speech ends: the end of the last frame at speech level up to shortly after the last word's end
    (Whisper's word ends are only roughly right; the search stops there so a later click does not count)."""
    loud = speech_frames(pcm)
    found = np.flatnonzero(loud[: int((word_end + 0.3) / FRAME_SECONDS)])
    if not len(found):
        raise ValueError(f"no speech before {word_end:.2f} s")
    return float(found[-1] + 1) * FRAME_SECONDS


def next_speech(pcm: Pcm, offset: int) -> float:
    """Where the speech resumes after the sample offset `offset`: the start of the next frame at speech level."""
    frame = offset // (int(FRAME_SECONDS * RATE) * WIDTH)
    found = np.flatnonzero(speech_frames(pcm)[frame:])
    if not len(found):
        raise ValueError(f"no speech after {offset / (RATE * WIDTH):.2f} s")
    return float(frame + found[0]) * FRAME_SECONDS


def quietest_cut(pcm: Pcm, start: float, end: float) -> int:
    """The sample offset of the quietest 10 ms frame between `start` and `end` s (a word boundary), frame-aligned
    so a pause inserted there splits no sound."""
    levels = frame_db(pcm)
    first = max(0, int(start / FRAME_SECONDS))
    last = max(first + 1, min(len(levels), int(np.ceil(end / FRAME_SECONDS))))
    frame = first + int(np.argmin(levels[first:last]))
    return frame * int(FRAME_SECONDS * RATE) * WIDTH


def pause_after(words: Sequence[Word], prefix: str) -> int:
    """The index of the word after which the pause goes: the last word of `prefix` ("" : the function word
    nearest the middle, not first or last, so the words before the pause are never a whole sentence)."""
    if prefix:  # count words: a misheard word ("and" for "add") still ends where the spoken one does
        wanted, said = normalise(prefix).split(), []
        for index, word in enumerate(words):
            said += normalise(word.text).split()
            if len(said) == len(wanted):
                return index
            if len(said) > len(wanted):
                break
        raise ValueError(f"no word boundary after {prefix!r} in {' '.join(w.text for w in words)!r}")
    inner = range(1, len(words) - 2)
    middle = (len(words) - 1) / 2
    function = [i for i in inner if normalise(words[i].text) in FUNCTION_WORDS]
    return min(function or inner, key=lambda i: abs(i - middle))


def make_clip(source: Source, words: Sequence[Word], folder: Path) -> Clip:
    """Lead-in silence, the recording (with its pause), saved as WAV; where its speech ends and resumes."""
    pcm, lead = source.recording.pcm, silence(LEAD_SECONDS)
    end = last_speech(pcm, words[-1].end)
    pause_s = resume_s = None
    if source.prefix is not None and source.pause_s is not None:
        index = pause_after(words, source.prefix)
        cut = quietest_cut(pcm, words[index].end - 0.05, words[index + 1].start + 0.05)
        pause_s = source.pause_s
        resume_s = LEAD_SECONDS + pause_s + next_speech(pcm, cut)
        pcm = Pcm(pcm.audio[:cut]) + silence(pause_s) + Pcm(pcm.audio[cut:])
        end += pause_s
    pcm = lead + pcm
    file = f"{source.name}.wav"
    (folder / file).write_bytes(wav_bytes(pcm.audio, RATE, WIDTH, 1))
    text = source.recording.text
    return Clip(source.name, source.kind, source.origin, text, file, pcm.seconds, LEAD_SECONDS + end, pause_s, resume_s)


def corpus_folder() -> Path:
    """Where the corpus of this definition is cached: keyed on everything that makes it."""
    definition = [CORPUS_VERSION, LEAD_SECONDS, SCALES, PAUSES, COMMANDS, PAUSED, LONG, LONG_SCALES, MODEL]
    definition += [WHOLE_PAUSES, WHOLE_PAUSED]
    return CACHE / "endpoint" / cache_key(json.dumps(definition))


def build_corpus(args: argparse.Namespace) -> list[Clip]:
    """The cached corpus, or make it: Piper speaks, faster-whisper finds the words, pauses go in."""
    folder = corpus_folder()
    manifest = folder / "manifest.json"
    if manifest.exists():
        return [Clip(**item) for item in json.loads(manifest.read_text())]
    log(f"Making the corpus in {folder} (once)")
    folder.mkdir(parents=True, exist_ok=True)
    sources = [*piper_sources(args.data_dir), *lj_sources()]
    engine = load_engine(args)
    try:
        clips = [make_clip(source, words_of(engine.model, source.recording.pcm), folder) for source in sources]
    finally:
        engine.close()
    for clip in clips:
        if clip.kind == "long" and not 10 <= clip.seconds - LEAD_SECONDS <= 15.5:
            log(f"warning: long request {clip.name} lasts {clip.seconds - LEAD_SECONDS:.1f} s")
    manifest.write_text(json.dumps([asdict(clip) for clip in clips], indent=1) + "\n")
    return clips


def in_room(clips: Sequence[Clip], folder: Path, condition: Condition) -> tuple[list[Clip], Path]:
    """The corpus as a room microphone hears it (bench/rooms.py): each clip with the silence streamed after it,
    rendered under `condition` (the babble from the LJ clips that are not the clip's own), cached in a folder of
    its own; times moved by the sound's path from the talker."""
    room = folder / cache_key(condition.name)
    room.mkdir(exist_ok=True)
    voices, shift = lj_recordings(), delay(condition)
    moved = []
    for clip in clips:
        path = room / clip.file
        if not path.exists():
            others = [voice.pcm for voice in voices if voice.name not in clip.name]
            heard = render(clip.pcm(folder) + silence(TAIL_SECONDS), condition, clip.name, others, 0.0, 0.0)
            path.write_bytes(wav_bytes(heard.audio, RATE, WIDTH, 1))
        resume_s = None if clip.resume_s is None else clip.resume_s + shift
        moved.append(replace(clip, last_speech_s=clip.last_speech_s + shift, resume_s=resume_s))
    return moved, room


def pick(clips: Sequence[Clip], share: float | None = None) -> list[Clip]:
    """Some clips of each kind, spread over the kind (speeds, Piper and LJ): `share` of them, or a few (--quick)."""
    picked = []
    for kind, few in QUICK_PER_KIND.items():
        mine = [clip for clip in clips if clip.kind == kind]
        count = few if share is None else max(1, round(share * len(mine)))
        picked += [mine[int(index)] for index in np.round(np.linspace(0, len(mine) - 1, count))] if mine else []
    return picked


# -- Home Assistant's VAD -----------------------------------------------------------------


def ha_stops(clips: Sequence[Clip], folder: Path, tail_s: float) -> tuple[dict[str, tuple[int | None, bool]], str]:
    """Per clip, the chunk at which Home Assistant's VAD ends the command (and whether its cap did), by
    bench/ha_vad.py in the Home Assistant venv, each file followed by `tail_s` of silence; and that Home
    Assistant's version."""
    venv = subprocess.run(  # its progress, if it has to build the venv, on our stderr
        [str(ROOT / "tests" / "ha" / "env.sh"), HA_VERSION], check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT
    ).stdout.strip()
    files = [str(folder / clip.file) for clip in clips]
    argv = [f"{venv}/bin/python", str(Path(__file__).with_name("ha_vad.py")), "--tail", str(tail_s), *files]
    lines = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()
    *decisions, version = [json.loads(line) for line in lines]
    stops = {clip.name: (d["stop_chunk"], d["timed_out"]) for clip, d in zip(clips, decisions, strict=True)}
    return stops, version["home_assistant"]


# -- systems and servers ------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    """One row of the report: a server, and who ends the turn (Home Assistant's VAD, or the server)."""

    key: str  # its --only name
    label: str
    server: str
    ha_vad: bool
    sensitivity: str | None = None


SYSTEMS = [
    System("ha-ours", "HA default path + ours", "ours-external", True),
    System("ha-peer", "HA default path + peer", "peer", True),
    System("peer-endpointing", "peer endpointing", "peer-endpointing", False),
    *(System("ours", f"ours ({sensitivity})", "ours", False, sensitivity) for sensitivity in SENSITIVITIES),
    System("ours-household", "ours (household)", "ours-household", False, "default"),
]
PHASES = (*dict.fromkeys(system.key for system in SYSTEMS), "concurrency")
CONCURRENCY_SYSTEMS = ("ours (default)", "HA default path + ours")


async def external_vad(port: int) -> bool:
    """The server's own word on who ends the turn: its ASR program's `requires_external_vad`."""
    info = await server_info(port)
    if info is None:
        raise RuntimeError(f"the server on port {port} closed the connection before its info")
    return info.asr[0].requires_external_vad


@asynccontextmanager
async def household_hass(wanted: bool) -> AsyncIterator[list[str]]:
    """The flags that have our server read tests/bench_household.py's names from a stand-in Home Assistant on
    loopback (tests/fake_hass.py), served while the context lasts; none where not `wanted`."""
    if not wanted:
        yield []
        return
    hass = fake_hass.FakeHass()
    bench_household.fill(hass.registry)
    runner, port = await fake_hass.serve(hass, host=HOST)
    try:
        yield ["--hass-api", f"http://{HOST}:{port}/api", "--hass-token", fake_hass.TOKEN]
    finally:
        await runner.cleanup()


async def names_read(server: ServerProcess, timeout: float = 60) -> None:
    """Wait until `server` has read the household's names from Home Assistant (its log says so)."""
    deadline = time.monotonic() + timeout
    while NAMES_READ not in server.log_path.read_text(errors="replace"):
        if server.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} read no names from Home Assistant:\n{server.log_tail}")
        await asyncio.sleep(0.1)


async def start_servers(
    args: argparse.Namespace,
    systems: Sequence[System],
    stack: ExitStack,
    extra: Sequence[str] = (),
    household: Sequence[str] = (),
) -> tuple[dict[str, int], dict, list[ServerProcess]]:
    """The servers `systems` need, ready: name -> port, what was run, and the processes; ours with the `extra`
    flags (bench/realtime.py: --debug), and ours reading a household's names with the `household` flags
    (`household_hass`).

    Ours on its defaults first: a server that already requires an external VAD (before issue 23) also serves
    the HA default path; a newer one gets a second process with --external-vad for it.
    """
    needed = {system.server for system in systems}
    home, data_dir, logs = CACHE / "home", args.data_dir, CACHE / "logs"
    started: list[ServerProcess] = []
    stack.callback(stop_servers, started)
    ports: dict[str, int] = {}
    run: dict = {"requires_external_vad": {}, "metrics": {}}

    async def start(name: str, argv: list[str], port: int, cwd: Path) -> None:
        server = start_server(name, argv, port, offline_env(home), cwd, logs)
        started.append(server)
        log(f"Starting {name}: {shlex.join(argv)}")
        await wait_ready(server)
        if name == "ours-household":
            await names_read(server)
        ports[name] = port
        run[f"{name}_argv"] = argv
        if "--http-port" in argv:  # ours: what ended each turn is counted there (`counted`)
            run["metrics"][name] = f"http://{HOST}:{argv[argv.index('--http-port') + 1]}/metrics"
        run["requires_external_vad"][name] = await external_vad(port)

    def ours(port: int) -> list[str]:  # HTTP on loopback and a port of its own: two of ours may run
        return [*ours_argv(args, port, free_port(), data_dir), *extra]

    if "ours-household" in needed:
        port = free_port()
        await start("ours-household", [*ours(port), *household], port, args.ours_src)
    if needed & {"ours", "ours-external"}:
        port = free_port()
        await start("ours", ours(port), port, args.ours_src)
        if "ours-external" in needed:
            if run["requires_external_vad"]["ours"]:
                log("ours already requires an external VAD: it serves the HA default path too")
                ports["ours-external"] = ports["ours"]
            else:
                port = free_port()
                await start("ours-external", [*ours(port), "--external-vad"], port, args.ours_src)
    if needed & {"ours", "ours-external", "ours-household"}:
        run["ours"] = {name: dist_version(name) for name in ("wyoming-wis", "faster-whisper", "ctranslate2")}
        run["ours_src"] = str(args.ours_src)
    if needed & {"peer", "peer-endpointing"}:
        python = ensure_venv(PEER_VENV, peer_requirements())
        model_dir = Catalog([data_dir], allow_download=False).asr_model(MODEL).path
        for name in sorted(needed & {"peer", "peer-endpointing"}):
            port = free_port()
            argv = peer_argv(python, args, port, model_dir, CACHE / "peer-data")
            if name == "peer-endpointing":
                argv += ["--vad-endpointing", str(PEER_ENDPOINTING)]
            await start(name, argv, port, CACHE)
        run["peer"] = venv_versions(python, ["wyoming-faster-whisper", "faster-whisper", "ctranslate2"])
    return ports, run, started


# -- one turn -------------------------------------------------------------------------------


@dataclass
class Turn:
    """One clip streamed to one system; times in seconds of audio from the first chunk."""

    system: str
    clip: str
    kind: str
    phase: str  # "alone" or "N at once"
    reference: str
    text: str | None = None
    error: str | None = None
    stop_s: float | None = None  # when audio-stop was sent (the HA default path)
    transcript_s: float | None = None  # when the transcript came
    latency_s: float | None = None  # last speech sample -> transcript; None for a cut or no transcript
    cut: bool = False  # ended before the last speech sample was sent
    ended_by: str | None = None  # ours, alone: what ended the turn, by the server's count (`turn_reason`)
    whisper_s: dict[str, float] | None = None  # ours, alone: Whisper's seconds meanwhile, by stage (`whisper_spent`)


async def stream_turn(
    system: System, port: int, clip: Clip, audio: bytes, stop: int | None, phase: str, timeout: float
) -> Turn:
    """Stream `clip` (its `audio`, with the trailing silence) as Home Assistant's pipeline does: `transcribe`,
    `audio-start`, a chunk each 10 ms while reading; `audio-stop` after chunk `stop` - 1 when its VAD ended at
    chunk `stop`, else on through the trailing silence until the transcript comes; then close, as Home
    Assistant does."""
    turn = Turn(system.label, clip.name, clip.kind, phase, clip.text)
    chunks = len(audio) // CHUNK_BYTES
    marks = Marks()
    client = AsyncTcpClient(HOST, port)
    reader: asyncio.Task | None = None
    start = time.perf_counter()
    try:
        await asyncio.wait_for(client.connect(), timeout)
        reader = asyncio.create_task(read_until_transcript(client, marks))
        await client.write_event(Transcribe(language="en", vad_sensitivity=system.sensitivity).event())
        await client.write_event(AudioStart(RATE, WIDTH, 1).event())
        start = time.perf_counter()
        for index in range(chunks if stop is None else stop):
            await asyncio.sleep(max(0.0, start + (index + 1) * CHUNK_SECONDS - time.perf_counter()))
            if reader.done():
                break
            piece = audio[index * CHUNK_BYTES : (index + 1) * CHUNK_BYTES]
            await client.write_event(AudioChunk(RATE, WIDTH, 1, audio=piece).event())
        if stop is not None and not reader.done():
            await asyncio.sleep(max(0.0, start + (stop + 1) * CHUNK_SECONDS - time.perf_counter()))
            await client.write_event(AudioStop().event())
            turn.stop_s = time.perf_counter() - start
        await asyncio.wait_for(asyncio.shield(reader), timeout if stop is not None else GRACE_SECONDS)
    except TimeoutError:
        marks.error = marks.error or "no transcript"
    except (OSError, EOFError) as err:
        if marks.final is None:  # after the transcript, a closed connection is no loss
            marks.error = marks.error or f"{type(err).__name__}: {err}"
    finally:
        if reader is not None and not reader.done():
            reader.cancel()
        await client.disconnect()
    turn.text, turn.error = marks.text, marks.error
    if marks.final is not None:
        turn.transcript_s = marks.final - start
        ended = min(turn.transcript_s, turn.stop_s if turn.stop_s is not None else turn.transcript_s)
        turn.cut = ended < clip.last_speech_s
        turn.latency_s = None if turn.cut else turn.transcript_s - clip.last_speech_s
    return turn


# -- phases -------------------------------------------------------------------------------


@dataclass
class Bench:
    """What every turn of this run shares."""

    ports: dict[str, int]
    folder: Path
    tail_s: float  # silence streamed after each file: TAIL_SECONDS, or none where the file holds it (a room's)
    stops: dict[str, tuple[int | None, bool]]
    timeout: float
    metrics: dict[str, str]  # our servers' /metrics

    async def turn(self, system: System, clip: Clip, phase: str, delay: float = 0.0) -> Turn:
        await asyncio.sleep(delay)
        stop = self.stops[clip.name][0] if system.ha_vad else None
        port = self.ports[system.server]
        audio = (clip.pcm(self.folder) + silence(self.tail_s)).audio
        return await stream_turn(system, port, clip, audio, stop, phase, self.timeout)

    async def alone(self, system: System, clip: Clip) -> Turn:
        """`turn` with no other at once: for ours, with what ended it and where Whisper's time went."""
        url = self.metrics.get(system.server)
        if url is None:
            return await self.turn(system, clip, "alone")
        before = await counted(url)
        turn = await self.turn(system, clip, "alone")
        after = await counted(url)
        turn.ended_by, turn.whisper_s = turn_reason(before, after), whisper_spent(before, after)
        return turn


@dataclass
class Counted:
    """What our server had counted at one moment (its /metrics)."""

    turns: Counter[str]  # Wyoming turns answered, by what ended them (`wis_turns_total`)
    whisper_s: dict[str, float]  # Whisper's seconds, by stage of its calls (`wis_asr_decode_seconds_total`)


async def counted(url: str) -> Counted:
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(url)).raise_for_status().text
    turns: Counter[str] = Counter()
    whisper_s: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "wis_turns_total" and sample.labels.get("frontend") == "wyoming":
                turns[sample.labels["ended"]] += int(sample.value)
            elif sample.name == "wis_asr_decode_seconds_total":
                stage = sample.labels["stage"]
                whisper_s[stage] = whisper_s.get(stage, 0.0) + sample.value
    return Counted(turns, whisper_s)


def turn_reason(before: Counted, after: Counted) -> str | None:
    """What ended the one turn answered between two counts (None: none was, or more than one)."""
    grown = after.turns - before.turns
    return next(iter(grown)) if sum(grown.values()) == 1 else None


def whisper_spent(before: Counted, after: Counted) -> dict[str, float]:
    """Whisper's seconds between two counts, by stage: a turn alone's decodes (every judgement, and the final)."""
    spent = {stage: seconds - before.whisper_s.get(stage, 0.0) for stage, seconds in after.whisper_s.items()}
    return {stage: round(seconds, 4) for stage, seconds in spent.items() if seconds > 0}


async def warm_up(bench: Bench, systems: Sequence[System], clip: Clip) -> None:
    """One request per server first (the first loads lazy parts); kept out of the numbers."""
    recording = Recording(clip.name, clip.text, clip.pcm(bench.folder))
    for server in dict.fromkeys(system.server for system in systems):
        result = await transcribe(server, bench.ports[server], "warm-up", recording, False, 0.0, bench.timeout)
        if not result.ok:
            raise RuntimeError(f"{server} failed its warm-up request: {result.error}")


def outcome(turn: Turn) -> str:
    """A turn in a progress line: its latency, or what went wrong."""
    return "cut" if turn.cut else turn.error or fmt_s(turn.latency_s)


async def alone_phase(bench: Bench, systems: Sequence[System], clips: Sequence[Clip]) -> list[Turn]:
    """Each clip to each system in turn, the first system rotating so that all share the machine's noise."""
    turns = []
    for index, clip in enumerate(clips):
        shift = index % len(systems)
        line = []
        for system in [*systems[shift:], *systems[:shift]]:
            turn = await bench.alone(system, clip)
            turns.append(turn)
            line.append(f"{system.label} {outcome(turn)}")
        log(f"[{index + 1}/{len(clips)} {clip.kind} {clip.name}] " + ", ".join(line))
    return turns


async def concurrency_phase(bench: Bench, systems: Sequence[System], clips: Sequence[Clip], groups: int) -> list[Turn]:
    """Groups of N satellites at once, started STAGGER_SECONDS apart, each at real-time pace; per system. The
    clips (plain and paused) are spread evenly over the corpus."""
    pool = [clip for clip in clips if clip.kind != "long"]
    turns = []
    for satellites in CONCURRENT:
        picks = groups * satellites
        for group in range(groups):
            chosen = [pool[(group * satellites + j) * len(pool) // picks] for j in range(satellites)]
            for system in systems:
                phase = f"{satellites} at once"
                together = [bench.turn(system, clip, phase, j * STAGGER_SECONDS) for j, clip in enumerate(chosen)]
                done = await asyncio.gather(*together)
                turns += done
                outcomes = ", ".join(f"{turn.clip} {outcome(turn)}" for turn in done)
                log(f"[{phase}, group {group + 1}/{groups}] {system.label}: {outcomes}")
    return turns


# -- summaries ------------------------------------------------------------------------------


def summarise(turns: Sequence[Turn], systems: Sequence[System]) -> list[dict]:
    """Per kind (and all) and system: latency, false cuts, turns without a transcript, WER."""
    rows = []
    for kind in [*KINDS, "all"]:
        for system in systems:
            part = [t for t in turns if t.system == system.label and kind in ("all", t.kind)]
            if not part:
                continue
            latencies = [t.latency_s for t in part if t.latency_s is not None]
            cuts = sum(t.cut for t in part)
            rows.append(
                {
                    "kind": kind,
                    "system": system.label,
                    "turns": len(part),
                    "median_s": median(latencies),
                    "p95_s": percentile(latencies, 95),
                    "cuts": cuts,
                    "cut_share": cuts / len(part),
                    "no_transcript": sum(t.text is None for t in part),
                    "wer": wer([t.reference for t in part], [t.text or "" for t in part]),
                }
            )
    return rows


def ended_by(alone: Sequence[Turn]) -> dict[str, dict[str, dict[str, int]]]:
    """Per system of ours and kind of clip, how many turns each reason ended (the server's count)."""
    counts: dict[str, dict[str, Counter[str]]] = {}
    for turn in alone:
        if turn.ended_by is not None:
            counts.setdefault(turn.system, {}).setdefault(turn.kind, Counter())[turn.ended_by] += 1
    return {system: {kind: dict(count) for kind, count in kinds.items()} for system, kinds in counts.items()}


def whisper_time(alone: Sequence[Turn]) -> dict[str, dict[str, dict[str, float]]]:
    """Per system of ours and kind of clip, the median of each turn's Whisper seconds by stage, and in all."""
    spent: dict[str, dict[str, list[dict[str, float]]]] = {}
    for turn in alone:
        if turn.whisper_s is not None:
            spent.setdefault(turn.system, {}).setdefault(turn.kind, []).append(turn.whisper_s)
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for system, kinds in spent.items():
        for kind, turns in kinds.items():
            stages = sorted({stage for turn in turns for stage in turn})
            row = {stage: statistics.median(turn.get(stage, 0.0) for turn in turns) for stage in stages}
            row["all"] = statistics.median(sum(turn.values()) for turn in turns)
            medians.setdefault(system, {})[kind] = {stage: round(seconds, 3) for stage, seconds in row.items()}
    return medians


def growth(alone: Sequence[Turn], together: Sequence[Turn]) -> list[dict]:
    """Per system and number of satellites: how much later each transcript came than the same clip's alone."""
    solo = {(t.system, t.clip): t.latency_s for t in alone}
    rows = []
    for system in dict.fromkeys(t.system for t in together):
        for phase in dict.fromkeys(t.phase for t in together):
            part = [t for t in together if t.system == system and t.phase == phase]
            grown = [
                t.latency_s - solo[(system, t.clip)]
                for t in part
                if t.latency_s is not None and solo.get((system, t.clip)) is not None
            ]
            rows.append(
                {
                    "system": system,
                    "phase": phase,
                    "turns": len(part),
                    "compared": len(grown),
                    "median_growth_s": median(grown),
                    "p95_growth_s": percentile(grown, 95),
                    "max_growth_s": max(grown) if grown else None,
                }
            )
    return rows


def verdicts(summary: Sequence[dict]) -> list[dict]:
    """The issue's targets for each sensitivity of ours, and ours with a household: latency on all turns, cuts on the
    paused, WER."""
    row = {(r["system"], r["kind"]): r for r in summary}
    baseline = row.get(("HA default path + ours", "all"), {}).get("wer")
    out = []
    for label in [*(f"ours ({sensitivity})" for sensitivity in SENSITIVITIES), "ours (household)"]:
        everything, paused = row.get((label, "all")), row.get((label, "paused"))
        whole = row.get((label, "whole-paused"))
        if everything is None:
            continue
        checks = [
            ("median <= 0.35 s (all)", everything["median_s"], fmt_s, lambda v: v <= 0.35),
            ("p95 <= 0.6 s (all)", everything["p95_s"], fmt_s, lambda v: v <= 0.6),
            ("false cuts <= 2 % (paused)", paused and paused["cut_share"], fmt_pct, lambda v: v <= 0.02),
            ("no false cut (whole-paused)", whole and whole["cut_share"], fmt_pct, lambda v: v == 0),
            ("WER <= HA default path + ours (all)", everything["wer"], fmt_pct, lambda v: v <= baseline + 1e-9),
        ]
        for target, value, show, check in checks:
            judged = None if value is None or (target.startswith("WER") and baseline is None) else bool(check(value))
            out.append({"system": label, "target": target, "value": show(value), "pass": judged})
    return out


# -- report -------------------------------------------------------------------------------


def print_summary(summary: Sequence[dict]) -> None:
    """`summarise`'s rows as a Markdown table."""
    print("| kind | system | turns | median | p95 | false cuts | no transcript | WER |")
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for row in summary:
        kind = f"**{row['kind']}**" if row["kind"] == "all" else row["kind"]
        print(
            f"| {kind} | {row['system']} | {row['turns']} | {fmt_s(row['median_s'])} | {fmt_s(row['p95_s'])} "
            f"| {row['cuts']} ({row['cut_share']:.0%}) | {row['no_transcript']} | {fmt_pct(row['wer'])} |"
        )


def print_report(document: dict, out: Path) -> None:
    machine, settings, run = document["machine"], document["settings"], document["versions"]
    corpus = document["corpus"]
    print("# End of turn: from the last word to the transcript\n")
    print(f"Command: `{document['command']}`  ")
    print(f"Machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), Python {machine['python']}  ")
    print(
        f"Whisper {MODEL}, device {settings['device']}, compute type {settings['compute_type']}, beam "
        f"{settings['beam_size']}, {settings['threads']} threads per server  "
    )
    versions = []
    if "ours" in run:
        versions.append(f"wyoming-wis {run['ours']['wyoming-wis']} from {run['ours_src']}")
    if "peer" in run:
        versions.append(f"wyoming-faster-whisper {run['peer']['wyoming-faster-whisper']}")
    if run.get("home_assistant"):
        versions.append(f"Home Assistant {run['home_assistant']}")
    print("; ".join(versions) + "  ")
    print(f"Servers' requires_external_vad: {run['requires_external_vad']}  ")
    counts = ", ".join(f"{sum(c['kind'] == kind for c in corpus)} {kind}" for kind in KINDS)
    room = settings.get("room")
    heard = f", as a room microphone hears them: {room} (bench/rooms.py)" if room else ""
    print(
        f"Corpus: {len(corpus)} clips ({counts}), each after {LEAD_SECONDS:g} s of silence and followed by up to "
        f"{TAIL_SECONDS:g} s more{heard}; 10 ms chunks at real-time pace\n"
    )
    print("## Last speech sample to `transcript`\n")
    print("False cut: the turn ended before the last speech sample was sent (on the paused commands: before the")
    print("command was complete); cut turns have no latency, their text counts in the WER.\n")
    print_summary(document["summary"])
    if document.get("ended_by"):
        print("\nWhat ended ours' turns (the server's `wis_turns_total`; commit: the client's audio-stop):\n")
        for system, kinds in document["ended_by"].items():
            for kind, count in kinds.items():
                print(f"- {system}, {kind}: " + ", ".join(f"{reason} {n}" for reason, n in sorted(count.items())))
    if document.get("whisper_time"):
        print("\nWhisper's time in ours' turns (the server's `wis_asr_decode_seconds_total` meanwhile: every judgement")
        print("and the final; median seconds per turn, by stage):\n")
        for system, kinds in document["whisper_time"].items():
            for kind, stages in kinds.items():
                spent = ", ".join(f"{stage} {seconds:.3f}" for stage, seconds in stages.items())
                print(f"- {system}, {kind}: {spent}")
    if document["verdicts"]:
        print("\n## The issue's targets for ours\n")
        print("| system | target | measured | |\n|---|---|--:|---|")
        for verdict in document["verdicts"]:
            judged = {True: "pass", False: "FAIL", None: "-"}[verdict["pass"]]
            print(f"| {verdict['system']} | {verdict['target']} | {verdict['value']} | {judged} |")
    if document["growth"]:
        print(f"\n## Several satellites at once (started {STAGGER_SECONDS:g} s apart)\n")
        print(
            f"Growth: each one's last-word-to-transcript time less the same clip's alone; target p95 <= "
            f"{GROWTH_TARGET_S * 1000:.0f} ms.\n"
        )
        print("| system | satellites | turns | compared | median growth | p95 growth | max growth | |")
        print("|---|---|--:|--:|--:|--:|--:|---|")
        for row in document["growth"]:
            p95 = row["p95_growth_s"]
            judged = "-" if p95 is None else ("pass" if p95 <= GROWTH_TARGET_S else "FAIL")
            print(
                f"| {row['system']} | {row['phase']} | {row['turns']} | {row['compared']} "
                f"| {fmt_s(row['median_growth_s'])} | {fmt_s(p95)} | {fmt_s(row['max_growth_s'])} | {judged} |"
            )
    wrong = [t for t in document["turns"] if t["error"] or t["cut"]]
    clips = {clip["name"]: clip for clip in corpus}
    if wrong:
        print(f"\n## Cut turns and errors ({len(wrong)})\n")
    for turn in wrong:
        clip, what = clips[turn["clip"]], turn["error"]
        if turn["cut"]:
            stopped = turn["stop_s"] is not None
            event, at = ("audio-stop", turn["stop_s"]) if stopped else ("transcript", turn["transcript_s"])
            resumed = "" if clip["resume_s"] is None else f", the speech resumed at {clip['resume_s']:.2f} s"
            what = f"{event} at {at:.2f} s{resumed}, the last speech at {clip['last_speech_s']:.2f} s"
        print(f"- {turn['system']}, {turn['clip']} ({turn['phase']}): {what}")
        print(f"  - said: {markdown_cell(turn['reference'])}; heard: {markdown_cell(turn['text'] or '')}")
    background = document["background_cpu_share"]
    print(f"\nOther processes used {background:.0%} of the CPUs during the run.")
    print(f"Runtime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


# -- main -----------------------------------------------------------------------------------


def add_corpus_args(parser: argparse.ArgumentParser, quick: str) -> None:
    """The corpus's and the server's flags, shared with bench/realtime.py; `settle_corpus_args` after parsing."""
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--share", type=float, default=1.0, help="Stream this share of each kind's clips. Default: 1")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per server (--cpu-threads). Default: 2")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--compute-type", help="CTranslate2 compute type. Default: int8 on cpu, float16 on cuda")


def settle_corpus_args(args: argparse.Namespace) -> None:
    args.compute_type = args.compute_type or ("float16" if args.device == "cuda" else "int8")
    args.data_dir = CACHE / "data"  # where our server joins the bundled model; the peers and the corpus use it


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_args(parser, "A few clips per kind and one group: a smoke run")
    parser.add_argument("--groups", type=int, default=4, help="Groups per number of satellites at once. Default: 4")
    parser.add_argument("--timeout", type=float, default=60, help="Seconds to wait for a transcript after audio-stop")
    rooms = {condition.name: condition for condition in CONDITIONS}
    parser.add_argument(
        "--room",
        choices=rooms,
        metavar="CONDITION",
        help="Stream the corpus as a room microphone hears it under "
        f"this condition of bench/rooms.py: {', '.join(map(repr, rooms))}. Default: the clips as recorded",
    )
    add_common_args(parser, "endpoint", PHASES)
    args = parser.parse_args(argv)
    check_common_args(parser, args, "endpoint", PHASES)
    if "concurrency" in args.phases and not {"ours", "ha-ours"} & set(args.phases):
        parser.error("concurrency compares with ours or ha-ours alone: choose one of them too")
    settle_corpus_args(args)
    args.room = rooms[args.room] if args.room else None
    if args.quick:
        args.groups = 1
    return args


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    load = BackgroundLoad()
    clips = build_corpus(args)
    folder, tail_s = corpus_folder(), TAIL_SECONDS
    if args.quick or args.share < 1:
        clips = pick(clips, None if args.quick else args.share)
    if args.room:
        clips, folder = in_room(clips, folder, args.room)
        tail_s = 0.0
    systems = [system for system in SYSTEMS if system.key in args.phases]
    stops, home_assistant = ha_stops(clips, folder, tail_s) if any(s.ha_vad for s in systems) else ({}, None)
    async with household_hass(any(system.server == "ours-household" for system in systems)) as household:
        ports, versions, servers = await start_servers(args, systems, stack, household=household)
        versions["home_assistant"] = home_assistant
        bench = Bench(ports, folder, tail_s, stops, args.timeout, versions["metrics"])
        await warm_up(bench, systems, clips[0])
        alone = await alone_phase(bench, systems, clips)
        together: list[Turn] = []
        if "concurrency" in args.phases:
            chosen = [system for system in systems if system.label in CONCURRENCY_SYSTEMS]
            together = await concurrency_phase(bench, chosen, clips, args.groups)
    summary = summarise(alone, systems)
    return {
        "versions": versions,
        "corpus": [asdict(clip) for clip in clips],
        "ha_stops": {name: {"stop_chunk": stop, "timed_out": capped} for name, (stop, capped) in stops.items()},
        "summary": summary,
        "verdicts": verdicts(summary),
        "growth": growth(alone, together),
        "ended_by": ended_by(alone),
        "whisper_time": whisper_time(alone),
        "background_cpu_share": load.share(servers),
        "turns": [asdict(turn) for turn in [*alone, *together]],
    }


def main() -> None:
    args = parse_args()
    keys = ("device", "threads", "beam_size", "compute_type", "groups", "share")
    settings = {key: getattr(args, key) for key in keys}
    settings.update(quick=args.quick, phases=args.phases, room=args.room.name if args.room else None)
    run_and_record(lambda stack: run(args, stack), settings, args.out, print_report)


if __name__ == "__main__":
    main()
