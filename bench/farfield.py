"""Far-field speech: ours against wyoming-faster-whisper, word error rate per room and noise (issue 38).

Every clip (the LJ Speech recordings and home-automation commands in our Piper voice, as bench/asr.py has them)
is rendered under each condition of bench/rooms.py (reverberant rooms, pink and brown noise, mains hum, babble,
alone and together, at 20, 10 and 5 dB SNR) and sent to both servers the way a satellite's stream ends: transcribe
(en), audio-start, the audio in 64 ms chunks at full speed, audio-stop. Both run the same Whisper folder with the
same device, compute type, threads and beam; a second beam restarts both. Reported per condition and beam: WER
(jiwer, after bench/asr.py's normalisation) of each server, and the clips where ours wrote nothing while the
peer transcribed speech (a clip the speech detector gated away). Then each noise alone, with no speech in it
(6 s at -50, -40 and -30 dBFS), streamed the same way: how many transcripts hold words anyway (for babble, the
words of other voices, as a TV's), where none is right.

    .venv/bin/python bench/farfield.py                 # beams 1 and 5, 24 clips x 19 conditions
    .venv/bin/python bench/farfield.py --quick         # beam 1, 8 clips
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asr import (  # noqa: E402  (bench/ is not a package)
    MODEL,
    Recording,
    command_recordings,
    lj_recordings,
    normalise,
    start_servers,
    transcribe,
    wer,
)
from common import (  # noqa: E402
    RATE,
    Pcm,
    Row,
    add_common_args,
    check_common_args,
    fmt_pct,
    log,
    not_worse,
    render_table,
    run_and_record,
)
from rooms import CONDITIONS, NOISES, Condition, noise, render  # noqa: E402

PHASES = ("farfield",)
COMMANDS = 16  # of bench/asr.py's commands, with the 8 LJ clips: 24 clips
QUICK_CLIPS = 4  # of each kind, with --quick
EMPTY_WER = 1.0  # a transcript this far off has no word of the speech: "empty"
NOISE_ALONE = "noise alone"  # the phase of clips with no speech: each noise of bench/rooms.py by itself
NOISE_ALONE_S = 6.0  # seconds: about what a satellite streams after a false wake before its turn ends
NOISE_ALONE_DBFS = (-50.0, -40.0, -30.0)  # a quiet room's noise to a loud fan's
NOISE_ALONE_SEEDS = (1, 2)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per server (--cpu-threads). Default: 2")
    parser.add_argument("--beams", default="1,5", help="Beam sizes, comma-separated; each restarts both servers")
    parser.add_argument("--compute-type", help="CTranslate2 compute type. Default: int8 on cpu, float16 on cuda")
    parser.add_argument("--quick", action="store_true", help=f"Beam 1 only, {QUICK_CLIPS} clips of each kind")
    parser.add_argument("--timeout", type=float, default=300, help="Seconds to wait for one transcript")
    add_common_args(parser, "farfield", PHASES)
    args = parser.parse_args(argv)
    check_common_args(parser, args, "farfield", PHASES)
    args.compute_type = args.compute_type or ("float16" if args.device == "cuda" else "int8")
    args.beam_list = [1] if args.quick else [int(beam) for beam in args.beams.split(",")]
    return args


def clips(commands: list[Recording], quick: bool) -> list[Recording]:
    lj, spoken = lj_recordings(), commands[:COMMANDS]
    return lj[:QUICK_CLIPS] + spoken[:QUICK_CLIPS] if quick else lj + spoken


def noise_alone(voices: Sequence[Recording], quick: bool) -> list[Recording]:
    """Clips without speech (the reference is ""): each noise at each level, as a satellite may stream after a
    false wake; babble is other voices (a TV), whose words are not the user's either."""
    floats = [voice.pcm.floats(np.float64) for voice in voices]
    recordings = []
    for kind in NOISES:
        for level in NOISE_ALONE_DBFS[1:2] if quick else NOISE_ALONE_DBFS:
            for seed in NOISE_ALONE_SEEDS[:1] if quick else NOISE_ALONE_SEEDS:
                samples = noise(kind, int(NOISE_ALONE_S * RATE), seed, floats)
                samples *= 10 ** (level / 20) / np.sqrt(np.mean(samples**2))
                recordings.append(Recording(f"{kind} {level:g} dBFS #{seed}", "", Pcm.from_floats(samples)))
    return recordings


async def run_beam(args: argparse.Namespace, beam: int, results: list[dict]) -> dict:
    """Both servers at this beam; every clip under every condition to each, ours first on even clips."""
    settings = argparse.Namespace(**{**vars(args), "beam_size": beam})
    with ExitStack() as stack:
        servers, _, versions = await start_servers(settings, stack)
        recordings = clips(await command_recordings(servers["ours"].port), args.quick)
        for condition in CONDITIONS:
            for index, clip in enumerate(recordings):
                others = [other.pcm for other in recordings if other is not clip]
                heard = Recording(clip.name, clip.text, render(clip.pcm, condition, clip.name, others))
                order = ("ours", "peer") if index % 2 == 0 else ("peer", "ours")
                for name in order:
                    result = await transcribe(name, servers[name].port, condition.name, heard, False, 0.0, args.timeout)
                    results.append({"beam": beam, **asdict(result)})
            done = [r for r in results if r["beam"] == beam and r["phase"] == condition.name]
            log(f"[beam {beam}] {condition.name}: " + ", ".join(f"{n} {_wer(done, n):.1%}" for n in ("ours", "peer")))
        for index, heard in enumerate(noise_alone(recordings, args.quick)):
            for name in ("ours", "peer") if index % 2 == 0 else ("peer", "ours"):
                result = await transcribe(name, servers[name].port, NOISE_ALONE, heard, False, 0.0, args.timeout)
                results.append({"beam": beam, **asdict(result)})
        done = [r for r in results if r["beam"] == beam and r["phase"] == NOISE_ALONE]
        log(
            f"[beam {beam}] {NOISE_ALONE}, clips with text: "
            + ", ".join(f"{n} {_texts(done, n)}" for n in ("ours", "peer"))
        )
    return versions


