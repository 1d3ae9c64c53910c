"""The server ends the speaker's turn itself (Wyoming, `requires_external_vad: false`), as Home Assistant now lets it.

The client that matters is Home Assistant 2026.10, the first release whose Wyoming integration passes the flag on.
Read from its own source (homeassistant 2026.10.0, the PyPI wheel):

- `homeassistant/components/wyoming/stt.py`: `WyomingSttProvider.__init__` copies the program's
  `requires_external_vad` into `stt.SpeechAudioProcessing`. `async_process_audio_stream` sends `transcribe
  {language}` (never `vad_sensitivity`) and `audio-start 16000/2/1`, then runs two tasks: `_async_upload_audio`
  writes an `audio-chunk` per piece of the stream and `audio-stop` only when the stream ends, while
  `_async_receive_result` reads events: the first `transcript` is the result, an `error` or a closed connection a
  failure. Whichever task finishes first wins; the other is cancelled and the connection closed.
- `homeassistant/components/assist_pipeline/default_pipeline.py` (`speech_to_text`): the `VoiceCommandSegmenter`
  (0.7 s of silence, a 15 s cap) is built only when the provider `requires_external_vad`; without it the stream runs
  as long as the satellite sends audio. The pipeline's chunks are 10 ms (`assist_pipeline/const.py`, MS_PER_CHUNK).

Releases 2026.5 to 2026.9 carry the flag in `stt` and the pipeline, but their Wyoming `stt.py` neither reports it
nor reads before `audio-stop`: to them we are a server like any other, which `test_clients_with_their_own_vad_*`
covers (and the Home Assistant suite in tests/ha, with real Home Assistant).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers import (
    CORPUS,
    Pcm,
    Server,
    assert_clean_log,
    assert_stops_cleanly,
    load_audio,
    normalise,
    rms,
    start_server,
    synthesize,
    transcribe,
    wav_bytes,
)
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncClient
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.ping import Ping

CHUNK_BYTES = 320  # 10 ms of 16 kHz 16-bit mono: the pipeline's BYTES_PER_CHUNK
RATE = 16000


@dataclass
class Result:
    """What Home Assistant's STT client got, and when."""

    text: str | None  # None: a failure (error event, or the connection closed)
    wait: float  # seconds from the end of the speech to the result
    sent_audio_stop: bool
    events: list[Event]


async def home_assistant(server: Server, speech: Pcm, *, silence: float, request: Transcribe | None = None) -> Result:
    """Home Assistant 2026.10's STT client behind its pipeline, for a server that needs no external VAD.

    The satellite's audio (`speech`, then `silence` seconds of silence) comes at the pace it is spoken, 10 ms at a
    time; the upload and the reading run at once, and the first transcript ends both (see the module docstring).
    `request` replaces Home Assistant's `transcribe {language: en}`, as another client may send.
    """
    spoken = time.perf_counter()  # set to when the last speech sample went out
    sent_stop = False
    events: list[Event] = []
    async with server.client() as client:
        await client.write_event((request or Transcribe(language="en")).event())
        await client.write_event(AudioStart(rate=RATE, width=2, channels=1).event())

        async def upload() -> None:
            nonlocal spoken, sent_stop
            await paced(client, speech.audio)
            spoken = time.perf_counter()
            await paced(client, bytes(int(silence * RATE) * 2))
            await client.write_event(AudioStop().event())
            sent_stop = True

        async def receive() -> str | None:
            while True:
                event = await client.read_event()
                if event is None or event.type == "error":
                    return None
                events.append(event)
                if event.type == "transcript":
                    return str(event.data["text"])

        uploading, receiving = asyncio.create_task(upload()), asyncio.create_task(receive())
        done, _ = await asyncio.wait((uploading, receiving), return_when=asyncio.FIRST_COMPLETED)
        text = receiving.result() if receiving in done else await receiving
        got = time.perf_counter()
        for task in (uploading, receiving):
            task.cancel()
        await asyncio.gather(uploading, receiving, return_exceptions=True)
    return Result(text, got - spoken, sent_stop, events)


async def say(server: Server, text: str) -> Pcm:
    """The bundled voice saying `text`, at 16 kHz as a satellite's microphone gives it."""
    async with server.client() as client:
        return load_audio(wav_bytes((await synthesize(client, text)).pcm))


async def heard_whole(server: Server, speech: Pcm) -> str:
    """What the server makes of all of `speech` sent at once with audio-stop: a turn it ends must lose no word."""
    async with server.client() as client:
        return str((await transcribe(client, speech, language="en")).data["text"])


