"""What the end of the turn is judged on, at every pause of bench/endpoint.py's corpus (issue 23), offline.

bench/endpoint.py times whole turns in real time (30-65 min). This looks at the judgement alone, in about ten
minutes, so that a change to the rules of wyoming_wis/asr/turn.py can be weighed before it is timed. For every
clip, at every place the VAD hears the speech stop for at least the default sensitivity's `check`, it does what
`AsrSession` does there: decode the audio so far with the silence after the speech padded as the session pads it
(with word times), ask the turn model, and apply the rules (the model's probability, the words, a last word that
begins where the speech ends). Where only the model was not sure, and the pause lasts the sensitivity's `recheck`,
the model listens again to the audio up to then. A clip's last pause is its whole request: judged complete, the
turn ends once the pause has lasted the sensitivity's `settle` (or at the second listen); not complete, it waits
for the silence. Any earlier pause judged complete that lasts the `settle`, and longer than a judgement takes
(LONG_PAUSE), would be a false cut in real time. Each pause also records what the model says after each of
LISTENS seconds of silence it lasted, to weigh other rules.

    .venv/bin/python bench/turn_signals.py [--kinds plain,paused,long]

Prints a Markdown report and writes bench/results/turn-signals-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import load_engine  # noqa: E402  (bench/ is not a package)
from common import CACHE, log, run_and_record  # noqa: E402
from endpoint import KINDS, build_corpus, corpus_folder  # noqa: E402

from wyoming_wis.asr.assemble import Transcript  # noqa: E402
from wyoming_wis.asr.engine import WhisperEngine  # noqa: E402
from wyoming_wis.asr.session import padded  # noqa: E402
from wyoming_wis.asr.turn import (  # noqa: E402
    PATIENCE,
    RECHECK_THRESHOLD,
    guessed_ending,
    judged_complete,
    sounds_complete,
)
from wyoming_wis.asr.turn_model import TurnEngine  # noqa: E402
from wyoming_wis.asr.vad import THRESHOLD, WINDOW, SpeechDetector  # noqa: E402
from wyoming_wis.audio import WHISPER_RATE  # noqa: E402
from wyoming_wis.catalog import Catalog  # noqa: E402
from wyoming_wis.requests import AsrRequest  # noqa: E402
from wyoming_wis.turns.detector import TURN_PAD  # noqa: E402

LONG_PAUSE = 0.4  # seconds of silence: about a judgement's time on 2 cores; a shorter pause resumes before it ends
SENSITIVITY = "default"
LISTENS = (0.1, 0.2, 0.3, 0.4, 0.6, 0.8)  # seconds of real silence after which the model is asked too, to weigh rules


@dataclass
class Pause:
    """One place the speech stopped, and how it was judged there."""

    clip: str
    kind: str
    last: bool  # the clip's last pause: its whole request was said
    at: float  # seconds: where the speech stopped
    silence: float  # seconds until the speech resumed (or the clip ended)
    text: str
    probability: float  # the turn model's
    words_complete: bool
    last_word_lead: float | None  # seconds from the last word's start to the end of the speech
    last_word_tail: float | None  # seconds from the last word's end to the end of the speech (< 0: past it)
    guessed: bool
    complete: bool  # all three judges agree: the turn would end here
    second_probability: float | None  # the turn model's at the second listen, if there was one
    complete_later: bool  # the turn would end at the second listen
    listens: dict[str, float]  # the turn model's probability after each of LISTENS seconds of silence the pause lasted


def pauses(probs: np.ndarray, check: int) -> list[tuple[int, int]]:
    """(end of speech, silence after it) in samples, for each stop of at least `check` samples of silence."""
    speech = probs >= THRESHOLD
    out = []
    for index in np.flatnonzero(speech[:-1] & ~speech[1:]) + 1:
        after = np.flatnonzero(speech[index:])
        silence = (int(after[0]) if len(after) else len(speech) - index) * WINDOW
        if silence >= check:
            out.append((int(index) * WINDOW, silence))
    return out


async def judge(
    whisper: WhisperEngine, turn: TurnEngine, audio: np.ndarray, end: int, check: int
) -> tuple[Transcript, float]:
    """The session's judgement of a stop at `end`, made `check` samples of silence later."""
    heard = audio[: end + check]
    judged = padded(heard, end)
    detector = SpeechDetector()
    detector.update(judged)
    options = whisper.options(AsrRequest(language="en", words=True))
    transcript = await whisper.transcribe_pieces(
        judged, detector, detector.pieces(len(judged)), options=options, known={}
    )
    return transcript, await turn.complete(padded(heard, end, TURN_PAD))


