"""OpenAI's Realtime API, transcription sessions (/v1/realtime?intent=transcription), with the official SDK.

The SDK connects as its docs say (`client.realtime.connect(extra_query={"intent": "transcription"})`, and for the
beta shape the `OpenAI-Beta: realtime=v1` header with `transcription_session.update`); the audio is the LJ Speech
corpus and the bundled voice, at 24 kHz as OpenAI asks, sent at the pace it is spoken where the server ends turns.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import CORPUS, Pcm, Server, assert_stops_cleanly, load_audio, normalise, start_server, wav_bytes, wer
from openai import AsyncOpenAI
from test_wyoming_turn import paused_after

from openai_audio.realtime import INLINE_AUDIO_CHARS, MAX_EVENT_BYTES

RATE = 24000
CHUNK = 4800  # bytes: 100 ms of 24 kHz 16-bit mono
TRANSCRIPTION = "transcription"


@pytest.fixture(scope="module")
def realtime(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Whisper base and Piper joe; at most 4 Realtime sessions (2 per address)."""
    running = start_server(
        [
            *("--data-dir", str(data_dir), "--asr-model", "base", "--voice", "en_US-joe-medium"),
            *("--realtime-max-sessions", "4", "--no-speech-seconds", "3"),
        ],
        tmp_path_factory.mktemp("realtime"),
    )
    yield running
    assert_stops_cleanly(running)


def sdk(server: Server) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused",
        base_url=server.http_url + "/v1",
        websocket_base_url=f"ws://{server.host}:{server.http_port}/v1",
    )


@asynccontextmanager
async def connect(server: Server, beta: bool = False) -> AsyncIterator[Any]:
    headers = {"OpenAI-Beta": "realtime=v1"} if beta else {}
    async with sdk(server).realtime.connect(extra_query={"intent": TRANSCRIPTION}, extra_headers=headers) as connection:
        created = await asyncio.wait_for(connection.recv(), 10)
        assert created.type == ("transcription_session.created" if beta else "session.created")
        yield connection


def clip(name: str) -> tuple[Pcm, str]:
    path = CORPUS / f"{name}.flac"
    return load_audio(path, rate=RATE), path.with_suffix(".txt").read_text().strip()


async def send(connection: Any, audio: bytes, paced: bool, chunk: int = CHUNK) -> None:
    started = time.perf_counter()
    for offset in range(0, len(audio), chunk):
        await connection.input_audio_buffer.append(audio=base64.b64encode(audio[offset : offset + chunk]).decode())
        if paced:
            await asyncio.sleep(max(0.0, started + (offset + chunk) / (2 * RATE) - time.perf_counter()))


async def events_until(connection: Any, kind: str, count: int = 1, timeout: float = 60) -> list[Any]:
    """Every event up to the `count`th of `kind`."""
    events: list[Any] = []
    async with asyncio.timeout(timeout):
        while sum(event.type == kind for event in events) < count:
            events.append(await connection.recv())
    return events


GA_MANUAL = {"type": TRANSCRIPTION, "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
             "transcription": {"model": "whisper-1", "language": "en"}, "turn_detection": None}}}  # fmt: skip


async def test_manual_commit_transcribes_the_buffer(realtime: Server) -> None:
    pcm, text = clip("LJ001-0001")
    async with connect(realtime) as connection:
        await connection.session.update(session=GA_MANUAL | {"include": ["item.input_audio_transcription.logprobs"]})
        updated = (await events_until(connection, "session.updated"))[-1]
        assert updated.session.audio.input.turn_detection is None and updated.session.include
        assert updated.session.audio.input.transcription.language == "en"
        big = 2 * RATE * 2  # 2 s appends: over the most decoded on the event loop, so in a worker thread
        assert len(base64.b64encode(bytes(big))) > INLINE_AUDIO_CHARS
        await send(connection, pcm.audio, paced=False, chunk=big)
        await connection.input_audio_buffer.commit()
        events = await events_until(connection, "conversation.item.input_audio_transcription.completed")
    committed = next(event for event in events if event.type == "input_audio_buffer.committed")
    completed = events[-1]
    assert completed.item_id == committed.item_id
    assert wer([text], [completed.transcript]) < 0.15
    assert completed.usage.type == "duration" and abs(completed.usage.seconds - len(pcm.audio) / 2 / RATE) < 0.2
    tokens = completed.logprobs  # each token of the transcript, with the model's log-probability of it
    assert "".join(token.token for token in tokens).strip() == completed.transcript.strip()
    assert all(token.logprob <= 0 for token in tokens) and len({token.logprob for token in tokens}) > 1
    assert not any(event.type == "input_audio_buffer.speech_started" for event in events)  # no VAD: no speech events


