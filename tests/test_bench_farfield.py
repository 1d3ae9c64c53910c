"""bench/farfield.py's own arithmetic: the clips without speech and how their transcripts are counted apart from
the WER of the clips with speech."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = str(ROOT / "bench")
sys.path.insert(0, BENCH)
import farfield  # noqa: E402  (bench/ is not a package)
from asr import Recording  # noqa: E402
from common import RATE, Pcm  # noqa: E402

while BENCH in sys.path:  # the benchmarks' bench/rtc.py must not shadow the rtc package for the tests after this
    sys.path.remove(BENCH)

pytestmark = pytest.mark.fast


def voice(seed: int) -> Recording:
    rng = np.random.default_rng(seed)
    return Recording(f"v{seed}", "words", Pcm.from_floats(0.1 * rng.standard_normal(RATE)))


def test_noise_alone_is_each_noise_at_each_level_with_no_speech_to_hear() -> None:
    clips = farfield.noise_alone([voice(seed) for seed in range(5)], quick=False)
    assert len(clips) == 4 * 3 * 2 and all(clip.text == "" for clip in clips)
    for clip in clips:
        level = float(clip.name.split()[1])
        rms = np.sqrt(np.mean(clip.pcm.floats(np.float64) ** 2))
        assert 20 * np.log10(rms) == pytest.approx(level, abs=0.5), clip.name


def test_texts_written_for_noise_alone_are_counted_and_kept_out_of_the_wer() -> None:
    def row(server: str, phase: str, recording: str, reference: str, text: str) -> dict:
        return {"beam": 1, "server": server, "phase": phase, "recording": recording, "reference": reference,
                "text": text, "error": None, "wer": None}  # fmt: skip

    results = [
        row("ours", "clean", "c", "turn on the light", "turn on the light"),
        row("peer", "clean", "c", "turn on the light", "turn on the lights"),
        *(row(name, farfield.NOISE_ALONE, "hum -40 dBFS #1", "", "") for name in ("ours", "peer")),
        row("ours", farfield.NOISE_ALONE, "babble -40 dBFS #1", "", "Thank you."),
        row("peer", farfield.NOISE_ALONE, "babble -40 dBFS #1", "", "of the Chinese"),
        row("ours", farfield.NOISE_ALONE, "babble -40 dBFS #2", "", " . "),  # punctuation alone is no words
        row("peer", farfield.NOISE_ALONE, "babble -40 dBFS #2", "", "we tour this"),
    ]
    [clean] = [condition for condition in farfield.CONDITIONS if condition.name == "clean"]
    summary = farfield.summarise(results, [1], [clean])[1]
    assert summary["all"]["ours"] == 0 and summary["all"]["peer"] == pytest.approx(0.25)
    alone = summary[farfield.NOISE_ALONE]
    assert alone["hum"] == {"clips": 1, "ours": 0, "peer": 0}
    assert alone["babble"] == {"clips": 2, "ours": 1, "peer": 2}
    assert alone["pink"] == {"clips": 0, "ours": 0, "peer": 0}
