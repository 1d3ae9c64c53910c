"""Turns the server ends: Home Assistant runs no VAD of its own for a wyoming STT that says it needs none
(`requires_external_vad: false`, as ours does) and streams the satellite's audio until our transcript.

Read from HA 2026.11.0: wyoming/stt.py `WyomingSttProvider.__init__` copies the program's `requires_external_vad`
into its `audio_processing`, and `async_process_audio_stream` returns on the first `transcript`, cancelling the upload
(no audio-stop); assist_pipeline/default_pipeline.py `speech_to_text` builds its VoiceCommandSegmenter (and with it
the stt-vad-start/-end events and its 15 s cap) only for a provider that `requires_external_vad`, and fails the run
with `stt-no-text-recognized` on an empty transcript. 2026.10.0 is the first whose wyoming STT passes the flag on
(read from its wheel: 2026.9.4's has no `audio_processing`); on older ones HA's VAD ends every turn.

Each turn streams at the pace it was spoken, with more silence after the speech than the server needs: a stream
that runs out makes HA send audio-stop, and then HA, not the server, ended the turn. The server's log says why it
ended each turn (wyoming_wis/asr/turn.py `Reason`), HA's own events say when; `-rP` shows the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pytest
from conftest import MAX_TURN_SECONDS, NO_SPEECH_SECONDS, Wis
from homeassistant.components.assist_pipeline.pipeline import (
    PipelineEvent,
    PipelineEventType,
    PipelineStage,
    async_create_default_pipeline,
)
from homeassistant.components.wyoming.stt import WyomingSttProvider
from replies import words
from support import RATE, Live, Pcm, corpus, espeak, wer

pytestmark = pytest.mark.skipif(
    "audio_processing" not in vars(WyomingSttProvider),
    reason="this HA's wyoming STT does not pass requires_external_vad on (2026.10 is the first): its VAD ends turns",
)

SILENCE_AFTER = 8.0  # seconds of silence after the speech: longer than any limit the server ends a turn at
# How a command's turn ends: a command Home Assistant's own sentences recognise, judged whole, or by the silence that
# ends any turn (1.25 s), where the turn model was not sure enough (its score for the same recording varies a little
# with where the live stream's pieces fall)
AFTER_A_COMMAND = ("command", "complete", "silence")


@dataclass
class Turn:
    """One turn through the pipeline: what HA heard, why the server ended it, and HA's events."""

    live: Live
    events: list[PipelineEvent]
    reasons: list[str]  # why the server ended the turns it ended meanwhile (its log)

    def at(self, kind: PipelineEventType) -> datetime:
        """When HA sent its event of that kind (the first)."""
        return datetime.fromisoformat(next(event.timestamp for event in self.events if event.type == kind))

    @property
    def heard(self) -> str | None:
        ends = [event.data for event in self.events if event.type == PipelineEventType.STT_END]
        return ends[0]["stt_output"]["text"] if ends else None

    @property
    def errors(self) -> list[str]:
        return [event.data["code"] for event in self.events if event.type == PipelineEventType.ERROR]

    @property
    def ended(self) -> datetime:
        """When HA had the STT's answer: its stt-end, or the error an empty transcript makes."""
        return self.at(PipelineEventType.ERROR if self.errors else PipelineEventType.STT_END)

    def since(self, moment: datetime | None) -> float | None:
        """Seconds from `moment` to `ended` (negative: the turn ended before it); None: the stream never got there."""
        return None if moment is None else (self.ended - moment).total_seconds()

    def figures(self) -> str:
        """HA's times, for the messages and the report."""
        last = self.since(self.live.speech_sent)
        return (
            f"heard {self.heard!r}, errors {self.errors}, ended by {self.reasons}; seconds to the end of STT: "
            f"from stt-start {self.since(self.at(PipelineEventType.STT_START)):.2f}, "
            f"from the first audio {self.since(self.live.started):.2f}, "
            f"from the last speech sent {'(not sent)' if last is None else f'{last:.2f}'}"
        )