async def test_an_update_mid_turn_answers_that_turn_as_it_began(realtime: Server) -> None:
    """A change of language with audio in the buffer: that audio is transcribed as English, the update applies
    from the next turn."""
    pcm, text = clip("LJ001-0001")
    async with connect(realtime) as connection:
        await connection.session.update(session=GA_MANUAL)
        await events_until(connection, "session.updated")
        await send(connection, pcm.audio, paced=False)
        german = {"type": TRANSCRIPTION, "audio": {"input": {"transcription": {"language": "de"}}}}
        await connection.session.update(session=german)
        events = await events_until(connection, "conversation.item.input_audio_transcription.completed")
    updated = [event for event in events if event.type == "session.updated"][-1]
    assert updated.session.audio.input.transcription.language == "de"
    assert wer([text], [events[-1].transcript]) < 0.15


async def test_server_vad_ends_each_turn_with_deltas_first(realtime: Server) -> None:
    """Two utterances with a pause between: two turns, each with speech events and deltas, in order."""
    first, first_text = clip("LJ001-0002")
    second, second_text = clip("LJ001-0003")
    pause = bytes(int(1.5 * RATE) * 2)
    async with connect(realtime) as connection:
        session = {"type": TRANSCRIPTION, "audio": {"input": {"transcription": {"model": "whisper-1", "language": "en"},
                   "turn_detection": {"type": "server_vad", "silence_duration_ms": 700}}}}  # fmt: skip
        await connection.session.update(session=session)
        await events_until(connection, "session.updated")
        sending = asyncio.create_task(send(connection, first.audio + pause + second.audio + pause, paced=True))
        events = await events_until(connection, "conversation.item.input_audio_transcription.completed", 2, 120)
        await sending
    kinds = [event.type for event in events]
    started = [event for event in events if event.type == "input_audio_buffer.speech_started"]
    stopped = [event for event in events if event.type == "input_audio_buffer.speech_stopped"]
    completed = [event for event in events if event.type.endswith("transcription.completed")]
    assert len(started) == len(stopped) == 2 and [e.item_id for e in started] == [e.item_id for e in completed]
    first_end = len(first.audio) / 2 / RATE * 1000
    assert started[0].audio_start_ms < 600 and abs(stopped[0].audio_end_ms - first_end) < 600
    assert started[1].audio_start_ms > stopped[0].audio_end_ms
    assert wer([first_text], [completed[0].transcript]) < 0.2 and wer([second_text], [completed[1].transcript]) < 0.2
    deltas = [event for event in events if event.type.endswith("transcription.delta")]
    assert any(event.item_id == started[0].item_id for event in deltas)
    # the first delta of a turn comes before its end: text while the speaker talks
    first_delta = kinds.index(next(e for e in deltas if e.item_id == started[0].item_id).type)
    assert first_delta < kinds.index("input_audio_buffer.speech_stopped")


async def test_a_paused_command_stays_one_turn_with_semantic_vad(realtime: Server) -> None:
    """ "Set a timer for ... ten minutes": the words before the pause cannot be a whole request, so the turn goes
    on through the pause (0.7 s, longer than OpenAI's default silence_duration_ms)."""
    paused = await paused_after(realtime, "Set a timer for ten minutes.", "for", pause=0.7)
    speech = load_audio(wav_bytes(paused), rate=RATE)
    async with connect(realtime) as connection:
        session = {"type": TRANSCRIPTION, "audio": {"input": {"transcription": {"language": "en"},
                   "turn_detection": {"type": "semantic_vad", "eagerness": "auto"}}}}  # fmt: skip
        await connection.session.update(session=session)
        await events_until(connection, "session.updated")
        await send(connection, speech.audio + bytes(3 * RATE * 2), paced=True)
        events = await events_until(connection, "conversation.item.input_audio_transcription.completed", 1, 30)
        await asyncio.sleep(1.0)  # a second turn would have ended by now
        await connection.input_audio_buffer.clear()
        later = await events_until(connection, "input_audio_buffer.cleared", 1, 10)
    completed = [event for event in events + later if event.type.endswith("transcription.completed")]
    assert len(completed) == 1 and "minutes" in normalise(completed[0].transcript), completed


async def test_beta_shape(realtime: Server) -> None:
    """The SDK's beta client (`OpenAI-Beta: realtime=v1`, the model in the query) and transcription_session.update."""
    pcm, text = clip("LJ001-0001")
    beta = sdk(realtime).beta.realtime.connect(model="whisper-1", extra_query={"intent": TRANSCRIPTION})
    async with beta as connection:
        created = await asyncio.wait_for(connection.recv(), 10)
        assert created.type == "transcription_session.created"
        await connection.transcription_session.update(session={"input_audio_format": "pcm16", "turn_detection": None,
            "input_audio_transcription": {"model": "whisper-1", "language": "en"}})  # fmt: skip
        updated = (await events_until(connection, "transcription_session.updated"))[-1]
        assert updated.session.input_audio_format == "pcm16" and updated.session.turn_detection is None
        await send(connection, pcm.audio, paced=False)
        await connection.input_audio_buffer.commit()
        completed = (await events_until(connection, "conversation.item.input_audio_transcription.completed"))[-1]
    assert wer([text], [completed.transcript]) < 0.15


