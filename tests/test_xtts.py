"""XTTS-v2 engine: loading a release folder, streaming, voice cloning, and bad references.

No real XTTS weights may be downloaded, so a tiny random XTTS-v2 is built in the
release's layout (tests/xtts_tiny.py) and loaded through the engine's own loading
code. It speaks noise: these tests check structure (rates, pieces, timing, files),
not how it sounds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("TTS", reason="the xtts extra is not installed")

import xtts_tiny  # noqa: E402
from helpers import CORPUS, Pcm, load_audio, wav_bytes  # noqa: E402

from wyoming_wis.audio import AudioFormat  # noqa: E402
from wyoming_wis.catalog import Found  # noqa: E402
from wyoming_wis.errors import AudioTooLong, BadRequest, UnknownSpeaker, UnsupportedLanguage  # noqa: E402
from wyoming_wis.runtime import Runtime  # noqa: E402
from wyoming_wis.tts.params import SpeechParams  # noqa: E402
from wyoming_wis.tts.xtts import MAX_REFERENCE_BYTES, XttsEngine  # noqa: E402

RUNTIME = Runtime(device="cpu", device_index=0, compute_type="int8", cpu_threads=2)
CHUNK_TOKENS = 8  # the tiny model writes 32 tokens a sentence: 4 pieces
FLAC = CORPUS / "LJ001-0001.flac"
TEXT = "Hello there, this is a test."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return xtts_tiny.build(tmp_path_factory.mktemp("xtts") / "tiny-xtts")


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xtts-voices")


def new_engine(model_dir: Path, voices_dir: Path, workers: int = 2) -> XttsEngine:
    found = Found(name="tiny-xtts", path=model_dir, source="test build")
    return XttsEngine(
        found, RUNTIME, workers=workers, queue_size=4, voices_dir=voices_dir, stream_chunk_tokens=CHUNK_TOKENS
    )


@pytest.fixture(scope="module")
def engine(model_dir: Path, voices_dir: Path) -> Iterator[XttsEngine]:
    engine = new_engine(model_dir, voices_dir)
    engine.warm_up()
    yield engine
    engine.close()


def wav(seconds: float, rate: int = 16000, noise: bool = True) -> bytes:
    """A WAV file of noise (or silence) that PyAV reads like any recording."""
    samples = np.random.default_rng(1).normal(0, 0.1, int(seconds * rate)) if noise else np.zeros(int(seconds * rate))
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    return wav_bytes(Pcm(pcm, rate, 2, 1))


def lj_wav(seconds: float) -> bytes:
    """The first `seconds` of an LJ Speech clip as a 22.05 kHz WAV."""
    pcm = load_audio(FLAC, rate=22050)
    return wav_bytes(Pcm(pcm.audio[: int(seconds * 22050) * 2], 22050, 2, 1))


async def timed(pieces: AsyncIterator[bytes]) -> tuple[list[bytes], list[float], float]:
    start = time.perf_counter()
    out, times = [], []
    async for piece in pieces:
        out.append(piece)
        times.append(time.perf_counter() - start)
    return out, times, time.perf_counter() - start


def voice_files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


def test_loads_the_release_layout(engine: XttsEngine, model_dir: Path) -> None:
    assert voice_files(model_dir) == {"config.json", "model.pth", "vocab.json", "speakers_xtts.pth"}
    assert engine.format == AudioFormat(24000, 2, 1)
    assert len(engine.languages) == 17 and {"en", "de", "zh-cn", "ja"} <= set(engine.languages)
    assert engine.speakers[:2] == list(xtts_tiny.SPEAKERS)
    # the saved weights were loaded, not a fresh random model
    stop = engine.config.model_args.gpt_stop_audio_token
    assert engine.model.gpt.mel_head.bias[stop].item() == pytest.approx(-1e4)
    assert engine.language("en-US") == "en" and engine.language("zh_CN") == "zh-cn" and engine.language(None) == "en"
    with pytest.raises(UnsupportedLanguage, match="does not speak 'xx'"):
        engine.language("xx")
    with pytest.raises(UnknownSpeaker, match="no speaker 'Nobody'"):
        engine.voice("Nobody")


async def test_streams_pieces_before_the_sentence_is_done(engine: XttsEngine) -> None:
    pieces, times, total = await timed(engine.stream(TEXT, xtts_tiny.SPEAKERS[1], "en"))
    whole = await engine.synthesize(TEXT, xtts_tiny.SPEAKERS[1], "en")
    assert len(pieces) >= 3
    assert all(len(piece) % 2 == 0 and piece for piece in pieces)
    assert times[0] < 0.6 * total, (times, total)  # the first piece came long before the last
    joined = b"".join(pieces)
    assert len(joined) == len(whole) > 2000  # the same number of samples as a whole synthesis
    assert np.abs(np.frombuffer(joined, dtype="<i2")).max() > 0


async def test_a_reader_that_leaves_early_frees_the_model(engine: XttsEngine) -> None:
    pieces = engine.stream(TEXT + " " + TEXT, None, "en")
    first = await pieces.__anext__()
    await pieces.aclose()
    assert first
    audio = await asyncio.wait_for(engine.synthesize("Next.", None, "en"), timeout=60)
    assert audio


@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("zh-cn", "你好，世界。"),
        ("ja", "こんにちは、世界。"),
        ("ko", "안녕하세요."),
        ("ru", "Привет, мир."),
        ("de", "Guten Tag."),
    ],
)
async def test_languages_with_their_own_text_front_ends_speak(engine: XttsEngine, language: str, text: str) -> None:
    assert len(await engine.synthesize(text, None, language)) > 2000


async def test_speed_silence_and_empty_text(engine: XttsEngine) -> None:
    plain = await engine.synthesize(TEXT, None, "en")
    slower = await engine.synthesize(TEXT, None, "en", params=SpeechParams(speed=0.5, sentence_silence=0.5))
    silence = int(0.5 * 24000) * 2
    assert len(slower) - silence > 1.5 * len(plain) and slower.endswith(bytes(silence))
    assert await engine.synthesize("  \n ", None, "en") == b""


async def test_cloned_voice_is_stored_and_survives_a_restart(
    engine: XttsEngine, model_dir: Path, voices_dir: Path
) -> None:
    info = await engine.clone("lj-speech_1.0", FLAC.read_bytes())
    assert voice_files(voices_dir) == {"lj-speech_1.0.safetensors", "lj-speech_1.0.json"}
    sidecar = json.loads((voices_dir / "lj-speech_1.0.json").read_text())
    assert sidecar == info and sidecar["model"] == "tiny-xtts"
    assert 9 < sidecar["source_seconds"] < 11 and sidecar["created"].endswith("Z")
    assert "lj-speech_1.0" in engine.speakers and engine.cloned_voices == ["lj-speech_1.0"]
    assert await engine.synthesize(TEXT, "lj-speech_1.0", "en")

    restarted = new_engine(model_dir, voices_dir, workers=1)
    try:
        assert restarted.speakers == [*xtts_tiny.SPEAKERS, "lj-speech_1.0"]
        stored, cloned = restarted.voice("lj-speech_1.0"), engine.voice("lj-speech_1.0")
        assert stored.cloned and stored.gpt_cond_latent.equal(cloned.gpt_cond_latent)
        assert stored.speaker_embedding.equal(cloned.speaker_embedding)
        pieces = [piece async for piece in restarted.stream(TEXT, "lj-speech_1.0", "en")]
        assert len(pieces) >= 2 and sum(map(len, pieces)) > 2000
    finally:
        restarted.close()
    engine.remove("lj-speech_1.0")
    assert voice_files(voices_dir) == set() and "lj-speech_1.0" not in engine.speakers


async def test_a_reference_for_one_request_is_not_stored(engine: XttsEngine, voices_dir: Path) -> None:
    before = voice_files(voices_dir)
    reference = lj_wav(4.0)
    whole = await engine.synthesize(TEXT, language="en", speaker_wav=reference)
    pieces = [piece async for piece in engine.stream(TEXT, language="de", speaker_wav=reference)]
    assert whole and len(pieces) >= 2
    assert voice_files(voices_dir) == before and engine.speakers == list(xtts_tiny.SPEAKERS)


@pytest.mark.parametrize(
    ("audio", "error", "message"),
    [
        (np.random.default_rng(7).bytes(50_000), BadRequest, "Cannot read the reference audio"),
        (b"", BadRequest, "empty"),
        (wav(1.0), BadRequest, "at least 3 s"),
        (wav(5.0, noise=False), BadRequest, "silent"),
        (wav(31.0, rate=8000), AudioTooLong, "longer than 30 s"),
        (bytes(MAX_REFERENCE_BYTES + 1), AudioTooLong, "the limit is 10 MB"),
    ],
    ids=["random-bytes", "empty", "too-short", "silent", "too-long", "too-big"],
)
async def test_bad_references_are_refused_clearly(
    engine: XttsEngine, voices_dir: Path, audio: bytes, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await engine.clone("rejected", audio)
    with pytest.raises(error, match=message):
        await engine.synthesize(TEXT, language="en", speaker_wav=audio)
    assert "rejected" not in engine.speakers and not list(voices_dir.glob("rejected*"))


@pytest.mark.parametrize("name", ["../x", "", ".hidden", "a/b", "x..y", "with space", "x" * 65, "/abs"])
async def test_invalid_voice_names_are_refused(engine: XttsEngine, voices_dir: Path, name: str) -> None:
    with pytest.raises(BadRequest, match="Invalid voice name"):
        await engine.clone(name, FLAC.read_bytes())
    assert not list(voices_dir.glob("*.safetensors")) and not list(voices_dir.parent.glob("*.safetensors"))


async def test_concurrent_requests_both_complete(engine: XttsEngine) -> None:
    async def streamed() -> bytes:
        return b"".join([piece async for piece in engine.stream(TEXT, xtts_tiny.SPEAKERS[0], "en")])

    whole, streamed_audio = await asyncio.wait_for(
        asyncio.gather(engine.synthesize(TEXT, xtts_tiny.SPEAKERS[1], "fr"), streamed()), timeout=120
    )
    assert len(whole) > 2000 and len(streamed_audio) > 2000
    assert engine.scheduler.pending == 0


async def test_the_event_loop_runs_while_xtts_works(engine: XttsEngine) -> None:
    """Inference runs in the scheduler's threads: a ticker on the loop is never held up for long."""
    reference = lj_wav(4.0)
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    try:
        pieces = [piece async for piece in engine.stream(TEXT, None, "en", speaker_wav=reference)]
    finally:
        done.set()
        await ticker
    assert len(pieces) >= 2 and len(gaps) > 20
    assert max(gaps) < 0.5, sorted(gaps)[-5:]
