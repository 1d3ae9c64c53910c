"""XTTS-v2: loading a release folder, streaming, voice cloning, bad references, the core and Wyoming.

No real XTTS weights may be downloaded, so a tiny random XTTS-v2 is built in the
release's layout (tests/xtts_tiny.py) and loaded through the engine's own loading
code. It speaks noise: these tests check structure (rates, pieces, timing, files,
names, errors), not how it sounds.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.xtts
pytest.importorskip("TTS", reason="the xtts extra is not installed (pip install 'wyoming-wis[xtts]')")

import xtts_tiny  # noqa: E402
from disks import full_dir, read_only_dir, temporary_files  # noqa: E402
from helpers import (  # noqa: E402
    CORPUS,
    Pcm,
    Server,
    assert_clean_log,
    load_audio,
    read_until,
    start_server,
    synthesize,
    wav_bytes,
)
from test_http_openai import decode  # noqa: E402
from wyoming.info import Describe, Info  # noqa: E402
from wyoming.tts import Synthesize, SynthesizeVoice  # noqa: E402

from wyoming_wis.audio import AudioFormat  # noqa: E402
from wyoming_wis.catalog import Found  # noqa: E402
from wyoming_wis.config import CoreSettings, Settings  # noqa: E402
from wyoming_wis.core import XTTS_VOICES, Core  # noqa: E402
from wyoming_wis.errors import (  # noqa: E402
    BadAudio,
    BadRequest,
    CannotStore,
    UnknownSpeaker,
    UnknownVoice,
    UnsupportedLanguage,
)
from wyoming_wis.requests import SpeechRequest  # noqa: E402
from wyoming_wis.runtime import Placement, Runtime  # noqa: E402
from wyoming_wis.scheduler import Pace  # noqa: E402
from wyoming_wis.tts.params import SpeechParams  # noqa: E402
from wyoming_wis.tts.stream import SpeechStream, Utterance  # noqa: E402
from wyoming_wis.tts.voices import XTTS  # noqa: E402
from wyoming_wis.tts.xtts import XttsEngine  # noqa: E402
from wyoming_wis.tts.xtts_voices import MAX_REFERENCE_BYTES  # noqa: E402
from wyoming_wis.wyoming.info import build_info  # noqa: E402

RUNTIME = Runtime(device="cpu", device_index=0, compute_type="int8", cpu_threads=2)
CHUNK_TOKENS = 8  # the tiny model writes 32 tokens a sentence: 4 pieces
FLAC = CORPUS / "LJ001-0001.flac"
TEXT = "Hello there, this is a test."
PLAIN = SpeechParams()
MODEL = "tiny-xtts"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return xtts_tiny.build(tmp_path_factory.mktemp("xtts") / MODEL)


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xtts-voices")


def new_engine(model_dir: Path, voices_dir: Path, workers: int = 2) -> XttsEngine:
    found = Found(name=MODEL, path=model_dir, source="test build")
    return XttsEngine(
        found, Placement(RUNTIME, workers, queue_size=4), voices_dir=voices_dir, stream_chunk_tokens=CHUNK_TOKENS
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


def lj_wav(seconds: float, start: float = 0.0) -> bytes:
    """`seconds` of an LJ Speech clip from `start` as a 22.05 kHz WAV."""
    pcm = load_audio(FLAC, rate=22050)
    first = int(start * 22050) * 2
    return wav_bytes(Pcm(pcm.audio[first : first + int(seconds * 22050) * 2], 22050, 2, 1))


def stream(engine: XttsEngine, text: str, speaker: str | None = None, language: str = "en") -> AsyncIterator[bytes]:
    return engine.stream(Utterance(text, speaker, PLAIN, Pace(), language=language))


async def timed(pieces: AsyncIterator[bytes]) -> tuple[list[bytes], list[float], float]:
    start = time.perf_counter()
    out, times = [], []
    async for piece in pieces:
        out.append(piece)
        times.append(time.perf_counter() - start)
    return out, times, time.perf_counter() - start


async def speak(speech: SpeechStream, text: str = TEXT) -> bytes:
    speech.write(text)
    speech.close()
    return b"".join([piece.audio async for piece in speech])


def voice_files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


# -- the engine ---------------------------------------------------------------


def test_loads_the_release_layout(engine: XttsEngine, model_dir: Path) -> None:
    assert voice_files(model_dir) == {"config.json", "model.pth", "vocab.json", "speakers_xtts.pth"}
    assert engine.format == AudioFormat(24000, 2, 1)  # XTTS-v2 speaks at 24 kHz
    assert len(engine.languages) == 17 and {"en", "de", "zh-cn", "ja"} <= set(engine.languages)
    assert engine.speakers[:2] == list(xtts_tiny.SPEAKERS)
    # the saved weights were loaded, not a fresh random model
    stop = engine.config.model_args.gpt_stop_audio_token
    assert engine.model.gpt.mel_head.bias[stop].item() == pytest.approx(-1e4)
    assert engine.language("en-US") == "en" and engine.language("zh_CN") == "zh-cn" and engine.language(None) == "en"
    with pytest.raises(UnsupportedLanguage, match="does not speak 'xx'"):
        engine.language("xx")
    with pytest.raises(UnknownSpeaker, match="no speaker 'Nobody'"):
        engine.speaker_id("Nobody")
    assert engine.speaker_id(None) == engine.speaker_id(xtts_tiny.SPEAKERS[0])


async def test_streams_pieces_before_the_sentence_is_done(engine: XttsEngine) -> None:
    pieces, times, total = await timed(stream(engine, TEXT, xtts_tiny.SPEAKERS[1]))
    whole = await engine.synthesize(TEXT, xtts_tiny.SPEAKERS[1], "en")
    assert len(pieces) >= 3
    assert all(len(piece) % 2 == 0 and piece for piece in pieces)
    assert times[0] < 0.6 * total, (times, total)  # the first piece came long before the last
    joined = b"".join(pieces)
    assert len(joined) == len(whole) > 2000  # the same number of samples as a whole synthesis
    assert np.abs(np.frombuffer(joined, dtype="<i2")).max() > 0


async def test_a_reader_that_leaves_early_frees_the_model(engine: XttsEngine) -> None:
    pieces = stream(engine, TEXT + " " + TEXT)
    first = await pieces.__anext__()
    await pieces.aclose()
    assert first
    audio = await asyncio.wait_for(engine.synthesize("Next.", None, "en"), timeout=60)
    assert audio


@pytest.mark.parametrize(
    ("language", "text"), [("zh-cn", "你好，世界。"), ("ja", "こんにちは、世界。"), ("ko", "안녕하세요.")]
)
async def test_languages_with_their_own_text_front_ends_speak(engine: XttsEngine, language: str, text: str) -> None:
    assert len(await engine.synthesize(text, None, language)) > 2000


async def test_speed_silence_and_empty_text(engine: XttsEngine) -> None:
    plain = await engine.synthesize(TEXT, None, "en")
    slower = await engine.synthesize(TEXT, None, "en", SpeechParams(speed=0.5, sentence_silence=0.5))
    silence = int(0.5 * 24000) * 2
    assert len(slower) - silence > 1.5 * len(plain) and slower.endswith(bytes(silence))
    assert await engine.synthesize("  \n ", None, "en") == b""


async def test_cloned_voice_is_stored_and_survives_a_restart(
    engine: XttsEngine, model_dir: Path, voices_dir: Path
) -> None:
    info = await engine.clone("lj-speech_1.0", FLAC.read_bytes())
    assert voice_files(voices_dir) == {"lj-speech_1.0.safetensors", "lj-speech_1.0.json"}
    sidecar = json.loads((voices_dir / "lj-speech_1.0.json").read_text())
    assert sidecar == info and sidecar["model"] == MODEL
    assert 9 < sidecar["source_seconds"] < 11 and sidecar["created"].endswith("Z")
    assert "lj-speech_1.0" in engine.speakers and engine.cloned_voices == ["lj-speech_1.0"]
    assert await engine.synthesize(TEXT, "lj-speech_1.0", "en")

    restarted = new_engine(model_dir, voices_dir, workers=1)
    try:
        assert restarted.speakers == [*xtts_tiny.SPEAKERS, "lj-speech_1.0"]
        stored, cloned = restarted.conditioning("lj-speech_1.0"), engine.conditioning("lj-speech_1.0")
        assert stored.cloned and np.array_equal(stored.gpt_cond_latent, cloned.gpt_cond_latent)
        assert np.array_equal(stored.speaker_embedding, cloned.speaker_embedding)
        assert restarted.speaker_id("lj-speech_1.0") == engine.speaker_id("lj-speech_1.0")
        pieces = [piece async for piece in stream(restarted, TEXT, "lj-speech_1.0")]
        assert len(pieces) >= 2 and sum(map(len, pieces)) > 2000
    finally:
        restarted.close()
    engine.remove("lj-speech_1.0")
    assert voice_files(voices_dir) == set() and "lj-speech_1.0" not in engine.speakers


async def test_a_voice_cloned_again_gets_a_new_speaker_id(engine: XttsEngine, model_dir: Path) -> None:
    """The speaker id is part of the speech cache key: a re-cloned voice must not hit the old voice's speech."""
    await engine.clone("again", lj_wav(4.0))
    before = engine.speaker_id("again")
    await engine.clone("again", lj_wav(4.0, start=4.0))
    after = engine.speaker_id("again")
    assert before[0] == after[0] == "again" and before[1] != after[1]
    other = new_engine(model_dir, engine.store.folder, workers=1)  # another server sharing the data dir
    try:
        assert other.speaker_id("again") == after
        await engine.clone("again", lj_wav(4.0))  # cloned again elsewhere: a rescan picks it up
        other.rescan()
        assert other.speaker_id("again") == before
        engine.remove("again")
        other.rescan()
        assert "again" not in other.speakers
    finally:
        other.close()


