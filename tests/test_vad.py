"""The speaker's own speech under someone else's (a TV across the room): `SpeechDetector.foreground_end`."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import CORPUS, load_audio

from wyoming_wis.asr.vad import LEAD_IN, SpeechDetector

pytestmark = pytest.mark.fast

RATE = 16000


def scored(audio: np.ndarray) -> SpeechDetector:
    detector = SpeechDetector()
    detector.update(audio.astype(np.float32))
    return detector


def reading(name: str) -> np.ndarray:
    return load_audio(CORPUS / f"{name}.flac").samples()


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(audio**2)))


@pytest.fixture(scope="module")
def speaker() -> np.ndarray:
    return reading("LJ001-0002")  # 1.9 s: "in being comparatively modern."


def under_tv(speaker: np.ndarray, db: float, lead: float = 0.5, tv: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Someone reading on `db` under the speaker from the start and for 7 s after them; where the speaker ends."""
    tv = reading("LJ001-0003") if tv is None else tv  # 9.7 s of reading, hardly a pause
    mixed = tv * rms(speaker) / rms(tv) * 10 ** (-db / 20)
    start = int(lead * RATE)
    mixed[start : start + len(speaker)] += speaker
    return mixed, start + len(speaker)


@pytest.mark.parametrize("db", [15.0, 20.0])
def test_under_a_tv_the_speakers_end_is_found(speaker: np.ndarray, db: float) -> None:
    mixed, end = under_tv(speaker, db)
    detector = scored(mixed)
    assert detector.speech_end() > end + 5 * RATE  # Silero hears the TV on as speech
    own = detector.foreground_end()
    assert own is not None and abs(own - end) < 0.35 * RATE, (own, end)


def test_a_tv_silero_hears_only_faintly_at_first_is_a_background(speaker: np.ndarray) -> None:
    """Silero starts cold: this reading, joined 0.1 s into its first word, scores one lead-in window over 0.5."""
    tv = reading("LJ001-0007")[int(0.1 * RATE) :]
    mixed, end = under_tv(speaker, 15.0, tv=tv)
    detector = scored(mixed)
    lead_in = detector._probs[:LEAD_IN]
    assert (lead_in >= 0.5).sum() == 1 and lead_in.max() < 0.9  # the case the rule must not miss
    own = detector.foreground_end()
    assert own is not None and abs(own - end) < 0.35 * RATE, (own, end)


def test_a_stream_that_starts_quiet_leaves_the_end_to_silero(speaker: np.ndarray) -> None:
    quiet = np.concatenate([np.zeros(RATE // 2), speaker, np.zeros(RATE)])
    noisy = quiet + np.random.default_rng(0).normal(0, rms(speaker) / 30, len(quiet))  # a fan, 30 dB under
    for audio in (quiet, noisy):
        assert scored(audio).foreground_end() is None


def test_a_speaker_talking_from_the_start_is_not_a_background(speaker: np.ndarray) -> None:
    """The speaker went straight on from the wake word: the start is their speech, not someone else's."""
    mixed, _ = under_tv(speaker, 15.0, lead=0.0)
    assert scored(np.concatenate([speaker, np.zeros(RATE)])).foreground_end() is None
    assert scored(mixed).foreground_end() is None  # the TV under them is not told from them: Silero's end stands
