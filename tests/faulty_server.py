"""`python tests/faulty_server.py ARGS`: the real server, whose model calls fail when a request asks them to.

Tests that need a model to fail inside a server process run this instead of `python -m wyoming_wis`. A Whisper
decode fails when its prompt holds MARKER (the `prompt` of an HTTP request, or a Wyoming `transcribe` event's
`transcript_terms`); a Piper synthesis fails when its text does. Each raises in the engine's worker thread, where a
real model's error would come from, so everything between the model and the client is the production path. Only
requests that carry the marker fail, so the very next request shows whether the server recovered.
"""

from __future__ import annotations

from wyoming_wis.__main__ import main
from wyoming_wis.asr.decoder import Decoded, Decoder, Job
from wyoming_wis.tts.piper import PiperEngine

MARKER = "raise-please"
ASR_FAILURE = "injected Whisper failure"
TTS_FAILURE = "injected Piper failure"


def install() -> None:
    """Patch the two model calls; everything else stays as shipped."""
    decode, phoneme_ids = Decoder.decode, PiperEngine._phoneme_ids

    def failing_decode(self: Decoder, jobs: list[Job]) -> list[Decoded]:
        if any(MARKER in job.options.prompt for job in jobs):
            raise RuntimeError(ASR_FAILURE)
        return decode(self, jobs)

    def failing_phoneme_ids(self: PiperEngine, text: str) -> list[list[int]]:
        if MARKER in text:
            raise RuntimeError(TTS_FAILURE)
        return phoneme_ids(self, text)

    Decoder.decode = failing_decode  # type: ignore[method-assign]
    PiperEngine._phoneme_ids = failing_phoneme_ids  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    main()
