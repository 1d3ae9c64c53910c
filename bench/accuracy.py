"""Accuracy: our ASR pipeline against faster-whisper's own `transcribe()`, utterance by utterance (issue 20).

A speed trick must never cost a word. Both run in this process on the very same `WhisperModel` object (our
bundled `base`): ours through `WhisperEngine.transcribe` (VAD pieces, short windows, their fallback, batching),
faster-whisper through `WhisperModel.transcribe()` with its defaults (one 30 s window at a time, temperature
fallback), at the same beam, language and task, on the same audio. Both are scored against the reference text.

    .venv/bin/python bench/accuracy.py [--beams 1,5] [--languages auto,forced] [--tasks transcribe,translate,words]
                                       [--groups recorded,joined,commands,languages,cross,noise]

Settings: every beam x language (auto: detected; forced: the utterance's known language) for task transcribe;
task translate at beam 5 (each language mode) for the non-English utterances, scored against an English reference
(faster-whisper base says "How do you call yourself?" for "Comment t'appelles-tu ?", so translations are only
compared with each other); and `words` (at the largest beam, the last language mode): ours asked for word times
must write exactly the text it writes without them, each word lasting (end > start). Everything on 2 CPU threads
takes about 20 min; `--languages forced --tasks transcribe,words` about 8.

Groups (built here, no downloads; generated audio is cached under bench/.cache/accuracy/):
  recorded   the LJ Speech clips of tests/corpus/ljspeech and the two recordings of tests/corpus/bias
  joined     pairs of LJ clips (10-15 s) and one recording of over a minute
  commands   home-automation commands and replies spoken by the bundled Piper voice
  languages  German, French and Spanish sentences from espeak-ng, each with an English translation
  cross      English, 1 s silence, German, 1 s silence, English
  noise      six English utterances with white noise and with a music stand-in at 10 and 5 dB SNR

`--household N` gives ours N household names that no utterance says, as Home Assistant's would come (issue 39:
the prompt must never make speech that holds no name read differently): each utterance is then decoded by ours
both with and without them (twice without: a text Whisper's temperature fallback samples differs between two
decodes of the same audio), and the report lists where the names changed a text that two decodes without them
agree on, and what the names cost in time.

Texts are normalised as bench/asr.py does (lowercase, no punctuation, numbers to words) before WER and CER.
Prints a Markdown report, writes bench/results/accuracy-<timestamp>.json, and exits 1 where ours is worse on
any utterance (ours WER > faster-whisper's) or a word-times check fails, so it serves as a check.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import jiwer
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asr import Recording, lj_recordings, long_recording, long_utterances, normalise  # noqa: E402
from common import (  # noqa: E402  (bench/ is not a package)
    CACHE,
    RATE,
    ROOT,
    Pcm,
    cache_key,
    comma_choices,
    decode_audio,
    dist_version,
    log,
    markdown_cell,
    run_and_record,
    silence,
    wav_bytes,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local

from wyoming_wis.asr import WhisperEngine  # noqa: E402
from wyoming_wis.asr.engine import Transcript  # noqa: E402
from wyoming_wis.catalog import Catalog  # noqa: E402
from wyoming_wis.requests import AsrRequest  # noqa: E402
from wyoming_wis.runtime import Placement, Runtime  # noqa: E402

MODEL = "base"
VOICE = "en_US-joe-medium"  # the bundled Piper voice
AUDIO_CACHE = CACHE / "accuracy"
BIAS_CORPUS = ROOT / "tests" / "corpus" / "bias"
GROUPS = ("recorded", "joined", "commands", "languages", "cross", "noise")
LANGUAGE_MODES = ("auto", "forced")
TASKS = ("transcribe", "translate", "words")
TRANSLATE_BEAM = 5
CROSS_GAP = 1.0  # seconds of silence either side of the German sentence
NOISE_SNRS = (10, 5)  # dB, against the speech's RMS
NOISE_SEED = 20

COMMANDS = [  # some without a final full stop, as a speech front end may hand them over
    "Turn off the kitchen lights",
    "Set the thermostat to 21 degrees",
    "What's the weather tomorrow",
    "Turn on the living room lamp.",
    "Set a timer for 10 minutes",
    "Dim the bedroom lights to 30 percent.",
    "Open the garage door",
    "Is the front door locked?",
    "Play some jazz in the kitchen",
    "Remind me to call mom at 6",
    "Add eggs and milk to the shopping list.",
    "The temperature inside is 22 degrees.",
    "The garage door is now closed.",
    "I have set a timer for 15 minutes.",
    "Tomorrow will be sunny with a high of 25 degrees.",
    "Good night",
    "Lock all the doors",
    "Turn the volume down to 4",
]

FOREIGN = {  # language -> (sentence, its English translation)
    "de": [
        ("Guten Morgen, wie geht es dir heute?", "Good morning, how are you today?"),
        ("Bitte schalte das Licht im Wohnzimmer aus.", "Please turn off the light in the living room."),
        ("Das Wetter ist heute sehr schön.", "The weather is very nice today."),
        ("Ich möchte einen Kaffee mit Milch.", "I would like a coffee with milk."),
        ("Wo ist der Bahnhof?", "Where is the train station?"),
    ],
    "fr": [
        ("Comment t'appelles-tu ?", "What is your name?"),
        ("Bonjour, je voudrais une table pour deux personnes.", "Hello, I would like a table for two people."),
        ("Il fait très froid ce matin.", "It is very cold this morning."),
        ("Ferme la porte de la cuisine, s'il te plaît.", "Close the kitchen door, please."),
        ("Nous allons au cinéma ce soir.", "We are going to the cinema tonight."),
    ],
    "es": [
        ("¿Dónde está la biblioteca?", "Where is the library?"),
        ("Enciende las luces del dormitorio.", "Turn on the bedroom lights."),
        ("Mañana vamos a la playa con mis amigos.", "Tomorrow we are going to the beach with my friends."),
        ("Me gusta mucho leer libros por la noche.", "I really like reading books at night."),
        ("¿Qué hora es?", "What time is it?"),
    ],
}


# -- corpus -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Utterance:
    """Audio with what is said in it, in which language, and (not English) what it says in English."""

    name: str
    group: str
    language: str
    text: str
    pcm: Pcm
    english: str | None = None

    def samples(self) -> np.ndarray:
        return self.pcm.floats()


def _utterance(recording: Recording, group: str) -> Utterance:
    """An English recording as one utterance of `group`."""
    return Utterance(recording.name, group, "en", recording.text, recording.pcm)


def bias_recordings() -> list[Recording]:
    return [
        Recording(path.stem, path.with_suffix(".txt").read_text().strip(), decode_audio(path))
        for path in sorted(BIAS_CORPUS.glob("*.wav"))
    ]


def _cached(kind: str, text: str, make: Callable[[], bytes]) -> Pcm:
    """16 kHz audio for `text`, made by `make() -> WAV bytes` once and kept as a WAV file."""
    path = AUDIO_CACHE / kind / f"{cache_key(kind, text)}.wav"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(make())
    return decode_audio(path)


def piper_speaker(data_dir: Path) -> Callable[[str, float | None], bytes]:
    """`speak(text, length_scale)`: WAV bytes in the bundled Piper voice's rate (None: the voice's own pace).

    The voice loads on the first call, so a corpus already cached never loads it.
    """
    voice = None

    def speak(text: str, length_scale: float | None = None) -> bytes:
        from piper import PiperVoice, SynthesisConfig

        nonlocal voice
        if voice is None:
            voice = PiperVoice.load(str(Catalog([data_dir], allow_download=False).voice(VOICE).path))
        chunks = list(voice.synthesize(text, SynthesisConfig(length_scale=length_scale)))
        audio = b"".join(chunk.audio_int16_bytes for chunk in chunks)
        return wav_bytes(audio, chunks[0].sample_rate, 2, 1)

    return speak


def piper_recordings(data_dir: Path, texts: Sequence[str] = COMMANDS) -> list[Recording]:
    """The commands (`texts`) spoken by the bundled Piper voice, resampled to 16 kHz by PyAV."""
    speak = piper_speaker(data_dir)
    return [
        Recording(f"cmd{number:02d}", text, _cached("piper", text, lambda text=text: speak(text)))
        for number, text in enumerate(texts)
    ]


def espeak(language: str, text: str) -> Pcm:
    """`text` spoken by espeak-ng in `language`, at 16 kHz."""

    def make() -> bytes:
        result = subprocess.run(
            ["espeak-ng", "-v", language, "--stdout", text], check=True, capture_output=True, timeout=60
        )
        return result.stdout

    return _cached(f"espeak-{language}", text, make)


def foreign_utterances() -> list[Utterance]:
    return [
        Utterance(f"{language}{number}", "languages", language, text, espeak(language, text), english)
        for language, sentences in FOREIGN.items()
        for number, (text, english) in enumerate(sentences)
    ]


def cross_utterances(clips: Sequence[Recording]) -> list[Utterance]:
    """An English clip, a German sentence, another English clip, with a second of silence between."""
    out = []
    for number, (text, _) in enumerate(FOREIGN["de"][:3]):
        first, last = clips[number], clips[-1 - number]
        pcm = first.pcm + silence(CROSS_GAP) + espeak("de", text) + silence(CROSS_GAP) + last.pcm
        name = f"{first.name}+de{number}+{last.name}"
        out.append(Utterance(name, "cross", "en", f"{first.text} {text} {last.text}", pcm))
    return out


def music(samples: int, rng: np.random.Generator) -> np.ndarray:
    """A stand-in for music: a few sine tones, each swelling and fading slowly."""
    t = np.arange(samples) / RATE
    out = np.zeros(samples)
    for _ in range(4):
        tone = rng.uniform(110, 880)
        swell = rng.uniform(0.1, 0.5)  # Hz
        envelope = 0.6 + 0.4 * np.sin(2 * np.pi * swell * t + rng.uniform(0, 2 * np.pi))
        out += envelope * np.sin(2 * np.pi * tone * t + rng.uniform(0, 2 * np.pi))
    return out


def mix(speech: Pcm, kind: str, snr_db: float, rng: np.random.Generator) -> Pcm:
    """`speech` with white noise or music added at `snr_db` below the speech's RMS."""
    clean = np.frombuffer(speech.audio, dtype=np.int16).astype(np.float64)
    noise = rng.standard_normal(len(clean)) if kind == "white" else music(len(clean), rng)
    rms = float(np.sqrt(np.mean(clean**2)))
    noise *= rms / 10 ** (snr_db / 20) / float(np.sqrt(np.mean(noise**2)))
    return Pcm(np.clip(clean + noise, -32768, 32767).astype(np.int16).tobytes())


