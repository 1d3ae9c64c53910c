"""Whole assist pipelines, as a voice satellite runs them, with HA's default conversation agent in between.

assist_pipeline/__init__.py `async_pipeline_from_audio_stream` runs assist_pipeline/pipeline.py `PipelineRun`:
`speech_to_text` (our STT entity's `async_process_audio_stream`, behind HA's VAD), `recognize_intent` (the default
agent, conversation/default_agent.py, matching HA's sentences for HassTurnOn), `text_to_speech` (our TTS through the
TTS manager), whose audio a satellite fetches from the `/api/tts_proxy/...` URL in the `tts-end` event. The pipeline
is the one HA makes for a new assistant: pipeline.py `async_create_default_pipeline` with our engines.
"""

from __future__ import annotations

from typing import Any

from conftest import HassClient, Wis, fetch, german_pipeline
from homeassistant.components.assist_pipeline.pipeline import (
    PipelineEventType,
    PipelineStage,
    async_create_default_pipeline,
)
from support import Pcm, chunks, espeak, stream, wer, within


async def run(wis: Wis, pipeline_id: str, pcm: Pcm, end_stage: PipelineStage) -> dict[PipelineEventType, Any]:
    """Run the pipeline on a recording (with a second of silence, for HA's VAD); its events' data by type."""
    return await wis.run_pipeline(pipeline_id, stream(chunks(pcm, trailing_silence=1.0)), end_stage)


async def test_english_command(wis: Wis, light: str, hass_client: HassClient) -> None:
    """A recorded "turn on the kitchen light": our STT hears it, HA turns the light on, our TTS says HA's reply."""
    pipeline = await async_create_default_pipeline(
        wis.hass, stt_engine_id=wis.stt_id, tts_engine_id=wis.tts_id, pipeline_name="wyoming-wis"
    )
    assert pipeline is not None, "HA would not make a pipeline with our STT and TTS for English"
    command = "Turn on the kitchen light"
    data = await run(wis, pipeline.id, await espeak(command, "en-us"), PipelineStage.TTS)

    heard = data[PipelineEventType.STT_END]["stt_output"]["text"]
    assert wer(command, heard) == 0, heard
    response = data[PipelineEventType.INTENT_END]["intent_output"]["response"]
    assert response["response_type"] == "action_done", response
    assert wis.hass.states.get(light).state == "on"

    reply = response["speech"]["plain"]["speech"]
    url = data[PipelineEventType.TTS_END]["tts_output"]["url"]
    audio = await within(20, "the reply's audio", fetch(hass_client, url, f"the reply {reply!r}"))
    await wis.assert_says(audio, reply)


async def test_german_command(wis: Wis, light: str) -> None:
    """A German pipeline hears "Schalte das Licht in der Küche ein": our STT transcribes it, HA's German sentences match
    HassTurnOn for the lights in the area Küche. The pipeline ends at the intent (our voices speak English)."""
    pipeline = await german_pipeline(wis, light, tts_engine=None, tts_language=None, tts_voice=None)
    command = "Schalte das Licht in der Küche ein"
    data = await run(wis, pipeline, await espeak(command, "de"), PipelineStage.INTENT)

    heard = data[PipelineEventType.STT_END]["stt_output"]["text"]
    assert wer(command, heard) <= 0.2, heard
    response = data[PipelineEventType.INTENT_END]["intent_output"]["response"]
    assert response["response_type"] == "action_done", response
    assert wis.hass.states.get(light).state == "on"
