"""One script of turns through all four frontends against one server: the same turns come back from each.

Every frontend that listens (Wyoming, WebRTC's /api/rtc/asr, the Realtime API over a WebSocket and over a call)
goes through the one turn controller (wyoming_wis/turns/listening.py). The script is two utterances, each followed
either by a moment of silence and the client's commit (Wyoming's audio-stop, WebRTC's `stop`, the Realtime API's
`input_audio_buffer.commit`, over the WebSocket with the SDK and over the call's data channel), or by a pause that
the server ends the turn at (Wyoming at the pace spoken, WebRTC hands-free, the Realtime API's semantic_vad). Each
frontend must answer two turns, in order, each with its own utterance's words (not merged, not split, not lost),
and count them alike in /metrics (`wis_turns_total`: ended by `commit`, or by the server's reason).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import CORPUS, Server, assert_stops_cleanly, load_audio, start_server, stream, transcribe, wer
from rtc_client import Client, pause, speech
from test_realtime import GA_MANUAL, RATE, connect, events_until, send
from test_realtime_calls import COMPLETED, call, transcription
from test_rtc import free_range, url

SCRIPT = [CORPUS / "LJ001-0002.flac", CORPUS / "LJ001-0008.flac"]  # "in being comparatively modern", "has never ..."
SILENCE = 0.3  # seconds after each utterance, before its commit
MAX_WER = 0.2


def reference(path: Path) -> str:
    return path.with_suffix(".txt").read_text().strip()


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    low, high = free_range(4)
    running = start_server(
        ["--data-dir", str(data_dir), "--asr-model", "base", "--rtc-ports", f"{low}-{high}"],
        tmp_path_factory.mktemp("contract"),
    )
    yield running
    assert_stops_cleanly(running)


SERVER_ENDS = ("command", "complete", "silence")  # the reasons a pause after a whole sentence may end a turn for
PAUSE = 2.0  # seconds of silence after each utterance where the server ends the turns: past any sensitivity's


def turns_counted(server: Server, frontend: str, ended: tuple[str, ...]) -> float:
    return sum(server.metric("wis_turns_total", frontend=frontend, ended=e, status="ok") or 0.0 for e in ended)


async def wyoming(server: Server, by_server: bool) -> list[str]:
    """One connection, per turn: transcribe, then the audio and its silence, then audio-stop. The client's end:
    sent as fast as it goes. The server's: at the pace it was spoken, the transcript before the audio-stop."""
    texts = []
    async with server.client() as client:
        for path in SCRIPT:
            pcm = load_audio(path)
            if by_server:
                heard = await stream(client, pcm, trailing_silence=PAUSE, language="en")
                assert any(event.type == "transcript" for event in heard.before_stop), heard.events
                event = heard.transcript
            else:
                pcm = dataclasses.replace(pcm, audio=pcm.audio + bytes(int(SILENCE * pcm.rate) * pcm.width))
                event = await transcribe(client, pcm, language="en")
            assert event.type == "transcript", event
            texts.append(event.data["text"])
    return texts


async def webrtc(server: Server, by_server: bool) -> list[str]:
    """One connection, the audio on the track at the pace it was spoken. The client's end: per turn start, the
    audio, stop, infer. The server's: one hands-free start, both utterances, an infer for each, stop."""
    client = Client(url(server))
    await client.connect()
    try:
        if by_server:
            client.send("start", {"hands_free": True, "language": "en"})
            for path in SCRIPT:
                client.track.play(np.concatenate([speech(str(path)), pause(PAUSE)]))
            answers = [(await client.turn())[-1] for _ in SCRIPT]
            client.send("stop")
        else:
            heard = [await client.utterance(speech(str(path)), trailing_silence=SILENCE) for path in SCRIPT]
            answers = [each.infer for each in heard]
    finally:
        await client.close()
    assert all(answer["type"] == "infer" for answer in answers), answers
    return [answer["obj"]["text"] for answer in answers]