def noisy_utterances(clips: Sequence[Recording], commands: Sequence[Recording]) -> list[Utterance]:
    """Three LJ clips and three commands, each with white noise and with music at each SNR."""
    rng = np.random.default_rng(NOISE_SEED)
    out = []
    for recording in [*clips[:3], *commands[:3]]:
        for kind in ("white", "music"):
            for snr in NOISE_SNRS:
                pcm = mix(recording.pcm, kind, snr, rng)
                out.append(Utterance(f"{recording.name}~{kind}{snr}dB", "noise", "en", recording.text, pcm))
    return out


def build_corpus(groups: Sequence[str], data_dir: Path) -> list[Utterance]:
    clips = lj_recordings()
    needs_commands = "commands" in groups or "noise" in groups
    commands = piper_recordings(data_dir) if needs_commands else []
    corpus: list[Utterance] = []
    if "recorded" in groups:
        corpus += [_utterance(r, "recorded") for r in [*clips, *bias_recordings()]]
    if "joined" in groups:
        corpus += [_utterance(r, "joined") for r in [*long_utterances(clips), long_recording(clips)]]
    if "commands" in groups:
        corpus += [_utterance(r, "commands") for r in commands]
    if "languages" in groups:
        corpus += foreign_utterances()
    if "cross" in groups:
        corpus += cross_utterances(clips)
    if "noise" in groups:
        corpus += noisy_utterances(clips, commands)
    return corpus


