"""`python tests/faulty_server.py ARGS`: the real server, whose model calls fail when a request asks them to.

Tests that need a model to fail inside a server process run this instead of `python -m wis_server`. A Whisper
decode fails when its prompt holds MARKER (the `prompt` of an HTTP request, or a Wyoming `transcribe` event's
`transcript_terms`); a Piper synthesis fails when its text does. Each raises in the engine's worker thread, where a
real model's error would come from, so everything between the model and the client is the production path. Only
requests that carry the marker fail, so the very next request shows whether the server recovered.

A WebRTC peer connection whose offer holds MARKER (e.g. as its session name, `s=raise-please`) fails to close when
the server's rtc package closes it: `RTCPeerConnection.close()` raises before it has stopped anything, as aiortc's
does part way on some offers. aiortc's own call (it closes a connection whose browser said goodbye, then reports the
state the server acts on) runs as shipped, so that the server's close of such a connection fails too. An offer
that holds SLOW_MARKER waits SLOW_SECONDS before aiortc takes it, so that a client can leave while it is answered.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from aiortc import RTCPeerConnection, RTCSessionDescription

from wis_server.__main__ import main
from wyoming_wis.asr.decoder import Decoded, Decoder, Job
from wyoming_wis.tts.piper import PiperEngine

MARKER = "raise-please"
ASR_FAILURE = "injected Whisper failure"
TTS_FAILURE = "injected Piper failure"
RTC_CLOSE_FAILURE = "injected RTCPeerConnection.close failure"
SLOW_MARKER = "slow-please"
SLOW_SECONDS = 1.0


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
    _install_rtc()


def _install_rtc() -> None:
    """Mark a peer connection given an offer with MARKER (its close raises then); slow one with SLOW_MARKER."""
    set_remote, close = RTCPeerConnection.setRemoteDescription, RTCPeerConnection.close

    async def marking_set_remote(self: RTCPeerConnection, description: RTCSessionDescription) -> Any:
        self._wis_fail_close = MARKER in description.sdp  # type: ignore[attr-defined]
        if SLOW_MARKER in description.sdp:
            await asyncio.sleep(SLOW_SECONDS)
        return await set_remote(self, description)

    async def fail() -> None:
        raise RuntimeError(RTC_CLOSE_FAILURE)

    def failing_close(self: RTCPeerConnection) -> Coroutine[Any, Any, None]:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if getattr(self, "_wis_fail_close", False) and caller.startswith("rtc."):
            return fail()
        return close(self)

    RTCPeerConnection.setRemoteDescription = marking_set_remote  # type: ignore[method-assign]
    RTCPeerConnection.close = failing_close  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    main()
