"""Wake words over Wyoming, as Home Assistant's wake word stage and satellites send them.

Home Assistant (components/wyoming/wake_word.py, 2026.2) sends `detect` with `names=[the entity's wake word id]`
(or none), `audio-start` 16000/2/1, then 10 ms `audio-chunk`s until the first `detection` names its wake word; a
satellite keeps streaming after it. The phrases are said by the bundled Piper voice, as the server itself speaks
them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import time
from pathlib import Path

import pytest
from helpers import Pcm, Server, load_audio, read_until, silence, synthesize, wav_bytes
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncClient
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.wake import Detect

LEAD = 1.0  # seconds of silence before each phrase
CHUNK_SECONDS = 0.01  # as Home Assistant's wake word stage sends audio


async def say(server: Server, text: str, rate: int = 16000) -> Pcm:
    """The bundled voice saying `text`, after LEAD s of silence and before 1 s of it, at `rate`."""
    async with server.client() as client:
        spoken = (await synthesize(client, text)).pcm
    speech = load_audio(wav_bytes(spoken), rate=rate)
    return join(silence(LEAD, rate), speech, silence(1.0, rate))


def join(*pieces: Pcm) -> Pcm:
    return Pcm(b"".join(piece.audio for piece in pieces), pieces[0].rate, 2, 1)


async def stream(client: AsyncClient, pcm: Pcm, names: list[str] | None) -> None:
    await client.write_event(Detect(names=names).event())
    await client.write_event(AudioStart(rate=pcm.rate, width=2, channels=1).event())
    step = int(pcm.rate * CHUNK_SECONDS) * 2
    for start in range(0, len(pcm.audio), step):
        chunk = AudioChunk(rate=pcm.rate, width=2, channels=1, audio=pcm.audio[start : start + step])
        await client.write_event(chunk.event())
    await client.write_event(AudioStop().event())


async def detect(server: Server, pcm: Pcm, names: list[str] | None) -> list[Event]:
    """Everything the server answers to one stream, up to a `pong` sent after its audio-stop (or an error)."""
    async with server.client() as client:
        await stream(client, pcm, names)
        await client.write_event(Ping().event())
        events = await read_until(client, "pong", "error", timeout=60)
        return events if events[-1].type == "error" else events[:-1]


@pytest.fixture(scope="module")
async def okay_nabu(server: Server) -> Pcm:
    return await say(server, "Okay Nabu, turn on the kitchen light.")


async def test_info_offers_both_families_in_one_wake_program(server: Server) -> None:
    async with server.client() as client:
        await client.write_event(Describe().event())
        info = Info.from_event((await read_until(client, "info"))[-1])
    assert len(info.wake) == 1  # Home Assistant reads only the first
    models = {model.name: model for model in info.wake[0].models}
    for name in ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa"):
        assert models[name].phrase and models[name].installed, models[name]
        assert models[name + "_oww"].phrase == models[name].phrase, models[name + "_oww"]
    assert models["hey_rhasspy_oww"].phrase == "Hey Rhasspy"
    assert "en" in models["okay_nabu"].languages
    assert models["okay_nabu"].description != models["okay_nabu_oww"].description  # told apart in HA's list


@pytest.mark.parametrize(
    ("name", "rate"), [("okay_nabu", 16000), ("okay_nabu_oww", 16000), ("okay_nabu", 22050)], ids=str
)
async def test_the_phrase_is_heard_where_it_is_said(server: Server, name: str, rate: int) -> None:
    pcm = await say(server, "Okay Nabu, turn on the kitchen light.", rate)
    events = await detect(server, pcm, [name])
    assert [event.type for event in events] == ["detection"], events  # and no not-detected after it
    assert events[0].data["name"] == name
    # stamped where the audio that made it ends: after the phrase starts, within 1.5 s of it (it lasts about 0.8 s)
    assert LEAD * 1000 < events[0].data["timestamp"] < (LEAD + 1.5) * 1000, events[0].data


@pytest.mark.parametrize("name", ["okay_nabu", "okay_nabu_oww"])
@pytest.mark.parametrize("text", ["Hey Jarvis, what time is it?", "Turn on the kitchen light.", "Okay, now."])
async def test_other_speech_is_not_detected(server: Server, name: str, text: str) -> None:
    events = await detect(server, await say(server, text), [name])
    assert [event.type for event in events] == ["not-detected"], events


async def test_each_wake_word_asked_for_is_heard(server: Server) -> None:
    jarvis = await say(server, "Hey Jarvis, what time is it?")
    events = await detect(server, jarvis, ["okay_nabu", "hey_jarvis"])
    assert [(event.type, event.data["name"]) for event in events] == [("detection", "hey_jarvis")], events


async def test_no_names_means_okay_nabu(server: Server, okay_nabu: Pcm) -> None:
    events = await detect(server, okay_nabu, None)
    assert [(event.type, event.data.get("name")) for event in events] == [("detection", "okay_nabu")], events


@pytest.mark.parametrize("asked", ["ok_nabu", "okay_nabu_v0.1", "OKAY_NABU"])
async def test_names_other_servers_use_are_understood_and_answered_as_asked(
    server: Server, okay_nabu: Pcm, asked: str
) -> None:
    """wyoming-openwakeword before 2.0 called it ok_nabu (ok_nabu_v0.1 in its info); satellites keep such names."""
    events = await detect(server, okay_nabu, [asked])
    assert [(event.type, event.data["name"]) for event in events] == [("detection", asked)], events


async def test_an_unknown_wake_word_is_an_error_that_ends_the_wait(server: Server) -> None:
    async with server.client() as client:
        await client.write_event(Detect(names=["hey_computer"]).event())
        await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        error = (await read_until(client, "error"))[-1]
        assert error.data["code"] == "unknown-wake-word" and "okay_nabu" in error.data["text"], error
        # a client that ignores the error and keeps streaming (as HA's wake word stage does) is not left waiting
        for _ in range(50):
            await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=bytes(320)).event())
        await client.write_event(AudioStop().event())
        assert await asyncio.wait_for(client.read_event(), 5) is None


async def test_a_satellite_streaming_on_hears_the_phrase_again_after_the_refractory_time(server: Server) -> None:
    """ "Okay Nabu" said twice 0.3 s apart: heard once (--wake-refractory-seconds 2); 3 s apart: twice, as far apart
    in the stream's timestamps as in its audio."""
    async with server.client() as client:
        phrase = load_audio(wav_bytes((await synthesize(client, "Okay Nabu.")).pcm), rate=16000)
    assert phrase.seconds < 1.5, phrase.seconds
    for gap, heard in ((0.3, 1), (3.0, 2)):
        pcm = join(silence(LEAD), phrase, silence(gap), phrase, silence(1.0))
        events = await detect(server, pcm, ["okay_nabu"])
        assert [event.type for event in events] == ["detection"] * heard, (gap, events)
    first, second = (event.data["timestamp"] for event in events)
    assert second - first == pytest.approx((phrase.seconds + 3.0) * 1000, abs=100), (first, second)