async def paused_after(server: Server, text: str, word: str, pause: float) -> Pcm:
    """`text` said in one go, with `pause` seconds of silence put in after `word`, in the quietest 10 ms between the
    middles of it and the next word (by the server's own word times, which may be off by a few tens of ms; a stop
    before the next word's first sound is quiet, and the pause goes there), as bench/endpoint.py makes its paused
    commands.

    A speaker who stops mid-request keeps the sentence's tune; the words said as a sentence of their own ("Set a
    timer for.") end on a full stop's fall, which Whisper may then hear as "Set a timer fork."
    """
    speech = await say(server, text)
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as http:
        response = await http.post(
            "/v1/audio/transcriptions",
            files={"file": ("speech.wav", wav_bytes(speech))},
            data={"model": "base", "response_format": "verbose_json", "timestamp_granularities[]": "word"},
        )
    words = response.raise_for_status().json()["words"]
    index = next(index for index, said in enumerate(words) if normalise(said["word"]) == word)
    samples = np.frombuffer(speech.audio, dtype="<i2").astype(np.float32)
    frame = RATE // 100
    first, last = (int(50 * (said["start"] + said["end"])) for said in words[index : index + 2])  # in 10 ms
    levels = [float(np.mean(samples[at * frame : (at + 1) * frame] ** 2)) for at in range(first, last + 1)]
    cut = (first + int(np.argmin(levels))) * frame * 2
    return Pcm(speech.audio[:cut] + bytes(int(pause * RATE) * 2) + speech.audio[cut:], RATE, 2, 1)


def same_words(heard: str | None, whole: str) -> bool:
    return heard is not None and normalise(heard) == normalise(whole)


