"""End of turn through Home Assistant's own assist pipeline (issue 37): ours beside Home Assistant's VAD, one run.

bench/endpoint.py streams to the servers over plain Wyoming and copies what Home Assistant would do. This runs
Home Assistant itself (tests/ha/env.sh VERSION, the newest by default) with two servers from this checkout added
through its wyoming config flow, each behind a pipeline of its own, both reading the names of a household that fits
the corpus' commands from Home Assistant (tests/ha/bench_turns.py):

  ours             the server on its defaults: `requires_external_vad: false`, so Home Assistant runs no VAD
                   and streams the satellite's audio until our transcript
  HA VAD + ours    the server with --external-vad: Home Assistant's own VAD ends the turn (audio-stop), then
                   the server transcribes

Every clip (bench/endpoint.py's corpus: plain, paused, whole-paused and long requests) goes through both
pipelines in turn, live, with 5 s of silence after it. The time is Home Assistant's own: from the clip's last
speech sample to its stt-end event (the transcript in the pipeline). A turn is cut when it ended before that
sample was sent (Home Assistant's VAD: its stt-vad-end; ours: the transcript). The report counts why the server
ended each of its turns: a `command` the household's sentences recognise, a pause judged `complete`, `silence`...

    .venv/bin/python bench/ha_turns.py [--quick | --share 0.5] [--home-assistant 2026.11.0] [--ours-src DIR]

(--ours-src: the servers run that checkout's wyoming_wis, through PYTHONPATH, in this checkout's venv.)

Prints a Markdown report and writes bench/results/ha-turns-<timestamp>.json. `--quick` (10 clips) takes about
2 min once Home Assistant's venv is built (tests/ha/env.sh: about 8 min the first time); `--share 0.5` about 12.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, ROOT, log, run_and_record  # noqa: E402  (bench/ is not a package)
from endpoint import KINDS, Clip, System, Turn, build_corpus, corpus_folder, pick, print_summary, summarise  # noqa: E402

SYSTEMS = {  # tests/ha/bench_turns.py's names
    "ours": System("ours", "ours (default)", "ours", False, "default"),
    "ha-vad": System("ha-ours", "HA VAD + ours", "ours-external", True),
}


def turns(rows: Sequence[dict], clips: dict[str, Clip]) -> list[Turn]:
    """tests/ha/bench_turns.py's rows as bench/endpoint.py's turns, times from the clip's start."""
    out = []
    for row in rows:
        clip, system = clips[row["clip"]], SYSTEMS[row["system"]]
        end = row["vad_end_s"] if system.ha_vad else row["stt_end_s"]
        cut = end is not None and end < clip.last_speech_s
        done = row["stt_end_s"] is not None and not row["ran_out"]
        latency = row["stt_end_s"] - clip.last_speech_s if done and not cut else None
        turn = Turn(system.label, clip.name, clip.kind, "alone", clip.text, row["heard"], ",".join(row["errors"]))
        turn.stop_s, turn.transcript_s, turn.latency_s, turn.cut = row["vad_end_s"], row["stt_end_s"], latency, cut
        out.append(turn)
    return out


async def run(args: argparse.Namespace, _: ExitStack) -> dict:
    clips = build_corpus(args)
    clips = pick(clips, None if args.quick else args.share) if args.quick or args.share < 1 else clips
    folder = corpus_folder()
    venv = subprocess.run(  # its progress, if it has to build the venv, on our stderr
        [str(ROOT / "tests" / "ha" / "env.sh"), args.home_assistant], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        manifest, out = Path(scratch) / "clips.json", Path(scratch) / "turns.json"
        listed = [{"name": c.name, "path": str(folder / c.file), "last_speech_s": c.last_speech_s} for c in clips]
        manifest.write_text(json.dumps(listed))
        env = dict(
            os.environ,
            WIS_HA_SERVER=str(ROOT / ".venv" / "bin" / "wyoming-wis"),
            WIS_HA_BENCH_CLIPS=str(manifest),
            WIS_HA_BENCH_OUT=str(out),
            PYTHONPATH=os.pathsep.join([str(args.ours_src), str(ROOT / "tests" / "ha")]),  # (the servers inherit it)
        )
        command = [f"{venv}/bin/python", "-m", "pytest", "-c", "tests/ha/pytest.ini", "tests/ha/bench_turns.py"]
        command += ["-q", "-s", "-p", "no:randomly", "--timeout=0"]
        log(f"Home Assistant {args.home_assistant}: {len(clips)} clips through both pipelines")
        subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=sys.stderr)
        result = json.loads(out.read_text())
    by_name = {clip.name: clip for clip in clips}
    played = turns(result["rows"], by_name)
    return {
        "home_assistant": result["home_assistant"],
        "corpus": [clip.name for clip in clips],
        "rows": result["rows"],
        "summary": summarise(played, list(SYSTEMS.values())),
        "cut": [{"system": t.system, "clip": t.clip, "said": t.reference, "heard": t.text} for t in played if t.cut],
        "ended_by": ended_by(result["rows"], by_name),
    }


def ended_by(rows: Sequence[dict], clips: dict[str, Clip]) -> dict[str, dict[str, int]]:
    """Per kind of clip, how many of our own turns each reason ended (the server's log)."""
    counts: dict[str, Counter[str]] = {}
    for row in rows:
        if row["system"] == "ours":
            counts.setdefault(clips[row["clip"]].kind, Counter()).update(row["server_reasons"] or ["none"])
    return {kind: dict(count) for kind, count in counts.items()}


def print_report(document: dict, out: Path) -> None:
    print(f"# End of turn through Home Assistant {document['home_assistant']}'s assist pipeline\n")
    print(f"    {document['command']}\n")
    print(f"{len(document['corpus'])} clips of bench/endpoint.py's corpus, live, each through both pipelines.")
    print("Time: the clip's last speech sample to Home Assistant's stt-end event.\n")
    print_summary(document["summary"])
    for kind, count in document["ended_by"].items():
        print(f"- ours, {kind}: ended by " + ", ".join(f"{reason} {n}" for reason, n in sorted(count.items())))
    for cut in document["cut"]:
        print(f"- cut, {cut['system']}, {cut['clip']}: said {cut['said']!r}, heard {cut['heard']!r}")
    print(f"\nRuntime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="A few clips of each kind")
    parser.add_argument("--share", type=float, default=1.0, help="This share of each kind's clips. Default: 1")
    parser.add_argument("--home-assistant", default="2026.11.0", help="tests/ha/env.sh's version. Default: 2026.11.0")
    parser.add_argument("--out", type=Path, help="JSON results. Default: bench/results/ha-turns-<timestamp>.json")
    parser.add_argument(
        "--ours-src", type=Path, default=ROOT, help="Checkout whose wyoming_wis package the servers run. Default: this"
    )
    args = parser.parse_args(argv)
    args.ours_src = args.ours_src.resolve()
    args.data_dir = CACHE / "data"  # as bench/endpoint.py: the bundled model and voice make the corpus
    args.device, args.compute_type, args.threads = "cpu", "int8", 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out = args.out or Path(__file__).resolve().parent / "results" / f"ha-turns-{stamp}.json"
    return args


def main() -> None:
    args = parse_args()
    settings = {"quick": args.quick, "share": args.share, "home_assistant": args.home_assistant, "kinds": KINDS}
    settings["ours_src"] = str(args.ours_src)
    run_and_record(lambda stack: run(args, stack), settings, args.out, print_report)


if __name__ == "__main__":
    main()