# -- scoring ------------------------------------------------------------------------------


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus word error rate of normalised texts; an empty reference with an empty text scores 0."""
    refs, hyps = [normalise(r) for r in references], [normalise(h) for h in hypotheses]
    return jiwer.wer(refs, hyps) if any(refs) else float(any(hyps))


def cer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Character edit distance over reference length, of normalised texts."""
    refs, hyps = [normalise(r) for r in references], [normalise(h) for h in hypotheses]
    return jiwer.cer(refs, hyps) if any(refs) else float(any(hyps))


@dataclass
class Scored:
    """One utterance in one setting: both texts against the reference."""

    setting: str
    group: str
    name: str
    seconds: float  # of audio
    reference: str
    ours: str
    theirs: str
    ours_wer: float
    theirs_wer: float
    ours_cer: float
    theirs_cer: float
    ours_s: float  # wall time of the call
    theirs_s: float
    unnamed: str | None = None  # with --household: ours without the names (`ours` is with them)
    unnamed_s: float = 0.0
    unnamed_again: str | None = None  # and a second time: where the two differ, the fallback sampled

    @property
    def named_differently(self) -> bool:
        """With --household: the names changed a text that two decodes without them agree on."""
        return self.unnamed is not None and self.unnamed == self.unnamed_again and self.unnamed != self.ours

    @property
    def worse(self) -> bool:
        return self.ours_wer > self.theirs_wer + 1e-9