async def test_a_reference_for_one_request_is_not_stored(engine: XttsEngine, voices_dir: Path) -> None:
    before = voice_files(voices_dir)
    speech = await engine.reference(lj_wav(4.0))
    assert speech.format == engine.format and speech.languages == engine.languages
    pieces = [piece async for piece in speech.stream(Utterance(TEXT, None, PLAIN, Pace(), language="de"))]
    assert len(pieces) >= 2 and sum(map(len, pieces)) > 2000
    assert voice_files(voices_dir) == before and engine.speakers == list(xtts_tiny.SPEAKERS)


BAD_REFERENCES = [
    (np.random.default_rng(7).bytes(50_000), "Cannot read the reference audio"),
    (b"", "empty"),
    (wav(1.0), "1.0 s; XTTS needs at least 3 s"),
    (wav(5.0, noise=False), "silent"),
    (wav(31.0, rate=8000), "longer than 30 s"),
    (bytes(MAX_REFERENCE_BYTES + 1), "the limit is 10 MB"),
]
BAD_IDS = ["random-bytes", "empty", "too-short", "silent", "too-long", "too-big"]


@pytest.mark.parametrize(("audio", "message"), BAD_REFERENCES, ids=BAD_IDS)
async def test_bad_references_are_refused_clearly(
    engine: XttsEngine, voices_dir: Path, audio: bytes, message: str
) -> None:
    with pytest.raises(BadAudio, match=message) as error:
        await engine.clone("rejected", audio)
    assert error.value.code == "bad-audio"
    with pytest.raises(BadAudio, match=message):
        await engine.reference(audio)
    assert "rejected" not in engine.speakers and not list(voices_dir.glob("rejected*"))


