"""Wake words through HA's own wyoming wake word entity and its assist pipeline, as a satellite that leaves wake word
detection to Home Assistant runs it.

homeassistant/components/wyoming/__init__.py sets up a `wake_word` platform for a server whose `info` has a wake
program; wyoming/wake_word.py `WyomingWakeWordProvider` lists `info.wake[0].models` and, for a pipeline, sends
`detect {names: [wake_word_id]}`, `audio-start` and chunks until the first `detection` naming that id. The pipeline
(assist_pipeline/pipeline.py `PipelineRun.wake_word_detection`) then hands the audio after it to the STT stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from conftest import Wis, entity_ids
from homeassistant.components import wake_word
from homeassistant.components.assist_pipeline.pipeline import (
    PipelineEventType,
    PipelineStage,
    async_create_default_pipeline,
    async_update_pipeline,
)
from support import RATE, Pcm, chunks, espeak, wer

SILENCE = b"\0\0" * RATE  # a second


async def live(pieces: list[bytes]) -> AsyncIterator[bytes]:
    """`pieces` at the pace they were spoken, as a satellite streams them: HA's wake word stage forwards the audio
    it reads to the wake word service until the detection comes back, and only what follows reaches the STT stage
    (a stream faster than real time would be spent on the wake word service before the detection arrives)."""
    for piece in pieces:
        yield piece
        await asyncio.sleep(len(piece) / (2 * RATE))


def entity(wis: Wis) -> wake_word.WakeWordDetectionEntity:
    entity_id = entity_ids(wis.hass, wis.entry).get("wake_word")
    assert entity_id, f"HA made no wake word entity for our server: {entity_ids(wis.hass, wis.entry)}"
    found = wake_word.async_get_wake_word_detection_entity(wis.hass, entity_id)
    assert found is not None
    return found


async def test_the_wake_word_entity_offers_our_models(wis: Wis) -> None:
    offered = {word.id: word for word in await entity(wis).get_supported_wake_words()}
    assert offered["okay_nabu"].name and offered["okay_nabu"].name != offered["okay_nabu_oww"].name, offered
    assert {"hey_jarvis", "alexa", "hey_mycroft", "hey_rhasspy_oww"} <= set(offered), offered
    if hasattr(offered["okay_nabu"], "phrase"):  # WakeWord has a phrase from HA 2024.5
        assert offered["okay_nabu"].phrase == "Okay Nabu"


async def test_a_pipeline_wakes_on_okay_nabu_then_our_stt_takes_the_command(wis: Wis) -> None:
    """ "Okay Nabu", a short pause, "Turn on the kitchen light" (espeak-ng), streamed as a satellite does from the wake
    word stage: HA's wake word stage detects it through our server, and the command after it is transcribed by our
    STT. (With a 0.7 s pause, HA's own VAD silence, HA 2026.2's VAD started the command in the pause, at 2.47 s, and
    ended it 0.7 s later, before the command was said.)"""
    pipeline = await async_create_default_pipeline(
        wis.hass, stt_engine_id=wis.stt_id, tts_engine_id=wis.tts_id, pipeline_name="wyoming-wis"
    )
    assert pipeline is not None
    await async_update_pipeline(wis.hass, pipeline, wake_word_entity=entity(wis).entity_id, wake_word_id="okay_nabu")
    command = "Turn on the kitchen light"
    wake, said = await espeak("Okay Nabu", "en-us"), await espeak(command, "en-us")
    audio = Pcm(SILENCE + wake.audio + SILENCE[: int(0.3 * RATE) * 2] + said.audio)
    stream = live(chunks(audio, trailing_silence=1.5))
    data = await wis.run_pipeline(pipeline.id, stream, PipelineStage.STT, start_stage=PipelineStage.WAKE_WORD)
    detected = data[PipelineEventType.WAKE_WORD_END]["wake_word_output"]
    assert detected["wake_word_id"] == "okay_nabu", detected
    assert 1000 <= detected["timestamp"] <= 3000, detected  # ms into the stream: the phrase ends at about 2 s
    heard = data[PipelineEventType.STT_END]["stt_output"]["text"]
    assert wer(command, heard) == 0, heard