@pytest.fixture
async def pipeline(wis: Wis) -> str:
    """The id of a pipeline as HA makes it for a new assistant, with our STT, ending at STT: the turn is under test."""
    assert wis.stt.audio_processing.requires_external_vad is False, wis.stt.audio_processing
    made = await async_create_default_pipeline(
        wis.hass, stt_engine_id=wis.stt_id, tts_engine_id=wis.tts_id, pipeline_name="wyoming-wis"
    )
    assert made is not None
    return made.id


async def turn(wis: Wis, pipeline_id: str, speech: Pcm) -> Turn:
    """`speech` and SILENCE_AFTER through the pipeline, live; the server must have ended the turn, once."""
    live = Live(speech, SILENCE_AFTER)
    logged = len(wis.server.turns_ended())
    events = await wis.pipeline_events(pipeline_id, live.stream(), PipelineStage.STT)
    done = Turn(live, events, wis.server.turns_ended()[logged:])
    print(done.figures())  # -rP shows them
    assert not live.ran_out, f"HA sent audio-stop: the server did not end the turn ({done.figures()})"
    assert PipelineEventType.STT_VAD_END not in [event.type for event in events], "HA ran a VAD of its own"
    assert len(done.reasons) == 1, done.figures()
    return done


async def test_command(wis: Wis, pipeline: str) -> None:
    command = "Turn on the kitchen light"
    done = await turn(wis, pipeline, await espeak(command, "en-us"))
    assert done.heard is not None and wer(command, done.heard) == 0, done.figures()
    assert done.reasons[0] in AFTER_A_COMMAND, done.figures()
    # what a satellite is told at stt-start: with neither auto gain nor noise suppression preferred, HA's esphome
    # assist_satellite has a Voice PE stream its raw microphone channel (our --processed-audio asks for both)
    [started] = [event.data for event in done.events if event.type == PipelineEventType.STT_START]
    preferred = {
        key: started["audio_processing"][key]
        for key in ("prefers_auto_gain_enabled", "prefers_noise_reduction_enabled")
    }
    assert preferred == {"prefers_auto_gain_enabled": False, "prefers_noise_reduction_enabled": False}, started


async def test_command_with_a_pause(wis: Wis, pipeline: str) -> None:
    """ "Turn on the living room ... lamp": the words before the 0.6 s pause are a command of their own (lights in
    an area), but the speaker goes on; the turn is the whole command."""
    command = "Turn on the living room lamp"
    done = await turn(wis, pipeline, await espeak(command, "en-us", pause=0.6))
    assert done.heard is not None and wer(command, done.heard) == 0, done.figures()
    assert done.reasons[0] in AFTER_A_COMMAND, done.figures()


async def test_long_turn(wis: Wis, pipeline: str) -> None:
    """Speech that goes on past --max-turn-seconds (LJ Speech recordings one after another, no pause between them):
    the turn ends there, with what was said until then."""
    recordings = await corpus(3)  # 9.7 + 1.9 + 9.7 s
    speech = Pcm(b"".join(pcm.trimmed(margin=0.0).audio for pcm, _ in recordings))
    said = words(" ".join(text for _, text in recordings))
    before_limit = words(" ".join(text for _, text in recordings[:2]))  # said in the first 11.4 s
    done = await turn(wis, pipeline, speech)
    assert done.reasons == ["max-speech"], done.figures()
    heard = words(done.heard or "")
    assert len(before_limit) <= len(heard) < len(said), done.figures()
    assert wer(" ".join(said[: len(heard)]), " ".join(heard)) <= 0.15, done.figures()
    after = done.since(done.live.started)  # the speech starts at once
    assert after is not None and after >= MAX_TURN_SECONDS, done.figures()


async def test_silent_turn(wis: Wis, pipeline: str) -> None:
    """Nothing said: an empty transcript after --no-speech-seconds, which HA's pipeline reports as no text."""
    done = await turn(wis, pipeline, Pcm(bytes(2 * RATE // 10)))  # 0.1 s, then the silence
    assert done.reasons == ["no-speech"], done.figures()
    assert done.errors == ["stt-no-text-recognized"], done.figures()
    after = done.since(done.live.started)
    assert after is not None and after >= NO_SPEECH_SECONDS, done.figures()