@dataclass
class WordCheck:
    """Ours with word times against ours without them."""

    setting: str
    group: str
    name: str
    text: str
    text_with_words: str
    words: int
    problems: list[str]


# -- running ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    beam: int
    language: str  # "auto" or "forced"
    task: str = "transcribe"

    @property
    def name(self) -> str:
        task = "" if self.task == "transcribe" else f"{self.task}, "
        return f"{task}beam {self.beam}, {self.language}"

    def code(self, utterance: Utterance) -> str | None:
        return utterance.language if self.language == "forced" else None


# Names of a household that no utterance here says: rooms and things in five made-up languages' words.
HOUSEHOLD = tuple(
    f"{room} {thing}"
    for room in ("Hyttloft", "Kveldsro", "Bryggeri", "Vesle", "Nuukfjord", "Belax", "Sjøbu", "Tårnrom", "Quorvex")
    for thing in ("lamp", "heater", "blind", "speaker", "fan", "plug", "window", "vacuum")
)


async def ours(
    engine: WhisperEngine, utterance: Utterance, setting: Setting, words: bool = False, household: int = 0
) -> tuple[Transcript, float]:
    """Our final transcript (with the first `household` names of HOUSEHOLD), and the seconds it took."""
    began = time.monotonic()
    options = engine.options(
        AsrRequest(language=setting.code(utterance), task=setting.task, words=words, beam_size=setting.beam),
        HOUSEHOLD[:household],
    )
    transcript = await engine.transcribe(utterance.samples(), options)
    return transcript, time.monotonic() - began


def theirs(engine: WhisperEngine, utterance: Utterance, setting: Setting) -> tuple[str, float]:
    """faster-whisper's `transcribe()` on the same model, on its defaults otherwise; the text and its seconds."""
    began = time.monotonic()
    segments, _ = engine.model.transcribe(
        utterance.samples(), beam_size=setting.beam, language=setting.code(utterance), task=setting.task
    )
    text = " ".join(segment.text.strip() for segment in segments)
    return text, time.monotonic() - began