def _texts(results: Sequence[dict], server: str, kind: str = "") -> int:
    """How many of `server`'s transcripts of clips without speech (of noise `kind`; "": any) hold words."""
    mine = [r for r in results if r["server"] == server and r["recording"].startswith(kind)]
    return sum(1 for r in mine if normalise(r["text"] or ""))


def _wer(results: Sequence[dict], server: str) -> float:
    mine = [r for r in results if r["server"] == server]
    return wer([r["reference"] for r in mine], [r["text"] or "" for r in mine]) or 0.0


def _heard_words(result: dict) -> bool:
    """Whether a transcript holds some of the speech's words."""
    return result["wer"] is not None and result["wer"] < EMPTY_WER


def summarise(results: Sequence[dict], beams: Sequence[int], conditions: Sequence[Condition]) -> dict:
    """Per beam: WER of each server under each condition and overall, and ours' empty transcripts where the
    peer heard words."""
    summary: dict = {}
    for beam in beams:
        at_beam = [r for r in results if r["beam"] == beam]
        per: dict = {}
        speech = [r for r in at_beam if r["phase"] != NOISE_ALONE]
        for name in [condition.name for condition in conditions] + ["all"]:
            done = [r for r in speech if name in ("all", r["phase"])]
            peer = {(r["phase"], r["recording"]): r for r in done if r["server"] == "peer"}
            gated = [
                f"{r['phase']}: {r['recording']}"
                for r in done
                if r["server"] == "ours"
                and not (r["text"] or "").strip()
                and _heard_words(peer[r["phase"], r["recording"]])
            ]
            per[name] = {
                "ours": _wer(done, "ours"),
                "peer": _wer(done, "peer"),
                "errors": sum(1 for r in done if r["error"]),
                "ours_empty_where_peer_heard": gated,
            }
        alone = [r for r in at_beam if r["phase"] == NOISE_ALONE]
        per[NOISE_ALONE] = {
            kind: {
                "clips": sum(1 for r in alone if r["server"] == "ours" and r["recording"].startswith(kind)),
                **{name: _texts(alone, name, kind) for name in ("ours", "peer")},
            }
            for kind in NOISES
        }
        summary[beam] = per
    return summary


def report_rows(summary: dict, conditions: Sequence[Condition]) -> list[Row]:
    """WER per condition; where the SNR is 10 dB or worse (and overall) ours must not be worse than the peer."""
    rows = []
    for beam, per in summary.items():
        for condition in [*conditions, None]:
            name = condition.name if condition else "all"
            hard = condition is None or (condition.snr is not None and condition.snr <= 10)
            cell = per[name]
            rows.append(
                Row(
                    f"beam {beam}: {name}: WER",
                    cell["ours"],
                    cell["peer"],
                    fmt_pct,
                    "not worse" if hard else "",
                    not_worse if hard else None,
                )
            )
        for kind, counts in per[NOISE_ALONE].items():
            metric = f"beam {beam}: {kind} alone: of {counts['clips']}, with text"
            rows.append(Row(metric, counts["ours"], counts["peer"], str, "not more", lambda o, p: o <= p))
        empty = per["all"]["ours_empty_where_peer_heard"]
        rows.append(Row(f"beam {beam}: ours empty, peer heard words", len(empty), 0, str, "0", lambda o, _: o == 0))
    return rows


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    del stack  # each beam's servers stop when its run ends
    results: list[dict] = []
    versions = {}
    for beam in args.beam_list:
        versions[beam] = await run_beam(args, beam, results)
    return {
        "summary": summarise(results, args.beam_list, CONDITIONS),
        "conditions": [asdict(condition) | {"name": condition.name} for condition in CONDITIONS],
        "versions": versions,
        "results": results,
    }


def print_report(document: dict, out: Path) -> None:
    settings = document["settings"]
    print(f"Command: {document['command']}")
    print(
        f"Settings: model {MODEL}, device {settings['device']}, compute type {settings['compute_type']}, "
        f"{settings['threads']} threads, beams {settings['beams']}; clips sent at full speed, closed by audio-stop"
    )
    print()
    summary = {int(beam): per for beam, per in document["summary"].items()}
    print(render_table(report_rows(summary, CONDITIONS)))
    for beam, per in summary.items():
        if per["all"]["ours_empty_where_peer_heard"]:
            print(f"beam {beam}: ours empty where the peer heard words: {per['all']['ours_empty_where_peer_heard']}")
    print(f"Runtime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


def main() -> None:
    args = parse_args()
    settings = {key: getattr(args, key) for key in ("device", "threads", "compute_type", "quick")}
    settings["beams"] = args.beam_list
    run_and_record(lambda stack: run(args, stack), settings, args.out, print_report)


if __name__ == "__main__":
    main()
