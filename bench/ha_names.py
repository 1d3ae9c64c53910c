"""Names from Home Assistant (issue 39): ours with the names, ours without, and the peer with its own, one run.

Runs Home Assistant itself (tests/ha/env.sh VERSION, the newest by default) with tests/ha/test_names.py's household
(3 floors, 10 areas, a device, 22 entities: 18 exposed to Assist with their aliases, 3 not exposed, 1 disabled;
names Whisper base has never heard, as "Nuukfjord Lamp" and "Kveldsro"), its websocket API served on loopback, and
three servers added through its wyoming config flow (tests/ha/bench_names.py):

  ours         wyoming-wis from this checkout with --hass-api and --hass-token-file (an admin's token)
  ours-plain   the same without a token: no names
  peer         wyoming-faster-whisper 3.8.1 with --hass-token and --hass-api (its `hass` extra), on our Whisper
               model folder, with the same beam size, compute type and threads (as bench/asr.py starts it)

Every command (18 with 21 of the names, 4 with the names of hidden things, 8 with none) is spoken by our server's
Piper through Home Assistant's TTS entity at 1.0, 0.85 and 1.2 speed and by espeak-ng, and each take is
transcribed by each system through Home Assistant's STT entity. Reported per system: the names written exactly
as Home Assistant spells them (whatever the case), the word error rate, any hidden thing's name written, and the
word error rate on the commands that say no name (the prompt must never make those worse).

    .venv/bin/python bench/ha_names.py [--quick] [--home-assistant 2026.11.0]

Prints a Markdown report and writes bench/results/ha-names-<timestamp>.json. About 10 min on 2 cores once Home
Assistant's venv (tests/ha/env.sh) and the peer's (bench/.cache/venv-peer-names, once) are built; `--quick` (two
voices) about half.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, ROOT, dist_version, ensure_venv, log, markdown_cell, run_and_record, venv_versions  # noqa: E402

PEER_PACKAGE = "wyoming-faster-whisper[hass]==3.8.1"  # the `hass` extra: aiohttp, for its --hass-token
PEER_VENV = CACHE / "venv-peer-names"  # not bench/asr.py's: that one has no extra
SYSTEMS = ("ours", "ours-plain", "peer")
LABELS = {"ours": "ours, names", "ours-plain": "ours, no names", "peer": "peer, names"}


def peer_requirements() -> list[str]:
    """The peer, with the same inference libraries (and protocol library) as our venv (bench/asr.py's)."""
    return [PEER_PACKAGE, *(f"{name}=={dist_version(name)}" for name in ("faster-whisper", "ctranslate2", "wyoming"))]


def summarise(rows: Sequence[dict], voices: Sequence[str]) -> dict:
    """Per system: names written of those said, WER of the commands with names and of those without, hidden names
    written, STT time; per voice and per name, the names written."""
    out: dict = {"systems": {}, "voices": {}, "names": {}}
    for system in SYSTEMS:
        mine = [row for row in rows if row["system"] == system]
        named = [row for row in mine if row["names"]]
        plain = [row for row in mine if not row["names"] and not row["hidden"]]
        out["systems"][system] = {
            "names_said": sum(len(row["names"]) for row in named),
            "names_written": sum(len(row["names_written"]) for row in named),
            "wer_named": _wer(named),
            "wer_no_names": _wer(plain),
            "wer_all": _wer(mine),
            "hidden_written": [
                {"voice": row["voice"], "command": row["command"], "heard": row["heard"]}
                for row in mine
                if row["hidden_written"]
            ],
            "median_stt_s": median(row["stt_s"] for row in mine) if mine else None,
        }
        for voice in voices:
            said = [row for row in named if row["voice"] == voice]
            out["voices"].setdefault(voice, {})[system] = (
                sum(len(row["names_written"]) for row in said),
                sum(len(row["names"]) for row in said),
            )
        for row in named:
            for name in row["names"]:
                written, said = out["names"].setdefault(name, {}).get(system, (0, 0))
                out["names"][name][system] = (written + (name in row["names_written"]), said + 1)
    return out


def _wer(rows: Sequence[dict]) -> float | None:
    words = sum(row["reference_words"] for row in rows)
    return sum(row["word_errors"] for row in rows) / words if words else None


def prompt_changed(rows: Sequence[dict]) -> list[dict]:
    """The takes without names that ours heard otherwise with the names than without."""
    plain = {(row["command"], row["voice"]): row for row in rows if row["system"] == "ours-plain"}
    return [
        {"voice": row["voice"], "with": row["heard"], "without": plain[(row["command"], row["voice"])]["heard"]}
        for row in rows
        if row["system"] == "ours" and not row["names"] and not row["hidden"]
        if row["word_errors"] != plain[(row["command"], row["voice"])]["word_errors"]
    ]


def kept_plain(rows: Sequence[dict]) -> dict:
    """Ours' takes of commands with names that wrote none of them, and of those the ones heard word for word as
    ours-plain heard them: the server decodes a text that writes none of the prompt's names again without them
    (wyoming_wis/asr/engine.py), so a near miss ("Kvarnhus Heater") becomes the plain decode ("cave on as heater")."""
    plain = {(row["command"], row["voice"]): row["heard"] for row in rows if row["system"] == "ours-plain"}
    missed = [row for row in rows if row["system"] == "ours" and row["names"] and not row["names_written"]]
    same = [row for row in missed if row["heard"] == plain[(row["command"], row["voice"])]]
    peer = {(row["command"], row["voice"]): row for row in rows if row["system"] == "peer"}
    return {
        "missed": len(missed),
        "as_plain": len(same),
        "examples": [
            {
                "voice": row["voice"],
                "ours": row["heard"],
                "peer": peer[(row["command"], row["voice"])]["heard"],
                "ours_errors": row["word_errors"],
                "peer_errors": peer[(row["command"], row["voice"])]["word_errors"],
            }
            for row in same
        ],
    }


async def run(args: argparse.Namespace, _: ExitStack) -> dict:
    peer_python = ensure_venv(PEER_VENV, peer_requirements())
    venv = subprocess.run(  # its progress, if it has to build the venv, on our stderr
        [str(ROOT / "tests" / "ha" / "env.sh"), args.home_assistant], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "names.json"
        env = dict(
            os.environ,
            WIS_HA_SERVER=str(ROOT / ".venv" / "bin" / "wyoming-wis"),
            WIS_HA_BENCH_OUT=str(out),
            WIS_HA_BENCH_PEER=str(peer_python),
            WIS_HA_BENCH_QUICK="1" if args.quick else "0",
            PYTHONPATH=str(ROOT / "tests" / "ha"),
        )
        command = [f"{venv}/bin/python", "-m", "pytest", "-c", "tests/ha/pytest.ini", "tests/ha/bench_names.py"]
        command += ["-q", "-s", "-p", "no:randomly", "--timeout=0"]
        log(f"Home Assistant {args.home_assistant}: the household's commands through three STT entities")
        subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=sys.stderr)
        result = json.loads(out.read_text())
    versions = {
        "ours": {name: dist_version(name) for name in ("wyoming-wis", "faster-whisper", "ctranslate2", "wyoming")},
        "peer": venv_versions(peer_python, ["wyoming-faster-whisper", "faster-whisper", "ctranslate2", "wyoming"]),
    }
    return {
        **result,
        "versions": versions,
        "summary": summarise(result["rows"], result["voices"]),
        "prompt_changed": prompt_changed(result["rows"]),
        "kept_plain": kept_plain(result["rows"]),
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def print_report(document: dict, out: Path) -> None:
    summary, rows = document["summary"], document["rows"]
    print(f"# Names from Home Assistant {document['home_assistant']}: ours with and without, the peer with\n")
    print(f"    {document['command']}\n")
    takes = len(rows) // len(SYSTEMS)
    commands = len({row["command"] for row in rows})
    print(f"{takes} takes ({commands} commands, voices {', '.join(document['voices'])}), each through every system.")
    peer = document["versions"]["peer"]
    print(
        f"Peer: wyoming-faster-whisper {peer['wyoming-faster-whisper']} (faster-whisper {peer['faster-whisper']}); "
        f"ours: wyoming-wis {document['versions']['ours']['wyoming-wis']}; Whisper base, beam 5, int8, 2 threads.\n"
    )
    print(
        "| system | names written exactly | WER, commands with names | WER, commands without | hidden names written |"
    )
    print("| --- | --- | --- | --- | --- |")
    for system in SYSTEMS:
        mine = summary["systems"][system]
        hidden = len(mine["hidden_written"])
        print(
            f"| {LABELS[system]} | {mine['names_written']} of {mine['names_said']} | {_pct(mine['wer_named'])} | "
            f"{_pct(mine['wer_no_names'])} | {hidden} |"
        )
    print("\nNames written, by voice:\n")
    print("| voice | " + " | ".join(LABELS[system] for system in SYSTEMS) + " |")
    print("| --- |" + " --- |" * len(SYSTEMS))
    for voice, counts in summary["voices"].items():
        print(f"| {voice} | " + " | ".join(f"{counts[s][0]} of {counts[s][1]}" for s in SYSTEMS) + " |")
    print("\nNames written, by name:\n")
    print("| name | " + " | ".join(LABELS[system] for system in SYSTEMS) + " |")
    print("| --- |" + " --- |" * len(SYSTEMS))
    for name, counts in summary["names"].items():
        print(f"| {name} | " + " | ".join(f"{counts[s][0]} of {counts[s][1]}" for s in SYSTEMS) + " |")
    print("\nMedian seconds in Home Assistant's STT call (2 shared cores): ", end="")
    print(", ".join(f"{LABELS[s]} {summary['systems'][s]['median_stt_s']:.2f}" for s in SYSTEMS))
    print(
        f"\nOurs: {len(document['ours_names_lines'])} readings of the names in all; during the takes "
        f"{document['ours_readings_during_takes']} (registry events meanwhile: "
        f"{document['registry_events_during_takes']}); token in a log of ours: {document['token_in_logs']}."
    )
    for line in document["ours_names_lines"][-1:] + document["ours_prompt"]:
        print(f"    {line}")
    for system in SYSTEMS:
        for hidden in summary["systems"][system]["hidden_written"]:
            print(f"- hidden name written by {LABELS[system]} ({hidden['voice']}): {markdown_cell(hidden['heard'])}")
    kept = document["kept_plain"]
    ours_errors = sum(example["ours_errors"] for example in kept["examples"])
    peer_errors = sum(example["peer_errors"] for example in kept["examples"])
    print(
        f"- ours wrote no name in {kept['missed']} takes of commands with names; {kept['as_plain']} of them word for "
        "word as ours without names (decoded again without the names); word errors in those takes: ours "
        f"{ours_errors}, the peer {peer_errors}"
    )
    for changed in document["prompt_changed"]:
        print(f"- no-name take, {changed['voice']}: with names {changed['with']!r}, without {changed['without']!r}")
    print(f"\nRuntime: {document['runtime_s'] / 60:.1f} min. JSON: {out}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Two voices (joe at 1.0 and 0.85) instead of four")
    parser.add_argument("--home-assistant", default="2026.11.0", help="tests/ha/env.sh's version. Default: 2026.11.0")
    parser.add_argument("--out", type=Path, help="JSON results. Default: bench/results/ha-names-<timestamp>.json")
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out = args.out or Path(__file__).resolve().parent / "results" / f"ha-names-{stamp}.json"
    return args


def main() -> None:
    args = parse_args()
    settings = {"quick": args.quick, "home_assistant": args.home_assistant, "peer": PEER_PACKAGE}
    run_and_record(lambda stack: run(args, stack), settings, args.out, print_report)


if __name__ == "__main__":
    main()
