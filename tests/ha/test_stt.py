"""Speech-to-text through HA's wyoming STT entity, as HA hands it audio.

The call is `SpeechToTextEntity.internal_async_process_audio_stream` (homeassistant/components/stt/__init__.py; the
STT view `/api/stt/<entity>` calls it, the assist pipeline calls the `async_process_audio_stream` it wraps, in
assist_pipeline/pipeline.py `PipelineRun.speech_to_text`), which reaches homeassistant/components/wyoming/stt.py
`WyomingSttProvider.async_process_audio_stream`: `transcribe {language}`, 16 kHz audio, read until `transcript`.
HA sets no timeout there: each call here has one, so a hang fails fast.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import Wis
from homeassistant.components import stt
from support import Pcm, chunks, corpus, espeak, metadata, stream, wer, within


async def process(wis: Wis, pcm: Pcm, language: str, timeout: float = 30) -> stt.SpeechResult:
    async with asyncio.timeout(timeout):
        return await wis.stt.internal_async_process_audio_stream(metadata(language), stream(chunks(pcm)))


@pytest.mark.parametrize("language", ["en", "en-US"])
async def test_english_recordings(wis: Wis, language: str) -> None:
    """LJ Speech recordings; "en-US" is a BCP 47 tag as HA's UI and satellites use them: the server must take it
    for English (HA's own metadata check only accepts the languages we list, and Whisper lists "en")."""
    recordings = await corpus(3)
    heard = []
    for pcm, _ in recordings:
        result = await process(wis, pcm, language)
        assert result.result == stt.SpeechResultState.SUCCESS, result
        heard.append(result.text or "")
    reference = " ".join(text for _, text in recordings)
    score = wer(reference, " ".join(heard))
    assert score <= 0.15, f"WER {score:.2f}: heard {heard!r} for {[text for _, text in recordings]!r}"


async def test_languages_and_metadata(wis: Wis) -> None:
    """HA checks a stream's metadata against what we advertise before a pipeline runs (`check_metadata`)."""
    assert {"en", "de"} <= set(wis.stt.supported_languages)
    for language in ("en", "de"):
        assert wis.stt.check_metadata(metadata(language)), language


async def test_german(wis: Wis) -> None:
    text = "Schalte das Licht in der Küche ein"
    result = await process(wis, await espeak(text, "de"), "de")
    assert result.result == stt.SpeechResultState.SUCCESS, result
    assert wer(text, result.text or "") <= 0.2, result.text


async def test_unknown_language_does_not_hang(wis: Wis) -> None:
    """A language Whisper does not know (a satellite's setting, a typo): HA reads until a `transcript` or the end of
    the connection, so the server must answer (a transcript, or an error and close) at once, not leave HA waiting
    until its idle timeout."""
    pcm = await espeak("Turn on the kitchen light", "en-us")
    result = await within(2, "STT in an unknown language ('xx')", process(wis, pcm, "xx"))
    assert result.result in (stt.SpeechResultState.SUCCESS, stt.SpeechResultState.ERROR), result