async def score(engine: WhisperEngine, utterance: Utterance, setting: Setting, household: int = 0) -> Scored:
    transcript, ours_s = await ours(engine, utterance, setting, household=household)
    unnamed, unnamed_s = (await ours(engine, utterance, setting)) if household else (None, 0.0)
    again = (await ours(engine, utterance, setting))[0].text if household else None
    text, theirs_s = theirs(engine, utterance, setting)
    reference = utterance.english if setting.task == "translate" else utterance.text
    scored = Scored(
        setting.name,
        utterance.group,
        utterance.name,
        utterance.pcm.seconds,
        reference,
        transcript.text,
        text,
        wer([reference], [transcript.text]),
        wer([reference], [text]),
        cer([reference], [transcript.text]),
        cer([reference], [text]),
        ours_s,
        theirs_s,
        None if unnamed is None else unnamed.text,
        unnamed_s,
        again,
    )
    mark = "  <-- ours worse" if scored.worse else ""
    if scored.named_differently:
        mark += "  <-- the names changed it"
    log(f"{setting.name:24s} {utterance.name:34s} WER ours {scored.ours_wer:.3f} fw {scored.theirs_wer:.3f}{mark}")
    return scored


async def check_words(engine: WhisperEngine, utterance: Utterance, setting: Setting, plain: str | None) -> WordCheck:
    """Ours with `words=True`: the same text as without, every word with end > start."""
    if plain is None:
        plain = (await ours(engine, utterance, setting))[0].text
    transcript, _ = await ours(engine, utterance, setting, words=True)
    problems = []
    if transcript.text != plain:
        problems.append("text differs with words=True")
    problems += [f"word {w.word!r} {w.start:.3f}-{w.end:.3f} s" for w in transcript.words if not w.end > w.start]
    if normalise(plain) and not transcript.words:
        problems.append("no word times")
    mark = f"  <-- {'; '.join(problems)}" if problems else ""
    log(f"words, {setting.name:17s} {utterance.name:34s} {len(transcript.words)} words{mark}")
    name = f"words, {setting.name}"
    return WordCheck(name, utterance.group, utterance.name, plain, transcript.text, len(transcript.words), problems)


def summarise(scored: Sequence[Scored]) -> list[dict]:
    """Per setting: every group and all together, WER and CER of both over those utterances."""
    rows = []
    for setting in dict.fromkeys(s.setting for s in scored):
        mine = [s for s in scored if s.setting == setting]
        for group in [*dict.fromkeys(s.group for s in mine), "all"]:
            part = [s for s in mine if group in ("all", s.group)]
            refs = [s.reference for s in part]
            rows.append(
                {
                    "setting": setting,
                    "group": group,
                    "utterances": len(part),
                    "audio_s": sum(s.seconds for s in part),
                    "ours_wer": wer(refs, [s.ours for s in part]),
                    "theirs_wer": wer(refs, [s.theirs for s in part]),
                    "ours_cer": cer(refs, [s.ours for s in part]),
                    "theirs_cer": cer(refs, [s.theirs for s in part]),
                    "ours_worse": sum(s.worse for s in part),
                    "ours_s": sum(s.ours_s for s in part),
                    "theirs_s": sum(s.theirs_s for s in part),
                }
            )
    return rows


def load_engine(args: argparse.Namespace) -> WhisperEngine:
    found = Catalog([args.data_dir], allow_download=False).asr_model(MODEL)
    runtime = Runtime(args.device, 0, args.compute_type, args.threads)
    engine = WhisperEngine(found, Placement(runtime, 1, 16), beam_size=5, max_batch=8, default_language=None)
    engine.warm_up()
    return engine


