"""How Piper speaks: speed and pauses, the first phrase early, and text read as a person would."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import held, read_until, rms
from wyoming.tts import SynthesizeChunk, SynthesizeStart, SynthesizeStop

from wyoming_wis.catalog import Catalog
from wyoming_wis.errors import BadRequest
from wyoming_wis.runtime import Placement, Runtime
from wyoming_wis.scheduler import Pace, Scheduler
from wyoming_wis.tts import PiperEngine, SpeechCache, SpeechParams, SpeechStream
from wyoming_wis.tts.normalize import normalize
from wyoming_wis.tts.phrasing import Phrasing
from wyoming_wis.tts.piper import FIRST_FRAMES, MAX_PIECE
from wyoming_wis.tts.stream import Utterance

STEADY = SpeechParams(noise_scale=0.0, noise_w=0.0)  # no randomness: lengths can be compared exactly
HOP = 256  # samples per latent frame in Piper's medium voices


async def say(engine: PiperEngine, text: str, params: SpeechParams) -> bytes:
    """All of the speech, a sentence at a time (as for a listener with audio in hand)."""
    return b"".join([piece async for piece in engine.stream(Utterance(text, None, params, Pace()))])


def same_sound(a: bytes, b: bytes) -> bool:
    """Equal length and within a few steps of 16-bit rounding everywhere."""
    x, y = np.frombuffer(a, dtype=np.int16).astype(int), np.frombuffer(b, dtype=np.int16).astype(int)
    return len(x) == len(y) and int(np.abs(x - y).max()) <= 4


@pytest.fixture(scope="module")
def joe(data_dir: Path) -> Iterator[PiperEngine]:
    engine = PiperEngine(
        Catalog([data_dir]).voice("en_US-joe-medium"), Placement(Runtime("cpu", 0, "int8", 2), workers=2, queue_size=4)
    )
    yield engine
    engine.close()


async def test_speed_and_sentence_silence(joe: PiperEngine) -> None:
    text = "The living room lights are now on."
    normal = await say(joe, text, STEADY)
    fast = await say(joe, text, STEADY.but(speed=2.0))
    slow = await say(joe, text, STEADY.but(speed=0.5))
    # Sounds scale with speed; the pauses Piper keeps around a sentence do not quite.
    assert 0.45 < len(fast) / len(normal) < 0.7, len(fast) / len(normal)
    assert 1.6 < len(slow) / len(normal) < 2.2, len(slow) / len(normal)
    paused = await say(joe, text, STEADY.but(sentence_silence=0.5))
    assert len(paused) - len(normal) == int(0.5 * joe.format.rate) * joe.format.bytes_per_frame
    assert paused[len(normal) :] == bytes(len(paused) - len(normal))


@pytest.mark.parametrize("change", [{"speed": 0.2}, {"speed": 4.5}, {"noise_scale": -1}, {"sentence_silence": 9}])
def test_out_of_range_parameters_are_refused(change: dict[str, float]) -> None:
    with pytest.raises(BadRequest):
        SpeechParams().but(**change)


async def test_first_clause_is_spoken_before_the_sentence_is_written(joe: PiperEngine) -> None:
    stream = SpeechStream(joe, None, 1000, STEADY)
    phrases = aiter(stream)
    stream.write("Okay, I turned on the kitchen lights, and ")
    first = (await asyncio.wait_for(anext(phrases), 30)).audio  # the rest of the sentence is not written yet
    clause = await say(joe, "Okay, I turned on the kitchen lights,", STEADY)
    assert len(first) == FIRST_FRAMES * HOP * 2 and same_sound(first, clause[: len(first)])
    stream.write("set the thermostat to twenty one degrees. Have a nice evening.")
    stream.close()
    rest = b"".join([piece.audio async for piece in phrases])
    assert same_sound(first + rest[: len(clause) - len(first)], clause)
    assert len(rest) - len(clause) > 2 * joe.format.rate  # and the other two sentences follow


async def test_pieces_join_without_a_seam(joe: PiperEngine) -> None:
    """A waiting listener gets a short first piece, then pieces of up to 3 s; together they are one whole decode."""
    text = (
        "According to the forecast for the rest of the week, "
        "temperatures will stay between twelve and seventeen degrees."
    )
    pieces = [piece async for piece in joe.stream(Utterance(text, None, STEADY, Pace(), urgent=True))]
    (ids,) = joe._phoneme_ids(text)
    whole = joe._whole(ids, joe._feeds(None, STEADY), alone=True)
    first, *rest = [len(piece) // (HOP * 2) for piece in pieces]
    assert first == FIRST_FRAMES and len(rest) >= 2 and max(rest) <= MAX_PIECE and max(rest) - min(rest) <= 1
    assert same_sound(b"".join(pieces), whole)


async def test_waiting_listeners_go_before_one_already_listening() -> None:
    """With the worker busy, a new listener's first step starts before the next step of one with audio in hand."""
    scheduler = Scheduler("order", workers=1, queue_size=8)
    order: list[str] = []
    try:
        async with held(scheduler):
            playing = Pace(started=time.monotonic() - 5, seconds=8.0)  # 3 s of audio in hand
            later = asyncio.ensure_future(scheduler.run(order.append, "playing", pace=playing))
            new = asyncio.ensure_future(scheduler.run(order.append, "new", pace=Pace()))
            await asyncio.sleep(0.05)
        await asyncio.gather(later, new)
        assert order == ["new", "playing"]
    finally:
        scheduler.close()


