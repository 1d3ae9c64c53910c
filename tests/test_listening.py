"""The core's turn controller (wyoming_wis/turns/listening.py) on stand-in sessions: what every frontend relies on.

The sessions here end a turn when the test says (as the VAD and the turn judge would) and transcribe what they were
fed as its length; the real sessions under it are tested end to end through Wyoming, WebRTC and the Realtime API.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import pytest

from wyoming_wis.asr.assemble import Transcript
from wyoming_wis.asr.turn import TurnEnd
from wyoming_wis.audio import WHISPER_RATE, AudioFormat
from wyoming_wis.errors import AudioTooLong, Busy
from wyoming_wis.requests import AsrRequest
from wyoming_wis.turns.listening import (
    MAX_ANSWERING,
    MIN_COMMIT_SECONDS,
    Failed,
    Final,
    Listening,
    Partial,
    SpeechStarted,
    TurnEnded,
    TurnEvent,
)

pytestmark = pytest.mark.fast

PCM16 = AudioFormat(WHISPER_RATE, 2, 1)
SERVER_ENDS = AsrRequest(end_of_turn="default")
CLIENT_ENDS = AsrRequest()


def pcm(seconds: float, value: int = 1000) -> bytes:
    return np.full(int(seconds * WHISPER_RATE), value, dtype="<i2").tobytes()


class StandInSession:
    """Keeps what it is fed; its turn ends when `end_turn` says; its transcript is the samples it kept, by value."""

    def __init__(self, on_text: Any, max_seconds: float) -> None:
        self.audio = np.zeros(0, dtype=np.float32)
        self.on_text = on_text
        self.max_seconds = max_seconds
        self.seconds = 0.0
        self.closed = False
        self.finish_gate: asyncio.Event | None = None
        self._turn: asyncio.Future[TurnEnd] = asyncio.get_running_loop().create_future()
        self.speech: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    @property
    def samples(self) -> int:
        return len(self.audio)

    @property
    def turn_over(self) -> bool:
        return self._turn.done()

    async def feed(self, data: bytes, audio_format: AudioFormat) -> None:
        samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768
        await self.feed_samples(samples)

    async def feed_samples(self, samples: np.ndarray, cleaned: bool = False) -> None:
        if self._turn.done():
            return
        self.seconds += len(samples) / WHISPER_RATE
        if self.seconds > self.max_seconds:
            raise AudioTooLong("too long")
        self.audio = np.concatenate([self.audio, samples])

    def end_turn(self, reason: str, at: int, speech_until: int | None) -> None:
        self._turn.set_result(TurnEnd(reason, at, 1.0, speech_until))  # type: ignore[arg-type]

    async def speech_start(self) -> int:
        return await asyncio.shield(self.speech)

    async def turn_end(self) -> TurnEnd:
        return await asyncio.shield(self._turn)

    def after_turn(self) -> np.ndarray:
        return self.audio[self._turn.result().samples :].copy() if self._turn.done() else np.zeros(0, np.float32)

    async def finish(self, ended: float | None = None) -> Transcript:
        if self.finish_gate is not None:
            await self.finish_gate.wait()
        kept = self.audio[: self._turn.result().samples] if self._turn.done() else self.audio
        values = sorted({round(float(v) * 32768) for v in kept})
        text = " ".join(str(value) for value in values)
        if self.on_text is not None and text:
            await self.on_text(text)
        return Transcript(text, "en", len(kept) / WHISPER_RATE, [])

    def close(self) -> None:
        self.closed = True
        if not self.speech.done():
            self.speech.cancel()
        if not self._turn.done():
            self._turn.cancel()

    async def end_audio(self) -> None:
        pass

    async def __aenter__(self) -> StandInSession:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class Decoding:
    model: str
    language: str | None


class StandInCore:
    def __init__(self, max_seconds: float = 60.0) -> None:
        self.sessions: list[StandInSession] = []
        self.requests: list[AsrRequest] = []  # each session's
        self.max_seconds = max_seconds

    def resolve(self, request: AsrRequest) -> Decoding:
        return Decoding(request.model or "base", request.language)

    def open_asr(self, request: AsrRequest, *, frontend: str, on_text: Any = None) -> Any:
        session = StandInSession(on_text, self.max_seconds)
        self.sessions.append(session)
        self.requests.append(request)
        return session


async def listening(core: StandInCore, request: AsrRequest, many: bool) -> tuple[Listening, list[TurnEvent]]:
    events: list[TurnEvent] = []

    async def heard(event: TurnEvent) -> None:
        events.append(event)

    return Listening(core, request, frontend="realtime", on_event=heard, many=many), events  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_the_audio_after_a_server_ended_turn_starts_the_next() -> None:
    """No word lost between turns: what came after the end (value 2) is the next turn's, ahead of what follows."""
    core = StandInCore()
    heard, events = await listening(core, SERVER_ENDS, many=True)
    await heard.feed(pcm(1.0, 1000) + pcm(0.5, 2000), PCM16)
    core.sessions[0].end_turn("complete", WHISPER_RATE, int(0.8 * WHISPER_RATE))
    await heard.feed(pcm(0.5, 3000), PCM16)  # the next turn, after the carried-over audio
    core.sessions[1].end_turn("silence", WHISPER_RATE, WHISPER_RATE)
    await heard.feed(pcm(0.1, 4000), PCM16)
    await heard.drain()
    ended = [event for event in events if isinstance(event, TurnEnded)]
    finals = [event for event in events if isinstance(event, Final)]
    assert [(e.turn, e.by, e.reason) for e in ended] == [(1, "server", "complete"), (2, "server", "silence")]
    assert ended[0].start == 0.0 and ended[0].end == pytest.approx(0.8)
    assert ended[1].start == pytest.approx(1.0) and ended[1].end == pytest.approx(2.0)
    assert [final.transcript.text for final in finals] == ["1000", "2000 3000"]
    assert heard.heard == pytest.approx(2.1)