async def run(args: argparse.Namespace, _: ExitStack) -> dict:
    corpus = build_corpus(args.groups, args.data_dir)
    log(f"{len(corpus)} utterances, {sum(u.pcm.seconds for u in corpus):.0f} s of audio")
    engine = load_engine(args)
    scored: list[Scored] = []
    words: list[WordCheck] = []
    try:
        if "transcribe" in args.tasks:
            for beam in args.beams:
                for language in args.languages:
                    setting = Setting(beam, language)
                    scored += [await score(engine, utterance, setting, args.household) for utterance in corpus]
        if "translate" in args.tasks:
            for language in args.languages:
                setting = Setting(TRANSLATE_BEAM, language, "translate")
                scored += [await score(engine, u, setting) for u in corpus if u.english is not None]
        if "words" in args.tasks:
            setting = Setting(max(args.beams), args.languages[-1])
            plain = {s.name: s.ours for s in scored if s.setting == setting.name}
            words = [await check_words(engine, u, setting, plain.get(u.name)) for u in corpus]
    finally:
        engine.close()
    versions = {name: dist_version(name) for name in ("wyoming-wis", "faster-whisper", "ctranslate2")}
    return {
        "versions": versions,
        "corpus": [
            {"name": u.name, "group": u.group, "language": u.language, "seconds": u.pcm.seconds} for u in corpus
        ],
        "summary": summarise(scored),
        "worse": [asdict(s) for s in scored if s.worse],
        "named_differently": [asdict(s) for s in scored if s.named_differently],
        "word_failures": [asdict(w) for w in words if w.problems],
        "words_checked": len(words),
        "results": [asdict(s) for s in scored],
        "word_checks": [asdict(w) for w in words],
    }


# -- report -------------------------------------------------------------------------------