async def test_audio_start_again_after_audio_stop_hears_the_same_wake_words(server: Server, okay_nabu: Pcm) -> None:
    async with server.client() as client:
        await stream(client, silence(1.0), ["okay_nabu"])
        assert [event.type for event in await read_until(client, "not-detected")] == ["not-detected"]
        await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=okay_nabu.audio).event())
        await client.write_event(AudioStop().event())
        detection = (await read_until(client, "detection", "not-detected"))[-1]
        assert detection.type == "detection" and detection.data["name"] == "okay_nabu", detection


async def test_a_model_dropped_in_the_data_dir_is_offered_without_a_restart(
    server: Server, data_dir: Path, okay_nabu: Pcm
) -> None:
    """A microWakeWord model and its config in DATA_DIR/wake/ (here the bundled Okay Nabu under another name)."""
    import pymicro_wakeword

    bundled = Path(pymicro_wakeword.__file__).parent / "models"
    folder = data_dir / "wake"
    folder.mkdir(exist_ok=True)
    config = json.loads((bundled / "okay_nabu.json").read_text())
    config.update(model="kitchen_nabu.tflite", wake_word="Kitchen Nabu")
    shutil.copy(bundled / "okay_nabu.tflite", folder / "kitchen_nabu.tflite")
    (folder / "kitchen_nabu.json").write_text(json.dumps(config))
    try:
        deadline = time.monotonic() + 15
        while True:  # files are looked at again every few seconds
            async with server.client() as client:
                await client.write_event(Describe().event())
                info = Info.from_event((await read_until(client, "info"))[-1])
            phrases = {model.name: model.phrase for model in info.wake[0].models}
            if "kitchen_nabu" in phrases or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert phrases.get("kitchen_nabu") == "Kitchen Nabu", phrases
        events = await detect(server, okay_nabu, ["kitchen_nabu"])
        assert [(event.type, event.data["name"]) for event in events] == [("detection", "kitchen_nabu")], events
    finally:
        shutil.rmtree(folder)


async def test_metrics_count_the_streams_listening_for_each_model(server: Server) -> None:
    """/metrics shows how many satellites listen for each wake word now, and none once they hang up."""
    names = ["okay_nabu", "hey_jarvis_oww"]

    def listening() -> list[float | None]:
        return [server.metric("wis_wake_streams", model=name) for name in names]

    before = listening()
    async with server.client() as client:
        await client.write_event(Detect(names=names).event())
        await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        quiet = silence(0.5).audio  # and more to come, as a satellite between phrases
        await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=quiet).event())
        await client.write_event(Ping().event())
        await read_until(client, "pong", timeout=30)
        assert [now - was for now, was in zip(listening(), before, strict=True)] == [1, 1]
    deadline = time.monotonic() + 10
    while listening() != before and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert listening() == before