@pytest.fixture(scope="module")
def limited(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Short turn limits, to see them end turns."""
    running = start_server(
        [
            *("--data-dir", str(data_dir), "--asr-model", "tiny.en", "--voice", "en_US-joe-medium"),
            *("--no-speech-seconds", "1.5", "--max-turn-seconds", "3"),
        ],
        tmp_path_factory.mktemp("turn-limits"),
    )
    yield running
    assert_stops_cleanly(running)


# -- Home Assistant 2026.10 -----------------------------------------------------------


async def test_info_says_the_server_ends_the_turn(server: Server) -> None:
    async with server.client() as client:
        await client.write_event(Describe().event())
        info = await asyncio.wait_for(client.read_event(), 10)
    assert info is not None and info.data["asr"][0]["requires_external_vad"] is False


@pytest.mark.parametrize("command", ["Turn on the kitchen light.", "What's the weather like tomorrow?"])
async def test_turn_ends_on_our_transcript_without_audio_stop(server: Server, command: str) -> None:
    """A whole turn as Home Assistant 2026.10 runs it: the transcript ends it, long before the silence would."""
    speech = await say(server, command)

    def ended() -> float:
        counts = (
            server.metric("wis_asr_after_last_speech_seconds_count", frontend="wyoming", reason=reason)
            for reason in ("command", "complete", "silence")
        )
        return sum(count or 0 for count in counts)

    before = ended()
    result = await home_assistant(server, speech, silence=8.0)
    assert ended() == before + 1
    assert same_words(result.text, await heard_whole(server, speech)), result
    assert not result.sent_audio_stop, result  # our transcript ended the upload
    assert result.wait < 1.5, result  # not the 8 s of silence, nor a timer Home Assistant no longer runs
    assert result.events[-1].type == "transcript", result.events


async def test_a_command_home_assistant_understands_ends_the_turn_at_once(server: Server) -> None:
    """Words Home Assistant's own sentence matcher recognises as a whole command (here one of its generic intents:
    no names are read) end the turn at its first look at the pause, not after the 0.7 s a whole-sounding pause must
    otherwise last (turns/commands.py), although the last word, short and soft, may look made up (it begins 0.07 s
    before the speech's end); the transcript is what the whole audio gives."""
    speech = await say(server, "What time is it?")

    def by_command() -> float:
        return server.metric("wis_asr_after_last_speech_seconds_count", frontend="wyoming", reason="command") or 0

    await home_assistant(server, speech, silence=8.0)  # (the language's sentences are built on first use)
    before = by_command()
    result = await home_assistant(server, speech, silence=8.0)
    assert by_command() == before + 1, result
    assert same_words(result.text, await heard_whole(server, speech)), result
    assert not result.sent_audio_stop, result


async def test_a_pause_inside_a_command_does_not_end_it(server: Server) -> None:
    """ "Set a timer for ... ten minutes": the words before the pause cannot be the whole request."""
    speech = await paused_after(server, "Set a timer for ten minutes.", "for", pause=0.7)
    result = await home_assistant(server, speech, silence=8.0)
    assert result.text is not None and "minutes" in normalise(result.text), result
    assert same_words(result.text, await heard_whole(server, speech)), result
    assert not result.sent_audio_stop, result


async def test_several_satellites_at_once(server: Server) -> None:
    # words base hears the same alone and in a batch ("Play some music" came out "Place some music" now and then:
    # a batch's arithmetic differs a little from one piece's, an effect of batching the accuracy bench covers)
    commands = ["Turn off the bedroom light.", "Close the blinds in the office.", "What time is it?"]
    voices = [await say(server, command) for command in commands]
    results = await asyncio.gather(*(home_assistant(server, pcm, silence=6.0) for pcm in voices))
    for pcm, result in zip(voices, results, strict=True):
        assert same_words(result.text, await heard_whole(server, pcm)), result
        assert not result.sent_audio_stop and result.wait < 2.0, result


async def test_unknown_vad_sensitivity_is_refused(server: Server) -> None:
    async with server.client() as client:
        await client.write_event(Transcribe(language="en", vad_sensitivity="sometimes").event())
        error = await asyncio.wait_for(client.read_event(), 10)
    assert error is not None and error.type == "error" and error.data["code"] == "bad-request", error
    assert "vad_sensitivity" in error.data["text"] and "relaxed" in error.data["text"]


@pytest.mark.parametrize("sensitivity", ["aggressive", "relaxed"])
async def test_named_sensitivity_ends_the_turn(server: Server, sensitivity: str) -> None:
    """A satellite may ask for its own sensitivity; each still ends a complete command on its own."""
    command = "Turn off the lights in the living room."
    speech = await say(server, command)
    request = Transcribe(language="en", vad_sensitivity=sensitivity)
    result = await home_assistant(server, speech, silence=6.0, request=request)
    assert same_words(result.text, await heard_whole(server, speech)), result
    assert not result.sent_audio_stop and result.wait < 2.5, result


async def test_a_tv_across_the_room_does_not_hold_the_turn_open(server: Server) -> None:
    """Someone reads on 15 dB under the speaker, before, during and for 8 s after the command (a TV): Silero hears
    that as speech without a pause, and the turn still ends on the speaker's own silence, with the command."""
    command, tv = await say(server, "Turn on the kitchen light."), load_audio(CORPUS / "LJ001-0003.flac")
    mixed = tv.samples() * rms(command) / rms(tv) * 10 ** (-15 / 20)  # 9.7 s of reading, hardly a pause
    mixed[RATE // 2 : RATE // 2 + len(command.samples())] += command.samples()

    def silences() -> float:
        return server.metric("wis_asr_after_last_speech_seconds_count", frontend="wyoming", reason="silence") or 0

    before = silences()
    result = await home_assistant(server, Pcm((mixed * 32767).astype("<i2").tobytes(), RATE, 2, 1), silence=0.0)
    assert result.text is not None and {"kitchen", "light"} <= set(normalise(result.text).split()), result
    assert not result.sent_audio_stop, result  # ended while the TV went on
    assert silences() == before + 1  # the speaker's silence ended it


# -- clients with their own VAD --------------------------------------------------------


async def paced(client: AsyncClient, audio: bytes) -> None:
    """Send 16 kHz audio in Home Assistant's 10 ms chunks, at the pace it was spoken."""
    started = time.perf_counter()
    for offset in range(0, len(audio), CHUNK_BYTES):
        chunk = audio[offset : offset + CHUNK_BYTES]
        await client.write_event(AudioChunk(rate=RATE, width=2, channels=1, audio=chunk).event())
        await asyncio.sleep(max(0.0, started + (offset + CHUNK_BYTES) / (2 * RATE) - time.perf_counter()))


async def test_clients_with_their_own_vad_get_one_transcript(server: Server) -> None:
    """Home Assistant before 2026.10 (and satellites with a VAD) send all audio and audio-stop, then read.

    The transcript may go out before their audio-stop; they still get exactly one, and the connection serves the
    next request.
    """
    speech = await say(server, "Turn on the kitchen light.")
    whole = await heard_whole(server, speech)
    async with server.client() as client:
        for _ in range(2):
            await client.write_event(Transcribe(language="en").event())
            await client.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
            await paced(client, speech.audio + bytes(int(0.8 * RATE) * 2))  # until their VAD hears 0.7 s of silence
            await client.write_event(AudioStop().event())
            await client.write_event(Ping(text="after").event())
            events = []
            while not events or events[-1].type != "pong":
                event = await asyncio.wait_for(client.read_event(), 30)
                assert event is not None, events
                events.append(event)
            transcripts = [event for event in events if event.type == "transcript"]
            assert len(transcripts) == 1, [event.type for event in events]
            assert same_words(transcripts[0].data["text"], whole), transcripts


async def test_audio_stop_before_our_end_is_answered(server: Server) -> None:
    """audio-stop right after the last word, before the server would end the turn: answered as always."""
    speech = await say(server, "What time is it?")
    whole = await heard_whole(server, speech)
    async with server.client() as client:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
        await paced(client, speech.audio)
        await client.write_event(AudioStop().event())
        events = []
        while not events or events[-1].type != "transcript":
            event = await asyncio.wait_for(client.read_event(), 30)
            assert event is not None, events
            events.append(event)
    assert same_words(events[-1].data["text"], whole), events


async def test_external_vad_leaves_the_end_to_the_client(server: Server, data_dir: Path, tmp_path: Path) -> None:
    """--external-vad: requires_external_vad is advertised, and nothing comes before audio-stop. A recording sent
    faster than it plays and closed with audio-stop (a file, not a speaker) is transcribed whole by a server that
    ends turns itself too, exactly as by one with --external-vad, however long it pauses after whole words."""
    running = start_server(["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--external-vad"], tmp_path)
    try:
        async with running.client() as client:
            await client.write_event(Describe().event())
            info = await asyncio.wait_for(client.read_event(), 10)
            assert info is not None and info.data["asr"][0]["requires_external_vad"] is True
        speech = await say(running, "Turn on the kitchen light.")
        result = await home_assistant(running, speech, silence=2.5)
        assert result.sent_audio_stop, result  # the server waited for it
        assert same_words(result.text, await heard_whole(running, speech)), result

        paused = await paused_after(server, "Turn on the living room light.", "on", pause=1.0)
        async with running.client() as external, server.client() as ours:
            theirs = (await transcribe(external, paused, language="en")).data["text"]
            heard = (await transcribe(ours, paused, name="tiny.en", language="en")).data["text"]
        # words well after the pause in both, and the same words up to them. Not the last word: tiny.en hears
        # "light" as it may ("like", "bye", "White." in one server where the other wrote "Like", or not at all in
        # both, in clean CI runs: a last word decoded again at a temperature is sampled); and it may drop "Turn" at
        # the start, in both servers alike.
        said, told = normalise(heard).split(), normalise(theirs).split()
        assert "room" in said and "room" in told, (heard, theirs)
        assert said[: said.index("room")] == told[: told.index("room")], (heard, theirs)
    finally:
        assert running.stop() == 0, running.log
    assert_clean_log(running.log)


# -- limits ----------------------------------------------------------------------------


async def test_no_speech_ends_the_turn_with_an_empty_transcript(limited: Server) -> None:
    """Nobody speaks after the wake word: an empty transcript after --no-speech-seconds, not an endless stream."""
    result = await home_assistant(limited, Pcm(b"", RATE, 2, 1), silence=10.0)
    assert result.text == "", result
    assert not result.sent_audio_stop and 1.4 < result.wait < 4.0, result


async def test_speech_past_max_turn_seconds_ends_the_turn(limited: Server) -> None:
    """Speech that goes on and on (a TV in the room) ends at --max-turn-seconds, with what was said by then."""
    reading = load_audio(CORPUS / "LJ001-0001.flac")  # 9.7 s of continuous reading
    began = time.perf_counter()
    result = await home_assistant(limited, reading, silence=0.0)
    assert result.text and not result.sent_audio_stop, result
    assert time.perf_counter() - began < reading.seconds - 3, result  # ended while the reading went on
    assert normalise(result.text).split()[0] == "printing", result


async def test_a_file_longer_than_max_turn_seconds_is_transcribed_whole(limited: Server) -> None:
    """A recording sent faster than it plays, closed with audio-stop, is a file, not a speaker: the most speech a
    turn may hold (3 s here) does not cut it."""
    reading = load_audio(CORPUS / "LJ001-0001.flac")  # 9.7 s of continuous reading
    async with limited.client() as client:
        text = str((await transcribe(client, reading, language="en")).data["text"])
    said = normalise(text)
    assert said.startswith("printing") and said.endswith("exhibition"), text
