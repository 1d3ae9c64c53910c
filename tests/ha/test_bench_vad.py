"""bench/ha_vad.py, through which bench/endpoint.py lets Home Assistant's own VAD decide where `audio-stop` goes:
it must end a spoken command in the silence after it, as the pipeline does, and at the segmenter's 15 s cap.

HA 2024.3 has no audio enhancer (microVAD came with it later), and the benchmark runs on a newer HA (bench/endpoint.py
`HA_VERSION`).
"""

from __future__ import annotations

import sys

import pytest
from support import RATE, ROOT, corpus

pytest.importorskip("homeassistant.components.assist_pipeline.audio_enhancer", reason="no microVAD in this HA")
sys.path.insert(0, str(ROOT / "bench"))
from ha_vad import stop_chunk  # noqa: E402  (bench/ is not a package)

CHUNK_SECONDS = 0.01  # BYTES_PER_CHUNK


def silence(seconds: float) -> bytes:
    return bytes(int(seconds * RATE) * 2)


async def test_ends_in_the_silence_after_the_command() -> None:
    """Not before the 0.7 s of silence that HA waits by default, and well before the 3 s that follow."""
    speech = (await corpus(2))[1][0].trimmed(margin=0.0)  # LJ001-0002, 1.9 s
    stop, capped = stop_chunk(silence(0.3) + speech.audio + silence(3.0))
    assert stop is not None and not capped
    ended = (stop + 1) * CHUNK_SECONDS - 0.3
    assert speech.seconds + 0.7 <= ended <= speech.seconds + 2.0, (ended, speech.seconds)


async def test_a_command_that_never_pauses_ends_at_the_cap() -> None:
    speech = (await corpus(1))[0][0].trimmed(margin=0.0)  # LJ001-0001, 9.7 s: twice is past the 15 s cap
    stop, capped = stop_chunk(speech.audio + speech.audio)
    assert capped
    assert stop is not None and abs((stop + 1) * CHUNK_SECONDS - 15.0) < 0.02


async def test_no_speech_never_ends() -> None:
    """The segmenter waits for a command to start; silence alone runs into the cap only."""
    assert stop_chunk(silence(5.0)) == (None, False)