async def test_many_long_streams_hold_nothing_once_they_end(server: Server, okay_nabu: Pcm) -> None:
    """Eight satellites stream a minute each at once (both families); each hears its own phrase, and what they held
    of the memory budget, and of the process, is given back."""
    minute = join(*([okay_nabu] + [silence(5.0), okay_nabu] * 8))  # about 60 s, the phrase every 7 s

    async def one(name: str) -> list[Event]:
        return await detect(server, minute, [name])

    names = ["okay_nabu", "okay_nabu_oww"] * 4
    await asyncio.gather(*(one(name) for name in names))  # warm: the process's allocator reaches its size
    rss = server.rss_mb()
    results = await asyncio.gather(*(one(name) for name in names))
    for name, events in zip(names, results, strict=True):
        assert [event.type for event in events] == ["detection"] * 9, (name, events)
    assert server.metric("wis_memory_budget_used_bytes") == 0
    assert server.rss_mb() - rss < 20, (rss, server.rss_mb())


async def test_openwakeword_hears_as_pyopen_wakeword_does(okay_nabu: Pcm) -> None:
    """The server's openWakeWord (shared interpreters, XNNPACK, the silence every stream starts from heard once)
    gives pyopen-wakeword's own probabilities for the same stream, window for window, with Okay Nabu in it."""
    from pyopen_wakeword import OpenWakeWord, OpenWakeWordFeatures

    from wyoming_wis.wake import oww
    from wyoming_wis.wake.models import OPEN, library_dir, tflite_library

    folder = library_dir(OPEN) / "models"
    features = OpenWakeWordFeatures.from_builtin(folder, tflite_library())
    model = OpenWakeWord.from_model(folder / "okay_nabu.tflite", libtensorflowlite_c_path=tflite_library())
    theirs: list[float] = []
    step = 1280 * 2  # 80 ms: pyopen-wakeword keeps 10 s, so its first piece must be short
    for start in range(0, len(okay_nabu.audio), step):
        for embedding in features.process_streaming(okay_nabu.audio[start : start + step]):
            theirs += model.process_streaming(embedding)
    key = oww.classifier_key(folder / "okay_nabu.tflite")
    for piece in (320, 32000, 9 * 2560 + 640):  # 10 ms, as Home Assistant sends it; 1 s; 9.25 windows' steps
        stream, ours, ends = oww.OpenFeatures.start(), [], []
        for start in range(0, len(okay_nabu.audio), piece):
            for end, embeddings in stream.hear(okay_nabu.audio[start : start + piece]):
                ours.append(oww.probability(key, embeddings))
                ends.append(end)
        mine = theirs[-len(ours) :]  # pyopen-wakeword also scores the silence each stream starts with
        assert abs(len(ours) - okay_nabu.seconds / 0.08) <= 1  # an embedding every 80 ms
        assert max(ours) > 0.9  # the phrase is in it
        assert max(abs(a - b) for a, b in zip(ours, mine, strict=True)) < 1e-4
        # each stamped where the audio it was made from ends: every 1280 samples, the last within the stream
        assert {b - a for a, b in itertools.pairwise(ends)} == {1280}
        assert len(okay_nabu.audio) // 2 - 1280 < ends[-1] <= len(okay_nabu.audio) // 2


async def test_one_detector_per_model_however_many_spellings(server: Server, okay_nabu: Pcm) -> None:
    """A detect naming Okay Nabu in 50 spellings holds what one naming it once holds of the memory budget (one
    detector, not 50: 13 MB each stream, 480 of them an address), and hears the phrase once, under the name it
    was given first."""
    spellings = [f"Okay_Nabu_v{n}" for n in range(50)]

    async def held(names: list[str]) -> tuple[float | None, list[Event]]:
        async with server.client() as client:
            await client.write_event(Detect(names=names).event())
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=bytes(320)).event())
            await client.write_event(Ping().event())
            await read_until(client, "pong", timeout=30)
            budget = server.metric("wis_memory_budget_used_bytes")
            await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=okay_nabu.audio).event())
            await client.write_event(AudioStop().event())
            await client.write_event(Ping().event())
            return budget, (await read_until(client, "pong", timeout=60))[:-1]

    one, _ = await held(["okay_nabu"])
    many, events = await held(spellings)
    print(f"budget held by a stream: one name {one / 1e6:.2f} MB, 50 spellings {many / 1e6:.2f} MB")
    assert many == one, (one, many)
    assert [(event.type, event.data["name"]) for event in events] == [("detection", spellings[0])], events


async def test_too_many_wake_word_names_is_a_bad_request(server: Server) -> None:
    from wyoming_wis.wake.engine import MAX_NAMES

    async with server.client() as client:
        await client.write_event(Detect(names=[f"okay_nabu_v{n}" for n in range(500)]).event())
        await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        error = (await read_until(client, "error", timeout=30))[-1]
    assert error.data["code"] == "bad-request" and f"at most {MAX_NAMES}" in error.data["text"], error
    assert len(error.data["text"]) < 200