async def test_a_change_applies_from_the_next_turn_and_answers_the_one_being_heard() -> None:
    """The Realtime API's session.update mid-turn: the turn being heard is ended as a commit would end it and
    answered under its own request, the next opens under the new one, and times count on from the listening's
    start. A turn with less than MIN_COMMIT_SECONDS of audio is dropped instead."""
    core = StandInCore()
    heard, events = await listening(core, CLIENT_ENDS, many=True)
    await heard.feed(pcm(0.5, 1000), PCM16)
    german, french = AsrRequest(language="de"), AsrRequest(language="fr")
    await heard.change(german)
    await heard.feed(pcm(MIN_COMMIT_SECONDS / 2, 2000), PCM16)
    await heard.change(french)
    await heard.feed(pcm(0.5, 3000), PCM16)
    await heard.commit()
    await heard.drain()
    assert core.requests == [CLIENT_ENDS, german, french]
    assert heard.request == french and heard.decoding == core.resolve(french)
    ended = [event for event in events if isinstance(event, TurnEnded)]
    assert [(event.turn, event.by, event.reason) for event in ended] == [
        (1, "client", "commit"),
        (3, "client", "commit"),
    ]
    assert ended[1].start == pytest.approx(0.5 + MIN_COMMIT_SECONDS / 2)
    assert [event.transcript.text for event in events if isinstance(event, Final)] == ["1000", "3000"]
    assert core.sessions[1].closed and not any(event.turn == 2 for event in events)


async def test_turns_are_answered_in_order() -> None:
    core = StandInCore()
    heard, events = await listening(core, CLIENT_ENDS, many=True)
    await heard.feed(pcm(0.5, 1000), PCM16)
    core_first = core.sessions[0]
    core_first.finish_gate = asyncio.Event()  # the first turn's decode is slow
    first = await heard.commit()
    await heard.feed(pcm(0.5, 2000), PCM16)
    second = await heard.commit()
    await settle()
    assert not any(isinstance(event, Final) for event in events)  # the second waits for the first
    core_first.finish_gate.set()
    await asyncio.gather(first, second)  # type: ignore[arg-type]
    assert [event.turn for event in events if isinstance(event, Final)] == [1, 2]