async def test_a_sentence_in_phrases_pauses_only_at_its_end(joe: PiperEngine) -> None:
    """The first clause goes on its own, and a long sentence in phrases, but `sentence_silence` follows the sentence."""
    text = "Okay, I turned on the kitchen lights, and set the thermostat to twenty one degrees. Good night."
    audio = await speak(SpeechStream(joe, None, 1000, STEADY.but(sentence_silence=0.5)), text)
    samples = np.frombuffer(audio, dtype=np.int16)
    pause = int(0.5 * joe.format.rate)
    silent = np.convolve(samples == 0, np.ones(pause, dtype=int), mode="valid") == pause  # 0.5 s of zeros from here
    starts = np.flatnonzero(silent[1:] & ~silent[:-1]) + 1
    assert len(starts) == 2 and silent[-1], starts  # after each sentence, the last at the very end


def test_short_first_sentence_is_not_split() -> None:
    phrases = Phrasing("en_US").add("Yes, done. Okay, I turned on the kitchen lights, and the fan.", final=True)
    assert [phrase.text for phrase in phrases] == ["Yes, done.", "Okay, I turned on the kitchen lights, and the fan."]


@pytest.mark.parametrize(
    ("language", "text", "spoken"),
    [
        (
            "en_US",
            "It is 21°C outside, 70°F inside.",
            "It is 21 degrees Celsius outside, 70 degrees Fahrenheit inside.",
        ),
        ("en_US", "It costs $4.99 or €1.", "It costs 4 dollars 99 cents or 1 euro."),
        (
            "en_US",
            "5 km away, 1 kg, 50 km/h, 3 kWh.",
            "5 kilometers away, 1 kilogram, 50 kilometers per hour, 3 kilowatt hours.",
        ),
        ("en_US", "Set a timer for 1h 30min.", "Set a timer for 1 hour 30 minutes."),
        ("en_US", "Due 12/03/2026 or 2026-01-02.", "Due December 3rd, 2026 or January 2nd, 2026."),
        ("en_GB", "Due 12/03/2026.", "Due March 12th, 2026."),
        ("en-US", "Due 12/03/2026.", "Due December 3rd, 2026."),
        ("en_US", "I am at home at 5 pm.", "I am at home at 5 pm."),
        ("de_DE", "Es sind 21°C.", "Es sind 21°C."),
    ],
)
def test_text_is_read_as_a_person_would(language: str, text: str, spoken: str) -> None:
    assert normalize(text, language) == spoken