async def realtime_websocket(server: Server, by_server: bool) -> list[str]:
    """The SDK. The client's end: detection off, per turn appends and commit. The server's: semantic_vad, both
    utterances appended at the pace they were spoken. Each item's completed transcript."""
    async with connect(server) as connection:
        if by_server:
            detection = {"type": "semantic_vad", "eagerness": "auto"}
            session = {"type": "transcription", "audio": {"input": {"transcription": {"language": "en"},
                       "turn_detection": detection}}}  # fmt: skip
            await connection.session.update(session=session)
            await events_until(connection, "session.updated")
            silence = bytes(int(PAUSE * RATE) * 2)
            audio = b"".join(load_audio(path, rate=RATE).audio + silence for path in SCRIPT)
            await send(connection, audio, paced=True)
            events = await events_until(connection, COMPLETED, len(SCRIPT))
        else:
            await connection.session.update(session=GA_MANUAL)
            await events_until(connection, "session.updated")
            events = []
            for path in SCRIPT:
                pcm = load_audio(path, rate=RATE)
                await send(connection, pcm.audio + bytes(int(SILENCE * RATE) * 2), paced=False)
                await connection.input_audio_buffer.commit()
                events += await events_until(connection, COMPLETED)
    committed = [event.item_id for event in events if event.type == "input_audio_buffer.committed"]
    completed = [event for event in events if event.type == COMPLETED]
    assert [event.item_id for event in completed] == committed and len(set(committed)) == len(SCRIPT), events
    return [event.transcript for event in completed]


async def realtime_call(server: Server, by_server: bool) -> list[str]:
    """A call made with the SDK, the audio on its track. The client's end: detection off, per turn the audio and
    commit on "oai-events". The server's: semantic_vad, both utterances."""
    detection = {"type": "semantic_vad", "eagerness": "auto"} if by_server else None
    client, _ = await call(server, transcription(turn_detection=detection))
    events = []
    try:
        created = await client.receive(10)
        assert created["type"] == "session.created", created
        for path in SCRIPT:
            client.track.play(np.concatenate([speech(str(path)), pause(PAUSE if by_server else SILENCE)]))
            if not by_server:
                await client.track.played()
                client.send("", raw=json.dumps({"type": "input_audio_buffer.commit"}))
                events += await client.until(COMPLETED, "error", timeout=60)
        if by_server:
            for _ in SCRIPT:
                events += await client.until(COMPLETED, "error", timeout=60)
    finally:
        await client.close()
    completed = [event for event in events if event["type"] == COMPLETED]
    assert len(completed) == len(SCRIPT) and len({event["item_id"] for event in completed}) == len(SCRIPT), events
    return [event["transcript"] for event in completed]


FRONTENDS = {
    "wyoming": (wyoming, "wyoming"),
    "webrtc": (webrtc, "webrtc"),
    "realtime-websocket": (realtime_websocket, "realtime"),
    "realtime-call": (realtime_call, "realtime"),
}


@pytest.mark.parametrize("ends", ["client", "server"])
@pytest.mark.parametrize("name", FRONTENDS)
async def test_the_same_turns_through_every_frontend(server: Server, name: str, ends: str) -> None:
    run, label = FRONTENDS[name]
    ended = SERVER_ENDS if ends == "server" else ("commit",)
    counted = turns_counted(server, label, ended)
    texts = await run(server, ends == "server")
    assert len(texts) == len(SCRIPT), texts
    for path, text in zip(SCRIPT, texts, strict=True):
        assert wer([reference(path)], [text]) <= MAX_WER, (name, path.name, text)
    assert turns_counted(server, label, ended) == counted + len(SCRIPT)


def test_the_script_is_two_turns_apart() -> None:
    """The check itself: the two utterances share no word, so a merged or swapped turn fails it."""
    first, second = (set(reference(path).lower().strip(".").split()) for path in SCRIPT)
    assert not first & second
    merged = f"{reference(SCRIPT[0])} {reference(SCRIPT[1])}"
    assert wer([reference(SCRIPT[0])], [merged]) > MAX_WER