def print_report(document: dict, out: Path) -> None:
    machine, settings, versions = document["machine"], document["settings"], document["versions"]
    print("# Accuracy: our pipeline against faster-whisper's transcribe()\n")
    print(f"Command: `{document['command']}`  ")
    print(f"Machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), Python {machine['python']}  ")
    print(
        f"Model {MODEL}, device {settings['device']}, compute type {settings['compute_type']}, "
        f"{settings['threads']} threads; wyoming-wis {versions['wyoming-wis']}, faster-whisper "
        f"{versions['faster-whisper']}, ctranslate2 {versions['ctranslate2']}  "
    )
    print(
        "Texts normalised as bench/asr.py does (lowercase, no punctuation, numbers 0-999 to words); "
        "both are judged the same way.\n"
    )
    print("## WER and CER\n")
    header = "setting | group | utterances | audio | WER ours | WER fw | CER ours | CER fw | ours worse | time ours"
    print(f"| {header} | time fw |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in document["summary"]:
        group = f"**{row['group']}**" if row["group"] == "all" else row["group"]
        print(
            f"| {row['setting']} | {group} | {row['utterances']} | {row['audio_s']:.0f} s "
            f"| {row['ours_wer']:.1%} | {row['theirs_wer']:.1%} | {row['ours_cer']:.1%} | {row['theirs_cer']:.1%} "
            f"| {row['ours_worse']} | {row['ours_s']:.1f} s | {row['theirs_s']:.1f} s |"
        )
    if document["words_checked"]:
        failures = document["word_failures"]
        print(f"\n## Word times\n\n{document['words_checked']} utterances checked, {len(failures)} failed.")
        for failure in failures:
            print(f"\n- {failure['setting']}, {failure['name']}: {'; '.join(failure['problems'])}")
            print(f"  - without words: {failure['text']}")
            print(f"  - with words: {failure['text_with_words']}")
    worse = document["worse"]
    print(f"\n## Where ours is worse ({len(worse)})\n")
    if not worse:
        print("Nowhere.")
    for item in worse:
        print(f"- **{item['setting']}, {item['name']}** ({item['group']})")
        print(f"  - reference: {markdown_cell(item['reference'])}")
        print(f"  - ours (WER {item['ours_wer']:.3f}): {markdown_cell(item['ours'])}")
        print(f"  - faster-whisper (WER {item['theirs_wer']:.3f}): {markdown_cell(item['theirs'])}")
    if settings.get("household"):
        named = [s for s in document["results"] if s["unnamed"] is not None]
        changed = document["named_differently"]
        with_s, without_s = sum(s["ours_s"] for s in named), sum(s["unnamed_s"] for s in named)
        print(f"\n## With {settings['household']} household names that no utterance says\n")
        sampled = [s for s in named if s["unnamed"] != s["unnamed_again"]]
        print(
            f"{len(named) - len(changed)} of {len(named)} transcripts read exactly as without the names, where two "
            f"decodes without them agree (they differ on {len(sampled)}: temperature fallback); time "
            f"{with_s:.1f} s with them, {without_s:.1f} s without ({with_s / max(without_s, 1e-9):.2f}x)."
        )
        for item in changed:
            print(f"\n- **{item['setting']}, {item['name']}**: with names {markdown_cell(item['ours'])}")
            print(f"  - without: {markdown_cell(item['unnamed'])}")
    print(f"\nRuntime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


# -- main -----------------------------------------------------------------------------------


def add_model_args(parser: argparse.ArgumentParser, kind: str) -> None:
    """The options both accuracy benchmarks take: which beams, language modes and groups, and the model's."""
    parser.add_argument("--beams", default="1,5", help="Comma-separated beam sizes. Default: 1,5")
    parser.add_argument("--languages", default=",".join(LANGUAGE_MODES), help="auto, forced or both. Default: both")
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"Some of {', '.join(GROUPS)}. Default: all")
    parser.add_argument("--data-dir", type=Path, default=CACHE / "data", help="Where the bundled model is joined")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads. Default: 2")
    parser.add_argument("--compute-type", help="CTranslate2 compute type. Default: int8 on cpu, float16 on cuda")
    parser.add_argument("--out", type=Path, help=f"JSON results. Default: bench/results/{kind}-<timestamp>.json")


def check_model_args(parser: argparse.ArgumentParser, args: argparse.Namespace, kind: str, most_beam: int) -> None:
    """Turn the options of `add_model_args` into lists and defaults, or stop with the parser's error."""
    try:
        args.beams = sorted({int(beam) for beam in args.beams.split(",") if beam.strip()})
    except ValueError:
        parser.error("--beams: comma-separated whole numbers")
    if not args.beams or not 1 <= min(args.beams) <= max(args.beams) <= most_beam:
        parser.error(f"--beams: at least one, each 1 to {most_beam}")
    args.languages = comma_choices(parser, args.languages, LANGUAGE_MODES, "--languages")
    args.groups = comma_choices(parser, args.groups, GROUPS, "--groups")
    args.compute_type = args.compute_type or ("float16" if args.device == "cuda" else "int8")
    args.out = args.out or ROOT / "bench" / "results" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser, "accuracy")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"Some of {', '.join(TASKS)}. Default: all")
    parser.add_argument(
        "--household", type=int, default=0, help=f"Give ours this many household names (at most {len(HOUSEHOLD)})"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.household <= len(HOUSEHOLD):
        parser.error(f"--household: 0 to {len(HOUSEHOLD)}")
    check_model_args(parser, args, "accuracy", most_beam=10)
    args.tasks = comma_choices(parser, args.tasks, TASKS, "--tasks")
    return args


def main() -> None:
    args = parse_args()
    keys = ("beams", "languages", "tasks", "groups", "device", "threads", "household")
    settings = {key: getattr(args, key) for key in keys}
    settings.update(compute_type=args.compute_type, data_dir=str(args.data_dir))
    failed = False

    def report(document: dict, out: Path) -> None:
        nonlocal failed
        print_report(document, out)
        failed = bool(document["worse"] or document["word_failures"] or document["named_differently"])

    run_and_record(lambda stack: run(args, stack), settings, args.out, report)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