async def test_wyoming_stream_speaks_before_the_sentence_is_complete(server) -> None:
    """An LLM writes a long first sentence; its first clause is heard before the sentence ends."""
    async with server.client() as client:
        await client.write_event(SynthesizeStart().event())
        await client.write_event(SynthesizeChunk(text="Okay, I turned on the kitchen lights, and ").event())
        early = await read_until(client, "audio-stop", timeout=30)
        assert [event.type for event in early][0] == "audio-start", early
        await client.write_event(SynthesizeChunk(text="set the thermostat to twenty one degrees.").event())
        await client.write_event(SynthesizeStop().event())
        rest = await read_until(client, "synthesize-stopped", timeout=30)
    assert rms_of(early) > 0.01
    assert [event.type for event in rest].count("audio-stop") == 1


def rms_of(events: list) -> float:
    from helpers import collect_speech

    return rms(collect_speech(events).pcm)


async def speak(stream: SpeechStream, text: str) -> bytes:
    stream.write(text)
    stream.close()
    return b"".join([piece.audio async for piece in stream])


async def test_speech_cache_hit_miss_and_bypass(joe: PiperEngine, tmp_path: Path) -> None:
    cache = SpeechCache(tmp_path, 10_000_000, 3600)
    text = "The garage door is closed."
    first = await speak(SpeechStream(joe, None, 1000, STEADY, cache=cache), text)
    assert (cache.hits, cache.misses) == (0, 1)
    again = await speak(SpeechStream(joe, None, 1000, STEADY, cache=cache), text)
    assert (cache.hits, cache.misses) == (1, 1) and again == first
    faster = await speak(SpeechStream(joe, None, 1000, STEADY.but(speed=1.5), cache=cache), text)
    assert cache.misses == 2 and len(faster) < len(first)  # other parameters, other entry
    await speak(SpeechStream(joe, None, 1000, STEADY, cache=None), text)  # bypassed: the cache is not asked
    assert (cache.hits, cache.misses) == (1, 2)
    assert len(list(tmp_path.glob("*/*.pcm"))) == 2
    assert not list(tmp_path.glob("*/.tmp-*"))  # written atomically: no leftovers


async def test_damaged_or_expired_entries_are_not_served(joe: PiperEngine, tmp_path: Path) -> None:
    cache = SpeechCache(tmp_path, 10_000_000, 3600)
    text = "Good night."
    good = await speak(SpeechStream(joe, None, 1000, STEADY, cache=cache), text)
    [entry] = tmp_path.glob("*/*.pcm")
    data = bytearray(entry.read_bytes())
    data[-100] ^= 0xFF
    entry.write_bytes(bytes(data))
    assert await speak(SpeechStream(joe, None, 1000, STEADY, cache=cache), text) == good  # synthesised again
    assert cache.hits == 0 and cache.misses == 2

    old = time.time() - 7200
    os.utime(entry, (old, old))
    assert await SpeechCache(tmp_path, 10_000_000, 3600).get(entry.stem) is None
    assert not entry.exists()


async def test_cache_stays_under_its_size_cap(tmp_path: Path) -> None:
    cache = SpeechCache(tmp_path, 100_000, 3600)
    for number in range(12):
        await cache.put(f"{number:02d}" + "0" * 62, bytes(20_000))
    total = sum(path.stat().st_size for path in tmp_path.glob("*/*.pcm"))
    assert 0 < total <= 100_000
    assert await cache.get("11" + "0" * 62) == bytes(20_000)  # the newest stay


def test_raw_phonemes_the_voice_lacks_are_dropped_without_a_log_line_each(
    joe: PiperEngine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        ids = joe._phoneme_ids("[[" + "€" * 200 + "]] Hello.")
    assert len(ids) == 1 and len(ids[0]) > 10  # Hello
    assert not caplog.records, caplog.records[:3]


def test_voice_sessions_keep_no_plan_per_phrase_length(joe: PiperEngine) -> None:
    """onnxruntime keeps a memory plan per input shape when asked; every phrase length is a new shape, so a busy
    server's memory grew without end (bench/soak.py). Every session the voice runs must have it off."""
    parts = [joe._front] + ([joe._decoder] if joe._decoder is not None else [])
    sessions = [session for part in parts for session in (part.alone, part.shared)]
    assert sessions and all(not s.get_session_options().enable_mem_pattern for s in sessions)
    # nor an arena, which keeps the most a session ever took (235 MB after one long sentence)
    assert all(not s.get_session_options().enable_cpu_mem_arena for s in sessions)