async def run(args: argparse.Namespace, _: ExitStack) -> dict:
    clips = [clip for clip in build_corpus(args) if clip.kind in args.kinds]
    folder = corpus_folder()
    patience = PATIENCE[SENSITIVITY]
    check, recheck = int(patience.check * WHISPER_RATE), int(patience.recheck * WHISPER_RATE)
    found = Catalog([args.data_dir], allow_download=False).turn_model("auto")
    if found is None:
        raise SystemExit("the turn model is not installed (run.sh installs it)")
    whisper, turn = load_engine(args), TurnEngine(found)
    turn.warm_up()
    judged: list[Pause] = []
    try:
        for number, clip in enumerate(clips, 1):
            samples = np.frombuffer(clip.pcm(folder).audio, dtype="<i2").astype(np.float32) / 32768
            audio = np.concatenate([samples, np.zeros(2 * WHISPER_RATE, dtype=np.float32)])
            detector = SpeechDetector()
            detector.update(audio)
            stops = pauses(detector._probs, check)  # the scores themselves: where the session would judge
            for index, (end, silence) in enumerate(stops):
                transcript, probability = await judge(whisper, turn, audio, end, check)
                text, words = transcript.text, transcript.words
                lead = end / WHISPER_RATE - words[-1].start if words else None
                tail = end / WHISPER_RATE - words[-1].end if words else None
                words_complete, guessed = sounds_complete(text, "en"), guessed_ending(words, end / WHISPER_RATE)
                complete = judged_complete(transcript, end / WHISPER_RATE, probability, patience.threshold)
                last = index == len(stops) - 1
                second = None
                if not complete and words_complete and not guessed and (last or silence >= recheck):
                    second = await turn.complete(audio[: end + recheck])
                pause = Pause(
                    clip.name,
                    clip.kind,
                    last,
                    end / WHISPER_RATE,
                    silence / WHISPER_RATE,
                    text,
                    probability,
                    words_complete,
                    lead,
                    tail,
                    guessed,
                    complete,
                    second,
                    second is not None and second >= RECHECK_THRESHOLD,
                    {},
                )
                for seconds in LISTENS:
                    if silence >= seconds * WHISPER_RATE:
                        heard = audio[: end + int(seconds * WHISPER_RATE)]
                        pause.listens[f"{seconds:g}"] = round(await turn.complete(heard), 4)
                judged.append(pause)
            log(f"[{number}/{len(clips)} {clip.name}] {len(stops)} pauses")
    finally:
        whisper.close()
        turn.close()
    long_pause = max(LONG_PAUSE, patience.settle)
    return {"sensitivity": SENSITIVITY, "long_pause_s": long_pause, "pauses": [asdict(p) for p in judged]}


def why_not(pause: dict, threshold: float) -> str:
    reasons = []
    if pause["probability"] < threshold:
        reasons.append(f"model {pause['probability']:.2f}")
    if not pause["words_complete"]:
        reasons.append("words")
    if pause["guessed"]:
        reasons.append("guessed last word")
    if pause["second_probability"] is not None:
        reasons.append(f"second listen {pause['second_probability']:.2f}")
    return ", ".join(reasons)


def print_report(document: dict, out: Path) -> None:
    threshold = PATIENCE[document["sensitivity"]].threshold
    rows = document["pauses"]
    last = [row for row in rows if row["last"]]
    inside = [row for row in rows if not row["last"] and row["silence"] >= document["long_pause_s"]]
    print(f"# Turn signals ({document['sensitivity']} sensitivity)\n")
    print(f"    {document['command']}\n")
    ended, later = sum(row["complete"] for row in last), sum(row["complete_later"] for row in last)
    recheck = PATIENCE[document["sensitivity"]].recheck
    print(f"Whole requests judged complete at their last pause: **{ended} of {len(last)}**, and {later} more at the")
    print(f"second listen ({recheck} s); the rest wait for the silence:\n")
    for row in last:
        if not row["complete"]:
            verdict = "ended at the second listen" if row["complete_later"] else why_not(row, threshold)
            print(f"- {row['clip']}: {verdict}: {row['text'][-60:]!r}")
    cuts = [row for row in inside if row["complete"] or row["complete_later"]]
    long_pause = document["long_pause_s"]
    print(f"\nPauses inside a request of {long_pause} s or more: {len(inside)}; judged complete (each a false cut):")
    print(f"**{len(cuts)}**\n")
    for row in inside:
        if row["complete"] or row["complete_later"]:
            verdict = "CUT" if row["complete"] else "CUT at the second listen"
        else:
            verdict = f"kept open ({why_not(row, threshold)})"
        print(f"- {row['clip']} after {row['silence']:.2f} s: {verdict}: {row['text'][-60:]!r}")
    leads = [row["last_word_lead"] for row in last if row["last_word_lead"] is not None and not row["guessed"]]
    guessed = [row["last_word_lead"] for row in rows if row["guessed"] and not row["last"]]
    if leads:
        print(f"\nLast word's start before the end of the speech: whole requests at least {min(leads):.3f} s;")
    if guessed:
        print(f"guessed words inside a request {min(guessed):.3f}-{max(guessed):.3f} s.")
    print(f"\nJSON: {out}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"Comma-separated kinds of {', '.join(KINDS)}")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for Whisper. Default: 2")
    parser.add_argument("--out", type=Path, help="JSON results. Default: bench/results/turn-signals-<timestamp>.json")
    args = parser.parse_args(argv)
    args.kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    if unknown := set(args.kinds) - set(KINDS):
        parser.error(f"unknown kind(s) {', '.join(sorted(unknown))}")
    args.data_dir = CACHE / "data"  # as bench/endpoint.py: the bundled model and voice, and the corpus
    args.device, args.compute_type = "cpu", "int8"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out = args.out or Path(__file__).resolve().parent / "results" / f"turn-signals-{stamp}.json"
    return args


def main() -> None:
    args = parse_args()
    run_and_record(
        lambda stack: run(args, stack), {"kinds": args.kinds, "threads": args.threads}, args.out, print_report
    )


if __name__ == "__main__":
    main()
