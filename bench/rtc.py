"""WebRTC benchmark: end of speech to final text for a browser, against Wyoming on the same server.

One wyoming-wis (bundled Whisper base, its defaults) is started here. The LJ
Speech clips shipped with the tests are each said, at real-time pace and
followed by 0.7 s of silence (Home Assistant's end of speech), twice: by a
browser stand-in over WebRTC (aiortc, Opus at 48 kHz, one connection for all
utterances with the track detached between them, as a page does; timed from
`stop` sent to `infer` received), and over Wyoming (timed from `audio-stop` to
`transcript`, bench/asr.py's client). The two frontends share the session
code, so the WebRTC time should be Wyoming's plus the Opus, jitter-buffer and
data-channel overhead.

    .venv/bin/python bench/rtc.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))
from asr import Recording, lj_recordings, transcribe, wer  # noqa: E402  (bench/ is not a package)
from common import (  # noqa: E402
    CACHE,
    ROOT,
    fmt,
    fmt_s,
    log,
    median,
    percentile,
    run_and_record,
    start_all_frontends,
)
from rtc_client import RATE, Client, PlayedTrack  # noqa: E402  (tests/rtc_client.py: the browser stand-in)

TRAILING_SILENCE = 0.7


@dataclass
class Result:
    frontend: str
    recording: str
    audio_s: float
    after_stop_s: float | None
    partials: int
    wer: float | None
    error: str | None = None


def at_48k(recording: Recording) -> np.ndarray:
    """16 kHz int16 to 48 kHz by repeating samples (the browser's rate; Opus and the server low-pass it anyway)."""
    return np.repeat(np.frombuffer(recording.pcm.audio, dtype=np.int16), RATE // 16000)


async def over_webrtc(url: str, recordings: Sequence[Recording]) -> list[Result]:
    client = Client(url)
    await client.connect()
    results = []
    try:
        for recording in recordings:
            heard = await client.utterance(at_48k(recording), TRAILING_SILENCE, start={"language": "en"})
            ok = heard.infer["type"] == "infer"
            results.append(
                Result(
                    "webrtc",
                    recording.name,
                    recording.pcm.seconds,
                    heard.stop_to_infer if ok else None,
                    len(heard.partials),
                    wer([recording.text], [heard.text]) if ok else None,
                    None if ok else str(heard.infer),
                )
            )
            await client.detach()
            await asyncio.sleep(0.5)
            client.attach(PlayedTrack())
    finally:
        await client.close()
    return results


async def over_wyoming(port: int, recordings: Sequence[Recording]) -> list[Result]:
    results = []
    for recording in recordings:
        done = await transcribe("ours", port, "rtc", recording, True, TRAILING_SILENCE, 120)
        seconds = recording.pcm.seconds
        results.append(Result("wyoming", recording.name, seconds, done.after_stop_s, done.chunks, done.wer, done.error))
    return results


async def run(args: argparse.Namespace, stack: ExitStack) -> dict:
    server, http_url = await start_all_frontends("ours", CACHE / "data", stack)
    port = server.port
    url = http_url + "/api/rtc/asr"
    recordings = lj_recordings()
    await over_wyoming(port, recordings[:1])  # warm up
    results: list[Result] = []
    for round_number in range(args.rounds):
        log(f"round {round_number + 1} of {args.rounds}")
        results += await over_webrtc(url, recordings)
        results += await over_wyoming(port, recordings)
    summary = {}
    for frontend in ("webrtc", "wyoming"):
        times = [r.after_stop_s for r in results if r.frontend == frontend and r.after_stop_s is not None]
        scores = [r.wer for r in results if r.frontend == frontend and r.wer is not None]
        summary[frontend] = {
            "median_s": median(times),
            "p95_s": percentile(times, 95),
            "max_s": max(times, default=None),
            "mean_wer": sum(scores) / len(scores) if scores else None,
            "errors": sum(r.error is not None for r in results if r.frontend == frontend),
        }
    return {"summary": summary, "results": [asdict(r) for r in results]}


def report(document: dict, out: Path) -> None:
    summary = document["summary"]
    print(f"Command: {document['command']}")
    print(f"Machine: {document['machine']['cpu_count']} CPUs ({document['machine']['cpu_model']})")
    print("End of speech (stop / audio-stop sent) to the final text, LJ Speech clips + 0.7 s silence, Whisper base:")
    for frontend, numbers in summary.items():
        print(
            f"  {frontend:8} median {fmt_s(numbers['median_s'])}  p95 {fmt_s(numbers['p95_s'])}  "
            f"max {fmt_s(numbers['max_s'])}  mean WER {fmt(numbers['mean_wer'], '{:.3f}')}  errors {numbers['errors']}"
        )
    print(f"Results: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or ROOT / "bench" / "results" / f"rtc-{time.strftime('%Y%m%d-%H%M%S')}.json"
    run_and_record(lambda stack: run(args, stack), {"rounds": args.rounds}, out, report)


if __name__ == "__main__":
    main()