async def test_a_listening_of_one_turn_drops_audio_after_it() -> None:
    core = StandInCore()
    heard, events = await listening(core, SERVER_ENDS, many=False)
    await heard.feed(pcm(0.5, 1000), PCM16)
    core.sessions[0].end_turn("complete", int(0.5 * WHISPER_RATE), int(0.4 * WHISPER_RATE))
    await heard.feed(pcm(0.5, 2000), PCM16)  # said after the end: not part of it, and no next turn
    answer = await heard.commit()  # the client's audio-stop: the server's answer
    assert answer is not None
    await answer
    assert heard.over and len(core.sessions) == 1
    assert [event.transcript.text for event in events if isinstance(event, Final)] == ["1000"]


async def test_a_turn_nobody_spoke_in_is_not_answered_when_many() -> None:
    core = StandInCore()
    heard, events = await listening(core, SERVER_ENDS, many=True)
    await heard.feed(pcm(1.0, 0), PCM16)
    core.sessions[0].end_turn("no-speech", WHISPER_RATE, None)
    await heard.feed(pcm(0.2, 5), PCM16)
    await heard.drain()
    assert events == [] and len(core.sessions) == 2 and core.sessions[0].closed


async def test_clear_drops_the_turn_and_commits_are_bounded() -> None:
    core = StandInCore()
    heard, events = await listening(core, CLIENT_ENDS, many=True)
    await heard.feed(pcm(0.5, 1000), PCM16)
    await heard.clear()
    assert core.sessions[0].closed and heard.turn is None
    gates = []
    for _ in range(MAX_ANSWERING):
        await heard.feed(pcm(0.2, 7), PCM16)
        core.sessions[-1].finish_gate = gate = asyncio.Event()
        gates.append(gate)
        await heard.commit()
    await heard.feed(pcm(0.2, 7), PCM16)
    with pytest.raises(Busy):
        await heard.commit()
    for gate in gates:
        gate.set()
    await heard.drain()
    assert len([event for event in events if isinstance(event, Final)]) == MAX_ANSWERING


async def test_a_feed_error_ends_the_turn_and_the_next_audio_opens_another() -> None:
    core = StandInCore(max_seconds=1.0)
    heard, events = await listening(core, CLIENT_ENDS, many=True)
    await heard.feed(pcm(0.8), PCM16)
    with pytest.raises(AudioTooLong):
        await heard.feed(pcm(0.8), PCM16)
    assert core.sessions[0].closed and heard.turn is None
    await heard.feed(pcm(0.3, 9), PCM16)
    assert heard.turn == 2 and len(core.sessions) == 2


async def test_events_carry_partials_and_speech() -> None:
    core = StandInCore()
    heard, events = await listening(core, SERVER_ENDS, many=True)
    await heard.feed(pcm(0.5, 1000), PCM16)
    core.sessions[0].speech.set_result(800)
    await settle()
    await core.sessions[0].on_text("hello")
    assert events == [SpeechStarted(1, 0.05), Partial(1, "hello", "hello")]


async def test_a_failed_judgement_fails_the_turn() -> None:
    core = StandInCore()
    heard, events = await listening(core, SERVER_ENDS, many=True)
    await heard.feed(pcm(0.5, 1000), PCM16)
    core.sessions[0]._turn.set_exception(Busy("busy"))
    await settle()
    assert [type(event) for event in events] == [Failed] and events[0].turn == 1  # type: ignore[union-attr]
    await heard.feed(pcm(0.5, 1000), PCM16)
    assert heard.turn == 2
    heard.close()