async def test_bad_input_gets_errors_and_the_session_goes_on(realtime: Server) -> None:
    """Invalid JSON, an unknown event, bad base64, an oversized event, an empty commit: each an error event naming
    what was wrong (and the client's event_id), and the session still transcribes."""
    url = f"ws://{realtime.host}:{realtime.http_port}/v1/realtime?intent=transcription"
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as socket:
        assert json.loads((await socket.receive()).data)["type"] == "session.created"

        async def error_for(data: str) -> dict[str, Any]:
            await socket.send_str(data)
            event = json.loads((await socket.receive(timeout=10)).data)
            assert event["type"] == "error", event
            return event["error"]

        assert (await error_for("{not json"))["code"] == "invalid_json"
        unknown = await error_for(json.dumps({"type": "response.create", "event_id": "ev1"}))
        assert unknown["code"] == "unknown_event" and unknown["event_id"] == "ev1"
        bad = await error_for(json.dumps({"type": "input_audio_buffer.append", "audio": "@@not base64@@"}))
        assert bad["code"] == "invalid_audio" and bad["param"] == "audio"
        big = await error_for(json.dumps({"type": "session.update", "session": {}, "x": "A" * MAX_EVENT_BYTES}))
        assert big["code"] == "event_too_large"
        empty = await error_for(json.dumps({"type": "input_audio_buffer.commit"}))
        assert empty["code"] == "input_audio_buffer_commit_empty"
        wrong = await error_for(json.dumps({"type": "session.update", "session": {"type": "realtime"}}))
        assert wrong["param"] == "session.type"
        rate = await error_for(json.dumps({"type": "session.update", "session": {"audio": {"input": {
            "turn_detection": {"type": "server_vad", "silence_duration_ms": -5}}}}}))  # fmt: skip
        assert rate["param"].endswith("silence_duration_ms")
        model = await error_for(json.dumps({"type": "session.update", "session": {"audio": {"input": {
            "transcription": {"model": "no-such-model"}}}}}))  # fmt: skip
        assert model["code"] == "unknown-model"
        pcm, text = clip("LJ001-0001")
        await socket.send_str(json.dumps({"type": "session.update", "session": GA_MANUAL}))
        assert json.loads((await socket.receive(timeout=10)).data)["type"] == "session.updated"
        for offset in range(0, len(pcm.audio), 48000):
            chunk = base64.b64encode(pcm.audio[offset : offset + 48000]).decode()
            await socket.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        await socket.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        while (event := json.loads((await socket.receive(timeout=60)).data))["type"] != (
            "conversation.item.input_audio_transcription.completed"
        ):
            pass
    assert wer([text], [event["transcript"]]) < 0.15
    assert "Traceback" not in realtime.log


async def test_a_conversation_session_is_refused(realtime: Server) -> None:
    url = f"ws://{realtime.host}:{realtime.http_port}/v1/realtime?model=gpt-realtime"
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url)
    assert refused.value.status == 400


async def test_sessions_are_shared_by_address(realtime: Server) -> None:
    """One address may open all 4 sessions while no one else wants one; a fifth of its own is refused 429. Another
    address's takes the place of its longest-running, which is told why and closed; one closing frees one."""
    url = f"ws://{realtime.host}:{realtime.http_port}/v1/realtime?intent=transcription"
    async with aiohttp.ClientSession() as http:
        mine = [await http.ws_connect(url) for _ in range(4)]
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url)
        assert refused.value.status == 429
        other = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0)))
        async with other:
            theirs = await other.ws_connect(url)
            assert json.loads((await theirs.receive(timeout=10)).data)["type"] == "session.created"
            events = [json.loads((await mine[0].receive(timeout=10)).data) for _ in range(2)]
            assert events[0]["type"] == "session.created" and events[1]["type"] == "error", events
            assert "Closed to make room for another client" in events[1]["error"]["message"], events
            assert (await mine[0].receive(timeout=10)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            await mine[1].close()
            await asyncio.sleep(0.5)
            again = await http.ws_connect(url)
            assert json.loads((await again.receive(timeout=10)).data)["type"] == "session.created"
            await asyncio.gather(theirs.close(), again.close(), *(socket.close() for socket in mine[2:]))