@pytest.mark.parametrize("name", ["../x", "", ".hidden", "a/b", "with space", "x" * 101, "/abs", "Daisy Studious"])
async def test_invalid_voice_names_are_refused(engine: XttsEngine, voices_dir: Path, name: str) -> None:
    with pytest.raises(BadRequest, match="Invalid voice name|studio speaker"):
        await engine.clone(name, FLAC.read_bytes())
    assert not list(voices_dir.glob("*.safetensors")) and not list(voices_dir.parent.glob("*.safetensors"))


async def test_concurrent_requests_both_complete(engine: XttsEngine) -> None:
    async def streamed() -> bytes:
        return b"".join([piece async for piece in stream(engine, TEXT, xtts_tiny.SPEAKERS[0])])

    whole, streamed_audio = await asyncio.wait_for(
        asyncio.gather(engine.synthesize(TEXT, xtts_tiny.SPEAKERS[1], "fr"), streamed()), timeout=120
    )
    assert len(whole) > 2000 and len(streamed_audio) > 2000
    assert engine.scheduler.pending == 0


async def test_the_event_loop_runs_while_xtts_works(engine: XttsEngine) -> None:
    """Conditioning and inference run in the scheduler's threads: a ticker on the loop is never held up for long."""
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
        speech = await engine.reference(lj_wav(4.0))
        pieces = [piece async for piece in speech.stream(Utterance(TEXT, None, PLAIN, Pace(), language="en"))]
    finally:
        done.set()
        await ticker
    assert len(pieces) >= 2 and len(gaps) > 20
    assert max(gaps) < 0.5, sorted(gaps)[-5:]


# -- the core: one voice list, cloning, the cache, errors -------------------------


@pytest.fixture(scope="module")
def xtts_data(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir holding the tiny model where a user would put XTTS-v2: DATA_DIR/xtts/NAME/."""
    data = tmp_path_factory.mktemp("xtts-data")
    shutil.copytree(model_dir, data / "xtts" / MODEL)
    (data / "voices").mkdir()
    announcer = {"model": MODEL, "speaker": xtts_tiny.SPEAKERS[1], "sentence_silence": 0.5}
    (data / "voices" / "voices.json").write_text(json.dumps({"voices": {"announcer": announcer}}))
    return data


def core_settings(data: Path) -> CoreSettings:
    return Settings.from_args(
        ["--data-dir", str(data), "--asr-model", "tiny.en", "--xtts", MODEL, "--cpu-threads", "2"], environ={}
    ).core


@pytest.fixture(scope="module")
def core(xtts_data: Path) -> Iterator[Core]:
    core = Core.load(core_settings(xtts_data))
    yield core
    core.close()


def voice_names(core: Core) -> list[str]:
    return [voice.name for voice in core.voices.voices]


async def test_core_lists_xtts_voices_and_speaks_them(core: Core) -> None:
    [model] = [voice for voice in core.voices.voices if voice.name == MODEL]
    assert model.engine == XTTS and model.speakers == list(xtts_tiny.SPEAKERS) and "ja" in model.languages
    assert model.model.source.startswith("data dir")  # found by name in DATA_DIR/xtts/
    speech = await core.speech_stream(SpeechRequest(voice_name=MODEL, speaker=xtts_tiny.SPEAKERS[1], language="de"))
    assert speech.format.rate == 24000 and speech.language == "de"
    assert len(await speak(speech)) > 2000
    assert core.voices.get(language="ko").name == MODEL  # the only voice that speaks Korean
    announcer = core.voices.get("announcer")  # a custom voice in voices.json on an XTTS speaker
    assert (announcer.engine, announcer.speaker) == (XTTS, xtts_tiny.SPEAKERS[1])
    audio = await speak(await core.speech_stream(SpeechRequest(voice_name="announcer")))
    assert audio.endswith(bytes(int(0.5 * 24000) * 2)) and len(audio) > 24000


async def test_core_errors_for_unknown_speakers_and_languages(core: Core) -> None:
    substitute = await core.speech_stream(
        SpeechRequest(voice_name="nobody", speaker="Nobody")
    )  # a name that leads nowhere: the default, its speaker
    assert substitute.engine.name == "en_US-joe-medium" and len(await speak(substitute)) > 2000
    with pytest.raises(UnknownSpeaker, match="no speaker 'Nobody'") as error:
        await core.speech_stream(SpeechRequest(voice_name=MODEL, speaker="Nobody"))
    assert error.value.code == "unknown-speaker"
    with pytest.raises(UnsupportedLanguage):
        await core.speech_stream(SpeechRequest(voice_name=MODEL, language="xx"))
    with pytest.raises(BadRequest, match="Piper voice"):
        await core.speech_stream(SpeechRequest(voice_name="en_US-joe-medium", reference=lj_wav(4.0)))
    with pytest.raises(UnknownVoice, match="No cloned voice 'en_US-joe-medium'"):
        await core.remove_voice("en_US-joe-medium")
    for taken in ("en_US-joe-medium", MODEL, "alloy"):
        with pytest.raises(BadRequest, match="exists already"):
            await core.clone_voice(taken, lj_wav(4.0))


async def test_core_clones_voices_and_caches_them_by_version(core: Core, xtts_data: Path) -> None:
    cache = core.speech_cache
    assert cache is not None
    info = await core.clone_voice("grandma", lj_wav(4.0))
    assert info["name"] == "grandma" and info["model"] == MODEL
    assert (xtts_data / XTTS_VOICES / MODEL / "grandma.safetensors").is_file()
    assert "grandma" in voice_names(core)  # listed at once
    grandma = core.voices.get("grandma")
    assert grandma.engine == XTTS and grandma.speaker == "grandma"
    assert "grandma" in core.voices.get(MODEL).speakers
    voices = {voice.name: voice for voice in build_info(core).tts[0].voices}
    assert voices["grandma"].attribution.name == "Coqui" and "zh-cn" in voices["grandma"].languages
    assert [speaker.name for speaker in voices[MODEL].speakers or []] == [*xtts_tiny.SPEAKERS, "grandma"]

    text = "The kitchen lights are on."
    first = await speak(await core.speech_stream(SpeechRequest(voice_name="grandma")), text)
    hits, misses = cache.hits, cache.misses
    again = await speak(await core.speech_stream(SpeechRequest(voice_name="grandma")), text)
    assert again == first and (cache.hits, cache.misses) == (hits + 1, misses)  # said before: from the cache
    await core.clone_voice("grandma", lj_wav(4.0, start=4.0))  # cloned again: the old speech is not hers
    fresh = await speak(await core.speech_stream(SpeechRequest(voice_name="grandma")), text)
    assert (cache.hits, cache.misses) == (hits + 1, misses + 1) and len(fresh) > 2000


async def test_core_reference_speech_is_never_cached_nor_stored(core: Core, xtts_data: Path) -> None:
    cache = core.speech_cache
    assert cache is not None
    entries = set((xtts_data / "cache" / "speech").rglob("*.pcm"))
    voices_before = voice_names(core)
    stored = set((xtts_data / XTTS_VOICES).rglob("*"))
    for _ in range(2):
        speech = await core.speech_stream(SpeechRequest(language="en", reference=lj_wav(4.0), cached=True))
        assert speech.cache is None
        assert len(await speak(speech, "The garage door is closed.")) > 2000
    assert set((xtts_data / "cache" / "speech").rglob("*.pcm")) == entries
    assert voice_names(core) == voices_before and set((xtts_data / XTTS_VOICES).rglob("*")) == stored
    with pytest.raises(BadAudio, match="Cannot read the reference audio") as error:
        await core.speech_stream(SpeechRequest(voice_name=MODEL, reference=b"not audio at all"))
    assert error.value.code == "bad-audio"


async def test_core_removes_cloned_voices(core: Core, xtts_data: Path) -> None:
    await core.clone_voice("passing", lj_wav(4.0))
    assert "passing" in voice_names(core)
    await core.remove_voice("passing")
    assert "passing" not in voice_names(core) and "passing" not in core.voices.get(MODEL).speakers
    assert not list((xtts_data / XTTS_VOICES / MODEL).glob("passing*"))
    assert (
        core.voices.find("passing") is None
        and (await core.speech_stream(SpeechRequest(voice_name="passing"))).engine.name != "passing"
    )


# -- Wyoming: a restarted server on the same data dir ----------------------------


@pytest.fixture(scope="module")
async def xtts_server(core: Core, xtts_data: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Server]:
    """A server started on the data dir the core cloned `narrator` into."""
    await core.clone_voice("narrator", lj_wav(4.0))
    args = ["--data-dir", str(xtts_data), "--asr-model", "tiny.en", "--xtts", MODEL, "--cpu-threads", "2"]
    server = start_server(args, tmp_path_factory.mktemp("xtts-server"))
    yield server
    assert server.stop() == 0
    assert "XTTS model tiny-xtts on cpu: 2 studio speakers, 2 cloned voices" in server.log
    assert_clean_log(server.log)


async def test_wyoming_lists_and_speaks_xtts_voices_after_a_restart(xtts_server: Server) -> None:
    """The cloned voice is there after a restart, and speaks."""
    server = xtts_server
    async with server.client() as client:
        await client.write_event(Describe().event())
        info = Info.from_event((await read_until(client, "info"))[-1])
        voices = {voice.name: voice for voice in info.tts[0].voices}
        assert {MODEL, "narrator", "grandma", "en_US-joe-medium"} <= voices.keys()
        assert [speaker.name for speaker in voices[MODEL].speakers or []][:2] == list(xtts_tiny.SPEAKERS)
        assert voices["narrator"].attribution.name == "Coqui" and "ja" in voices["narrator"].languages

        cloned = await synthesize(client, TEXT, SynthesizeVoice(name="narrator"))
        assert (cloned.pcm.rate, cloned.pcm.width, cloned.pcm.channels, cloned.stops) == (24000, 2, 1, 1)
        assert cloned.pcm.seconds > 0.1
        studio = await synthesize(client, TEXT, SynthesizeVoice(name=MODEL, speaker=xtts_tiny.SPEAKERS[1]))
        assert studio.pcm.rate == 24000 and studio.pcm.seconds > 0.1

        await client.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name=MODEL, speaker="Nobody")).event())
        error = (await read_until(client, "audio-stop"))[-1]
        assert error.type == "error" and error.data["code"] == "unknown-speaker", error


def seconds_of(data: bytes) -> float:
    samples, rate = decode(data)
    return len(samples) / rate


def test_http_clones_like_wis_and_speaks_with_a_reference(xtts_server: Server) -> None:
    """Willow's POST /api/tts?speaker= stores a voice; OpenAI speech as multipart speaks from a reference."""
    url = xtts_server.http_url
    with httpx.Client(timeout=120) as http:
        added = http.post(url + "/api/tts", params={"speaker": "papa"}, files={"audio_file": ("p.wav", lj_wav(5.0))})
        assert added.status_code == 200 and added.json()["status"] == "Added speaker 'papa'", added.text
        assert added.json()["voice"]["source_seconds"] == pytest.approx(5.0, abs=0.1)
        spoken = http.get(url + "/api/tts", params={"text": TEXT, "speaker": "papa"})
        assert spoken.status_code == 200 and spoken.headers["X-Cache"] == "MISS"
        assert seconds_of(spoken.content) > 0.1
        assert "papa" in {voice["id"] for voice in http.get(url + "/v1/audio/voices").json()["voices"]}

        form = {"input": TEXT, "model": "tts-1", "response_format": "wav", "language": "de"}
        once = http.post(url + "/v1/audio/speech", data=form, files={"reference_audio": ("r.wav", lj_wav(4.0, 1.0))})
        assert once.status_code == 200 and once.headers["X-Cache"] == "BYPASS", once.text
        assert seconds_of(once.content) > 0.1

        for params, files, param in (
            ({"speaker": "papa"}, {}, "audio_file"),  # no recording
            ({}, {"audio_file": ("p.wav", lj_wav(4.0))}, "speaker"),  # no name
        ):
            refused = http.post(url + "/api/tts", params=params, files=files or {"x": ("x", b"")})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.text
        bad = http.post(url + "/v1/audio/speech", data=form, files={"reference_audio": ("r.wav", b"not audio")})
        assert bad.status_code == 415 and bad.json()["error"]["param"] == "reference_audio", bad.text
        missing = http.post(url + "/v1/audio/speech", data=form, files={"voice_sample": ("r.wav", lj_wav(4.0))})
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "reference_audio"


# -- where cloned voices are kept: the quota, and a data dir that refuses writes ------------


def test_http_cloning_past_the_quota_is_refused_and_stores_nothing(model_dir: Path, tmp_path: Path) -> None:
    """Willow's POST /api/tts?speaker= with --max-cloned-voices 2: the third new voice is a 507, before its
    recording is decoded; replacing a voice is not refused."""
    data = tmp_path / "data"
    shutil.copytree(model_dir, data / "xtts" / MODEL)
    args = ["--data-dir", str(data), "--asr-model", "tiny.en", "--xtts", MODEL, "--cpu-threads", "2"]
    server = start_server([*args, "--max-cloned-voices", "2"], tmp_path / "server")
    folder = data / XTTS_VOICES / MODEL
    try:
        with httpx.Client(base_url=server.http_url, timeout=120) as http:

            def clone(name: str, audio: bytes) -> httpx.Response:
                return http.post("/api/tts", params={"speaker": name}, files={"audio_file": ("v.wav", audio)})

            for name in ("mum", "dad"):
                assert clone(name, lj_wav(4.0)).status_code == 200
            refused = clone("gran", lj_wav(4.0))
            assert refused.status_code == 507, refused.text  # before: 200, and a third voice on disk
            error = refused.json()["error"]
            assert error["code"] == "cannot-store" and "at most 2 cloned voices" in error["message"], error
            assert voice_files(folder) == {"mum.json", "mum.safetensors", "dad.json", "dad.safetensors"}
            assert clone("mum", lj_wav(4.0, start=4.0)).status_code == 200  # a replacement takes no more room
            long_name = clone("x" * 5000, lj_wav(4.0))
            assert long_name.status_code == 400 and "(5000 characters)" in long_name.json()["error"]["message"]
            assert len(long_name.text) < 500
            voices = {voice["id"] for voice in http.get("/v1/audio/voices").json()["voices"]}
            assert {"mum", "dad"} <= voices and "gran" not in voices
            assert len(voice_files(folder)) == 4
    finally:
        code = server.stop()
    assert code == 0 and "Cloned XTTS voice gran" not in server.log
    assert_clean_log(server.log)


@pytest.mark.parametrize("disk", ["read-only", "full"])
async def test_cloning_into_a_data_dir_that_refuses_writes(model_dir: Path, tmp_path: Path, disk: str) -> None:
    """The engine starts on a data dir it cannot write (before: a read-only one stopped it), refuses a clone
    clearly, keeps nothing, and speaks on."""
    with (read_only_dir if disk == "read-only" else full_dir)(tmp_path / "data") as data:
        engine = new_engine(model_dir, data / XTTS_VOICES / MODEL, workers=1)
        try:
            with pytest.raises(CannotStore, match="data dir cannot be written") as refused:
                await engine.clone("mum", lj_wav(4.0))
            assert refused.value.code == "cannot-store"
            assert engine.cloned_voices == [] and temporary_files(data) == []
            assert not [path for path in data.rglob("*") if path.is_file() and path.name != ".filler"]
            assert len(await engine.synthesize(TEXT, None, "en")) > 2000
        finally:
            engine.close()
